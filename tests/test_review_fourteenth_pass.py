"""What another hostile review found: fairseq-generate writing through a link at its results file, and a
SIGTERM leaving half-written results; sentences over the position limits as tracebacks; a summary statistic
that needed an n x n matrix; BPE learning with nothing to merge; a length-prior weight stored in a checkpoint
blamed on a flag."""

import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from .conftest import call, tool
from .helpers import one_line_error

PLAIN_ENV = dict(os.environ, PYTHONPATH="")  # the installed package only
FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "release_0_2")
CHECKPOINT = os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt")
GENERATE = ["data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--path", CHECKPOINT,
            "--gen-subset", "test", "--beam", "2", "--batch-size", "8"]


@pytest.fixture
def work(tmp_path):
    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    return tmp_path


# ------------------------------------------------------------------ the results file
def test_a_link_at_the_results_file_is_refused_and_neither_it_nor_its_target_is_touched(work):
    (work / "mine.txt").write_text("PRECIOUS\n")
    (work / "res").mkdir()
    os.symlink("../mine.txt", work / "res" / "generate-test.txt")
    result = call([tool("fairseq-generate"), *GENERATE, "--results-path", "res", "--sampling-topp", "5"], cwd=work,
                  expect_ok=False)
    last = one_line_error(result, "fairseq-generate", "generate-test.txt there is a symbolic link")
    assert "--results-path res" in last, last
    assert (work / "mine.txt").read_text() == "PRECIOUS\n" and os.path.islink(work / "res" / "generate-test.txt")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_terminated_generation_restores_the_earlier_results_and_leaves_no_partial_file(work, signum):
    (work / "res").mkdir()
    results = work / "res" / "generate-test.txt"
    results.write_text("OLD RESULTS\n")
    argv = [tool("fairseq-generate"), *GENERATE[:-4], "--gen-subset", "test", "--beam", "40", "--nbest", "40",
            "--batch-size", "1", "--min-len", "300", "--max-len-b", "350", "--results-path", "res"]
    process = subprocess.Popen(argv, cwd=work, env={**PLAIN_ENV, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                                                    signal.SIG_DFL))
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:  # the run's own file has lines in it
        if results.exists() and results.stat().st_size > 0 and results.read_text(errors="replace") != "OLD RESULTS\n":
            break
        time.sleep(0.2)
    assert process.poll() is None, "generation ended before it could be interrupted"
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signum, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == \
        f"fairseq-generate: interrupted ({signal.Signals(signum).name}); no output was left half-written"
    assert results.read_text() == "OLD RESULTS\n" and sorted(os.listdir(work / "res")) == ["generate-test.txt"]


# ------------------------------------------------------------------ sentences over the limits
def test_sentences_over_the_position_limits_are_one_line_and_leave_no_results_file(work):
    result = call([tool("fairseq-generate"), *GENERATE, "--max-source-positions", "5", "--results-path", "res"],
                  cwd=work, expect_ok=False)
    last = one_line_error(result, "fairseq-generate", "of the test split are longer than the limits (source 5",
                          "--skip-invalid-size-inputs-valid-test")
    assert "the first sentence id" in last, last
    assert not os.path.exists(work / "res" / "generate-test.txt")


