"""What another hostile review found: a parse-noise curve joining two runs' evaluations, or plotting a BLEU its
statistics contradict; an evaluation named after another seed than its log records; seeds no run trains with."""

import json
import os
import shutil

import pytest

from fairseq_syntax_analysis import evaluate as ev
from fairseq_syntax_analysis import results as rs
from fairseq_syntax_core.errors import InputError

from .helpers import _folder, decoded_at, fake_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HYPS = ["a man rides a bike", "two dogs play", "a woman reads", "kids swim"] * 5


def _run(seed, save_dir="ck", updates=20):
    return {"checkpoints": [{"arch": "transformer_dep_rel", "seed": seed, "save_dir": save_dir, "updates": updates,
                             "checkpoint": f"{save_dir}/checkpoint_last.pt"}], "data_bin": "db", "perturbation": None}


def _point(tmp_path, name, perturbation, decoded=None, bleu=30.0, statistics=None):
    system = {"name": "dep_rel.seed1", "scores": {"BLEU": bleu}}
    if decoded is not None:
        system["decoded"] = decoded_at(decoded, perturbation)
    data = {"systems": [system], "reference": "test.de", "sentences": 1, "perturbation": perturbation}
    if statistics is not None:
        data["statistics"] = {"dep_rel.seed1": {"BLEU": statistics}}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _noise(tmp_path, clean, noisy):
    return rs.cli_main(["noise", "--plot", str(tmp_path / "n.png"), "--point", f"dep_rel:0={clean}",
                        "--point", f"dep_rel:0.4={noisy}"])


@pytest.mark.parametrize("other, words", [
    (_run(2, "ck2"), "a checkpoint of seed 2 at 20 updates"),
    (_run(1, "ck", updates=40), "a checkpoint of seed 1 at 40 updates"),  # the same run, another checkpoint
    (None, "a log that records no checkpoint"),
])
def test_the_points_of_a_noise_curve_are_one_checkpoints_translations(tmp_path, capsys, other, words):
    clean = _point(tmp_path, "clean", 0.0, _run(1))
    noisy = _point(tmp_path, "noisy", 0.4, other)
    assert _noise(tmp_path, clean, noisy) == 1
    err = capsys.readouterr().err
    assert f"{noisy}: evaluates translations of " in err and words in err, err
    assert "must be one checkpoint's" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "n.png").exists()
    assert _noise(tmp_path, clean, _point(tmp_path, "same", 0.4, _run(1))) == 0


def test_a_noise_point_whose_bleu_its_statistics_contradict_is_refused(tmp_path, capsys):
    rows = [[4, 4, 4, 3, 2, 1, 4, 3, 2, 1]]  # lengths, then every n-gram of a 4-word sentence matched: BLEU 100
    clean = _point(tmp_path, "clean", 0.0, _run(1), statistics=rows, bleu=100.0)
    edited = _point(tmp_path, "edited", 0.4, _run(1), statistics=rows, bleu=42.0)
    assert _noise(tmp_path, clean, edited) == 1
    assert f"{edited}: has BLEU 42, its per-sentence statistics give 100 (edited?)" in capsys.readouterr().err
    cut = _point(tmp_path, "cut", 0.4, _run(1), statistics=[], bleu=100.0)
    assert _noise(tmp_path, clean, cut) == 1
    assert "one row per sentence (damaged?)" in capsys.readouterr().err
    assert _noise(tmp_path, clean, _point(tmp_path, "kept", 0.4, _run(1), statistics=rows, bleu=100.0)) == 0


def test_an_evaluated_system_is_named_after_the_seed_its_log_records():
    with pytest.raises(InputError, match=r"gen\.txt: was decoded by a checkpoint of a seed-2 run .* named "
                                         r"'dep_rel\.seed1'"):
        ev.check_decoded_seed(_run(2), "gen.txt", "dep_rel.seed1")
    ev.check_decoded_seed(_run(2), "gen.txt", "dep_rel.seed2")
    ev.check_decoded_seed(_run(2), "gen.txt", "dep_rel")  # a name without a seed claims none
    ev.check_decoded_seed(None, "gen.txt", "dep_rel.seed1")  # plain text: nothing recorded


@pytest.mark.parametrize("seed", [-1, 2**32, 10**30])
def test_a_result_of_a_seed_fairseq_cannot_train_with_is_damaged(tmp_path, capsys, seed):
    result = fake_result("transformer", seed, HYPS)
    assert rs.cli_main(["table", str(_folder(tmp_path, [result])), "--baseline", "transformer"]) == 1
    assert "is not a seed fairseq trains with (0 to 2^32 - 1)" in capsys.readouterr().err


def test_two_seeds_with_the_same_translations_are_warned_about(tmp_path, capsys):
    one, two = fake_result("transformer", 1, HYPS), fake_result("transformer", 2, HYPS)
    assert rs.cli_main(["table", str(_folder(tmp_path, [one, two])), "--baseline", "transformer"]) == 0
    err = capsys.readouterr().err
    assert "transformer.seed2.json: holds the per-sentence statistics of" in err and "(a copy?)" in err, err


# ------------------------------------------------------------------ fairseq's commands
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "release_0_2")
TINY = ["data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--arch", "transformer",
        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2", "--optimizer", "adam", "--lr", "0.001", "--valid-subset", "test",
        "--save-dir", "ck", "--no-epoch-checkpoints", "--max-tokens", "100", "--seed", "1"]


def test_a_finished_run_started_again_trains_nothing_and_keeps_its_checkpoints(tmp_path):
    """fairseq checks --max-update after each update: a rerun trained update N + 1 and replaced checkpoint_last.pt."""
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    from .conftest import call, tool

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    call([tool("fairseq-train"), *TINY, "--max-update", "2"], cwd=tmp_path)
    last = tmp_path / "ck" / "checkpoint_last.pt"
    before = last.read_bytes()
    again = call([tool("fairseq-train"), *TINY, "--max-update", "2"], cwd=tmp_path)
    assert "ck/checkpoint_last.pt is at update 2, --max-update 2: the run is finished, nothing is trained" \
        in again.stderr, again.stderr[-2000:]
    assert last.read_bytes() == before
    call([tool("fairseq-train"), *TINY, "--max-update", "3"], cwd=tmp_path)  # a raised cap trains on
    assert load_fairseq_checkpoint(str(last))["optimizer_history"][-1]["num_updates"] == 3


@pytest.mark.parametrize("command, flags, words", [
    ("fairseq-interactive", ["--score-reference"], "--score-reference: fairseq-interactive reads source lines only"),
    ("fairseq-generate", ["--lm-path", "lm.pt", "--lm-weight", "0.5"], "--lm-path lm.pt: language-model fusion"),
    ("fairseq-interactive", ["--lm-path", "lm.pt"], "--lm-path lm.pt: language-model fusion"),
])
def test_decoding_options_that_cannot_work_here_are_refused_at_start(tmp_path, command, flags, words):
    from .conftest import call, tool
    from .helpers import one_line_error

    argv = [tool(command), os.path.join(FIXTURE, "data-bin"), "--user-dir", "fairseq_syntax", "--task",
            "syntax_translation", "--gen-subset", "test", "--path",
            os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt"), *flags]
    result = call(argv, cwd=tmp_path, stdin="a man .\n", expect_ok=False)
    one_line_error(result, command, words)


# ------------------------------------------------------------------ which run a checkpoint belongs to
def _train(folder, *flags):
    from .conftest import call, tool

    return call([tool("fairseq-train"), *TINY, *flags], cwd=folder)


def test_record_refuses_the_best_checkpoint_another_run_left_in_the_folder(tmp_path):
    """Two runs of one architecture, seed, folder and data-bin: only the identifier each drew tells them apart."""
    from fairseq_syntax_analysis import results as rs_
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint
    from fairseq_syntax_core.errors import InputError as Refused

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "2")
    first = load_fairseq_checkpoint(str(tmp_path / "ck" / "checkpoint_last.pt"))["task_state"]["run_id"]
    _train(tmp_path, "--max-update", "3")  # the same run, resumed: the same identifier
    assert load_fairseq_checkpoint(str(tmp_path / "ck" / "checkpoint_last.pt"))["task_state"]["run_id"] == first
    rs_.checkpoint_facts(str(tmp_path / "ck"))
    best = (tmp_path / "ck" / "checkpoint_best.pt").read_bytes()
    shutil.rmtree(tmp_path / "ck")
    _train(tmp_path, "--max-update", "4", "--lr", "0.002")  # another run in the same folder
    assert load_fairseq_checkpoint(str(tmp_path / "ck" / "checkpoint_last.pt"))["task_state"]["run_id"] != first
    (tmp_path / "ck" / "checkpoint_best.pt").write_bytes(best)
    with pytest.raises(Refused, match=rf"checkpoint_best.pt: is of run {first[:12]}, checkpoint_last.pt of run "):
        rs_.checkpoint_facts(str(tmp_path / "ck"))


def test_a_resume_with_reset_dataloader_is_warned_and_record_refuses_the_run(tmp_path):
    from fairseq_syntax_analysis import results as rs_
    from fairseq_syntax_core.errors import InputError as Refused

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "1")
    resumed = _train(tmp_path, "--max-update", "2", "--reset-dataloader")
    assert "--reset-dataloader: ck/checkpoint_last.pt was at update 1; fairseq starts the epochs again at epoch 1" \
        in resumed.stderr + resumed.stdout
    _train(tmp_path, "--max-update", "3")  # carried by later resumes
    with pytest.raises(Refused, match="was resumed at update 1 with --reset-dataloader: fairseq started its epochs"):
        rs_.checkpoint_facts(str(tmp_path / "ck"))


def test_a_shard_that_lacks_the_train_digest_the_others_record_is_refused():
    from fairseq_syntax_core.errors import DataBinError
    from fairseq_syntax_core.shards import check_same_train_content

    first = {"id": 0, "train_sha256": "a" * 64}
    with pytest.raises(DataBinError, match="is shard 1, which lacks the SHA-256 of the train files that the first "
                                           "shard records"):
        check_same_train_content("s1/syntax.json", {"id": 1}, first)
    check_same_train_content("s1/syntax.json", {"id": 1}, {"id": 0})  # shards of a release before the digest


@pytest.mark.parametrize("name", ["../../tmp/fifo", "dict.en.txt\n", ""])
def test_a_stored_data_record_naming_files_outside_a_data_bin_is_damaged(name):
    from fairseq_syntax.data import provenance

    record = {"dictionaries_sha256": {"dict.en.txt": "a" * 64, name: "b" * 64}}
    assert provenance.decode(json.dumps(record)) == {provenance.DAMAGED: True}
    assert provenance.decode(json.dumps({"dictionaries_sha256": {"dict.en.txt": "a" * 64}}))["dictionaries_sha256"]


def test_two_copies_of_a_stored_data_record_that_disagree_are_damaged():
    from fairseq_syntax.data import provenance

    one = provenance.decode(json.dumps({"dictionaries_sha256": {"dict.en.txt": "a" * 64}}))
    other = provenance.decode(json.dumps({"dictionaries_sha256": {"dict.en.txt": "b" * 64}}))
    assert provenance.kept(one, other) == {provenance.DAMAGED: True}
    assert provenance.kept(one, dict(one)) == one


# ------------------------------------------------------------------ signals while exiting
LATE = """
import atexit, os, signal, sys, time
atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(1)))  # runs after the plugin's
from fairseq_syntax_core import interrupts
interrupts.install_error_hook()
sys.argv[0] = "fairseq-generate"
{body}
"""


