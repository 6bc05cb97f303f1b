"""A fifth hostile pass (one-line errors at the edges): fairseq's own options that it takes silently
(--lr, --clip-norm, --keep-*, --sampling-topp/-topk, --num-shards/--shard-id), a checkpoint whose optimizer
state does not fit the model, the crash.pt fairseq leaves after a refused training step, and the BPE codes
that fairseq-syntax-perturb copies by the name syntax.json records."""

import json
import os
import shutil
import types

import pytest
import torch

from .conftest import call, tool

RELEASE_0_2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_2")
TINY_TRAIN = ["--arch", "transformer_dep_rel", "--encoder-layers", "1", "--decoder-layers", "1",
              "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
              "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
              "--optimizer", "adam", "--max-tokens", "2000", "--no-progress-bar", "--valid-subset", "test", "--cpu"]


@pytest.fixture
def release(tmp_path):
    """The 0.2.0 fixture (a data-bin, tiny checkpoints) copied outside the checkout."""
    shutil.copytree(RELEASE_0_2, tmp_path / "r", ignore=shutil.ignore_patterns("make.sh"))
    return tmp_path / "r"


def _refused_in_one_line(result, *words):
    err = result.stderr
    assert result.returncode not in (0, None) and "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "\x1b" not in err, err[-3000:]
    assert all(w in errors[0] for w in words), errors[0]
    return errors[0]


def _train(release, *extra, arch=TINY_TRAIN, task="syntax_translation"):
    return call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", task, *arch,
                 *extra], cwd=str(release), expect_ok=False)


def _generate(release, *extra):
    return call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                 "--path", "checkpoints/transformer_dep_rel.pt", "--gen-subset", "test", "--beam", "2", "--nbest", "2",
                 "--max-len-b", "5", "--batch-size", "8", *extra], cwd=str(release), expect_ok=False)


# ------------------------------------------------------------------ 1. training settings fairseq misreads