def test_an_input_line_over_the_limits_in_interactive_is_one_line(work):
    result = call([tool("fairseq-interactive"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", CHECKPOINT, "--source-lang", "en", "--target-lang", "fr",
                   "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", "data-bin/bpe.codes", "--beam", "2",
                   "--max-source-positions", "8"], cwd=work, expect_ok=False,
                  stdin="a man rides a bike down the long street with his dog .\n")
    one_line_error(result, "fairseq-interactive", "of the input are longer than the limits (source 8")


# ------------------------------------------------------------------ projectivity without an n x n matrix
def _crossing_pairwise(heads: np.ndarray) -> bool:
    """The definition: two arcs (l1, r1), (l2, r2) cross iff l1 < l2 < r1 < r2."""
    n = len(heads)
    arcs = [(min(d, h), max(d, h)) for d, h in zip(range(1, n + 1), heads.tolist()) if h > 0]
    return any(a < c < b < d for a, b in arcs for c, d in arcs)


def test_projectivity_agrees_with_the_pairwise_definition_on_random_trees():
    from preprocess.word_tree import WordTree

    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(3000):
        n = int(rng.integers(1, 12))
        heads = np.array([int(rng.integers(0, n + 1)) for _ in range(n)])
        heads[heads == np.arange(1, n + 1)] = 0  # no word heads itself
        tree = WordTree(["w"] * n, heads, ["dep"] * n, ["X"] * n)
        expected = not _crossing_pairwise(heads)
        assert tree.is_projective() == expected, heads.tolist()
        seen.add(expected)
    assert seen == {True, False}


def test_projectivity_of_a_very_long_sentence_needs_no_square_matrix():
    from preprocess.word_tree import WordTree

    n = 400_000  # an n x n boolean matrix would be 149 GiB
    chain = np.arange(0, n)  # word i+1 heads on word i: projective
    assert WordTree(["ab"] * n, chain, ["dep"] * n, ["X"] * n).is_projective()
    crossing = chain.copy()
    crossing[[2, 3]] = [5, 1]  # arcs (3, 5) and (1, 4) cross
    assert not WordTree(["ab"] * n, crossing, ["dep"] * n, ["X"] * n).is_projective()


# ------------------------------------------------------------------ BPE with nothing to merge
def test_learning_bpe_from_text_with_nothing_to_merge_is_one_line(tmp_path):
    (tmp_path / "one.en").write_text("a\n")
    result = call([tool("fairseq-syntax-bpe"), "--codes", "codes", "--learn", "one.en", "--symbols", "100"],
                  cwd=tmp_path, expect_ok=False)
    one_line_error(result, "fairseq-syntax-bpe", "one.en: BPE learned no merges from the 1 lines")
    assert not os.path.exists(tmp_path / "codes")


# ------------------------------------------------------------------ stored task settings in the hub
def test_the_hub_names_the_checkpoint_for_a_stored_length_prior_weight(tmp_path):
    import torch
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_syntax  # noqa: F401
    from fairseq_syntax_core.checkpoint_loader import load_checkpoint
    from fairseq_syntax_core.errors import CheckpointError

    state = load_checkpoint(CHECKPOINT)
    state["cfg"]["task"].update(length_prior=True, length_prior_weight=float("nan"))
    torch.save(state, tmp_path / "model.pt")
    data = os.path.join(FIXTURE, "data-bin")
    with pytest.raises(CheckpointError, match=r"model\.pt: its stored task settings \(cfg\.task\): "
                                              r"--length-prior-weight nan: expected a finite number >= 0"):
        ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
            str(tmp_path), checkpoint_file="model.pt", data_name_or_path=data, tokenizer="moses", bpe="subword_nmt",
            bpe_codes=os.path.join(data, "bpe.codes"))


@pytest.mark.parametrize("splits", ["", "test,", ",test"])
def test_perturb_refuses_an_empty_split_name(work, splits):
    result = call([tool("fairseq-syntax-perturb"), "data-bin", "--destdir", "noisy", "--p", "0.1", "--splits", splits],
                  cwd=work, expect_ok=False)
    one_line_error(result, "fairseq-syntax-perturb", "an empty split name")
    assert not os.path.exists(work / "noisy")


# ------------------------------------------------------------------ what a checkpoint may build
def _crafted(tmp_path, edit) -> str:
    import torch

    from fairseq_syntax_core.checkpoint_loader import load_checkpoint

    state = load_checkpoint(CHECKPOINT)
    edit(state["cfg"])
    torch.save(state, tmp_path / "model.pt")
    return str(tmp_path / "model.pt")


def _lm_with_character_filters(marker):
    def edit(cfg):
        model = cfg["model"]
        model.arch = model._name = "transformer_lm"  # fairseq.models.transformer_lm: not inside .transformer
        model.character_embeddings, model.character_embedding_dim, model.char_embedder_highway_layers = True, 4, 1
        model.character_filters = f"__import__('os').system('touch {marker}') or [(1, 4)]"
    return edit