@pytest.mark.parametrize("body, words", [
    ("print('done')", "fairseq-generate: interrupted (SIGINT) while exiting, after its work was done"),
    ("raise KeyboardInterrupt", "fairseq-generate: interrupted (SIGINT); no output was left half-written"),
])
def test_a_signal_while_a_command_exits_is_one_line(tmp_path, body, words):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", LATE.format(body=body)], capture_output=True, text=True,
                            timeout=60, env=dict(os.environ, FAIRSEQ_SYNTAX_TRACEBACK="0"))
    assert result.returncode == 130 and words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


# ------------------------------------------------------------------ the thirtieth pass
def test_a_resume_from_a_checkpoint_without_optimizer_state_is_a_restart_record_refuses(tmp_path):
    """fairseq takes the update count from the optimizer state: without one it counts from 0 again."""
    from fairseq_syntax_analysis import results as rs_
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint
    from fairseq_syntax_core.errors import InputError as Refused

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "1", "--no-save-optimizer-state")
    again = _train(tmp_path, "--max-update", "1")  # finished all the same: fairseq would train it all again
    assert "is at update 1, --max-update 1: the run is finished" in again.stderr
    resumed = _train(tmp_path, "--max-update", "2")
    assert "ck/checkpoint_last.pt was at update 1 and holds no optimizer state" in resumed.stderr + resumed.stdout
    assert load_fairseq_checkpoint(str(tmp_path / "ck" / "checkpoint_last.pt"))["task_state"]["update_restarts"] == [1]
    with pytest.raises(Refused, match="counted 1 updates, then again from 0"):
        rs_.checkpoint_facts(str(tmp_path / "ck"))


def test_record_refuses_translations_of_a_run_deleted_before_this_one():
    facts = {"last_identity": {"arch": "a", "seed": 1}, "last_training_data": None, "last_updates": 30,
             "best_updates": 20, "last_run_id": "b" * 32}
    assert "run 'aaaaaaaaaaaa... (this folder's: bbbbbbbbbbbb)" in rs._decoded_differs(
        {"arch": "a", "seed": 1, "run_id": "a" * 32, "updates": 20}, facts)[0]
    stale = {"arch": "a", "seed": 1, "run_id": "b" * 32, "updates": 10, "checkpoint": "ck/checkpoint_best.pt"}
    assert rs._decoded_differs(stale, facts) == ["updates 10, not checkpoint_best.pt's 20 (another checkpoint, or "
                                                 "an earlier best)"]
    assert rs._decoded_differs(dict(stale, updates=20), facts) == []


@pytest.mark.parametrize("checkpoint", [{"seed": [1]}, {"seed": 10**400}, {"updates": float("nan")},
                                        {"seed": True}, {"run_id": 5}])
def test_a_decoded_line_with_counts_that_are_not_counts_is_not_one(checkpoint):
    from fairseq_syntax_core.decoding_record import MARK, parse_line

    text = json.dumps({"checkpoints": [checkpoint], "data_bin": "db", "perturbation": None})
    assert parse_line(f"{MARK}\t{text}") is None
    assert parse_line(f"{MARK}\t" + json.dumps({"checkpoints": [{"seed": 1, "updates": 2}]})) is not None


@pytest.mark.parametrize("record", [{"p": [0.5]}, [0.5], {"p": 0.5, "previous": {"p": "x"}}])
def test_perturb_refuses_a_data_bin_whose_perturbation_record_is_damaged(tmp_path, record):
    from .conftest import call, tool
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "db")
    meta = json.loads((tmp_path / "db" / "syntax.json").read_text(encoding="utf-8"))
    meta["perturbation"] = record
    (tmp_path / "db" / "syntax.json").write_text(json.dumps(meta), encoding="utf-8")
    result = call([tool("fairseq-syntax-perturb"), "db", "--destdir", "out", "--p", "0.1"], cwd=tmp_path,
                  expect_ok=False)
    one_line_error(result, "fairseq-syntax-perturb", "db/syntax.json", "is not the probability in [0, 1]")
    assert not (tmp_path / "out").exists()


def test_awsl_that_fails_leaves_no_folder_of_its_own(tmp_path):
    from .conftest import call, tool
    from .helpers import one_line_error

    (tmp_path / "text.pt").write_text("not a checkpoint", encoding="utf-8")
    data = os.path.join(FIXTURE, "data-bin")
    missing = call([tool("fairseq-syntax-awsl"), data, "--path", "none.pt", "--out", "new/awsl/valid"],
                   cwd=tmp_path, expect_ok=False)
    one_line_error(missing, "fairseq-syntax-awsl", "none.pt: not found: --path names the checkpoint file")
    failed = call([tool("fairseq-syntax-awsl"), data, "--path", "text.pt", "--out", "new/awsl/valid"],
                  cwd=tmp_path, expect_ok=False)
    assert failed.returncode != 0 and not (tmp_path / "new").exists(), failed.stderr


def _limited(argv, cwd, file_size: int, **env):
    """``argv`` run with a file-size limit (``ulimit -f``) of ``file_size`` bytes."""
    import resource
    import subprocess

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, preexec_fn=limit,
                          env=dict(os.environ, PYTHONPATH="", OMP_NUM_THREADS="1", **env))


def test_data_loader_workers_that_could_not_pass_batches_are_refused_before_they_hang(tmp_path):
    from .conftest import tool
    from .helpers import one_line_error

    argv = [tool("fairseq-generate"), os.path.join(FIXTURE, "data-bin"), "--user-dir", "fairseq_syntax", "--task",
            "syntax_translation", "--gen-subset", "test", "--beam", "2", "--path",
            os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt")]
    one_line_error(_limited(argv, tmp_path, 1 << 20), "fairseq-generate", "--num-workers 1 with a file-size limit of "
                   "1048576 bytes (ulimit -f)", "give --num-workers 0")
    assert _limited(argv + ["--num-workers", "0"], tmp_path, 1 << 20).returncode == 0


def test_a_file_system_error_while_a_command_imports_is_one_line(tmp_path):
    from .conftest import tool

    result = _limited([tool("fairseq-syntax-report"), "table", "x"], tmp_path, 0, TMPDIR=str(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith("fairseq-syntax-report: error: ")
    assert "No usable temporary directory" in result.stderr and "the file-size limit (ulimit -f: 0 bytes)" in \
        result.stderr  # the cause here: the disk has room, and TMPDIR changes nothing


def test_a_perfect_score_as_sacrebleu_rounds_it_is_a_noise_point(tmp_path):
    clean = _point(tmp_path, "clean", 0.0, _run(1), bleu=100.00000000000004)
    assert _noise(tmp_path, clean, _point(tmp_path, "noisy", 0.4, _run(1), bleu=90.0)) == 0


def test_sizes_fairseq_parses_as_text_are_sizes_and_a_widened_decoder_needs_only_its_width_to_fit_the_heads():
    from fairseq_syntax_core.checkpoint_loader import settings_size_problem

    from .conftest import parse

    assert settings_size_problem({"decoder_output_dim": "64"}, "the command line", as_flags=True) is None
    assert "is not a number" in settings_size_problem({"decoder_output_dim": "6x4"}, "the command line", as_flags=True)
    assert "is not a number" in settings_size_problem({"decoder_output_dim": "64"}, "the checkpoint")  # stored: edited
    # 63 words + 5 distance dimensions: the decoder layers are 68 wide, which 4 heads divide
    args = parse("transformer_nsd_target", ["--decoder-embed-dim", "63", "--encoder-embed-dim", "63",
                                             "--decoder-attention-heads", "4", "--nsd-target-input", "concat",
                                             "--nsd-embed-dim", "5", "--encoder-attention-heads", "3"])
    assert args.decoder_embed_dim == 63


# ------------------------------------------------------------------ the thirty-first pass
def test_one_run_recorded_as_two_models_is_refused_and_a_model_is_not_compared_with_itself(tmp_path, capsys):
    one, other = fake_result("transformer", 1, HYPS), fake_result("transformer_rel", 1, HYPS[::-1])
    one["run_id"] = other["run_id"] = "c" * 32
    assert rs.cli_main(["table", str(_folder(tmp_path, [one, other])), "--baseline", "transformer"]) == 1
    assert "records the run of" in capsys.readouterr().err
    other["run_id"] = "d" * 32
    folder = _folder(tmp_path, [one, other], "apart")
    assert rs.cli_main(["table", str(folder), "--baseline", "transformer"]) == 0
    with pytest.raises(SystemExit):
        rs.cli_main(["table", str(folder), "--baseline", "transformer", "--compare", "transformer:transformer"])
    assert "expected SYSTEM:BASELINE, two models" in capsys.readouterr().err


@pytest.mark.parametrize("line", ["a <pad> man .", "a man </s> .", "<unk>"])
def test_interactive_refuses_fairseqs_special_symbols_in_the_text(tmp_path, line):
    from .conftest import call, tool
    from .helpers import one_line_error

    result = call([tool("fairseq-interactive"), os.path.join(FIXTURE, "data-bin"), "--user-dir", "fairseq_syntax",
                   "--task", "syntax_translation", "--path", os.path.join(FIXTURE, "checkpoints",
                                                                         "transformer_dep_rel.pt")],
                  cwd=tmp_path, stdin=f"a man .\n{line}\n", expect_ok=False)
    one_line_error(result, "fairseq-interactive", "input line 2: token", "special symbols")



# ------------------------------------------------------------------ what a run carries across resumes
def test_a_run_started_from_other_weights_stays_one_after_its_resumes(tmp_path):
    """fairseq reads --finetune-from-model on the first launch only; the checkpoints now carry it."""
    from fairseq_syntax_analysis import results as rs_
    from fairseq_syntax_core.errors import InputError as Refused

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "1")
    shutil.move(str(tmp_path / "ck"), str(tmp_path / "start"))
    _train(tmp_path, "--max-update", "1", "--finetune-from-model", "start/checkpoint_last.pt")
    _train(tmp_path, "--max-update", "2")  # resumed without the flag
    with pytest.raises(Refused, match="records --finetune-from-model 'start/checkpoint_last.pt'"):
        rs_.checkpoint_facts(str(tmp_path / "ck"))


def test_a_resume_with_reset_meters_is_warned_and_record_refuses_the_run(tmp_path):
    from fairseq_syntax_analysis import results as rs_
    from fairseq_syntax_core.errors import InputError as Refused

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "1")
    resumed = _train(tmp_path, "--max-update", "2", "--reset-meters")
    assert "--reset-meters: ck/checkpoint_last.pt was at update 1; fairseq forgets the best validation value" in \
        resumed.stderr + resumed.stdout
    with pytest.raises(Refused, match="was resumed at update 1 with --reset-meters"):
        rs_.checkpoint_facts(str(tmp_path / "ck"))


def test_fairseqs_patience_count_is_given_back_on_resume_and_a_run_that_stopped_early_is_finished():
    import types

    import fairseq_cli.train as fairseq_train

    from fairseq_syntax import resume_settings

    state = {"task_state": {"validations_without_improvement": 2}, "extra_state": {"best": 3.5}}
    cfg = types.SimpleNamespace(checkpoint=types.SimpleNamespace(patience=2))
    with pytest.raises(SystemExit) as stopped:
        resume_settings._restore_patience(cfg, state, "ck/checkpoint_last.pt", forget=False)
    assert stopped.value.code == 0
    cfg.checkpoint.patience = 5  # raised: trains on, counting from where it was
    resume_settings._restore_patience(cfg, state, "ck/checkpoint_last.pt", forget=False)
    assert (fairseq_train.should_stop_early.num_runs, fairseq_train.should_stop_early.best) == (2, 3.5)
    del fairseq_train.should_stop_early.num_runs, fairseq_train.should_stop_early.best


def test_an_ensemble_of_seeds_is_not_one_seed_and_a_noise_point_is_the_checkpoint_not_its_path(tmp_path):
    both = {"checkpoints": _run(1)["checkpoints"] + _run(2, "ck2")["checkpoints"]}
    with pytest.raises(InputError, match="an ensemble of checkpoints of 2 seeds"):
        ev.check_decoded_seed(both, "gen.txt", "dep_rel.seed1")
    absolute = _run(1, "/abs/ck")
    assert _noise(tmp_path, _point(tmp_path, "clean", 0.0, _run(1)), _point(tmp_path, "noisy", 0.4, absolute)) == 0


# ------------------------------------------------------------------ the thirty-second pass
def test_a_table_marker_inside_a_model_name_neither_opens_nor_closes_a_block():
    import importlib.util

    spec = importlib.util.spec_from_file_location("refresh_tables", os.path.join(ROOT, "docs", "refresh_tables.py"))
    refresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh)
    text = ("<!-- table: fairseq-syntax-report table r --baseline m -->\n| `x<!-- /table -->` | 1 |\n"
            "<!-- /table -->\nafter\n")
    (match,) = list(refresh.BLOCK.finditer(text))
    assert match.group("body") == "| `x<!-- /table -->` | 1 |\n" and text[match.end():] == "\nafter\n"


