"""Every checkpoint is read weights-only with fairseq's allow-list: a pickled payload never runs.

A payload checkpoint is a genuine torch zip file (``torch.save``) of an object whose
``__reduce__`` is ``os.system("touch MARKER")``: unpickled without the allow-list, it creates
the marker. Every command that reads checkpoints must refuse it with one line naming the file,
exit non-zero, and leave no marker; and no module outside ``fairseq_syntax_core/checkpoint_loader.py``
may read a pickle any other way.
"""

import json
import os
import re
import shlex
import shutil

import pytest
import torch

from fairseq_syntax_core.checkpoint_loader import (allow_fairseq_checkpoints, default_load_problem,
                                                   fairseq_checkpoint_globals, load_checkpoint)
from fairseq_syntax_core.errors import CheckpointError

from .conftest import REPO, call, tool
from .helpers import COMMANDS, FIXTURE, _evaluation  # noqa: F401

LOADER = os.path.join("fairseq_syntax_core", "checkpoint_loader.py")
SCANNED = ("fairseq_syntax", "fairseq_syntax_core", "preprocess", "benchmarks", "tests", "examples", "scripts")
REFUSED = r"the checkpoint holds an object that is not allowed \((?:posix|nt|os)\.system\) and was not loaded"


class Payload:
    """Unpickled, runs ``touch MARKER`` (what any pickle may do: name a callable and its arguments)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(self.marker)}",)


def payload_checkpoint(path, marker) -> str:
    """A fairseq-shaped torch checkpoint at ``path`` whose extra state is a :class:`Payload`."""
    torch.save({"model": {}, "optimizer_history": [{"num_updates": 3}], "extra_state": Payload(str(marker))}, path)
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) in (["posix.system"], ["nt.system"])
    return str(path)


def plain_checkpoint(path) -> str:
    torch.save({"model": {"w": torch.ones(2)}, "optimizer_history": [{"num_updates": 3}], "args": None,
                "cfg": {"model": {"_name": "transformer"}, "task": {"_name": "translation"}},
                "extra_state": {"train_iterator": {"epoch": 2, "iterations_in_epoch": 0}, "best": 4.0}}, path)
    return str(path)


def assert_refused(stderr: str, path: str, marker) -> None:
    """One error line naming ``path`` and the refused global; no traceback; the payload did not run."""
    assert not os.path.exists(marker), "the pickled payload ran"
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if re.search(REFUSED, line)]
    assert len(lines) == 1 and f"error: {path}: the checkpoint holds" in lines[0], stderr[-3000:]


# ------------------------------------------------------------------------------ the loader
def test_payload_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "MARKER"
    path = payload_checkpoint(tmp_path / "checkpoint_best.pt", marker)
    with pytest.raises(CheckpointError, match=re.escape(path) + ": " + REFUSED) as caught:
        load_checkpoint(path)
    assert "\n" not in str(caught.value) and not marker.exists()


def test_the_environment_cannot_switch_the_check_off(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    marker = tmp_path / "MARKER"
    with pytest.raises(CheckpointError, match=REFUSED):
        load_checkpoint(payload_checkpoint(tmp_path / "c.pt", marker))
    assert not marker.exists()
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set" in default_load_problem()
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    assert default_load_problem() is None  # torch >= 2.6: torch.load defaults to weights_only=True


def _truncated(path):
    plain_checkpoint(path)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])


@pytest.mark.parametrize("damage, expected", [
    (_truncated, r"it cannot be read as a fairseq checkpoint \(RuntimeError: .*central directory"),
    (lambda p: open(p, "wb").close(), r"the file is empty \(0 bytes\)"),
    (lambda p: open(p, "w").write("not a checkpoint"), r"it cannot be read as a fairseq checkpoint \(UnpicklingError"),
    (lambda p: open(p, "wb").write(b"PK\x03\x04" + b"\0" * 60), r"it cannot be read as a fairseq checkpoint"),
    (lambda p: os.mkdir(p), r"is a folder, not a checkpoint file"),
    (lambda p: None, r"not found"),
])
def test_every_failure_is_one_line_naming_the_file(tmp_path, damage, expected):
    path = str(tmp_path / "checkpoint_last.pt")
    damage(path)
    with pytest.raises(CheckpointError, match=re.escape(path) + ": " + expected) as caught:
        load_checkpoint(path)
    assert "\n" not in str(caught.value) and "\x1b" not in str(caught.value)


def test_a_fairseq_checkpoint_still_loads(tmp_path):
    state = load_checkpoint(os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt"))
    assert state["model"] and isinstance(state["optimizer_history"], list)


def test_the_loader_imports_neither_fairseq_nor_the_plugin():
    from .helpers import _modules_after

    loaded = _modules_after("import fairseq_syntax_core.checkpoint_loader")
    assert not [m for m in loaded if m.split(".")[0] in ("fairseq", "fairseq_syntax", "fairseq_syntax_preprocess")]


def test_loading_keeps_the_process_wide_allow_list():
    allow_fairseq_checkpoints()  # what importing the plugin does, for fairseq's own reads
    load_checkpoint(os.path.join(FIXTURE, "checkpoints", "transformer_gps.pt"))
    assert set(fairseq_checkpoint_globals()) <= set(torch.serialization.get_safe_globals())


def test_fairseqs_own_reads_refuse_the_payload(tmp_path, monkeypatch):
    import fairseq_syntax  # noqa: F401  (the allow-list and compat's wrapper)
    from fairseq import checkpoint_utils

    marker = tmp_path / "MARKER"
    path = payload_checkpoint(tmp_path / "checkpoint1.pt", marker)
    with pytest.raises(CheckpointError, match=re.escape(path) + ": " + REFUSED):
        checkpoint_utils.load_checkpoint_to_cpu(path)
    # fairseq leaves weights_only to torch: with the default switched off, the plugin does not read at all
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(CheckpointError, match=re.escape(path) + ": TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set"):
        checkpoint_utils.load_checkpoint_to_cpu(path)
    assert not marker.exists()


def test_from_pretrained_refuses_the_payload(tmp_path):
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_syntax  # noqa: F401

    marker = tmp_path / "MARKER"
    payload_checkpoint(tmp_path / "checkpoint_best.pt", marker)
    with pytest.raises(CheckpointError, match=REFUSED):
        ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
            str(tmp_path), checkpoint_file="checkpoint_best.pt", data_name_or_path=os.path.join(FIXTURE, "data-bin"))
    assert not marker.exists()


def test_from_pretrained_names_the_checkpoint_whose_settings_name_another_task(tmp_path):
    import torch
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_syntax  # noqa: F401
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    release = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_2")
    state = load_fairseq_checkpoint(os.path.join(release, "checkpoints", "transformer_dep_rel.pt"))
    state["cfg"]["task"]["_name"] = "translation"
    torch.save(state, tmp_path / "model.pt")
    with pytest.raises(ValueError) as error:
        ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
            str(tmp_path), checkpoint_file="model.pt", data_name_or_path=os.path.join(release, "data-bin"))
    assert str(error.value) == (
        f"{tmp_path / 'model.pt'}: --arch transformer_dep_rel reads the source syntax (depth), which only --task "
        "syntax_translation provides (the checkpoint's settings name --task translation)")


@pytest.mark.slow
@pytest.mark.parametrize("key", ["encoder_embed_path", "decoder_embed_path"])
def test_a_pretrained_embedding_file_a_checkpoint_names_is_never_opened(tmp_path, key):
    import torch

    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    release = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_2")
    os.mkfifo(tmp_path / "fifo")  # fairseq's parse_embedding would wait on it for ever
    state = load_fairseq_checkpoint(os.path.join(release, "checkpoints", "transformer_dep_rel.pt"))
    setattr(state["cfg"]["model"], key, str(tmp_path / "fifo"))
    torch.save(state, tmp_path / "model.pt")
    argv = [tool("fairseq-generate"), os.path.join(release, "data-bin"), "--user-dir", "fairseq_syntax", "--task",
            "syntax_translation", "--gen-subset", "test", "--beam", "1", "--batch-size", "4"]
    edited = call(argv + ["--path", str(tmp_path / "model.pt")], cwd=str(tmp_path))
    clean = call(argv + ["--path", os.path.join(release, "checkpoints", "transformer_dep_rel.pt")], cwd=str(tmp_path))
    assert [l for l in edited.stdout.splitlines() if l.startswith("H-")] == \
        [l for l in clean.stdout.splitlines() if l.startswith("H-")]  # the weights, as without the setting


# ------------------------------------------------------------------------------ no other reader
#: ways to unpickle a file; every one is allowed in the loader module only
UNPICKLING = [re.compile(p) for p in (
    r"\btorch\.load\b", r"\bserialization\.load\b", r"\b(?:_|c)?[pP]ickle\.(?:loads?|Unpickler)\b",
    r"\bfrom\s+(?:_pickle|c?pickle|dill|cloudpickle|joblib)\s+import\b", r"\bimport\s+(?:dill|cloudpickle|joblib)\b",
    r"\bfrom\s+torch(?:\.serialization)?\s+import\s+[^\n]*\bload\b", r"allow_pickle\s*=\s*True",
    r"weights_only\s*=\s*False", r"\bpickle_module\s*=",
)]
_ALIAS = re.compile(r"\bimport\s+(?:torch|torch\.serialization|_?c?pickle|numpy)\s+as\s+(\w+)")


def unpickling_calls(text: str):
    """The places in ``text`` that could unpickle a file other than through the loader."""
    found = [m.group(0) for pattern in UNPICKLING for m in pattern.finditer(text)]
    for alias in set(_ALIAS.findall(text)) - {"np"}:  # np.load refuses pickles unless allow_pickle=True
        found += re.findall(rf"\b{re.escape(alias)}\.(?:load|loads|Unpickler)\b", text)
    return found


@pytest.mark.parametrize("snippet", [
    'state = torch.load(path, map_location="cpu", weights_only=False)', "import pickle\npickle.load(f)",
    "data = pickle.loads(blob)", 'np.load(p, allow_pickle = True)', "from torch import load",
    "import torch as T\nT.load(p)", "import pickle as pk\npk.Unpickler(f)", "torch.serialization.load(f)",
])
def test_the_scan_finds_each_way_to_unpickle(snippet):
    assert unpickling_calls(snippet)


def test_no_code_reads_a_checkpoint_but_the_loader():
    this = os.path.relpath(os.path.abspath(__file__), REPO)
    offenders = []
    for top in SCANNED:
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                rel = os.path.relpath(os.path.join(root, name), REPO)
                if not name.endswith((".py", ".sh")) or rel in (LOADER, this):
                    continue
                with open(os.path.join(REPO, rel), encoding="utf-8", errors="replace") as handle:
                    found = unpickling_calls(handle.read())
                offenders += [f"{rel}: {call}" for call in found]
    assert not offenders, "read checkpoints with fairseq_syntax_core.checkpoint_loader.load_checkpoint: " + "; ".join(offenders)


@pytest.mark.parametrize("which", ["last", "best"])
def test_report_record_refuses_the_payload(tmp_path, capsys, which):
    from fairseq_syntax_analysis import results as rs

    marker, save = tmp_path / "MARKER", tmp_path / "ckpt"
    save.mkdir()
    plain_checkpoint(save / "checkpoint_last.pt")
    plain_checkpoint(save / "checkpoint_best.pt")
    path = payload_checkpoint(save / f"checkpoint_{which}.pt", marker)
    argv = ["record", "--model", "m", "--seed", "1", "--max-update", "3", "--save-dir", str(save), "--commit", "x",
            "--eval", f"t={_evaluation(tmp_path / 'ev.json')}", "--out", str(tmp_path / "r.json")]
    assert rs.cli_main(argv) == 1
    assert_refused(capsys.readouterr().err, path, marker)
    assert not (tmp_path / "r.json").exists()


@pytest.fixture
def work(tmp_path):
    """The release-0.1 data-bin, a folder of payload checkpoints, and where the payload would leave its marker."""
    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    (tmp_path / "ckpt").mkdir()
    marker = tmp_path / "MARKER"
    for name in ("checkpoint_best.pt", "checkpoint_last.pt", "checkpoint1.pt"):
        payload_checkpoint(tmp_path / "ckpt" / name, marker)
    return tmp_path


TASK = ["--user-dir", "fairseq_syntax", "--task", "syntax_translation"]
TINY = ["--arch", "transformer_dep_rel", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--optimizer", "adam", "--lr", "0.01"]


@pytest.mark.parametrize("command", sorted(COMMANDS))  # each stops at the checkpoint: seconds
def test_every_command_refuses_the_payload(work, command):
    argv, path = COMMANDS[command]
    _evaluation(work / "ev.json")
    result = call([tool(argv[0]), *argv[1:]], cwd=work, stdin="A dog runs .\n", expect_ok=False)
    assert result.returncode != 0, result.stderr[-3000:]
    assert_refused(result.stderr, path, work / "MARKER")


# ------------------------------------------------------------------------------ settings that are code
#: a model setting fairseq hands to eval() (the transformer decoder's adaptive_softmax_cutoff), and a model of
#: fairseq's that evals its layer specs: both from a checkpoint, both must run nothing
SETTINGS_PAYLOADS = {
    "eval": ({"adaptive_softmax_cutoff": "__import__('os').system('touch {marker}') or [5]"}, "not a Python literal"),
    "model": ({"arch": "fconv", "_name": "fconv", "encoder_layers": "__import__('os').system('touch {marker}') or []"},
              "its settings build the model 'fconv'"),
    # fconv_self_att evals --pretrained; named where a check of one setting alone would not look
    "model_in_args": ({"pretrained": "__import__('os').system('touch {marker}')",
                       "pretrained_checkpoint": "/nonexistent.pt"}, "its settings build the model 'fconv_self_att'"),
    "model_name_only": ({"_name": "fconv_self_att", "pretrained": "__import__('os').system('touch {marker}')",
                         "pretrained_checkpoint": "/nonexistent.pt"}, "its settings build the model 'fconv_self_att'"),
}


def settings_payload_checkpoint(path, source, marker, kind) -> str:
    """A genuine checkpoint (``source``) whose model settings carry the code of ``SETTINGS_PAYLOADS[kind]``."""
    state = load_checkpoint(source)
    if kind == "model_in_args":  # cfg.model still names the plugin's model; fairseq builds from args when present
        from fairseq import options

        state["args"] = options.parse_args_and_arch(options.get_training_parser(), [
            os.path.join(FIXTURE, "data-bin"), "--task", "syntax_translation", "--arch", "fconv_self_att",
            "--optimizer", "adam", "--lr", "0.001"])
    targets = [state["args"]] if kind == "model_in_args" else [(state.get("cfg") or {}).get("model")] \
        if kind == "model_name_only" else [state.get("args"), (state.get("cfg") or {}).get("model")]
    for settings in targets:
        if settings is not None:
            for key, value in SETTINGS_PAYLOADS[kind][0].items():
                if isinstance(settings, dict):
                    settings[key] = value.format(marker=marker)
                else:
                    setattr(settings, key, value.format(marker=marker))
    torch.save(state, path)
    return str(path)


SETTINGS_COMMANDS = {name: COMMANDS[name] for name in ("generate", "interactive", "validate", "awsl")}


@pytest.mark.parametrize("kind", sorted(SETTINGS_PAYLOADS))
@pytest.mark.parametrize("command", sorted(SETTINGS_COMMANDS))
def test_no_command_runs_a_checkpoint_s_settings_as_code(tmp_path, command, kind):
    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    (tmp_path / "ckpt").mkdir()
    marker = tmp_path / "MARKER"
    source = os.path.join(FIXTURE, "checkpoints", "transformer_gps.pt" if command == "awsl" else "transformer_dep_rel.pt")
    argv, path = SETTINGS_COMMANDS[command]
    settings_payload_checkpoint(tmp_path / path, source, marker, kind)
    result = call([tool(argv[0]), *argv[1:]], cwd=tmp_path, stdin="A dog runs .\n", expect_ok=False)
    assert not marker.exists(), "a setting of the checkpoint ran as code"
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and SETTINGS_PAYLOADS[kind][1] in errors[0], result.stderr[-3000:]


@pytest.mark.parametrize("kind", sorted(SETTINGS_PAYLOADS))
def test_from_pretrained_runs_no_setting_as_code(tmp_path, kind):
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_syntax  # noqa: F401

    marker = tmp_path / "MARKER"
    settings_payload_checkpoint(tmp_path / "model.pt", os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt"),
                                marker, kind)
    with pytest.raises(ValueError, match=SETTINGS_PAYLOADS[kind][1]):
        ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
            str(tmp_path), checkpoint_file="model.pt", data_name_or_path=os.path.join(FIXTURE, "data-bin"))
    assert not marker.exists()


@pytest.mark.parametrize("text, expected", [("[5, 10]", [5, 10]), ("5", [5]), ("(1,2)", [1, 2])])
def test_fairseq_s_setting_readers_read_literals(text, expected):
    import fairseq_syntax  # noqa: F401
    from fairseq import utils

    assert utils.eval_str_list(text, type=int) == expected
    assert utils.eval_bool("True") is True and utils.eval_str_dict("{'a': 1}") == {"a": 1}
    with pytest.raises(ValueError, match="not a Python literal"):
        utils.eval_str_list("__import__('os').getcwd()", type=int)
