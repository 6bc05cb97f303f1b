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