@pytest.mark.slow
@pytest.mark.parametrize("extra, words", [
    (["--lr", "-1"], ("--lr -1", "> 0")),  # fairseq: stops at once, exit 0, nothing trained
    (["--lr", "0.01", "--clip-norm", "nan"], ("--clip-norm nan", ">= 0")),  # fairseq: no clipping
    (["--lr", "0.01", "--keep-last-epochs", "-2"], ("--keep-last-epochs -2", "-1")),  # fairseq: keeps every one
    (["--lr", "0.1)"], ("--lr 0.1)", "not a value fairseq can read")),  # fairseq: SyntaxError traceback (literal_eval)
    (["--lr", "True"], ("argument --lr", "'True'", "not a number")),  # fairseq: trains at 1.0
    (["--lr", ""], ("--lr (empty)", "> 0")),  # fairseq: IndexError when it sets the first rate
    (["--lr", "0.01", "--max-update", "-1"], ("--max-update -1", ">= 0")),  # fairseq: one update, exit 0
    (["--lr", "0.01", "--max-epoch", "-1"], ("--max-epoch -1", ">= 0")),  # fairseq: trains nothing, exit 0
    (["--lr", "0.01", "--validate-interval", "0"], ("--validate-interval 0", ">= 1")),  # ZeroDivisionError late
    (["--lr", "0.01", "--save-interval", "0"], ("--save-interval 0", ">= 1")),  # ZeroDivisionError late
    (["--lr", "0.01", "--log-interval", "0"], ("--log-interval 0", ">= 1")),  # ZeroDivisionError
    (["--lr", "0.01", "--weight-decay", "nan"], ("--weight-decay nan", ">= 0")),  # NaN weights, blamed on --lr
    (["--lr", "{1: 2}"], ("argument --lr", "not a number")),  # fairseq: trains at 1.0 (the dict's key)
    (["--lr", "0.01", "--update-freq", "True"], ("argument --update-freq", "e.g. 4")),  # fairseq: accumulates 1
    (["--lr", "0.01", "--keep-interval-updates-pattern", "0", "--keep-interval-updates", "1",
      "--save-interval-updates", "1"], ("--keep-interval-updates-pattern 0",)),  # fairseq: ZeroDivisionError late
    (["--lr", "0.01", "--stop-min-lr", "0.01"], ("--stop-min-lr 0.01", "first learning rate, 0.01")),  # exit 0
    (["--lr", "0.01", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10", "--stop-min-lr", "0"],
     ("--stop-min-lr 0", "first learning rate, 0 ")),  # warm-up from 0: fairseq stops at once, exit 0
    (["--lr", "0.01", "--adam-betas", "(0.9,-0.5)"], ("--adam-betas (0.9,-0.5)", "[0, 1)")),  # NaN, exit 0
    (["--lr", "0.01", "--adam-betas", "(0.9,nan)"], ("--adam-betas (0.9,nan)",)),  # fairseq: NameError traceback
    (["--lr", "0.01", "--adam-betas", "(0.9,0.98"], ("--adam-betas (0.9,0.98:",)),  # fairseq: SyntaxError
    (["--lr", "0.01", "--adam-betas", "__import__('os')"], ("--adam-betas __import__",)),  # never evaluated
    (["--lr", "0.01", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "1.5"],
     ("--label-smoothing 1.5", "[0, 1)")),  # fairseq's own criterion: unchecked
    (["--lr", "0.01", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "nan"],
     ("--label-smoothing nan",)),
    (["--lr", "0.01", "--adam-eps", "nan"], ("--adam-eps nan", ">= 0")),
    (["--lr", "0.01", "--adam-eps", "-1"], ("--adam-eps -1", ">= 0")),
    (["--lr", "0.01", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10", "--warmup-init-lr", "nan"],
     ("--warmup-init-lr nan", "finite")),
    (["--lr", "0.01", "--batch-size", "0"], ("--batch-size 0", ">= 1")),  # fairseq: trains, as if not given
    (["--lr", "0.01", "--batch-size", "-3"], ("--batch-size -3", ">= 1")),  # was blamed on the model
    (["--lr", "0.01", "--save-interval-updates", "-1"], ("--save-interval-updates -1", ">= 0")),
    (["--lr", "0.01", "--patience", "-5"], ("--patience -5", ">= -1")),
    (["--lr", "0.01", "--update-freq", "0"], ("--update-freq 0", ">= 1")),  # fairseq: a message naming no flag
    (["--lr", "0.01", "--log-file", "/dev/full"], ("/dev/full", "No space left")),  # fairseq: tracebacks, exit 0
    (["--lr", "0.01", "--validate-interval-updates", "-1"], ("--validate-interval-updates -1", ">= 0")),
    (["--lr", "0.01", "--curriculum", "-1"], ("--curriculum -1", ">= 0")),
    (["--lr", "0.01", "--max-valid-steps", "0"], ("--max-valid-steps 0", ">= 1")),
    (["--lr", "0.01", "--stop-time-hours", "-1"], ("--stop-time-hours -1", "hours >= 0")),  # fairseq: no limit
    (["--lr", "0.01", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "-5"], ("--warmup-updates -5", ">= 0")),
    (["--lr", "0.01", "--lr-scheduler", "polynomial_decay", "--total-num-update", "0"],
     ("--lr-scheduler polynomial_decay", "AssertionError: assert cfg.total_num_update > 0")),  # a bare assert
])
def test_training_settings_fairseq_takes_silently_are_refused_at_start_up(release, extra, words):
    _refused_in_one_line(_train(release, "--max-update", "2", "--save-dir", "ck", *extra), *words)
    if "--log-file" in extra:  # fairseq makes --save-dir before its first log line: left empty
        assert not os.listdir(release / "ck")
    else:
        assert not os.path.exists(release / "ck")  # refused before anything was trained or saved


@pytest.mark.slow
def test_settings_in_range_train_and_the_first_rate_check_changes_no_setting(release):
    result = _train(release, "--max-update", "2", "--save-dir", "ck", "--lr", "0.01", "--lr-scheduler", "inverse_sqrt",
                    "--warmup-updates", "10", "--warmup-init-lr", "1e-07", "--stop-min-lr", "1e-09", "--adam-betas",
                    "(0.9, 0.98)", "--adam-eps", "1e-9", "--batch-size", "4", "--update-freq", "2",
                    "--log-file", "train.log")
    assert result.returncode == 0, result.stderr[-3000:]
    log = (release / "train.log").read_text()
    assert "done training" in log and "'warmup_init_lr': 1e-07" in log  # the schedule as given, not as rebuilt


def test_the_first_learning_rate_is_read_from_a_copy_of_the_settings():
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_syntax.optimizer_settings import optimizer_settings_error

    def cfg(*extra):
        parser = options.get_training_parser()
        return convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, [
            "data-bin", "--arch", "transformer", "--optimizer", "adam", "--lr", "0.01", "--lr-scheduler", "inverse_sqrt",
            "--warmup-updates", "10", *extra]))

    warm = cfg("--stop-min-lr", "0")
    assert "--stop-min-lr 0: expected below the first learning rate, 0 " in optimizer_settings_error(warm)
    assert warm.lr_scheduler.warmup_init_lr == -1.0  # fairseq's scheduler writes its default back: not into ours
    assert optimizer_settings_error(cfg("--stop-min-lr", "1e-9", "--warmup-init-lr", "1e-7")) is None
    assert optimizer_settings_error(cfg()) is None  # fairseq's default --stop-min-lr -1: no check


