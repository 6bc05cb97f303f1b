"""A hostile review's findings on checkpoints, BPE codes, dictionary identity and fairseq's usage errors.

1. A file that loads weights-only but is not shaped as a fairseq checkpoint (a list, a string, a
   Namespace, no settings, weights that are not tensors) is one ``CheckpointError`` line in every
   reader (``checkpoint_loader.check_fairseq_state``, run before fairseq's upgrade code), not a
   ``TypeError`` from fairseq.
2. The BPE codes fairseq-interactive and the hub apply (``--bpe-codes``, ``bpe_codes=``) are checked
   as codes and compared with the codes the model was trained with.
3. A dictionary's identity is its symbols in id order: other counts or CRLF line ends change no id.
4. fairseq's own usage errors (an ``assert`` of a ``fairseq_cli`` module, omegaconf's missing
   mandatory value) are one line ``PROG: error: ...``.
"""

import argparse
import json
import logging
import os
import re
import shutil
import sys

import pytest
import torch

from .conftest import call, tool
from .helpers import COMMANDS, FIXTURE, _evaluation
from .helpers import _fairseq_state  # noqa: F401

TARGET_SIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "target_side_8b0e53c")
#: the target-side fixture's model records these codes' hash; the release fixture's codes are others
TRAINED_CODES = os.path.join(TARGET_SIDE, "data-bin", "bpe.codes")
OTHER_CODES = os.path.join(FIXTURE, "data-bin", "bpe.codes")
NOT_A_CHECKPOINT = "it is not a fairseq checkpoint: "
TASK_LOGGER = "fairseq_syntax.tasks.syntax_translation"


def _short(path) -> str:
    import hashlib

    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:12]


#: what the review found: states that load weights-only and fail inside fairseq, and what the error says
NOT_CHECKPOINTS = {
    "list": ([1, 2], "it holds a list, not fairseq's dict"),
    "str": ("a string", "it holds a str, not fairseq's dict"),
    "namespace": (argparse.Namespace(arch="transformer"), "it holds a Namespace, not fairseq's dict"),
    "no-settings": (_fairseq_state(cfg=None, args=None), "it holds neither 'cfg' nor 'args'"),
    "model-list": (_fairseq_state(model=[1]), "its 'model' is a list, not a dict of tensors"),
    "model-str-section": (_fairseq_state(cfg={"model": "x", "task": {}}), r"its cfg\['model'\] is a str"),
    "weights-not-tensors": (_fairseq_state(model={"w": [1.0]}), r"its 'model' entry 'w' is a list, not a tensor"),
    "args-dict": (_fairseq_state(args={"arch": "transformer"}), "its 'args' is a dict, not fairseq's argparse"),
    "empty-history": (_fairseq_state(optimizer_history=[]), "its 'optimizer_history' is a list, not a non-empty"),
    "extra-state-list": (_fairseq_state(extra_state=[1]), "its 'extra_state' is a list, not a dict"),
}


def _save(path, state) -> str:
    torch.save(state, path)
    return str(path)


# ------------------------------------------------------------------------------ 1. not a checkpoint
@pytest.mark.parametrize("name", sorted(NOT_CHECKPOINTS))
def test_fairseqs_read_refuses_what_is_not_a_checkpoint_in_one_line(tmp_path, name):
    import fairseq_syntax  # noqa: F401  (compat's wrapper)
    from fairseq import checkpoint_utils

    from fairseq_syntax_core.errors import CheckpointError

    state, expected = NOT_CHECKPOINTS[name]
    path = _save(tmp_path / "checkpoint_best.pt", state)
    with pytest.raises(CheckpointError, match=re.escape(path) + ": " + NOT_A_CHECKPOINT + expected) as caught:
        checkpoint_utils.load_checkpoint_to_cpu(path)
    assert "\n" not in str(caught.value) and "fairseq-train" in str(caught.value)
    # a checkpoint fairseq-train wrote still loads through the same wrapper, its weights whole
    good = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt"))
    assert good["model"] and all(torch.is_tensor(v) for v in good["model"].values())


def test_the_hub_and_the_provenance_read_refuse_it_too(tmp_path):
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_syntax  # noqa: F401
    from fairseq_syntax.data import provenance
    from fairseq_syntax_core.errors import CheckpointError

    _save(tmp_path / "checkpoint_best.pt", [1, 2])
    with pytest.raises(CheckpointError, match=NOT_A_CHECKPOINT + "it holds a list"):
        ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
            str(tmp_path), checkpoint_file="checkpoint_best.pt", data_name_or_path=os.path.join(FIXTURE, "data-bin"))
    # fairseq-train reads what a restored checkpoint records before fairseq reads it: unusable is unknown
    path = _save(tmp_path / "restored.pt", _fairseq_state(task_state=[1]))
    assert provenance.of_checkpoint(path) is None
    assert provenance.of_checkpoint(os.path.join(TARGET_SIDE, "checkpoints", "tree2seq.pt"))["bpe_codes_sha256"]