def test_a_model_of_a_module_whose_name_only_begins_like_an_admitted_one_is_refused(work):
    marker = work / "MARKER"
    _crafted(work, _lm_with_character_filters(marker))
    result = call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", "model.pt", "--gen-subset", "test", "--beam", "1", "--batch-size",
                   "4"], cwd=work, expect_ok=False)
    one_line_error(result, "fairseq-generate", "model.pt", "'transformer_lm'", "not one of this plugin's")
    assert not marker.exists()


@pytest.mark.parametrize("criterion, words", [
    ({"_name": "ctc", "zero_infinity": False, "sentence_avg": False, "post_process": "letter",
      "wer_kenlm_model": None, "wer_lexicon": None, "wer_lm_weight": 2.0, "wer_word_score": -1.0,
      "wer_args": "__import__('os').system('touch MARKER') or (None, None, 2.0, -1.0)"},
     "its stored criterion 'ctc' is not one of this plugin's or fairseq's translation losses"),
    ({"_name": "label_smoothed_cross_entropy", "label_smoothing": float("nan"), "sentence_avg": False,
      "ignore_prefix_size": 0, "report_accuracy": False},
     "its stored criterion settings: --label-smoothing nan: expected a share in [0, 1)"),
])
def test_fairseq_validate_builds_only_admitted_stored_criteria_with_settings_in_range(work, criterion, words):
    _crafted(work, lambda cfg: cfg.update(criterion=criterion))
    result = call([tool("fairseq-validate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", "model.pt", "--valid-subset", "test", "--batch-size", "4"],
                  cwd=work, expect_ok=False)
    last = one_line_error(result, "fairseq-validate", "model.pt: ")
    assert words in last, last
    assert not (work / "MARKER").exists()


def test_the_hub_names_the_checkpoint_for_a_stored_segmenter(tmp_path):
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_syntax  # noqa: F401
    from fairseq_syntax_core.errors import CheckpointError

    _crafted(tmp_path, lambda cfg: cfg.update(bpe={"_name": "characters"}))
    with pytest.raises(CheckpointError, match=r"model\.pt: its stored settings \(cfg\.bpe\.bpe, which the caller "
                                              r"did not give\): --bpe characters"):
        ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
            str(tmp_path), checkpoint_file="model.pt", data_name_or_path=os.path.join(FIXTURE, "data-bin"),
            tokenizer="moses")


# ------------------------------------------------------------------ options: bounds and repeats
def test_a_count_beyond_any_library_s_range_is_a_usage_error(tmp_path):
    (tmp_path / "two.txt").write_text("lower lowest newer newest\nlower lowest newer newest\n")
    result = call([tool("fairseq-syntax-bpe"), "--learn", "two.txt", "--codes", "c", "--symbols",
                   "99999999999999999999"], cwd=tmp_path, expect_ok=False)
    last = result.stderr.strip().splitlines()[-1]
    assert "--symbols" in last and "expected a number <= 1000000000" in last and "Traceback" not in result.stderr


@pytest.mark.parametrize("command, argv", [
    ("fairseq-syntax-bpe", ["--learn", "a.txt", "--learn", "b.txt", "--codes", "c"]),
    ("fairseq-syntax-perturb", ["data-bin", "--p", "0.3", "--splits", "test", "--splits", "train", "--destdir", "p"]),
    ("fairseq-syntax-show", ["data-bin", "--split", "test", "--sentences", "1", "--out", "s.html", "--split", "train"]),
])
def test_a_single_valued_option_given_twice_is_refused(work, command, argv):
    for name in ("a.txt", "b.txt"):
        (work / name).write_text("lower lowest newer newest\n" * 3)
    result = call([tool(command), *argv], cwd=work, expect_ok=False)
    assert result.returncode == 2 and "given twice" in result.stderr.strip().splitlines()[-1], result.stderr[-800:]
    assert not os.path.exists(work / "c") and not os.path.exists(work / "p") and not os.path.exists(work / "s.html")