@pytest.mark.slow
def test_an_unlogged_best_checkpoint_metric_names_the_option_and_what_validation_logged(release):
    # fairseq: a KeyError at the first validation, after an epoch of training (bleu without --eval-bleu is
    # refused at start-up: tests/test_review_seventeenth_pass.py)
    line = _refused_in_one_line(_train(release, "--max-update", "1", "--save-dir", "ck", "--lr", "0.001",
                                       "--best-checkpoint-metric", "accuracy"), "--best-checkpoint-metric accuracy")
    assert "it logged:" in line and "loss" in line and "--eval-bleu" in line


@pytest.mark.parametrize("optimization, checkpoint, words", [
    ({"lr": [0.0]}, {}, "--lr 0"), ({"lr": [0.01, float("nan")]}, {}, "--lr 0.01,nan"),
    ({"lr": [float("inf")]}, {}, "--lr inf"), ({"clip_norm": -1.0}, {}, "--clip-norm -1"),
    ({"clip_norm": float("inf")}, {}, "--clip-norm inf"),
    ({}, {"keep_interval_updates": -3}, "--keep-interval-updates -3"),
    ({}, {"keep_best_checkpoints": -5}, "--keep-best-checkpoints -5"),
    ({}, {"keep_interval_updates_pattern": -2}, "--keep-interval-updates-pattern -2"),
])
def test_every_training_setting_out_of_range_is_named(optimization, checkpoint, words):
    from fairseq_syntax.fairseq_settings import training_settings_error

    def cfg(optimization=(), checkpoint=()):
        return types.SimpleNamespace(
            optimization=types.SimpleNamespace(**{"lr": [0.25], "clip_norm": 0.0, **dict(optimization)}),
            checkpoint=types.SimpleNamespace(**{"keep_interval_updates": -1, "keep_interval_updates_pattern": -1,
                                                "keep_last_epochs": -1, "keep_best_checkpoints": -1,
                                                **dict(checkpoint)}))

    assert training_settings_error(cfg()) is None
    assert training_settings_error(cfg({"lr": [0.001, 0.0005], "clip_norm": 0.1}, {"keep_last_epochs": 2})) is None
    assert "--keep-last-epochs 0" in training_settings_error(cfg({"lr": [0.001]}, {"keep_last_epochs": 0}))
    error = training_settings_error(cfg(optimization, checkpoint))
    assert error is not None and error.startswith(words + ":"), error