def test_statistics_no_sentence_can_have_are_damaged(tmp_path, capsys):
    from fairseq_syntax_analysis.result_format import statistics_rows

    assert statistics_rows([[5, 4, 3, 2, 1, 0, 5, 4, 3, 2]], "BLEU")
    assert not statistics_rows([[5, 4, 9, 2, 1, 0, 5, 4, 3, 2]], "BLEU")  # more matches than unigrams
    assert not statistics_rows([[5, 4, 3, 2, 1, 0, 9, 4, 3, 2]], "BLEU")  # more unigrams than words
    assert statistics_rows([[14, 14, 13] * 6], "chrF2") and not statistics_rows([[14, 14, 15] * 6], "chrF2")
    result = fake_result("transformer", 1, HYPS)
    rows = result["tests"]["test_2016_flickr"]["statistics"]["BLEU"]
    rows[0] = [rows[0][0], rows[0][1], *[2 * v for v in rows[0][6:10]], *rows[0][6:10]]
    assert rs.cli_main(["table", str(_folder(tmp_path, [result])), "--baseline", "transformer"]) == 1
    assert "needs per-sentence statistics" in capsys.readouterr().err


def test_an_evaluation_whose_hypotheses_are_not_one_per_sentence_is_not_recorded(tmp_path):
    from fairseq_syntax_analysis.evaluation_file import read_evaluation

    from .helpers import _evaluation

    path = tmp_path / "ev.json"
    data = json.loads(open(_evaluation(path), encoding="utf-8").read())
    data["hypotheses"] = {"m": ["one", "two"]}
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError, match="its hypotheses are not one line per sentence"):
        read_evaluation(str(path))


def test_a_decoded_line_whose_training_data_is_no_record_is_not_one():
    from fairseq_syntax_core.decoding_record import MARK, parse_line

    assert parse_line(f"{MARK}\t" + json.dumps({"checkpoints": [{"seed": 1, "training_data": [1]}]})) is None


def _rewrite(path, edit):
    import torch

    from fairseq_syntax_core.checkpoint_loader import load_checkpoint

    state = load_checkpoint(str(path))
    edit(state)
    torch.save(state, str(path))


def test_a_checkpoint_best_that_is_a_copy_of_another_checkpoint_is_refused(tmp_path):
    """The best checkpoint was saved with the best validation value it records; a copy of another is not."""
    from fairseq_syntax_analysis import results as rs_
    from fairseq_syntax_core.errors import InputError as Refused

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "2")
    rs_.checkpoint_facts(str(tmp_path / "ck"))
    _rewrite(tmp_path / "ck" / "checkpoint_best.pt",
             lambda state: state["extra_state"].update(val_loss=state["extra_state"]["best"] + 1.0))
    with pytest.raises(Refused, match="not the checkpoint fairseq saved as the best"):
        rs_.checkpoint_facts(str(tmp_path / "ck"))


@pytest.mark.parametrize("key, value, words", [
    ("run_id", "../../etc", "run_id is not 32 lower-case hexadecimal digits"),
    ("validations_without_improvement", True, "validations_without_improvement is not a count"),
    ("epoch_restarts", ["2"], "epoch_restarts is not a list of update counts"),
])
def test_a_resume_from_a_checkpoint_whose_carried_run_record_was_edited_is_refused(tmp_path, key, value, words):
    from .conftest import call, tool
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "1")
    _rewrite(tmp_path / "ck" / "checkpoint_last.pt", lambda state: state["task_state"].update({key: value}))
    result = call([tool("fairseq-train"), *TINY, "--max-update", "2"], cwd=tmp_path, expect_ok=False)
    one_line_error(result, "fairseq-train", "ck/checkpoint_last.pt: its task_state's " + words)


# ------------------------------------------------------------------ the thirty-third pass
def test_a_compare_pair_without_a_common_seed_says_it_was_not_compared(tmp_path):
    results = [fake_result("transformer", 1, HYPS), fake_result("transformer_rel", 2, HYPS[::-1])]
    table = rs.make_table(rs.load_results([str(_folder(tmp_path, results))]), "transformer",
                          [("transformer_rel", "transformer")])
    assert "`transformer_rel` against `transformer`: not compared, no test set that both decoded" in table
    results.append(fake_result("transformer", 2, HYPS))
    table = rs.make_table(rs.load_results([str(_folder(tmp_path, results, "both"))]), "transformer",
                          [("transformer_rel", "transformer")])
    assert "not compared" not in table and "`transformer_rel` against `transformer` (same seeds)" in table


def test_a_finished_run_named_by_the_path_of_its_own_last_checkpoint_is_finished_too(tmp_path):
    """--restore-file ck/checkpoint_last.pt is what fairseq resumes by default: the same run started again."""
    from .conftest import call, tool

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "2")
    last = tmp_path / "ck" / "checkpoint_last.pt"
    before = last.read_bytes()
    for named in ("ck/checkpoint_last.pt", str(last), "ck/../ck/checkpoint_last.pt"):
        again = call([tool("fairseq-train"), *TINY, "--max-update", "2", "--restore-file", named], cwd=tmp_path)
        assert "--max-update 2: the run is finished, nothing is trained" in again.stderr, (named, again.stderr[-2000:])
        assert last.read_bytes() == before


def test_a_run_resumed_from_a_checkpoint_not_its_own_last_is_carried_and_not_recorded_as_one(tmp_path):
    """Its first updates were trained in another folder (under that run's settings, another seed perhaps)."""
    from fairseq_syntax_analysis import results as rs_
    from fairseq_syntax_core.errors import InputError as Refused

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "1")
    shutil.move(str(tmp_path / "ck"), str(tmp_path / "other"))
    _train(tmp_path, "--max-update", "2", "--restore-file", "other/checkpoint_last.pt")
    _train(tmp_path, "--max-update", "3")  # its later resumes carry it
    with pytest.raises(Refused, match=r"was resumed from 'other/checkpoint_last.pt' \(--restore-file or "
                                      r"--continue-once\), not from its own checkpoint_last.pt"):
        rs_.checkpoint_facts(str(tmp_path / "ck"))


def test_a_best_checkpoint_of_an_earlier_best_is_not_the_runs_best(tmp_path):
    """An epoch checkpoint copied over checkpoint_best.pt was the best when saved: checkpoint_last.pt knows better."""
    from fairseq_syntax_analysis import results as rs_
    from fairseq_syntax_core.errors import InputError as Refused

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "2")
    _rewrite(tmp_path / "ck" / "checkpoint_best.pt", lambda state: state["extra_state"].update(
        val_loss=state["extra_state"]["best"] + 1.0, best=state["extra_state"]["best"] + 1.0))
    with pytest.raises(Refused, match=r"checkpoint_last.pt records the run's best as .*an earlier one copied in"):
        rs_.checkpoint_facts(str(tmp_path / "ck"))


def test_early_stopping_is_fairseqs_count_under_the_runs_own_patience():
    from fairseq_syntax_analysis.run_checks import logged_best_problem, run_patience

    facts = {"last_updates": 50, "last_epoch": 9, "best_epoch": 3}
    assert rs.how_stopped(facts, 100, 5) == "early-stopped"  # nothing carried: the epochs since the best
    assert rs.how_stopped(dict(facts, stalled=1), 100, 5) == "stopped before the cap"  # fairseq counted 1
    assert rs.how_stopped(dict(facts, best_epoch=8, stalled=5), 100, 5) == "early-stopped"
    last = {"cfg": {"checkpoint": {"patience": 5}}, "task_state": {"validations_without_improvement": 1}}
    assert run_patience(last) == {"patience": 5, "stalled": 1}
    best = {"best_valid_loss": 3.424, "best_updates": 60, "best_checkpoint_metric": "loss"}
    assert logged_best_problem({"loss": 3.424}, best) is None
    assert "logs loss 5.443 at update 60, but checkpoint_best.pt was saved with 3.424" in \
        logged_best_problem({"loss": 5.443}, best)


def test_a_full_disk_while_the_writer_writes_names_the_file_by_its_place_in_destdir(tmp_path):
    """The one writer writes through open files (fairseq's builders, the CoNLL-U): their errors carry no name."""
    from .conftest import spacy_model, tool
    from .helpers import one_line_error

    sample = os.path.join(ROOT, "examples", "sample")
    argv = [tool("fairseq-syntax-preprocess"), "-s", "en", "-t", "de", "--trainpref", os.path.join(sample, "train"),
            "--destdir", "bin", "--parser", spacy_model(), "--bpe-symbols", "300", "--workers", "1"]
    line = one_line_error(_limited(argv, tmp_path, 60000), "fairseq-syntax-preprocess", "bin/train.en-de.",
                          "nothing was written to")
    assert "ulimit -f" in line
    assert not os.listdir(tmp_path)


# ------------------------------------------------------------------ the thirty-fourth pass
def test_checkpoints_holding_numeric_numpy_arrays_load_and_object_arrays_do_not(tmp_path):
    """--eval-bleu's meters keep BLEU's counts as arrays in the checkpoint fairseq-train writes."""
    import numpy as np
    import torch

    from fairseq_syntax_core.checkpoint_loader import load_checkpoint
    from fairseq_syntax_core.errors import CheckpointError

    torch.save({"extra_state": {"metrics": {"valid": [np.array([60, 0, 0, 0]), np.float64(1.5)]}}}, tmp_path / "a.pt")
    assert load_checkpoint(str(tmp_path / "a.pt"))["extra_state"]["metrics"]["valid"][0].tolist() == [60, 0, 0, 0]
    torch.save({"x": np.array([{"a": 1}], dtype=object)}, tmp_path / "b.pt")
    with pytest.raises(CheckpointError):
        load_checkpoint(str(tmp_path / "b.pt"))


