"""A run's validation metrics read back from fairseq-train's log (``report record --train-log``)."""

import pytest

from fairseq_syntax_analysis.train_log import training_seconds, valid_metrics
from fairseq_syntax_core.errors import InputError

SIMPLE = """2026-11-26 08:47:27 | INFO | train | epoch 005 | loss 4.9 | nll_loss 3.5 | num_updates 650
2026-11-26 08:47:27 | INFO | valid | epoch 005 | valid on 'valid' subset | loss 4.734 | nll_loss 3.245 | ppl 9.48 | wps 3587.2 | num_updates 650 | best_loss 4.734
2026-11-26 08:47:28 | INFO | valid | epoch 005 | valid on 'test' subset | loss 9.9 | nll_loss 9.9 | num_updates 650
2026-11-26 08:52:59 | INFO | valid | epoch 006 | valid on 'valid' subset | loss 4.463 | nll_loss 2.894 | nll_loss_fed 3.1 | nll_loss_gap 0.206 | num_updates 780 | best_loss 4.463
"""
JSON = """2026-11-26 08:48:32 | INFO | valid | {"epoch": 3, "valid_loss": "5.934", "valid_nll_loss": "4.232", "valid_nll_loss_fed": "5.166", "valid_tgt_nsd_fed_acc": "46.3", "valid_num_updates": "300"}
"""