# ------------------------------------------------------------------ 2, 3. generation settings

@pytest.mark.slow
@pytest.mark.parametrize("extra, words", [
    (["--sampling", "--sampling-topp", "nan"], ("--sampling-topp nan", "(0, 1]")),
    (["--sampling", "--sampling-topp", "1.5"], ("--sampling-topp 1.5",)),
    (["--sampling", "--sampling-topk", "0"], ("--sampling-topk 0",)),
    (["--num-shards", "0"], ("--num-shards 0", ">= 1")),
    (["--diversity-rate", "nan"], ("--diversity-rate nan", "finite")),  # fairseq: off without a word
    (["--lm-weight", "nan"], ("--lm-weight nan", "finite")),
    (["--max-len-a", "inf"], ("--max-len-a inf", "finite length")),  # fairseq: OverflowError, no flag named
    (["--shard-id", "5", "--num-shards", "2"], ("--shard-id 5", "from 0 to 1")),
    (["--shard-id", "1", "--num-shards", "2"], ("--num-shards 2", "--distributed-world-size 2 --distributed-rank 1")),
])
def test_generation_settings_fairseq_ignores_or_reads_as_off_are_one_line(release, extra, words):
    _refused_in_one_line(_generate(release, "--results-path", "out", *extra), *words)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["fairseq-generate", "fairseq-interactive", "fairseq-validate"])
def test_the_moses_tokenizer_without_languages_is_one_line_without_fairseqs_settings_dump(release, command):
    # fairseq: hydra's ConfigCompositionException traceback after a log line of every setting
    result = call([tool(command), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--path",
                   "checkpoints/transformer_dep_rel.pt", "--batch-size", "8", "--tokenizer", "moses"],
                  cwd=str(release), expect_ok=False, stdin="a dog .\n")
    _refused_in_one_line(result, "--source-lang is required", "--tokenizer moses")
    assert "Overrides:" not in result.stderr
    assert not os.path.exists(release / "out" / "generate-test.txt")  # nor an empty results file


@pytest.mark.parametrize("settings, words", [
    ({"sampling_topp": 0.0}, "--sampling-topp 0"), ({"sampling_topp": -0.5}, "--sampling-topp -0.5"),
    ({"sampling_topk": -3}, "--sampling-topk -3"), ({"sampling_topk": 161}, "--sampling-topk 161"),
])
def test_sampling_settings_are_checked_with_the_target_dictionary(settings, words):
    from fairseq_syntax.search_settings import check_search as _check_search
    from fairseq_syntax_core.errors import UsageError

    base = {"beam": 2, "nbest": 2, "sampling_topp": -1.0, "sampling_topk": -1}
    _check_search(types.SimpleNamespace(**base), 160)
    _check_search(types.SimpleNamespace(**{**base, "sampling_topp": 1.0}), 160)
    _check_search(types.SimpleNamespace(**{**base, "sampling_topk": 160}), 160)
    with pytest.raises(UsageError, match="ignores top-k"):  # fairseq would silently drop top-k
        _check_search(types.SimpleNamespace(**{**base, "sampling_topp": 0.5, "sampling_topk": 5}), 160)
    with pytest.raises(UsageError, match=words.replace("-", r"\-") + ":"):
        _check_search(types.SimpleNamespace(**{**base, **settings}), 160)


def test_generation_shards_in_range_of_one_pass():
    from fairseq_syntax.compat import generation_shards_error

    assert generation_shards_error(types.SimpleNamespace(num_shards=1, shard_id=0)) is None
    assert "--shard-id -1" in generation_shards_error(types.SimpleNamespace(num_shards=1, shard_id=-1))


# ------------------------------------------------------------------ 4. optimizer state that does not fit

def _forge_optimizer_state(release, edit):
    from fairseq_syntax_core.checkpoint_loader import load_checkpoint

    state = load_checkpoint(str(release / "base" / "checkpoint_last.pt"))
    edit(state["last_optimizer_state"])
    torch.save(state, release / "forged.pt")