def test_a_run_trained_with_eval_bleu_resumes_and_is_read(tmp_path):
    from fairseq_syntax_analysis import results as rs_

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    bleu = ["--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 3}', "--max-tokens-valid", "400"]
    _train(tmp_path, "--max-update", "1", *bleu)
    _train(tmp_path, "--max-update", "2", *bleu)
    assert rs_.checkpoint_facts(str(tmp_path / "ck"))["last_updates"] == 2


def test_a_run_resumed_under_another_seed_is_warned_carried_and_not_one_run(tmp_path):
    from fairseq_syntax_analysis import results as rs_
    from fairseq_syntax_core.errors import InputError as Refused

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-epoch", "1", "--max-update", "1000")  # at an epoch's end: fairseq takes the new seed
    resumed = _train(tmp_path, "--max-epoch", "2", "--max-update", "1000", "--seed", "2")
    assert "--seed 2: ck/checkpoint_last.pt was trained with --seed 1" in resumed.stderr + resumed.stdout
    with pytest.raises(Refused, match=r"was trained with --seed 1, then resumed with --seed 2"):
        rs_.checkpoint_facts(str(tmp_path / "ck"))


def test_a_checkpoint_last_that_links_into_another_folder_is_not_the_runs_own(tmp_path):
    from fairseq_syntax_analysis import results as rs_
    from fairseq_syntax_core.errors import InputError as Refused

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "1")
    shutil.move(str(tmp_path / "ck"), str(tmp_path / "other"))
    (tmp_path / "ck").mkdir()
    os.symlink(tmp_path / "other" / "checkpoint_last.pt", tmp_path / "ck" / "checkpoint_last.pt")
    _train(tmp_path, "--max-update", "2")
    with pytest.raises(Refused, match=r"was resumed from .*not from its own checkpoint_last.pt"):
        rs_.checkpoint_facts(str(tmp_path / "ck"))


def test_seeds_selected_by_other_best_checkpoint_metrics_are_not_one_row(tmp_path):
    one, two = fake_result("transformer", 1, HYPS), fake_result("transformer", 2, HYPS[::-1])
    two["best_checkpoint_metric"] = "nll_loss"
    with pytest.raises(InputError, match=r"with best_checkpoint_metric 'nll_loss', but .* has 'loss'"):
        rs.load_results([str(_folder(tmp_path, [one, two]))])