def test_the_validation_at_the_best_update_in_the_simple_format(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(SIMPLE, encoding="utf-8")
    assert valid_metrics(str(log), 650) == {"epoch": 5, "loss": 4.734, "nll_loss": 3.245, "ppl": 9.48, "num_updates": 650}
    later = valid_metrics(str(log), 780)
    assert later["nll_loss_fed"] == 3.1 and later["nll_loss_gap"] == 0.206 and later["epoch"] == 6


def test_a_resumed_run_appends_and_the_last_validation_counts(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(SIMPLE + SIMPLE.replace("loss 4.463", "loss 4.400"), encoding="utf-8")
    assert valid_metrics(str(log), 780)["loss"] == 4.400


def test_the_json_format(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(JSON, encoding="utf-8")
    got = valid_metrics(str(log), 300)
    assert got["nll_loss"] == 4.232 and got["nll_loss_fed"] == 5.166 and got["tgt_nsd_fed_acc"] == 46.3
    assert got["epoch"] == 3


@pytest.mark.parametrize("content", [b"", b"\xff\xfe garbage\n", SIMPLE.encode().replace(b"num_updates 780", b"num_updates nan")])
def test_a_log_without_that_validation_is_one_line_naming_it(tmp_path, content):
    log = tmp_path / "train.log"
    log.write_bytes(content)
    with pytest.raises(InputError, match=r"train.log: logs no validation on 'valid' at update 780") as error:
        valid_metrics(str(log), 780)
    assert "\n" not in str(error.value)


def test_a_missing_log_is_one_line(tmp_path):
    with pytest.raises(InputError, match="nope.log: cannot be read"):
        valid_metrics(str(tmp_path / "nope.log"), 1)


@pytest.mark.parametrize("line, dropped", [
    ('2026 | INFO | valid | {"epoch": 1, "valid_loss": ' + "1" * 401 + ', "valid_num_updates": 780}', {"loss"}),
    ("2026 | INFO | valid | epoch " + "9" * 5000 + " | valid on 'valid' subset | loss 1 | num_updates 780", {"epoch"}),
    ('2026 | INFO | valid | {"epoch": true, "valid_loss": true, "valid_num_updates": 780}', {"loss", "epoch"}),
])
def test_numbers_too_long_or_not_numbers_are_dropped(tmp_path, line, dropped):
    log = tmp_path / "train.log"
    log.write_text(line + "\n", encoding="utf-8")
    got = valid_metrics(str(log), 780)
    assert got["num_updates"] == 780 and not dropped & set(got)


def test_a_fifo_as_the_log_is_refused_at_once(tmp_path):
    import os

    os.mkfifo(tmp_path / "train.log")
    with pytest.raises(InputError, match="is not a regular file"):
        valid_metrics(str(tmp_path / "train.log"), 1)


def test_another_subset_is_read_when_asked_and_named_when_not(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("epoch 002 | valid on 'test' subset | loss 3.5 | nll_loss 2.5 | num_updates 10\n", encoding="utf-8")
    assert valid_metrics(str(log), 10, "test") == {"epoch": 2, "loss": 3.5, "nll_loss": 2.5, "num_updates": 10}
    with pytest.raises(InputError, match=r"it validates on 'test' \(--valid-subset\)"):
        valid_metrics(str(log), 10)


@pytest.mark.parametrize("broken", [{"signatures": None}, {"hypotheses": [1]}, {"statistics": [1]}])
def test_record_refuses_an_evaluation_with_fields_of_the_wrong_kind(tmp_path, broken):
    import json

    from fairseq_syntax_analysis import results as rs

    ev = {"sentences": 1, "systems": [{"name": "m", "scores": {"BLEU": 1.0}}], "signatures": {},
          "statistics": {"m": {}}, **broken}
    path = tmp_path / "ev.json"
    path.write_text(json.dumps(ev), encoding="utf-8")
    with pytest.raises(InputError, match="ev.json: (is not a fairseq-syntax-evaluate JSON|lacks per-sentence)"):
        rs.read_evaluation(str(path))


def _invocation(start: str, fresh: bool, end: str) -> str:
    found = "No existing checkpoint found ck/checkpoint_last.pt" if fresh else "Loaded checkpoint ck/checkpoint_last.pt"
    return (f"{start} | INFO | fairseq_cli.train | {{'_name': None, 'common': {{}}}}\n"
            f"{start} | INFO | fairseq.trainer | {found}\n"
            "some line a tool printed without a time stamp\n"
            f"{end} | INFO | train_inner | epoch 001:    100 / 130 loss=9.1\n")


def test_training_time_sums_the_invocations_of_a_resumed_run(tmp_path):
    """A run killed and resumed twice: 100 + 50 + 10 s, not the gaps between; an earlier run that trained from scratch
    into the same log before (another run, given up) does not count."""
    log = tmp_path / "train.log"
    log.write_text(_invocation("2026-11-26 07:00:00", True, "2026-11-26 07:30:00")
                   + _invocation("2026-11-26 08:00:00", True, "2026-11-26 08:01:40")
                   + _invocation("2026-11-26 09:00:00", False, "2026-11-26 09:00:50")
                   + _invocation("2026-11-26 10:00:00", False, "2026-11-26 10:00:10"), encoding="utf-8")
    assert training_seconds(str(log)) == 160.0
    (tmp_path / "empty.log").write_text("no fairseq here\n", encoding="utf-8")
    assert training_seconds(str(tmp_path / "empty.log")) is None


def test_the_lines_a_resumed_invocation_logs_before_its_settings_are_not_the_stopped_ones_time(tmp_path):
    """fairseq's imports log a line before the settings line (tensorboardX missing): a run killed at 07:00:10 and
    resumed an hour later trained 10 + 10 s, not an hour and 10 s."""
    prelude = "2026-11-26 08:00:00 | INFO | fairseq.tasks.text_to_speech | Please install tensorboardX\n"
    log = tmp_path / "train.log"
    log.write_text(_invocation("2026-11-26 07:00:00", True, "2026-11-26 07:00:10") + prelude
                   + _invocation("2026-11-26 08:00:00", False, "2026-11-26 08:00:10"), encoding="utf-8")
    assert training_seconds(str(log)) == 20.0


def test_the_json_format_reads_the_subset_asked_for():
    """fairseq's json bar logs each subset under its own name with its keys prefixed (``| test | {"test_loss"``)."""
    import tempfile

    lines = JSON + JSON.replace("| valid |", "| test |").replace('"valid_', '"test_').replace('"5.934"', '"6.5"')
    with tempfile.TemporaryDirectory() as folder:
        log = f"{folder}/train.log"
        with open(log, "w", encoding="utf-8") as handle:
            handle.write(lines)
        assert valid_metrics(log, 300)["loss"] == 5.934
        assert valid_metrics(log, 300, "test")["loss"] == 6.5
        with pytest.raises(InputError, match=r"logs no validation on 'nosuch' at update 300 .* it validates on "
                                             r"'test', 'valid'"):
            valid_metrics(log, 300, "nosuch")


def test_another_commands_lines_appended_and_a_clock_stepped_back_are_not_training_time(tmp_path):
    """fairseq-validate appended an hour later logs under ``valid`` as fairseq-train's validation does: 2 s of
    training were recorded as 3,760; a clock set back an hour made an invocation count 0 s."""
    validate = ("2026-11-26 08:00:00 | INFO | fairseq_cli.validate | {'_name': None}\n"
                "2026-11-26 08:00:05 | INFO | valid | valid on 'valid' subset | loss 6.1 | nll_loss 6.0\n")
    log = tmp_path / "train.log"
    log.write_text(_invocation("2026-11-26 07:00:00", True, "2026-11-26 07:00:02") + validate, encoding="utf-8")
    assert training_seconds(str(log)) == 2.0
    stepped = ("2026-11-26 03:00:00 | INFO | fairseq_cli.train | {'_name': None}\n"
               "2026-11-26 03:00:30 | INFO | train_inner | epoch 001:  10 / 130 loss=9.1\n"
               "2026-11-26 02:00:40 | INFO | train_inner | epoch 001:  20 / 130 loss=8.1\n"  # the clock set back
               "2026-11-26 02:01:10 | INFO | train_inner | epoch 001:  30 / 130 loss=7.1\n")
    log.write_text(stepped, encoding="utf-8")
    assert training_seconds(str(log)) == 60.0


def test_only_the_invocations_of_the_run_the_log_ends_with_count(tmp_path):
    """Runs A (10 min), B (60 min), then A resumed (10 min) in one log: 1,200 s, not 4,200 (B is another run)."""
    def invocation(start, end, run, fresh):
        return (_invocation(start, fresh, end).replace("some line", f"{start} | INFO | fairseq_syntax.compat | run "
                                                       f"{run}: its checkpoints carry it\nsome line"))

    a, b = "a" * 32, "b" * 32
    log = tmp_path / "train.log"
    log.write_text(invocation("2026-11-26 07:00:00", "2026-11-26 07:10:00", a, True)
                   + invocation("2026-11-26 08:00:00", "2026-11-26 09:00:00", b, True)
                   + invocation("2026-11-26 10:00:00", "2026-11-26 10:10:00", a, False), encoding="utf-8")
    assert training_seconds(str(log)) == 1200.0