def _drop_last_parameter(optimizer_state):
    last = optimizer_state["param_groups"][0]["params"].pop()
    optimizer_state["state"].pop(last, None)


@pytest.mark.slow
def test_restoring_optimizer_state_that_does_not_fit_names_the_checkpoint(release):
    trained = _train(release, "--lr", "0.01", "--max-update", "2", "--save-dir", "base")
    assert trained.returncode == 0, trained.stderr[-3000:]
    for edit, words in ((lambda o: o["state"][0].__setitem__("exp_avg", torch.zeros(3)),
                         ("forged.pt: ", "parameter 1 of", "exp_avg of shape [3]", "--reset-optimizer")),
                        (_drop_last_parameter, ("forged.pt: ", "parameters in group 1", "--reset-optimizer"))):
        _forge_optimizer_state(release, edit)
        shutil.rmtree(release / "ck", ignore_errors=True)
        result = _train(release, "--lr", "0.01", "--max-update", "4", "--save-dir", "ck", "--restore-file", "forged.pt")
        _refused_in_one_line(result, *words)
        assert not os.path.exists(release / "ck" / "crash.pt")
    resumed = _train(release, "--lr", "0.01", "--max-update", "4", "--save-dir", "base")  # the true state still loads
    assert resumed.returncode == 0 and "num_updates 4" in resumed.stdout + resumed.stderr, resumed.stderr[-3000:]


@pytest.mark.parametrize("edit, words", [
    (lambda o: o["state"][1].__setitem__("exp_avg_sq", torch.zeros(2, 3)), "parameter 2 of 3 has exp_avg_sq"),
    (lambda o: o["state"][0].__setitem__("step", "x"), "has step 'x'"),
    (lambda o: o["state"][0].__setitem__("exp_avg", torch.zeros(4, 2, dtype=torch.complex64)), "complex64"),
    (lambda o: o["state"].__setitem__(7, {}), "entry 7 for no parameter"),
    (lambda o: o["param_groups"].append({"params": []}), "2 parameter groups, the optimizer 1"),
    (lambda o: o.pop("state"), "without torch's 'state'"),
    # the sixth pass: entries torch or fairseq would take, then fail on or train with
    (lambda o: o["state"][0].__setitem__("exp_avg", [0.0] * 8), "exp_avg a list, not a dense tensor"),
    (lambda o: o["state"][0].pop("step"), "parameter 1 of 3 has no step"),
    (lambda o: o["state"][1].__setitem__("step", torch.tensor([3.0])), "has step"),
    (lambda o: o["state"][0].__setitem__("exp_avg", torch.zeros(4, 2).to_sparse()), "not a dense tensor"),
    (lambda o: o["state"][0].__setitem__("exp_avg", torch.zeros(4, 2, device="meta")), "not a dense tensor"),
    (lambda o: o["state"][0].__setitem__("exp_avg", torch.full((4, 2), float("nan"))), "NaN or infinite"),
    (lambda o: o["state"][0].__setitem__("exp_avg_sq", -torch.ones(4, 2)), "negative values"),
    (lambda o: o["param_groups"][0].__setitem__("betas", (5.0, 0.999)), "betas (5.0, 0.999)"),
    (lambda o: o["param_groups"][0].__setitem__("betas", "ab"), "betas 'ab'"),
    (lambda o: o["param_groups"][0].__setitem__("eps", -1.0), "eps -1.0: expected a value >= 0"),
    (lambda o: o["param_groups"][0].__setitem__("weight_decay", "x"), "weight_decay 'x'"),
    (lambda o: o["param_groups"][0].__setitem__("amsgrad", True), "no max_exp_avg_sq"),
])
def test_optimizer_state_is_checked_against_the_parameters(edit, words):
    from fairseq_syntax_core.checkpoint_loader import check_optimizer_state
    from fairseq_syntax_core.errors import CheckpointError

    def saved():
        return {"state": {0: {"step": 3, "exp_avg": torch.zeros(4, 2), "exp_avg_sq": torch.zeros(4, 2)},
                          1: {"step": torch.tensor(3.0), "exp_avg": torch.zeros(2), "exp_avg_sq": torch.zeros(2)}},
                "param_groups": [{"lr": 0.1, "params": [0, 1, 2]}]}

    shapes = [[(4, 2), (2,), (5,)]]
    check_optimizer_state("ck.pt", saved(), shapes)
    state = saved()
    edit(state)
    with pytest.raises(CheckpointError) as error:
        check_optimizer_state("ck.pt", state, shapes)
    assert str(error.value).startswith("ck.pt: ") and words in str(error.value) and "\n" not in str(error.value)