@pytest.fixture
def work(tmp_path):
    """The release data-bin, and a folder of checkpoints without settings (cfg and args None) under the
    names the commands read."""
    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    (tmp_path / "ckpt").mkdir()
    for name in ("checkpoint_best.pt", "checkpoint_last.pt", "checkpoint1.pt"):
        _save(tmp_path / "ckpt" / name, NOT_CHECKPOINTS["no-settings"][0])
    _evaluation(tmp_path / "ev.json")
    return tmp_path


def _assert_one_line(result, path, expected):
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if NOT_A_CHECKPOINT in line]
    assert len(lines) == 1 and re.search(f"error: {re.escape(path)}: {NOT_A_CHECKPOINT}{expected}", lines[0]), \
        result.stderr[-3000:]


@pytest.mark.parametrize("command", sorted(COMMANDS))  # each stops at the checkpoint: seconds
def test_every_command_refuses_a_checkpoint_without_settings(work, command):
    argv, path = COMMANDS[command]
    result = call([tool(argv[0]), *argv[1:]], cwd=work, stdin="A dog runs .\n", expect_ok=False)
    _assert_one_line(result, path, NOT_CHECKPOINTS["no-settings"][1])
    assert not (work / "r.json").exists()


def test_generate_refuses_a_list_in_one_line(work):
    """The review's repro: ``torch.save([1, 2], ...)`` given to fairseq-generate."""
    _save(work / "list.pt", [1, 2])
    result = call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                   "--path", "list.pt", "--gen-subset", "test"], cwd=work, expect_ok=False)
    _assert_one_line(result, "list.pt", "it holds a list")


# ------------------------------------------------------------------------------ 2. the codes applied
def _interactive(cwd, codes, *extra, stdin=""):
    return call([tool("fairseq-interactive"), os.path.join(TARGET_SIDE, "data-bin"), "--user-dir", "fairseq_syntax",
                 "--task", "syntax_translation", "--path", os.path.join(TARGET_SIDE, "checkpoints", "tree2seq.pt"),
                 "--source-lang", "en", "--target-lang", "fr", "--bpe", "subword_nmt", "--bpe-codes", codes, *extra],
                cwd=cwd, stdin=stdin, expect_ok=False)


def test_interactive_refuses_codes_other_than_the_models(tmp_path):
    refused = _interactive(tmp_path, OTHER_CODES)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    (line,) = [line for line in refused.stderr.splitlines() if ": error: " in line]
    assert line.startswith(f"fairseq-interactive: error: {OTHER_CODES}: ") and "--allow-other-data-bin" in line, line
    assert f"sha256 {_short(TRAINED_CODES)} at training, {_short(OTHER_CODES)} now" in line, line
    allowed = _interactive(tmp_path, OTHER_CODES, "--allow-other-data-bin")
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert [line for line in allowed.stderr.splitlines()
            if OTHER_CODES in line and "going on (--allow-other-data-bin)" in line], allowed.stderr[-3000:]
    # the codes it was trained with: not a word
    same = _interactive(tmp_path, TRAINED_CODES)
    assert same.returncode == 0 and "BPE codes" not in same.stderr, same.stderr[-3000:]


@pytest.mark.parametrize("text, where, expected", [
    ("#version: 0.2\n", "", "holds no merges: expected subword-nmt codes"),
    ("#version: 0.2\na b\nc d e\n", ":3", "not a subword-nmt codes line"),
])
def test_interactive_checks_the_codes_before_subword_nmt_reads_them(tmp_path, text, where, expected):
    codes = tmp_path / "bad.codes"
    codes.write_text(text, encoding="utf-8")
    result = _interactive(tmp_path, str(codes))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "invalid line" not in result.stderr  # subword-nmt's own message, which names no file
    (line,) = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert line.startswith(f"fairseq-interactive: error: {codes}{where}: {expected}"), line


def test_the_hub_refuses_codes_other_than_the_models(tmp_path, caplog):
    from fairseq.models import ARCH_MODEL_REGISTRY
    from omegaconf import OmegaConf

    import fairseq_syntax  # noqa: F401
    from fairseq_syntax_core.checkpoint_loader import load_checkpoint
    from fairseq_syntax_core.errors import InputError

    # a checkpoint of this release: its task settings hold allow_other_data_bin, which the hub's
    # keyword overrides (fairseq sets only the settings a checkpoint holds; 8b0e53c predates the option)
    state = load_checkpoint(os.path.join(TARGET_SIDE, "checkpoints", "tree2seq.pt"))
    state["cfg"]["task"]["allow_other_data_bin"] = False
    _save(tmp_path / "tree2seq.pt", state)

    def hub(codes, **extra):
        return ARCH_MODEL_REGISTRY["tree2seq"].from_pretrained(
            str(tmp_path), checkpoint_file="tree2seq.pt",
            data_name_or_path=os.path.join(TARGET_SIDE, "data-bin"), bpe="subword_nmt", bpe_codes=codes,
            source_lang="en", target_lang="fr", **extra)

    with pytest.raises(InputError, match=re.escape(f"{OTHER_CODES}: ") + ".*" +
                       re.escape(f"sha256 {_short(TRAINED_CODES)} at training, {_short(OTHER_CODES)} now")):
        hub(OTHER_CODES)
    with caplog.at_level(logging.WARNING, logger=TASK_LOGGER):
        hub(OTHER_CODES, allow_other_data_bin=True)
    assert [r for r in caplog.records if "going on (--allow-other-data-bin)" in r.getMessage()]
    loaded = hub(TRAINED_CODES)
    other = OmegaConf.create({"_name": "subword_nmt", "bpe_codes": OTHER_CODES, "bpe_separator": "@@"})
    with pytest.raises(InputError, match="are not those the model was trained with"):
        loaded.task.check_applied_bpe(other)
    # fairseq-generate decodes a split of the data-bin: its codes only take the separator off the output
    loaded.task.load_dataset("test")
    loaded.task.check_applied_bpe(other)


