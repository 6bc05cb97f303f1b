"""fairseq's hub interface translates raw text with a syntax model: the task parses it on the fly."""

import os
import sys

import pytest

from . import fork_server
from .conftest import REPO, spacy_model

pytestmark = pytest.mark.slow  # end-to-end runs of the installed commands


TRANSFORMER_TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32",
                    "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
                    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
TREE2SEQ_TINY = ["--encoder-embed-dim", "32", "--encoder-hidden-size", "32", "--decoder-embed-dim", "32"]


@pytest.mark.parametrize("arch, flags, inputs", [("transformer_dep", TRANSFORMER_TINY, {"depth"}),
                                                 ("tree2seq", TREE2SEQ_TINY, {"phrase"})])
def test_hub_translate_parses_raw_text(multi30k_bin, tmp_path, arch, flags, inputs):
    spacy_model()
    fairseq_train = os.path.join(os.path.dirname(sys.executable), "fairseq-train")
    if not os.path.exists(fairseq_train):
        pytest.skip("fairseq-train is not installed beside this Python")
    trained = fork_server.run(
        [fairseq_train, str(multi30k_bin), "--user-dir", os.path.join(REPO, "fairseq_syntax"),
         "--task", "syntax_translation", "--arch", arch, *flags, "--optimizer", "adam", "--lr", "0.002", "--max-tokens", "1500",
         "--max-update", "4", "--save-dir", str(tmp_path), "--no-epoch-checkpoints", "--no-progress-bar"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=""),
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    from fairseq.models import ARCH_MODEL_REGISTRY

    hub = ARCH_MODEL_REGISTRY[arch].from_pretrained(
        str(tmp_path), checkpoint_file="checkpoint_last.pt", data_name_or_path=str(multi30k_bin),
        tokenizer="moses", bpe="subword_nmt", bpe_codes=str(multi30k_bin / "bpe.codes"),
        source_lang="en", target_lang="de", max_len_b=10,
    )
    parsed = []
    parser = hub.task.online_parser()
    original = parser.features_for
    parser.features_for = lambda tokens, requested, texts: parsed.append(list(texts)) or original(tokens, requested, texts)
    # "Xylophonists" is split into pieces some of which are not in the tiny dictionary: the parse
    # must come from the text (one word), not from the ids (several <unk> words)
    out = hub.translate(["A dog runs on the beach .", "Two Xylophonists are talking ."], beam=2)
    assert len(out) == 2 and len(parsed) == 1
    assert sorted(parsed[0], key=len) == sorted([hub.apply_bpe(hub.tokenize(s)) for s in
                                                  ["A dog runs on the beach .", "Two Xylophonists are talking ."]], key=len)
    assert hub.task.syntax_requested == inputs


# ------------------------------------------------------------------ what only the caller may give
RELEASE_0_2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_2")


def _edited_checkpoint(tmp_path, edit):
    """The 0.2.0 fixture's transformer_dep_rel checkpoint, its settings edited by ``edit``, as model.pt."""
    import torch

    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    state = load_fairseq_checkpoint(os.path.join(RELEASE_0_2, "checkpoints", "transformer_dep_rel.pt"))
    edit(state["cfg"])
    torch.save(state, tmp_path / "model.pt")
    return tmp_path


def _hub(folder, **kwargs):
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_syntax  # noqa: F401

    data_bin = os.path.join(RELEASE_0_2, "data-bin")
    settings = dict(tokenizer="moses", bpe="subword_nmt", bpe_codes=os.path.join(data_bin, "bpe.codes"))
    settings.update(kwargs)
    settings = {k: v for k, v in settings.items() if v is not None}  # None: not given
    return ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
        str(folder), checkpoint_file="model.pt", data_name_or_path=data_bin, **settings)


def test_the_hub_drops_a_pipeline_folder_a_checkpoint_stores_and_checks_its_languages(tmp_path):
    spacy_model()
    from fairseq_syntax_core.errors import UsageError

    def edit(cfg):
        cfg["task"].update(syntax_parser=str(tmp_path / "a_pipeline_folder"), allow_other_data_bin=True)

    hub = _hub(_edited_checkpoint(tmp_path, edit))
    assert (hub.task.cfg.syntax_parser, hub.task.cfg.allow_other_data_bin) == (None, False)
    assert len(hub.translate(["A man rides a bike ."], beam=2)) == 1
    with pytest.raises(UsageError, match=r"^--source-lang \(given, or stored in the checkpoint's settings\): "
                                         r"'\.\./\.\./x' is not a valid language code"):
        _hub(_edited_checkpoint(tmp_path, lambda cfg: cfg["task"].update(source_lang="../../x")))


@pytest.mark.parametrize("key, value, words", [
    ("task", {"data": "${oc.env:HOME}"}, "its setting cfg.task.data holds a reference '${oc.env:HOME}'"),
    ("bpe", {"_name": "subword_nmt", "bpe_codes": "/etc/passwd", "bpe_separator": "@@"},
     "its settings name BPE codes (cfg.bpe.bpe_codes '/etc/passwd') that the caller did not give"),
])
def test_the_hub_never_resolves_or_opens_what_a_checkpoints_settings_name(tmp_path, key, value, words):
    from fairseq_syntax_core.errors import CheckpointError

    folder = _edited_checkpoint(tmp_path, lambda cfg: cfg[key].update(value) if cfg.get(key) else cfg.update({key: value}))
    with pytest.raises(CheckpointError) as error:
        _hub(folder, bpe_codes=None, bpe=None) if key == "bpe" else _hub(folder)
    assert str(error.value).startswith(str(tmp_path / "model.pt")) and words in str(error.value), str(error.value)
    assert "root:" not in str(error.value)  # no line of the file is quoted


def test_the_hub_refuses_to_shift_rows_over_a_skipped_sentence(tmp_path):
    spacy_model()
    from fairseq_syntax_core.errors import UsageError

    hub = _hub(_edited_checkpoint(tmp_path, lambda cfg: None), max_source_positions=20)
    long = "Two women hold a blue hat in the garden while a small dog runs on the green grass near the old house ."
    with pytest.raises(UsageError, match=r"^sentences 1 of the 3 were skipped \(skip_invalid_size_inputs"):
        hub.translate(["A man rides a bike .", long, "A dog ."], beam=2, skip_invalid_size_inputs=True)
    assert len(hub.translate(["A man rides a bike .", "A dog ."], beam=2, skip_invalid_size_inputs=True)) == 2