# ------------------------------------------------------------------ limits that leave nothing, ids across buffers
def test_a_split_whose_every_sentence_is_skipped_is_one_line(work):
    result = call([tool("fairseq-generate"), *GENERATE, "--max-source-positions", "4",
                   "--skip-invalid-size-inputs-valid-test"], cwd=work, expect_ok=False)
    one_line_error(result, "fairseq-generate", "every one of the", "of the test split", "nothing is left to decode")


def test_interactive_names_the_input_line_over_the_limits_across_buffers(work):
    text = "a man .\ntwo dogs .\na man rides a bike down the long street with his dog in the rain .\n"
    result = call([tool("fairseq-interactive"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", CHECKPOINT, "--source-lang", "en", "--target-lang", "fr",
                   "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", "data-bin/bpe.codes", "--beam", "2",
                   "--max-source-positions", "12", "--buffer-size", "2"], cwd=work, expect_ok=False, stdin=text)
    last = one_line_error(result, "fairseq-interactive", "the first input line 3 with")
    assert "target tokens" not in last, last


# ------------------------------------------------------------------ fairseq-train settings taken silently
@pytest.mark.parametrize("flags, words", [
    (["--checkpoint-suffix", "/x"], "--checkpoint-suffix /x: expected a file-name suffix without a path separator"),
    (["--store-ema", "--ema-decay", "2"], "--ema-decay 2: expected a decay in [0, 1]"),
])
def test_train_settings_fairseq_takes_and_misreads_are_refused_at_start_up(work, flags, words):
    _train_refused(work, flags, words)


def _train_refused(work, flags, words):
    result = call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                   "--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim",
                   "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16",
                   "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--optimizer", "adam", "--lr",
                   "0.001", "--max-tokens", "500", "--max-update", "1", "--valid-subset", "test", "--save-dir", "ck",
                   *flags], cwd=work, expect_ok=False)
    last = one_line_error(result, "fairseq-train")
    assert words in last, last
    assert not os.path.exists(work / "ck")


# ------------------------------------------------------------------ a generate log cut in a line; results folders
def test_a_generate_log_cut_in_the_middle_of_its_last_line_is_refused(tmp_path):
    from fairseq_syntax_analysis.hypotheses import TranslationFileError, read_translations

    log = "S-0\ta man .\nH-0\t-0.5\tun homme .\nD-0\t-0.5\tun homme .\nS-1\ttwo dogs .\nH-1\t-0.4\tdeux chi"
    (tmp_path / "cut.txt").write_text(log)
    with pytest.raises(TranslationFileError, match=r"cut\.txt:5: its last line ends without a newline"):
        read_translations(str(tmp_path / "cut.txt"))
    (tmp_path / "whole.txt").write_text(log + "ens .\nD-1\t-0.4\tdeux chiens .\n")
    assert read_translations(str(tmp_path / "whole.txt"), detokenize=False) == ["un homme .", "deux chiens ."]


def test_results_folders_that_cannot_be_one_are_named(work):
    os.symlink("/nonexistent/folder", work / "dangling")
    for folder, words in (("", "--results-path '': expected a folder"),
                          ("dangling", "--results-path dangling: a link to a folder that does not exist")):
        result = call([tool("fairseq-generate"), *GENERATE, "--results-path", folder], cwd=work, expect_ok=False)
        last = one_line_error(result, "fairseq-generate")
        assert words in last, last


def test_a_worker_count_that_would_exhaust_the_process_table_is_a_usage_error(tmp_path):
    (tmp_path / "a.en").write_text("a man .\n")
    result = call([tool("fairseq-syntax-tokenize"), "--lang", "en", "--input", "a.en", "--output", "b.en",
                   "--workers", "100000"], cwd=tmp_path, expect_ok=False)
    assert result.returncode == 2 and "--workers" in result.stderr and "expected a number <= 256" in result.stderr
    assert not os.path.exists(tmp_path / "b.en")