# ------------------------------------------------------------------ 5. crash.pt after a refused training step

TREE2SEQ = ["--arch", "tree2seq", "--encoder-embed-dim", "16", "--encoder-hidden-size", "16", "--decoder-embed-dim",
            "16", "--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16", "--optimizer", "adam", "--lr", "0.01",
            "--max-tokens", "2000", "--no-progress-bar", "--valid-subset", "test", "--cpu"]


@pytest.mark.slow
@pytest.mark.parametrize("earlier", [None, b"an earlier run's crash.pt"])
def test_a_refusal_inside_a_training_step_leaves_no_crash_pt(release, earlier):
    # tree2seq under fairseq's translation task: the model refuses its first batch (no phrase structure) inside
    # fairseq's train_step, where fairseq saves crash.pt on any error that is not a RuntimeError
    if earlier is not None:
        (release / "ck").mkdir()
        (release / "ck" / "crash.pt").write_bytes(earlier)
    result = _train(release, "--max-update", "2", "--save-dir", "ck", arch=TREE2SEQ, task="translation")
    _refused_in_one_line(result, "tree2seq needs the source phrase structure")
    if earlier is None:
        assert not os.path.exists(release / "ck" / "crash.pt")
    else:
        assert (release / "ck" / "crash.pt").read_bytes() == earlier


def test_any_other_error_keeps_fairseqs_crash_pt_and_names_it_in_its_line(tmp_path):
    from fairseq_syntax import compat
    from fairseq_syntax_core.errors import UsageError
    from fairseq_syntax_core.interrupts import error_notes

    class Trainer:
        def save_checkpoint(self, filename, extra_state):
            with open(filename, "wb") as handle:
                handle.write(b"state")

    module = types.SimpleNamespace(Trainer=Trainer)
    assert compat._wrap_crash_save(module)
    crash = str(tmp_path / "crash.pt")
    try:
        raise UsageError("--x: refused")
    except UsageError as refusal:
        Trainer().save_checkpoint(crash, {})
        assert not os.path.exists(crash) and error_notes(refusal) == ""
    try:
        raise ValueError("fairseq's own failure")
    except ValueError as failure:
        Trainer().save_checkpoint(crash, {})
        assert os.path.exists(crash) and crash in error_notes(failure) and "debugging" in error_notes(failure)
    Trainer().save_checkpoint(str(tmp_path / "checkpoint_last.pt"), {})  # other saves as they were
    assert os.path.exists(tmp_path / "checkpoint_last.pt")
    (tmp_path / "crash.pt").write_bytes(b"mine")  # an earlier crash.pt (or the user's file) is never replaced
    try:
        raise ValueError("fairseq's own failure, again")
    except ValueError as failure:
        Trainer().save_checkpoint(crash, {})
        assert (tmp_path / "crash.pt").read_bytes() == b"mine" and (tmp_path / "crash-1.pt").read_bytes() == b"state"
        assert str(tmp_path / "crash-1.pt") in error_notes(failure)


@pytest.mark.slow
def test_gradients_that_become_nan_are_one_line_naming_the_crash_pt(release):
    """fairseq reruns the step under its NanDetector, whose module backward hooks made torch fail on our
    models' dict outputs (a second traceback); its FloatingPointError is now one line."""
    result = _train(release, "--max-update", "3", "--save-dir", "ck", "--lr", "1e30")
    _refused_in_one_line(result, "diverged", "crash.pt")