def test_a_model_decodes_only_trees_of_the_source_it_trained_on_and_epochs_do_not_mix_sources(tmp_path):
    """Imported brackets and the dependency conversion give trees of other shapes over the same text and ids."""
    from fairseq_syntax_core.errors import DataBinError
    from fairseq_syntax_core.shards import check_same_features

    from .conftest import call, tool
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    meta_path = tmp_path / "data-bin" / "syntax.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    other = dict(meta, phrase_structure=dict(meta["phrase_structure"], source="ptb"))
    with pytest.raises(DataBinError, match=r"phrase_structure 'ptb' differs from a's 'dependency-conversion'"):
        check_same_features("a", meta, "b", other)
    meta_path.write_text(json.dumps(other), encoding="utf-8")
    argv = [tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
            "--gen-subset", "test", "--beam", "2", "--path",
            os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt")]
    one_line_error(call(argv, cwd=tmp_path, expect_ok=False), "fairseq-generate",
                   "its phrase structures come from 'ptb'", "--allow-other-data-bin")
    assert call(argv + ["--allow-other-data-bin"], cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("flags, words", [
    (["--srcdict", "d.txt", "--tgtdict", "d.txt", "--nwordssrc", "100"], "--nwordssrc 100: the source dictionary is given"),
    (["--joined-dictionary", "--thresholdtgt", "2"], "--thresholdtgt 2: --joined-dictionary counts one dictionary"),
])
def test_vocabulary_sizes_where_no_dictionary_is_counted_are_refused(tmp_path, flags, words):
    from fairseq_syntax_core.errors import UsageError
    from fairseq_syntax_preprocess.cli import get_parser, run

    (tmp_path / "d.txt").write_text("a 1\n", encoding="utf-8")
    sample = os.path.join(ROOT, "examples", "sample", "train")
    argv = ["-s", "en", "-t", "de", "--trainpref", sample, "--destdir", str(tmp_path / "bin"), "--external-parse",
            "conllu", "--bpe-symbols", "10", *[str(tmp_path / f) if f == "d.txt" else f for f in flags]]
    with pytest.raises(UsageError, match=words):
        run(get_parser().parse_args(argv))


# ------------------------------------------------------------------ the thirty-fifth pass
@pytest.mark.parametrize("flags, words", [(["--score-reference"], "'--score-reference'"),
                                          (["--beam", "2", "--prefix-size", "2"], "'--prefix-size 2'")])
def test_a_log_whose_hypotheses_copy_the_reference_is_not_evaluated(tmp_path, flags, words):
    """--score-reference writes the reference as each hypothesis; --prefix-size forces its first tokens in."""
    from fairseq_syntax_analysis.hypotheses import TranslationFileError, decoding_of

    from .conftest import call, tool

    argv = [tool("fairseq-generate"), os.path.join(FIXTURE, "data-bin"), "--user-dir", "fairseq_syntax", "--task",
            "syntax_translation", "--gen-subset", "test", "--path",
            os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt"), *flags]
    (tmp_path / "gen.txt").write_text(call(argv, cwd=tmp_path).stdout, encoding="utf-8")
    with pytest.raises(TranslationFileError, match=rf"gen.txt: was decoded with \[{words}\] .* not translations"):
        decoding_of(str(tmp_path / "gen.txt"))


def test_the_hub_refuses_alignments_of_tree2seq_in_one_line():
    from fairseq_syntax.models.tree2seq.model import Tree2SeqModel
    from fairseq_syntax_core.errors import UsageError

    data = os.path.join(FIXTURE, "data-bin")
    hub = Tree2SeqModel.from_pretrained(os.path.join(FIXTURE, "checkpoints"), checkpoint_file="tree2seq.pt",
                                        data_name_or_path=data, tokenizer="moses", bpe="subword_nmt",
                                        bpe_codes=os.path.join(data, "bpe.codes"))
    with pytest.raises(UsageError, match=r"print_alignment='soft': tree2seq attends over phrases"):
        hub.translate(["A man rides a bike ."], beam=2, print_alignment="soft")
    assert len(hub.translate(["A man rides a bike ."], beam=2)) > 0


# ------------------------------------------------------------------ the thirty-sixth pass
def test_a_generate_log_records_its_search_and_split_and_record_refuses_what_is_no_test_score(tmp_path):
    from fairseq_syntax_analysis.hypotheses import decoding_of
    from fairseq_syntax_analysis.run_checks import decoding_problem, decoding_settings

    from .conftest import call, tool

    argv = [tool("fairseq-generate"), os.path.join(FIXTURE, "data-bin"), "--user-dir", "fairseq_syntax", "--task",
            "syntax_translation", "--gen-subset", "test", "--beam", "3", "--lenpen", "0.5", "--path",
            os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt")]
    (tmp_path / "gen.txt").write_text(call(argv, cwd=tmp_path).stdout, encoding="utf-8")
    record = decoding_of(str(tmp_path / "gen.txt"))
    assert decoding_settings(record)["beam"] == 3 and decoding_settings(record)["lenpen"] == 0.5
    assert record["search"]["gen_subset"] == "test" and decoding_problem(record) is None
    assert "perturbed" in decoding_problem(dict(record, perturbation={"p": 0.5}))
    assert "--sampling" in decoding_problem(dict(record, search=dict(record["search"], sampling=True)))
    assert "the split 'valid'" in decoding_problem(dict(record, search=dict(record["search"], gen_subset="valid")))


def test_results_decoded_with_other_searches_are_not_compared(tmp_path):
    one, two = fake_result("transformer", 1, HYPS), fake_result("transformer_rel", 1, HYPS[::-1])
    one["tests"]["test_2016_flickr"]["search"] = {"beam": 5, "lenpen": 1.0}
    two["tests"]["test_2016_flickr"]["search"] = {"beam": 1, "lenpen": 1.0}
    with pytest.raises(InputError, match=r"was decoded with .*'beam': 1.* with .*'beam': 5.*other searches"):
        rs.make_table(rs.load_results([str(_folder(tmp_path, [one, two]))]), "transformer", [])


def test_refresh_tables_names_a_failing_block_in_one_line(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("refresh_tables", os.path.join(ROOT, "docs", "refresh_tables.py"))
    refresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh)
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- table: rm -rf / -->\nold\n<!-- /table -->\n", encoding="utf-8")
    assert refresh.main([str(doc)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("refresh_tables: error: ") and "unknown table command" in err and len(err.splitlines()) == 1
    assert doc.read_text(encoding="utf-8").endswith("old\n<!-- /table -->\n")


def test_an_interrupted_generate_leaves_the_results_another_run_wrote_meanwhile(tmp_path, capsys):
    """Two fairseq-generate runs into one --results-path: the interrupted one removes and restores only its own."""
    import types

    from fairseq_syntax import results_file

    (tmp_path / "generate-test.txt").write_text("earlier\n", encoding="utf-8")
    cfg = types.SimpleNamespace(common_eval=types.SimpleNamespace(results_path=str(tmp_path)),
                                dataset=types.SimpleNamespace(gen_subset="test"))
    with pytest.raises(KeyboardInterrupt):
        with results_file.earlier_results_kept(cfg):
            mine = open(tmp_path / "generate-test.txt", "w", encoding="utf-8")  # this run's, as fairseq opens it
            mine.write("half")
            (tmp_path / "other.txt").write_text("the other run's\n", encoding="utf-8")
            os.replace(tmp_path / "other.txt", tmp_path / "generate-test.txt")  # another run took the name
            assert results_file.discard_results(mine) == str(tmp_path / "generate-test.txt")
            raise KeyboardInterrupt
    assert (tmp_path / "generate-test.txt").read_text(encoding="utf-8") == "the other run's\n"
    [kept] = [n for n in os.listdir(tmp_path) if n.startswith("generate-test.txt.earlier-")]  # in sight
    assert (tmp_path / kept).read_text(encoding="utf-8") == "earlier\n"
    assert "another run wrote" in capsys.readouterr().err
    with pytest.raises(KeyboardInterrupt):  # alone: its own file removed, the earlier results back
        with results_file.earlier_results_kept(cfg):
            mine = open(tmp_path / "generate-test.txt", "w", encoding="utf-8")
            results_file.discard_results(mine)
            raise KeyboardInterrupt
    assert (tmp_path / "generate-test.txt").read_text(encoding="utf-8") == "the other run's\n"


# --- thirty-seventh pass: one fairseq-train at a time in a --save-dir ---------------------------------------------


def test_a_second_fairseq_train_into_a_save_dir_in_use_is_refused(tmp_path):
    """A job submitted twice: the second resumed the first's checkpoint while it trained, both wrote the same files."""
    import fcntl

    from fairseq_syntax.save_dir_lock import LOCK_FILE

    from .conftest import call, tool
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    (tmp_path / "ck").mkdir()
    with open(tmp_path / "ck" / LOCK_FILE, "w") as held:  # as the first run holds it
        fcntl.lockf(held, fcntl.LOCK_EX)
        refused = call([tool("fairseq-train"), *TINY, "--max-update", "1"], cwd=tmp_path, expect_ok=False)
        one_line_error(refused, "fairseq-train", "--save-dir ck: another fairseq-train is training into it now")
        assert sorted(os.listdir(tmp_path / "ck")) == [LOCK_FILE]  # nothing read, nothing written
    _train(tmp_path, "--max-update", "1")  # released: trains
    assert (tmp_path / "ck" / "checkpoint_last.pt").exists()


def test_a_refused_run_makes_no_save_dir_and_a_run_of_several_ranks_takes_no_lock(tmp_path):
    from fairseq_syntax.save_dir_lock import LOCK_FILE, lock_save_dir

    assert lock_save_dir(str(tmp_path / "missing")) is None and not (tmp_path / "missing").exists()
    assert lock_save_dir(str(tmp_path), world_size=2) is None and not (tmp_path / LOCK_FILE).exists()
    assert lock_save_dir(str(tmp_path), no_save=True) is None and not (tmp_path / LOCK_FILE).exists()
    assert lock_save_dir(str(tmp_path)) is None and (tmp_path / LOCK_FILE).exists()
    assert lock_save_dir(str(tmp_path)) is None  # this process holds it already


# --- thirty-seventh pass: a perturbation is that of the split decoded ---------------------------------------------


def test_a_round_of_perturbation_counts_only_for_the_splits_it_perturbed():
    from fairseq_syntax_core.databin import recorded_perturbation, split_perturbation

    valid_only = {"p": 0.5, "seed": 1, "splits": ["valid"]}
    twice = {"p": 0.2, "seed": 2, "splits": ["test"], "previous": valid_only}
    assert split_perturbation(valid_only, "test") is None and split_perturbation(valid_only, "valid") == valid_only
    assert split_perturbation(twice, "test") == {"p": 0.2, "seed": 2, "splits": ["test"]}
    assert recorded_perturbation({"perturbation": valid_only}, "syntax.json", "test") == 0.0
    assert recorded_perturbation({"perturbation": valid_only}, "syntax.json") == 0.5  # the data-bin as a whole
    assert recorded_perturbation({"perturbation": twice}, "syntax.json", "valid") == 0.5
    assert recorded_perturbation({"perturbation": twice}, "syntax.json") == [0.5, 0.2]
    assert split_perturbation({"p": 0.3}, "test") == {"p": 0.3}  # a record without its splits: kept whole


def test_a_test_set_decoded_on_a_data_bin_perturbed_only_on_valid_is_the_clean_test_score(tmp_path):
    """perturb --splits valid (here train, which the fixture holds): the test parses are the clean ones, so the log and the noise point are p = 0."""
    from fairseq_syntax_analysis.run_checks import decoding_problem
    from fairseq_syntax_core.decoding_record import MARK, parse_line

    from .conftest import call, tool

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    call([tool("fairseq-syntax-perturb"), "data-bin", "--destdir", "pvalid", "--p", "0.5", "--seed", "1",
          "--splits", "train"], cwd=tmp_path)
    checkpoint = os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt")
    logs = {}
    for split in ("test", "train"):
        call([tool("fairseq-generate"), "pvalid", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
              "--path", checkpoint, "--gen-subset", split, "--beam", "1", "--batch-size", "8", "--max-len-b", "5",
              "--results-path", f"res-{split}"], cwd=tmp_path)
        last = (tmp_path / f"res-{split}" / f"generate-{split}.txt").read_text(encoding="utf-8").splitlines()[-1]
        assert last.startswith(MARK)
        logs[split] = parse_line(last)
    assert logs["test"]["perturbation"] is None and logs["train"]["perturbation"]["p"] == 0.5
    assert decoding_problem(logs["test"]) is None
    references = [line for line in (tmp_path / "res-test" / "generate-test.txt").read_text(encoding="utf-8")
                  .splitlines() if line.startswith("T-")]
    (tmp_path / "ref.fr").write_text("".join(line.split("\t")[1].replace("@@ ", "") + "\n" for line in
                                             sorted(references, key=lambda t: int(t.split("\t")[0][2:]))))
    argv = [tool("fairseq-syntax-evaluate"), "--reference", "ref.fr", "--baseline",
            "transformer_dep_rel.seed1=res-test/generate-test.txt", "--target-lang", "fr", "--split", "test",
            "--quiet", "--no-detokenize", "--json"]
    call(argv + ["ev-pvalid.json", "--data-bin", "pvalid"], cwd=tmp_path)
    call(argv + ["ev-clean.json", "--data-bin", "data-bin"], cwd=tmp_path)  # the same parses: either data-bin
    for name in ("ev-pvalid.json", "ev-clean.json"):
        assert json.loads((tmp_path / name).read_text(encoding="utf-8"))["perturbation"] == 0.0


def test_fairseq_train_logs_the_identifier_its_checkpoints_carry(tmp_path):
    from fairseq_syntax_analysis.train_log import logged_run
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    log = tmp_path / "train.log"  # as the recipes keep it: fairseq-train's output, appended at each resume
    log.write_text(_train(tmp_path, "--max-update", "1").stdout, encoding="utf-8")
    carried = load_fairseq_checkpoint(str(tmp_path / "ck" / "checkpoint_last.pt"))["task_state"]["run_id"]
    assert logged_run(str(log))["run_id"] == carried
    with open(log, "a", encoding="utf-8") as handle:  # resumed: the same run, the same identifier
        handle.write(_train(tmp_path, "--max-update", "2").stdout)
    assert logged_run(str(log))["run_id"] == carried


@pytest.mark.parametrize("occupant", ["folder", "link"])
def test_a_lock_file_that_cannot_be_opened_as_one_is_refused_not_skipped(tmp_path, occupant):
    """A folder or a link in the lock file's place: two runs went on unlocked into one folder."""
    from fairseq_syntax.save_dir_lock import LOCK_FILE, lock_save_dir

    lock = tmp_path / LOCK_FILE
    if occupant == "folder":
        lock.mkdir()
    else:
        (tmp_path / "elsewhere").write_text("")
        lock.symlink_to(tmp_path / "elsewhere")
    problem = lock_save_dir(str(tmp_path))
    assert problem is not None and f"its lock file {LOCK_FILE} cannot be opened (a {occupant.replace('link', 'symbolic link')})" in problem
    assert "\n" not in problem


def test_a_second_generate_into_the_results_file_in_use_is_refused_and_the_lock_goes_with_the_run(tmp_path):
    """Two fairseq-generate --results-path runs at once both opened generate-test.txt with "w": the one that
    finished last lost its translations, and an interrupted one put older results back over the other's."""
    import fcntl

    from .conftest import call, tool
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "generate-test.txt").write_text("EARLIER RESULTS\n", encoding="utf-8")
    argv = [tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
            "--path", os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt"), "--gen-subset", "test",
            "--beam", "1", "--batch-size", "8", "--max-len-b", "5", "--results-path", "res"]
    lock = tmp_path / "res" / ".generate-test.txt.lock"
    with open(lock, "w") as held:  # as a run writing there holds it
        fcntl.lockf(held, fcntl.LOCK_EX)
        refused = call(argv, cwd=tmp_path, expect_ok=False)
        one_line_error(refused, "fairseq-generate", "--results-path res: another fairseq-generate is writing "
                       "generate-test.txt there now")
        assert (tmp_path / "res" / "generate-test.txt").read_text(encoding="utf-8") == "EARLIER RESULTS\n"
    call(argv, cwd=tmp_path)
    assert sorted(os.listdir(tmp_path / "res")) == ["generate-test.txt"]  # the lock went with the run
    assert (tmp_path / "res" / "generate-test.txt").read_text(encoding="utf-8").startswith("S-")


# --- thirty-seventh pass: a decoded line vouches for its own log only --------------------------------------------


def _decoded_log(folder, data_bin="data-bin", split="test", results="res"):
    from .conftest import call, tool

    call([tool("fairseq-generate"), data_bin, "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
          "--path", os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt"), "--gen-subset", split,
          "--beam", "1", "--batch-size", "8", "--max-len-b", "5", "--results-path", results], cwd=folder)
    return folder / results / f"generate-{split}.txt"


def _evaluate(folder, log, *flags, expect_ok=True):
    from .conftest import call, tool

    lines = [line for line in log.read_text(encoding="utf-8").splitlines() if line.startswith("T-")]
    (folder / "ref.fr").write_text("".join(line.split("\t")[1].replace("@@ ", "") + "\n" for line in
                                           sorted(lines, key=lambda t: int(t.split("\t")[0][2:]))))
    return call([tool("fairseq-syntax-evaluate"), "--reference", "ref.fr", "--baseline",
                 f"transformer_dep_rel.seed1={log}", "--target-lang", "fr", "--quiet", "--no-detokenize", *flags],
                cwd=folder, expect_ok=expect_ok)


def test_a_decoded_line_refuses_sentence_lines_it_was_not_written_with(tmp_path):
    """Another log's record put under these lines, or sentence blocks of two logs spliced: refused; lines appended
    after the record do not hide it."""
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    log = _decoded_log(tmp_path)
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    _evaluate(tmp_path, log, "--data-bin", "data-bin")
    hypothesis = next(i for i, line in enumerate(lines) if line.startswith("H-"))
    edited = tmp_path / "edited.txt"
    fields = lines[hypothesis].split("\t")
    edited.write_text("".join(lines[:hypothesis] + ["\t".join(fields[:2] + ["edited words\n"])]
                              + lines[hypothesis + 1:]), encoding="utf-8")
    refused = _evaluate(tmp_path, edited, "--data-bin", "data-bin", expect_ok=False)
    one_line_error(refused, "fairseq-syntax-evaluate", "edited.txt: its sentence lines (S-, T-, H-, D-, P-) are not "
                   "those its fairseq-syntax-decoded line was written with")
    appended = tmp_path / "appended.txt"  # more than 1 MiB after the record: the record is still read
    appended.write_text("".join(lines) + ("2026-01-01 00:00:00 | INFO | x | " + "y" * 200 + "\n") * 6000,
                        encoding="utf-8")
    assert appended.stat().st_size > (1 << 20)
    _evaluate(tmp_path, appended, "--data-bin", "data-bin", "--json", "ev.json")
    assert json.loads((tmp_path / "ev.json").read_text(encoding="utf-8"))["systems"][0]["decoded"]["lines_sha256"]


def test_evaluate_refuses_another_split_and_a_data_bin_perturbed_with_the_same_p_and_another_seed(tmp_path):
    """The depth buckets of a data-bin perturbed with another seed are of trees that were not decoded."""
    from fairseq_syntax_analysis.run_checks import decoding_problem
    from fairseq_syntax_core.decoding_record import parse_line

    from .conftest import call, tool
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    for name, seed in (("s1", "1"), ("s2", "2")):
        call([tool("fairseq-syntax-perturb"), "data-bin", "--destdir", name, "--p", "0.5", "--seed", seed], cwd=tmp_path)
    call([tool("fairseq-syntax-perturb"), "data-bin", "--destdir", "zero", "--p", "0", "--seed", "1"], cwd=tmp_path)
    log = _decoded_log(tmp_path, "s1")
    refused = _evaluate(tmp_path, log, "--data-bin", "s2", expect_ok=False)
    one_line_error(refused, "fairseq-syntax-evaluate", "(p = 0.5 seed 1; its fairseq-syntax-decoded line); "
                   "--data-bin s2 is perturbed with p = 0.5 (p = 0.5 seed 2)")
    _evaluate(tmp_path, log, "--data-bin", "s1")
    refused = _evaluate(tmp_path, log, "--data-bin", "s1", "--split", "train", expect_ok=False)
    one_line_error(refused, "fairseq-syntax-evaluate", "generate-test.txt: was decoded on the split 'test' (its "
                   "fairseq-syntax-decoded line), not the --split train evaluated")
    zero = _decoded_log(tmp_path, "zero", results="res-zero")  # p = 0 changed no parse: the clean test score
    assert decoding_problem(parse_line(zero.read_text(encoding="utf-8").splitlines()[-1])) is None
    _evaluate(tmp_path, zero, "--data-bin", "data-bin")


def test_a_noise_point_whose_log_records_nothing_is_refused(tmp_path, capsys):
    clean = _point(tmp_path, "clean", 0.0)  # both cut before their records: nothing of either is checked
    assert _noise(tmp_path, clean, _point(tmp_path, "bare", 0.4)) == 1
    err = capsys.readouterr().err
    assert "clean.json: evaluates translations whose log has no fairseq-syntax-decoded line" in err
    assert "a noise point needs the complete log" in err and len(err.strip().splitlines()) == 1


# --- thirty-eighth pass -----------------------------------------------------------------------------------------


def test_a_sentence_line_behind_a_byte_order_mark_is_counted_as_the_reader_takes_it(tmp_path):
    """The reader drops a byte-order mark from a line: a forged D- line behind one was scored unchecked."""
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    log = _decoded_log(tmp_path)
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    bom_first = tmp_path / "bom.txt"  # a correct log saved with a byte-order mark: accepted
    bom_first.write_text("\ufeff" + "".join(lines), encoding="utf-8")
    _evaluate(tmp_path, bom_first, "--data-bin", "data-bin")
    first = next(i for i, line in enumerate(lines) if line.startswith("D-"))
    forged = tmp_path / "forged.txt"
    sid = lines[first].split("\t")[0]
    forged.write_text("".join(lines[:first] + [f"\ufeff{sid}\t-0.1\tforged words\n"] + lines[first:]), encoding="utf-8")
    refused = _evaluate(tmp_path, forged, "--data-bin", "data-bin", expect_ok=False)
    one_line_error(refused, "fairseq-syntax-evaluate", "forged.txt: its sentence lines (S-, T-, H-, D-, P-) are not "
                   "those its fairseq-syntax-decoded line was written with")


def test_python_m_fairseq_cli_train_is_fairseq_train_to_the_plugin(tmp_path):
    """Run as a module, main() is __main__'s: every check of fairseq-train was skipped, and a carried record set in
    the environment went into the checkpoints as it was."""
    import subprocess
    import sys

    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    forged = json.dumps({"run_id": "f" * 32, "restored_from": "elsewhere/checkpoint_last.pt"})
    env = dict(os.environ, FAIRSEQ_SYNTAX_CARRIED=forged, OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-m", "fairseq_cli.train", *TINY, "--max-update", "1", "--cpu"],
                            cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    state = load_fairseq_checkpoint(str(tmp_path / "ck" / "checkpoint_last.pt"))["task_state"]
    assert state["run_id"] != "f" * 32 and len(state["run_id"]) == 32 and "restored_from" not in state
    refused = subprocess.run([sys.executable, "-m", "fairseq_cli.train", *TINY, "--max-update", "1", "--cpu",
                              "--save-dir", "ck2", "--encoder-layers-to-keep", "0"], cwd=tmp_path, env=env,
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr[-2000:]


def test_a_results_folder_not_made_yet_is_made_and_locked_before_fairseq_opens_the_file(tmp_path):
    from fairseq_syntax.results_file import _lock_results
    from fairseq_syntax_core.file_lock import release

    held = _lock_results(str(tmp_path / "new"), "test")  # (another process is refused: the test above)
    assert held is not None and os.listdir(tmp_path / "new") == [".generate-test.txt.lock"]
    release(*held)
    assert os.listdir(tmp_path / "new") == []


# --- thirty-ninth pass ------------------------------------------------------------------------------------------


def test_sigterm_to_fairseq_train_is_one_line_and_the_run_resumes(tmp_path):
    """SIGTERM (timeout, scancel, a container's stop) killed fairseq-train silently: exit 143 and no line."""
    import signal
    import subprocess
    import time

    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    from .conftest import tool

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    env = dict(os.environ, PYTHONPATH="", OMP_NUM_THREADS="1")
    process = subprocess.Popen([tool("fairseq-train"), *TINY, "--max-update", "1000000", "--cpu"], cwd=tmp_path,
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (tmp_path / "ck" / "checkpoint_last.pt").exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert stderr.rstrip().splitlines()[-1] == ("fairseq-train: interrupted (SIGTERM); no output was left "
                                                "half-written") and "Traceback" not in stderr
    assert not [n for n in os.listdir(tmp_path / "ck") if n.endswith(".tmp")]
    updates = load_fairseq_checkpoint(str(tmp_path / "ck" / "checkpoint_last.pt"))["optimizer_history"][-1]["num_updates"]
    resumed = _train(tmp_path, "--max-update", str(updates + 1), "--cpu")
    assert f"@ {updates} updates" in resumed.stdout + resumed.stderr


def _module_run(folder, module, *flags, stdin=None):
    """``python -m MODULE`` in a fresh interpreter (a module run is its own ``__main__``: the case under test)."""
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH="", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", module, *flags], cwd=folder, env=env, input=stdin,
                          capture_output=True, text=True, timeout=600)


def test_python_m_fairseq_cli_generate_gets_the_plugins_wrappers(tmp_path):
    """Run as a module, fairseq-generate is a second copy of its module, whose main and _main were fairseq's own: a
    refused run emptied the earlier results, a good one wrote no fairseq-syntax-decoded line, --num-shards decoded
    every sentence, and fairseq's assertion was a traceback named generate.py."""
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    flags = ["data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--path",
             os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt"), "--gen-subset", "test", "--beam", "1",
             "--batch-size", "8", "--max-len-b", "5", "--results-path", "res"]
    log = _decoded_log(tmp_path)  # the console script's
    kept = log.read_bytes()
    one_line_error(_module_run(tmp_path, "fairseq_cli.generate", *flags, "--beam", "0"), "fairseq-generate",
                   "--beam 0")
    assert log.read_bytes() == kept
    one_line_error(_module_run(tmp_path, "fairseq_cli.generate", *flags, "--num-shards", "2", "--shard-id", "1"),
                   "fairseq-generate", "--num-shards 2 --shard-id 1")
    one_line_error(_module_run(tmp_path, "fairseq_cli.generate", *flags, "--sampling", "--beam", "2"),
                   "fairseq-generate", "--sampling requires --nbest to be equal to --beam")
    assert log.read_bytes() == kept
    log.unlink()
    done = _module_run(tmp_path, "fairseq_cli.generate", *flags)
    assert done.returncode == 0, done.stderr[-2000:]
    assert log.read_bytes() == kept  # the same log as the console script's, decoded line and digest included


def test_python_m_fairseq_cli_interactive_names_the_line_that_is_not_utf8(tmp_path):
    from .helpers import one_line_error

    (tmp_path / "in.txt").write_bytes(b"a man .\n\xff\xfe bad\n")
    result = _module_run(tmp_path, "fairseq_cli.interactive", os.path.join(FIXTURE, "data-bin"), "--user-dir",
                         "fairseq_syntax", "--task", "syntax_translation", "--path",
                         os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt"), "--input", "in.txt")
    one_line_error(result, "fairseq-interactive", "in.txt:2: not UTF-8")


def test_a_module_run_is_named_as_its_command(monkeypatch):
    """``PROG: error:`` and the start-up handler key on the command's name; under ``python -m`` argv[0] is the
    module's file (generate.py, evaluate.py), and "-m" while runpy still imports the package."""
    import re
    import sys
    import types

    from fairseq_syntax_core import startup

    setup_py = open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read()
    scripts = dict((module, script) for script, module in re.findall(r'"(fairseq-syntax-[\w-]+) = ([\w.]+):\w+"',
                                                                      setup_py))
    assert {m: s for m, s in scripts.items() if m in startup.MODULE_COMMANDS} == startup.MODULE_COMMANDS
    assert set(scripts) - set(startup.MODULE_COMMANDS) == {"fairseq_syntax_preprocess.stages"}  # three commands
    running = types.ModuleType("__main__")
    for module, name in [("fairseq_cli.generate", "fairseq-generate"), ("fairseq_cli.train", "fairseq-train"),
                         ("fairseq_syntax_analysis.evaluate", "fairseq-syntax-evaluate")]:
        running.__spec__ = types.SimpleNamespace(name=module)
        monkeypatch.setitem(sys.modules, "__main__", running)
        assert startup.program_name() == name
    running.__spec__ = None
    monkeypatch.setattr(sys, "argv", ["-m", "--help"])
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "fairseq_syntax_preprocess.perturb", "--help"],
                        raising=False)
    assert startup.program_name() == "fairseq-syntax-perturb"


def test_python_m_of_the_module_holding_three_commands_refuses_instead_of_doing_nothing(tmp_path):
    result = _module_run(tmp_path, "fairseq_syntax_preprocess.stages", "--input", "missing.txt", "--output", "out")
    assert result.returncode == 1 and "fairseq-syntax-tokenize" in result.stderr and "Traceback" not in result.stderr
    assert os.listdir(tmp_path) == []


def _hand_parsed_bin(folder):
    from .conftest import parsed_bin

    src = ["the big dog runs .", "birds sing", "a cat sleeps on the mat ."]
    conll = lambda words, heads: "".join(
        f"{i}\t{w}\t_\tX\t_\t_\t{h}\t{'root' if h == 0 else ('dep', 'obj')[i % 2]}\t_\t_\n"
        for i, (w, h) in enumerate(zip(words, heads), 1)) + "\n"
    trees = conll(src[0].split(), [3, 3, 4, 0, 4]) + conll(src[1].split(), [2, 0]) \
        + conll(src[2].split(), [2, 0, 2, 6, 6, 3, 2])
    tgt = ["der große Hund rennt .", "Vögel singen", "eine Katze schläft auf der Matte ."]
    return parsed_bin(folder, {"train": (src, tgt, trees), "test": (src, tgt, trees)})


def test_split_digests_name_the_file_that_is_missing_foreign_or_changed(tmp_path):
    from fairseq_syntax_core.split_digests import FILES_KEY, split_file_digests, split_files_problem

    for name, data in [("test.en-de.en.bin", b"text"), ("test.en-de.en.head.bin", b"heads"),
                       ("test.en-de.en.conllu", b"not binarized"), ("test1.en-de.en.bin", b"another split")]:
        (tmp_path / name).write_bytes(data)
    digests = split_file_digests(str(tmp_path), "test", "en", "de")
    assert sorted(digests) == ["test.en-de.en.bin", "test.en-de.en.head.bin"]
    meta = {"splits": {"test": {FILES_KEY: digests}}}
    assert split_files_problem(str(tmp_path), meta, "test", "en", "de") is None
    assert split_files_problem(str(tmp_path), {"splits": {"test": {}}}, "test", "en", "de") is None  # nothing recorded
    (tmp_path / "test.en-de.en.head.bin").write_bytes(b"other heads")
    name, what = split_files_problem(str(tmp_path), meta, "test", "en", "de")
    assert name == "test.en-de.en.head.bin" and what.startswith("not the file this data-bin was made with")
    (tmp_path / "test.en-de.en.head.bin").unlink()
    assert split_files_problem(str(tmp_path), meta, "test", "en", "de")[1].startswith("missing")
    (tmp_path / "test.en-de.en.head.bin").write_bytes(b"heads")
    (tmp_path / "test.en-de.en.pos.idx").write_bytes(b"")  # added later: no stream the record lists reads it
    assert split_files_problem(str(tmp_path), meta, "test", "en", "de") is None
    (tmp_path / "outside.bin").write_bytes(b"text")
    forged = {"splits": {"test": {FILES_KEY: {"../outside.bin": digests["test.en-de.en.bin"]}}}}
    assert split_files_problem(str(tmp_path / "sub"), forged, "test", "en", "de")[1].startswith("not a plain file name")
    (tmp_path / "test.en-de.en.head.bin").unlink()
    (tmp_path / "test.en-de.en.head.bin").mkdir()  # a folder where the record names a file: not called missing
    assert split_files_problem(str(tmp_path), meta, "test", "en", "de")[1].startswith("not a regular file")


@pytest.mark.parametrize("files", [[], "x", {"test.en-de.en.bin": "abc"}, {"test.en-de.en.bin": 7}])
def test_a_split_files_record_that_is_not_names_and_digests_is_refused(files):
    from fairseq_syntax_core.databin import check_metadata
    from fairseq_syntax_core.errors import DataBinError

    meta = {"producer": "fairseq-syntax-preprocess", "format_version": 1, "source_lang": "en", "target_lang": "de",
            "splits": {"test": {"sentences": 1, "files_sha256": files}}}
    with pytest.raises(DataBinError, match="splits.test.files_sha256: expected an object of the split's file names"):
        check_metadata(meta, "db/syntax.json")


def test_a_perturbed_copys_side_files_in_a_clean_data_bin_are_refused_not_decoded_as_clean(tmp_path):
    """A perturbed copy's heads have the clean heads' lengths: copied into the clean data-bin, they decoded with exit
    0, recorded as "perturbation": null (hostile pass V)."""
    from .conftest import call, tool
    from .helpers import one_line_error

    clean = _hand_parsed_bin(tmp_path)
    recorded = json.loads((clean / "syntax.json").read_text(encoding="utf-8"))["splits"]["test"]["files_sha256"]
    assert "test.en-de.en.head.bin" in recorded and "test.en-de.de.bin" in recorded
    call([tool("fairseq-syntax-perturb"), "bin", "--destdir", "noisy", "--p", "0.9", "--seed", "3"], cwd=tmp_path)
    noisy_record = json.loads((tmp_path / "noisy" / "syntax.json").read_text(encoding="utf-8"))["splits"]
    assert noisy_record["test"]["files_sha256"]["test.en-de.en.head.bin"] != recorded["test.en-de.en.head.bin"]
    assert noisy_record["test"]["files_sha256"]["test.en-de.de.bin"] == recorded["test.en-de.de.bin"]
    shutil.copytree(clean, tmp_path / "mixed")
    assert (tmp_path / "noisy" / "test.en-de.en.head.bin").read_bytes() != (clean / "test.en-de.en.head.bin").read_bytes()
    shutil.copy(tmp_path / "noisy" / "test.en-de.en.head.bin", tmp_path / "mixed")
    few = [tool("fairseq-train"), "bin", *TINY[1:], "--arch", "transformer_dep_rel", "--max-tokens", "1000",
           "--max-update", "2", "--cpu"]
    one_line_error(call(few, cwd=tmp_path, expect_ok=False), "fairseq-train", "fairseq made no batch",
                   "--required-batch-size-multiple 1")  # 3 sentences: fairseq's traceback, "The dataset is empty"
    call([*few, "--required-batch-size-multiple", "1"], cwd=tmp_path)
    decode = [tool("fairseq-generate"), "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--path",
              "ck/checkpoint_last.pt", "--gen-subset", "test", "--beam", "1", "--cpu"]
    assert call([*decode, "noisy"], cwd=tmp_path).returncode == 0  # the perturbed copy itself, as it is
    one_line_error(call([*decode, "mixed"], cwd=tmp_path, expect_ok=False), "fairseq-generate",
                   "mixed/test.en-de.en.head.bin: not the file this data-bin was made with")
    one_line_error(call([tool("fairseq-syntax-perturb"), "mixed", "--destdir", "again", "--p", "0.1"], cwd=tmp_path,
                        expect_ok=False), "fairseq-syntax-perturb", "mixed/test.en-de.en.head.bin")
    assert not (tmp_path / "again").exists()
    # the record emptied, so that the foreign file is listed nowhere (hostile pass W): refused, and perturb does not
    # launder it into a fully recorded data-bin
    meta = json.loads((tmp_path / "mixed" / "syntax.json").read_text(encoding="utf-8"))
    meta["splits"]["test"]["files_sha256"] = {}
    (tmp_path / "mixed" / "syntax.json").write_text(json.dumps(meta), encoding="utf-8")
    one_line_error(call([*decode, "mixed"], cwd=tmp_path, expect_ok=False), "fairseq-generate",
                   "mixed/test.en-de.en.bin: read for split 'test', but syntax.json records no digest of it")
    one_line_error(call([tool("fairseq-syntax-perturb"), "mixed", "--destdir", "again", "--p", "0.1"], cwd=tmp_path,
                        expect_ok=False), "fairseq-syntax-perturb", "records no digest")
    # a whole split added by hand: fairseq's combine trains on train1 whenever its files are there
    shutil.copytree(clean, tmp_path / "extra")
    for name in os.listdir(tmp_path / "noisy"):
        if name.startswith("train.en-de.") and name.endswith((".bin", ".idx")):
            shutil.copy(tmp_path / "noisy" / name, tmp_path / "extra" / ("train1" + name[len("train"):]))
    one_line_error(call([*few[:1], "extra", *few[2:], "--required-batch-size-multiple", "1", "--save-dir", "ck2"],
                        cwd=tmp_path, expect_ok=False), "fairseq-train",
                   "extra/syntax.json: records no files of a split 'train1'")


def test_a_refused_generate_leaves_no_results_folder_it_made(tmp_path):
    """The results file was removed, but the folders made for it stayed (hostile pass V)."""
    from .conftest import call, tool
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    (tmp_path / "mine").mkdir()
    for results in ("new/deeper/res", "mine/res"):
        refused = call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                        "syntax_translation", "--path", os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt"),
                        "--beam", "0", "--results-path", results], cwd=tmp_path, expect_ok=False)
        one_line_error(refused, "fairseq-generate", "--beam 0")
    assert sorted(os.listdir(tmp_path)) == ["data-bin", "mine"] and os.listdir(tmp_path / "mine") == []


def test_a_split_listed_nowhere_or_a_cut_record_is_refused_and_an_older_data_bin_only_warned_about(tmp_path, caplog):
    from fairseq_syntax_core.errors import DataBinError
    from fairseq_syntax_core.split_digests import FILES_KEY, check_split_files, combined_splits, split_file_digests

    for split in ("test", "test1", "test3"):
        for name in ("en.bin", "en.idx", "de.bin", "de.idx", "en.head.bin", "en.head.idx"):
            (tmp_path / f"{split}.en-de.{name}").write_bytes(f"{split} {name}".encode())
    (tmp_path / "test2.de-en.en.bin").write_bytes(b"the other direction, which fairseq also reads")
    assert combined_splits(str(tmp_path), "test", "en", "de") == ["test", "test1", "test2", "test3"]
    full = split_file_digests(str(tmp_path), "test", "en", "de")
    meta = {"parsed_langs": {"en": ["head"]}, "splits": {"test": {FILES_KEY: full}}}
    check_split_files(str(tmp_path), meta, "test", "en", "de")
    with pytest.raises(DataBinError, match=r"syntax.json: records no files of a split 'test1' \(it records test\)"):
        check_split_files(str(tmp_path), meta, "test1", "en", "de")
    cut = dict(meta, splits={"test": {FILES_KEY: {k: v for k, v in full.items() if ".head." not in k}}})
    with pytest.raises(DataBinError, match=r"test.en-de.en.head.bin: read for split 'test', but syntax.json records"):
        check_split_files(str(tmp_path), cut, "test", "en", "de")
    older = {"parsed_langs": {"en": ["head"]}, "splits": {"test": {"sentences": 1}}}
    with caplog.at_level("WARNING"):
        check_split_files(str(tmp_path), older, "test1", "en", "de")
    assert "a data-bin of an earlier release" in caplog.text


def _stripped_copy(folder):
    """A hand-parsed data-bin ``folder/bin`` (returned) and a copy ``folder/stripped`` with every files_sha256 key
    removed from its syntax.json."""
    clean = _hand_parsed_bin(folder)
    shutil.copytree(clean, folder / "stripped")
    meta = json.loads((clean / "syntax.json").read_text(encoding="utf-8"))
    for entry in meta["splits"].values():
        del entry["files_sha256"]
    (folder / "stripped" / "syntax.json").write_text(json.dumps(meta), encoding="utf-8")
    return clean


def test_a_stripped_record_is_not_laundered_by_perturb_nor_accepted_beside_a_recording_shard(tmp_path):
    """With every files_sha256 key removed, a data-bin reads as one of an earlier release: perturb then recorded fresh
    digests of the swapped-in files it copied, and a stripped second shard trained beside a recording first one
    (hostile pass X)."""
    from .conftest import call, tool
    from .helpers import one_line_error

    _stripped_copy(tmp_path)
    done = call([tool("fairseq-syntax-perturb"), "stripped", "--destdir", "noisy", "--p", "0.5", "--splits", "test"],
                cwd=tmp_path)
    assert "records no digests of the train split's files" in done.stderr
    splits = json.loads((tmp_path / "noisy" / "syntax.json").read_text(encoding="utf-8"))["splits"]
    assert "files_sha256" in splits["test"] and "files_sha256" not in splits["train"]  # copied unchecked: unrecorded
    train = [tool("fairseq-train"), "bin:stripped", *TINY[1:], "--arch", "transformer_dep_rel", "--max-tokens", "1000",
             "--max-update", "2", "--cpu", "--required-batch-size-multiple", "1"]
    one_line_error(call(train, cwd=tmp_path, expect_ok=False), "fairseq-train",
                   "stripped/syntax.json: records no digests of its files, but bin among the same data paths does")


def test_record_reads_the_first_subset_of_fairseq_trains_valid_subset_list(tmp_path):
    """``--valid-subset valid,test`` (the run's own value) was refused as "is it this run's log?"."""
    from fairseq_syntax_analysis.train_log import valid_metrics

    log = tmp_path / "train.log"
    log.write_text("2026-11-27 10:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 4.5 | nll_loss 3.1 | "
                   "ppl 8.6 | num_updates 20\n2026-11-27 10:00:01 | INFO | valid | epoch 001 | valid on 'test' subset "
                   "| loss 9.9 | nll_loss 9.9 | ppl 99 | num_updates 20\n", encoding="utf-8")
    assert valid_metrics(str(log), 20, "valid,test") == valid_metrics(str(log), 20, "valid")
    assert valid_metrics(str(log), 20, "valid,test")["loss"] == 4.5


# --- fortieth pass ------------------------------------------------------------------------------------------------
def test_a_write_to_a_full_or_closed_standard_output_is_named_as_standard_output(tmp_path):
    """``> /dev/full`` and ``| head -1`` printed "No space left on device" / "Broken pipe", naming no file."""
    import subprocess

    from .conftest import tool
    from .helpers import one_line_error

    argv = [tool("fairseq-syntax-report"), "table", os.path.join(ROOT, "examples", "dep_rel", "results", "multi30k"),
            "--baseline", "transformer"]
    with open("/dev/full", "w") as full:
        result = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    result.stdout = ""
    one_line_error(result, "fairseq-syntax-report", "standard output: No space left on device", "the disk is full")
    reader = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    reader.stdout.close()  # the reader stops before the first line
    result = subprocess.CompletedProcess(argv, reader.wait(), "", reader.stderr.read())
    one_line_error(result, "fairseq-syntax-report", "standard output: Broken pipe", "stopped reading")


def test_a_quiet_generate_log_is_not_scored_as_plain_text_translations(tmp_path):
    """``fairseq-generate --quiet`` prints no H- lines: its log lines were read as 60 plain-text translations."""
    from fairseq_syntax_analysis.hypotheses import read_translations
    from fairseq_syntax_core.decoding_record import MARK

    log = tmp_path / "quiet.log"
    log.write_text("INFO:fairseq_cli.generate:Translated 2 sentences\nGenerate test with beam=5: BLEU4 = 1.00\n"
                   f"{MARK}\t{{}}\n", encoding="utf-8")
    with pytest.raises(InputError, match="without H- lines: decoded with --quiet"):
        read_translations(str(log))
    log.write_text("a man rides a bike\ntwo dogs play\n", encoding="utf-8")
    assert read_translations(str(log)) == ["a man rides a bike", "two dogs play"]


def test_a_files_digest_is_taken_once_while_it_is_unchanged_and_again_once_written(tmp_path, monkeypatch):
    """A sharded run loads its splits every epoch: unchanged files are not read again; a rewritten one is."""
    import hashlib
    import time

    from fairseq_syntax_core import split_digests

    monkeypatch.setattr(split_digests, "_taken", {})
    path = tmp_path / "test.en-de.en.head.bin"
    path.write_bytes(b"heads")
    first = split_digests._sha256(str(path))
    assert first == hashlib.sha256(b"heads").hexdigest() and not split_digests._taken  # written just now: not kept
    now = time.time_ns()
    monkeypatch.setattr(split_digests.time, "time_ns", lambda: now + 10 ** 10)
    assert split_digests._sha256(str(path)) == first and first in split_digests._taken.values()
    path.write_bytes(b"other")  # same size, written in place
    os.utime(path, ns=(now - 10 ** 9, now - 10 ** 9))
    assert split_digests._sha256(str(path)) == hashlib.sha256(b"other").hexdigest()


@pytest.mark.parametrize("command", ["fairseq-syntax-report", "fairseq-syntax-evaluate", "fairseq-syntax-perturb",
                                     "fairseq-generate", "fairseq-interactive"])
def test_a_command_started_with_standard_output_closed_refuses_instead_of_losing_its_output(tmp_path, command):
    """``>&-``: print() to a closed standard output drops everything; fairseq-interactive exited 0 having printed
    nothing, fairseq-generate gave a traceback."""
    import subprocess

    from .conftest import tool
    from .helpers import one_line_error

    argv = {"fairseq-syntax-report": ["table", "results"], "fairseq-syntax-evaluate": ["-r", "ref", "-b", "x=hyp"],
            "fairseq-syntax-perturb": ["db", "--destdir", "out"]}.get(
        command, ["db", "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--path", "ck.pt"])
    result = subprocess.run([tool(command), *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path, pass_fds=(),
                            preexec_fn=lambda: os.close(1))
    one_line_error(result, command, "standard output is closed (>&-)")


def test_the_next_generate_puts_back_the_earlier_results_a_killed_one_had_set_aside(tmp_path, capsys):
    """``kill -9`` while fairseq-generate wrote --results-path: the earlier results stayed hidden as
    ``.generate-test.txt.kept-PID`` for ever, the killed run's partial output in their place. The next run puts
    them back; partial outputs stay in sight, and a complete file written there since is not replaced."""
    import types

    from fairseq_syntax import results_file
    from fairseq_syntax_core.decoding_record import MARK

    (tmp_path / ".generate-test.txt.kept-4194301").write_text("earlier\n", encoding="utf-8")
    os.utime(tmp_path / ".generate-test.txt.kept-4194301", (1, 1))
    (tmp_path / ".generate-test.txt.kept-4194302").write_text("S-0\tpartial of a first kill\n", encoding="utf-8")
    (tmp_path / "generate-test.txt").write_text("S-0\thalf", encoding="utf-8")  # the last killed run's
    cfg = types.SimpleNamespace(common_eval=types.SimpleNamespace(results_path=str(tmp_path)),
                                dataset=types.SimpleNamespace(gen_subset="test"))
    with pytest.raises(KeyboardInterrupt):  # this run fails too: the earlier results are what it puts back
        with results_file.earlier_results_kept(cfg):
            results_file.discard_results(open(tmp_path / "generate-test.txt", "w", encoding="utf-8"))
            raise KeyboardInterrupt
    assert (tmp_path / "generate-test.txt").read_text(encoding="utf-8") == "earlier\n"
    assert "held results a fairseq-generate killed while it wrote there had set aside" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["generate-test.txt", "generate-test.txt.partial-4194302",
                                            "generate-test.txt.partial-4194302.1"]
    assert (tmp_path / "generate-test.txt.partial-4194302.1").read_text(encoding="utf-8") == "S-0\thalf"
    with results_file.earlier_results_kept(cfg):  # a run that completes: its results, nothing set aside left
        (tmp_path / "generate-test.txt").write_text("new\n", encoding="utf-8")
    assert (tmp_path / "generate-test.txt").read_text(encoding="utf-8") == "new\n"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".generate-test.txt.kept-")]
    complete = f"H-0\t-1.0\tnewer\n{MARK}\t{{}}\n"  # written since the kill (standard output, say): it stays
    (tmp_path / "generate-test.txt").write_text(complete, encoding="utf-8")
    (tmp_path / ".generate-test.txt.kept-4194303").write_text("earlier\n", encoding="utf-8")
    with pytest.raises(KeyboardInterrupt):
        with results_file.earlier_results_kept(cfg):
            results_file.discard_results(open(tmp_path / "generate-test.txt", "w", encoding="utf-8"))
            raise KeyboardInterrupt
    assert (tmp_path / "generate-test.txt").read_text(encoding="utf-8") == complete
    assert (tmp_path / "generate-test.txt.earlier-4194303").read_text(encoding="utf-8") == "earlier\n"


def test_a_new_run_into_a_save_dir_of_checkpoints_without_a_last_one_is_refused_not_run_over_them(tmp_path):
    """A run killed while it saved its first checkpoint left checkpoint_1_5.pt and no checkpoint_last.pt: the rerun
    with the same flags started over, overwriting them without a word."""
    from .conftest import call, tool
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "2")
    os.remove(tmp_path / "ck" / "checkpoint_last.pt")
    kept = (tmp_path / "ck" / "checkpoint_best.pt").read_bytes()
    train = [tool("fairseq-train"), *TINY, "--max-update", "2"]
    one_line_error(call(train, cwd=tmp_path, expect_ok=False), "fairseq-train", "--save-dir ck holds checkpoint",
                   "and no checkpoint_last.pt", "copy the latest")
    assert (tmp_path / "ck" / "checkpoint_best.pt").read_bytes() == kept
    for other in (["--no-last-checkpoints"], ["--finetune-from-model", "ck/checkpoint_best.pt"]):  # new runs too
        one_line_error(call(train + other, cwd=tmp_path, expect_ok=False), "fairseq-train",
                       "holds checkpoint_best.pt, checkpoints of another run", "give another --save-dir")
    assert (tmp_path / "ck" / "checkpoint_best.pt").read_bytes() == kept
    shutil.copy(tmp_path / "ck" / "checkpoint_best.pt", tmp_path / "ck" / "checkpoint_last.pt")  # the advice
    call(train + ["--max-update", "3"], cwd=tmp_path)  # resumes that run


def test_a_checkpoint_of_a_recording_data_bin_refuses_one_whose_record_was_removed(tmp_path):
    """A data-bin with every files_sha256 key removed read as one of an earlier release: a warning only, and its
    swapped-in side-files decoded. A checkpoint trained on a data-bin that records them knows better."""
    from .conftest import call, tool
    from .helpers import one_line_error

    _stripped_copy(tmp_path)
    call([tool("fairseq-train"), "bin", *TINY[1:], "--arch", "transformer_dep_rel", "--max-tokens", "1000",
          "--max-update", "2", "--cpu", "--required-batch-size-multiple", "1"], cwd=tmp_path)
    generate = [tool("fairseq-generate"), "stripped", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                "--path", "ck/checkpoint_last.pt", "--gen-subset", "test", "--beam", "2", "--max-len-b", "3", "--cpu"]
    one_line_error(call(generate, cwd=tmp_path, expect_ok=False), "fairseq-generate",
                   "stripped/syntax.json: records no digests of its splits' files, but the data-bin "
                   "the checkpoint was trained on recorded them", "--allow-other-data-bin")
    assert "H-0" in call(generate + ["--allow-other-data-bin"], cwd=tmp_path).stdout
    assert "H-0" in call(generate[:1] + ["bin"] + generate[2:], cwd=tmp_path).stdout  # its own data-bin


def test_fairseq_interactive_with_standard_input_closed_is_one_line(tmp_path):
    import subprocess

    from .conftest import tool
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "1")
    argv = [tool("fairseq-interactive"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
            "--path", "ck/checkpoint_last.pt", "--source-lang", "en", "--target-lang", "de"]
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            preexec_fn=lambda: os.close(0))
    one_line_error(result, "fairseq-interactive", "standard input is closed (<&-)")


def test_the_plugin_imported_outside_a_command_with_standard_output_closed_is_not_refused(tmp_path):
    """The hub in a service started without a terminal: only fairseq's commands write their output there."""
    import subprocess
    import sys

    code = ("import argparse, sys; sys.argv = ['service']; from fairseq.utils import import_user_module; "
            "import_user_module(argparse.Namespace(user_dir='fairseq_syntax')); print('imported', file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, preexec_fn=lambda: os.close(1))
    assert result.returncode == 0 and result.stderr.strip().endswith("imported"), result.stderr[-2000:]


def test_a_resume_from_the_folders_own_checkpoint_under_a_checkpoint_suffix_is_not_refused(tmp_path):
    """fairseq opens --restore-file with the suffix put in (ck/checkpoint_1_1.pt is ck/checkpoint_1_1_s1.pt)."""
    from .conftest import call, tool

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "2", "--checkpoint-suffix", "_s1", "--save-interval-updates", "1")
    assert (tmp_path / "ck" / "checkpoint_1_1_s1.pt").is_file()
    resumed = call([tool("fairseq-train"), *TINY, "--max-update", "3", "--checkpoint-suffix", "_s1",
                    "--restore-file", "ck/checkpoint_1_1.pt"], cwd=tmp_path)
    assert "checkpoint_1_1_s1.pt" in resumed.stdout + resumed.stderr


def test_a_run_resumed_with_another_dropout_or_label_smoothing_is_refused_not_recorded_as_one_run(tmp_path):
    """fairseq builds the resumed model from this command line: dropout 0.5 after 0.1 left no trace in the
    checkpoints, and record wrote one result of the two systems."""
    from .conftest import call, tool
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    _train(tmp_path, "--max-update", "1", "--dropout", "0.1")
    refused = call([tool("fairseq-train"), *TINY, "--max-update", "2", "--dropout", "0.5"], cwd=tmp_path,
                   expect_ok=False)
    one_line_error(refused, "fairseq-train", "ck/checkpoint_last.pt was trained with --dropout 0.1; this run gives 0.5",
                   "resume with --dropout 0.1")
    _train(tmp_path, "--max-update", "2", "--dropout", "0.1")  # the same settings resume


def test_a_memory_limit_a_file_size_limit_and_a_removed_working_folder_are_one_line_each(tmp_path, capsys):
    """``ulimit -v``: a traceback from ``import torch``; ``ulimit -f 0``: "free space, or set TMPDIR" with 69 GB
    free; a removed working folder: MKL's abort naming torch's own library."""
    import resource
    import subprocess

    from fairseq_syntax_core import startup

    from .conftest import tool
    from .helpers import one_line_error

    startup._import_error(ImportError, ImportError("libtorch_cpu.so: failed to map segment from shared object"), None)
    assert "too little memory to load its libraries" in capsys.readouterr().err
    argv = [tool("fairseq-syntax-report"), "table", os.path.join(ROOT, "examples", "dep_rel", "results", "multi30k")]
    limited = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE,
                                                                   (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1])))
    if limited.returncode != 0:  # whether a library writes at start-up depends on its caches
        one_line_error(limited, "fairseq-syntax-report", "ulimit -f")
    gone = tmp_path / "gone"
    gone.mkdir()
    removed = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: (os.chdir(gone), os.rmdir(gone)))
    one_line_error(removed, "fairseq-syntax-report", "the working folder no longer exists")