# ------------------------------------------------------------------ what a checkpoint may still decide (sixteenth)
def _hub_of(tmp_path, **kwargs):
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_syntax  # noqa: F401

    data = os.path.join(FIXTURE, "data-bin")
    settings = dict(tokenizer="moses", bpe="subword_nmt", bpe_codes=os.path.join(data, "bpe.codes"))
    settings.update(kwargs)
    settings = {k: v for k, v in settings.items() if v is not None}
    return ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
        str(tmp_path), checkpoint_file="model.pt", data_name_or_path=data, **settings)


def test_the_hub_opens_no_replacement_file_a_checkpoint_names(tmp_path):
    (tmp_path / "align.txt").write_text("homme SECRET\n")
    _crafted(tmp_path, lambda cfg: cfg["generation"].update(replace_unk=str(tmp_path / "align.txt")))
    assert _hub_of(tmp_path).align_dict is None


def test_the_hub_fetches_no_segmenter_file_a_checkpoint_names_even_when_other_data_is_allowed(tmp_path):
    from fairseq_syntax_core.errors import CheckpointError

    _crafted(tmp_path, lambda cfg: cfg.update(bpe={"_name": "sentencepiece",
                                                   "sentencepiece_model": str(tmp_path / "x.model")}))
    with pytest.raises(CheckpointError, match=r"cfg\.bpe\.sentencepiece_model .*that the caller did not give"):
        _hub_of(tmp_path, bpe=None, bpe_codes=None, allow_other_data_bin=True)


def test_a_stored_leave_to_decode_on_other_data_is_not_obeyed(work):
    from .helpers import _swap_two_symbols

    _swap_two_symbols(work / "data-bin")
    _crafted(work, lambda cfg: cfg["task"].update(allow_other_data_bin=True))
    result = call([tool("fairseq-validate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", "model.pt", "--valid-subset", "test", "--batch-size", "8"],
                  cwd=work, expect_ok=False)
    one_line_error(result, "fairseq-validate", "dict.")


def test_decoding_the_train_split_keeps_every_sentence(work):
    result = call([tool("fairseq-generate"), *GENERATE[:-4], "--gen-subset", "train", "--beam", "1",
                   "--batch-size", "8", "--max-len-b", "3"], cwd=work)
    assert sum(line.startswith("H-") for line in result.stdout.splitlines()) == 300


@pytest.mark.parametrize("flags, words", [
    (["--restore-file", "nonexist.pt"], "--restore-file nonexist.pt: no such checkpoint"),
    (["--lr-scheduler", "reduce_lr_on_plateau", "--lr-shrink", "nan"], "--lr-shrink nan: expected a finite number"),
    (["--lr-scheduler", "polynomial_decay", "--total-num-update", "10", "--power", "nan"],
     "--power nan: expected a finite number"),
])
def test_more_train_settings_fairseq_misreads_are_refused_at_start_up(work, flags, words):
    _train_refused(work, flags, words)


@pytest.mark.parametrize("flags, words", [
    (["--batch-size", "0"], "--batch-size 0: expected a count >= 1"),
    (["--no-repeat-ngram-size", "-1"], "--no-repeat-ngram-size -1: expected a size >= 0"),
])
def test_generation_limits_that_mean_something_else_are_refused(work, flags, words):
    result = call([tool("fairseq-generate"), *GENERATE[:-2], *flags], cwd=work, expect_ok=False)
    last = one_line_error(result, "fairseq-generate")
    assert words in last, last


def test_a_folder_at_the_results_file_is_refused_as_not_a_regular_file(work):
    (work / "res" / "generate-test.txt").mkdir(parents=True)
    result = call([tool("fairseq-generate"), *GENERATE, "--results-path", "res"], cwd=work, expect_ok=False)
    one_line_error(result, "fairseq-generate", "generate-test.txt there is not a regular file")
    assert (work / "res" / "generate-test.txt").is_dir()