# ------------------------------------------------------------------ 6. perturb copies the recorded BPE codes

@pytest.mark.parametrize("name", ["codes.subword", "../codes.subword", "/etc/passwd", "..", "a/b"])
def test_perturb_copies_the_bpe_codes_syntax_json_names_and_refuses_a_path(tmp_path, capsys, name):
    from fairseq_syntax_preprocess.perturb import cli_main

    data = tmp_path / "bin"
    shutil.copytree(os.path.join(RELEASE_0_2, "data-bin"), data)
    (data / "bpe.codes").rename(data / "codes.subword")
    meta = json.loads((data / "syntax.json").read_text())
    meta["bpe"]["codes"] = name
    (data / "syntax.json").write_text(json.dumps(meta))
    code = cli_main([str(data), "--destdir", str(tmp_path / "noisy"), "--p", "0.2"])
    err = capsys.readouterr().err
    if name == "codes.subword":
        assert code == 0, err
        assert (tmp_path / "noisy" / name).read_bytes() == (data / name).read_bytes()
        assert json.loads((tmp_path / "noisy" / "syntax.json").read_text())["bpe"]["codes"] == name
        return
    assert code != 0 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1 and "syntax.json" in lines[0] and "bpe.codes" in lines[0] and repr(name) in lines[0], err
    assert not os.path.exists(tmp_path / "noisy") and not os.path.exists(tmp_path / "codes.subword")


def test_perturb_refuses_a_data_bin_without_the_codes_it_records(tmp_path, capsys):
    from fairseq_syntax_preprocess.perturb import cli_main

    data = tmp_path / "bin"
    shutil.copytree(os.path.join(RELEASE_0_2, "data-bin"), data)
    (data / "bpe.codes").unlink()
    code = cli_main([str(data), "--destdir", str(tmp_path / "noisy"), "--p", "0.2"])
    err = capsys.readouterr().err
    assert code != 0 and "bpe.codes: not found" in err and "Traceback" not in err, err
    assert not os.path.exists(tmp_path / "noisy")


# ---- the sixth pass: what the fifth pass's own adversary found

def test_a_refused_generation_keeps_the_earlier_results_file(tmp_path):
    """fairseq opens ``generate-SUBSET.txt`` with "w" before anything is checked: a refusal (or any
    stop) must leave the earlier run's file as it was."""
    from types import SimpleNamespace

    from fairseq_syntax.results_file import earlier_results_kept

    folder = tmp_path / "rp"
    folder.mkdir()
    earlier = folder / "generate-test.txt"
    earlier.write_text("S-0\tan earlier run\n", encoding="utf-8")
    cfg = SimpleNamespace(common_eval=SimpleNamespace(results_path=str(folder)), dataset=SimpleNamespace(gen_subset="test"))
    with pytest.raises(RuntimeError):
        with earlier_results_kept(cfg):
            with open(earlier, "w", encoding="utf-8"):  # as fairseq opens it
                raise RuntimeError("refused")
    assert earlier.read_text(encoding="utf-8") == "S-0\tan earlier run\n"
    assert sorted(p.name for p in folder.iterdir()) == ["generate-test.txt"]
    with earlier_results_kept(cfg):
        earlier.write_text("this run\n", encoding="utf-8")
    assert earlier.read_text(encoding="utf-8") == "this run\n"
    assert sorted(p.name for p in folder.iterdir()) == ["generate-test.txt"]