# ------------------------------------------------------------------------------ 3. dictionary identity
def test_counts_and_line_ends_change_no_dictionary_identity(tmp_path):
    from fairseq.data import Dictionary

    from fairseq_syntax.data import provenance

    data_bin = tmp_path / "data-bin"
    shutil.copytree(os.path.join(FIXTURE, "data-bin"), data_bin)
    meta = json.loads((data_bin / "syntax.json").read_text(encoding="utf-8"))
    trained = provenance.of_data_bin(str(data_bin), meta)
    path = data_bin / "dict.en.txt"
    ids = Dictionary.load(str(path)).symbols
    lines = path.read_text(encoding="utf-8").splitlines()
    recounted = [f"{line.split(' ')[0]} {7 + number}" for number, line in enumerate(lines)]
    path.write_bytes(("\r\n".join(recounted) + "\r\n").encode("utf-8"))
    assert Dictionary.load(str(path)).symbols == ids  # the same ids for fairseq
    assert provenance.differing_files(trained, provenance.of_data_bin(str(data_bin), meta)) == []
    # another order is other ids: named, with the hashes of the symbols
    recounted[0:2] = recounted[1], recounted[0]
    path.write_text("\n".join(recounted) + "\n", encoding="utf-8")
    (difference,) = provenance.differing_files(trained, provenance.of_data_bin(str(data_bin), meta))
    assert difference.startswith("dict.en.txt (symbols by id: sha256 ") and \
        provenance.dictionary_ids_sha256(str(path))[:12] in difference


# ------------------------------------------------------------------------------ 4. fairseq's usage errors
def test_fairseqs_own_argument_checks_are_one_line():
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue

    from fairseq_syntax_core.interrupts import fairseq_usage_message

    def raised(code: str, module: str):
        try:
            exec(compile(code, f"{module.replace('.', '/')}.py", "exec"), {"__name__": module})
        except BaseException as error:  # noqa: B902 - the error under test
            return error, sys.exc_info()[2]
        raise AssertionError("nothing raised")

    check = "assert False, 'Must specify batch size either with --max-tokens or --batch-size'"
    assert fairseq_usage_message(*raised(check, "fairseq_cli.validate")) == \
        "Must specify batch size either with --max-tokens or --batch-size"
    assert fairseq_usage_message(*raised(check, "fairseq.trainer")) is None  # fairseq's internals: a bug, traced
    assert fairseq_usage_message(*raised("assert False", "fairseq_cli.train")) is None  # says nothing: traced
    try:
        OmegaConf.create({"bpe": {"bpe_codes": "???"}}).bpe.bpe_codes
    except MissingMandatoryValue as error:
        assert fairseq_usage_message(error, error.__traceback__).startswith("--bpe-codes is required")


def test_validate_without_batch_size_and_interactive_without_codes_are_one_line(tmp_path, monkeypatch):
    checkpoint = os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt")
    data_bin = os.path.join(FIXTURE, "data-bin")
    validate = [tool("fairseq-validate"), data_bin, "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                "--path", checkpoint, "--valid-subset", "test"]
    result = call(validate, cwd=tmp_path, expect_ok=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "fairseq-validate: error: Must specify batch size either with --max-tokens or --batch-size" in \
        result.stderr.splitlines(), result.stderr[-3000:]
    interactive = call([tool("fairseq-interactive"), data_bin, "--user-dir", "fairseq_syntax", "--task",
                        "syntax_translation", "--path", checkpoint, "--source-lang", "en", "--target-lang", "de",
                        "--bpe", "subword_nmt"], cwd=tmp_path, stdin="", expect_ok=False)
    assert interactive.returncode == 1 and "Traceback" not in interactive.stderr, interactive.stderr[-3000:]
    assert [line for line in interactive.stderr.splitlines()
            if line.startswith("fairseq-interactive: error: --bpe-codes is required")], interactive.stderr[-3000:]
    # FAIRSEQ_SYNTAX_TRACEBACK=1 shows where it came from
    monkeypatch.setenv("FAIRSEQ_SYNTAX_TRACEBACK", "1")
    traced = call(validate, cwd=tmp_path, expect_ok=False)
    assert "Traceback" in traced.stderr and "AssertionError: Must specify batch size" in traced.stderr