def test_depth_level_sizes_that_add_up_but_are_wrong_are_refused():
    """Paper 001's path LSTM: sizes from a caller that sum to B*T but are not the batch's levels fail
    loudly instead of slicing the wrong tokens."""
    from fairseq_syntax.modules.syntactic_position import SyntacticPathEncoder
    from fairseq_syntax_core.trees import level_sizes_of, tree_depth

    parents = torch.tensor([[0, 0, 1, 1, 3, 5], [1, 1, 1, 2, 4, 5]])
    padding = torch.tensor([[False] * 6, [False] * 5 + [True]])
    depth = tree_depth(parents)
    encoder = SyntacticPathEncoder(6, 4, 8, padding_idx=0)
    labels = torch.ones_like(parents)
    assert level_sizes_of(depth, padding) == (1, 4, 3, 3, 1)
    for wrong in ((2, 3, 3, 3, 1), (1, 4, 3, 4), (1, 4, 3, 3, 0, 1)):
        with pytest.raises(RuntimeError, match="depth_level_sizes"):
            encoder(parents, labels, depth, padding, level_sizes=wrong)


def test_the_fused_values_switch_takes_0_or_1_only(monkeypatch):
    from fairseq_syntax.modules.relative_attention import RelativeMultiheadAttention
    from fairseq_syntax_core.errors import UserError

    attn = RelativeMultiheadAttention(8, 2, self_attention=True)
    for value, fused in (("", False), ("0", False), ("1", True)):
        monkeypatch.setenv("FAIRSEQ_SYNTAX_FUSED_VALUES", value)
        assert attn._fuse_values(torch.device("cpu")) is fused
    for value in ("yes", "true", " 1"):
        monkeypatch.setenv("FAIRSEQ_SYNTAX_FUSED_VALUES", value)
        with pytest.raises(UserError, match="FAIRSEQ_SYNTAX_FUSED_VALUES"):
            attn._fuse_values(torch.device("cpu"))


def test_a_symlinked_codes_file_is_refused(tmp_path):
    from fairseq_syntax_core.databin import codes_file
    from fairseq_syntax_core.errors import DataBinError

    (tmp_path / "outside").write_text("#version: 0.2\n", encoding="utf-8")
    os.symlink(tmp_path / "outside", tmp_path / "evil.codes")
    with pytest.raises(DataBinError, match="symbolic link"):
        codes_file({"bpe": {"codes": "evil.codes"}}, str(tmp_path / "syntax.json"))
    assert codes_file({"bpe": {"codes": "bpe.codes"}}, str(tmp_path / "syntax.json")) == "bpe.codes"


def test_fairseq_generate_refused_keeps_the_earlier_results_file(release):
    (release / "out").mkdir(exist_ok=True)
    (release / "out" / "generate-test.txt").write_text("an earlier run\n", encoding="utf-8")
    _refused_in_one_line(_generate(release, "--results-path", "out", "--sampling", "--sampling-topp", "1.5"),
                         "--sampling-topp 1.5")
    assert (release / "out" / "generate-test.txt").read_text(encoding="utf-8") == "an earlier run\n"
    assert sorted(p.name for p in (release / "out").iterdir()) == ["generate-test.txt"]


def test_a_codes_name_pointing_at_another_file_of_the_data_bin_is_refused(tmp_path):
    """A syntax.json whose codes name is the dictionary: its "SYMBOL COUNT" lines read as merges."""
    from fairseq_syntax_core.databin import codes_file
    from fairseq_syntax_core.errors import DataBinError

    (tmp_path / "dict.en.txt").write_text("the 12\n", encoding="utf-8")
    (tmp_path / "bpe.codes").write_text("#version: 0.2\nt h\n", encoding="utf-8")
    meta = str(tmp_path / "syntax.json")
    with pytest.raises(DataBinError, match="not the subword-nmt codes"):
        codes_file({"bpe": {"codes": "dict.en.txt", "given_codes": ""}}, meta)
    assert codes_file({"bpe": {"codes": "bpe.codes", "given_codes": ""}}, meta) == "bpe.codes"
    # codes the user gave (--bpe-codes) are copied as they were: no header is required of them
    assert codes_file({"bpe": {"codes": "dict.en.txt", "given_codes": "/data/codes"}}, meta) == "dict.en.txt"
