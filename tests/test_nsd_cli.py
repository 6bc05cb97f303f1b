"""Source-side NSD end to end (issue 14): constituency distances through the installed commands."""

import pytest

from .conftest import spacy_model, train
from .helpers import generate, interactive

pytestmark = pytest.mark.slow  # end-to-end runs of the installed commands


def test_transformer_nsd_with_relative_constituency_distance_trains_generates_and_translates_raw_text(outside):
    spacy_model()
    checkpoint = train(outside, "transformer_nsd", "ckpt_nsd_dr", "--nsd-distance", "constituency-relative",
                       "--criterion", "label_smoothed_cross_entropy_with_nsd", "--label-smoothing", "0.1",
                       "--nsd-rank-weight", "0.5", "--log-file", "nsd_dr_train.log")
    log = (outside / "nsd_dr_train.log").read_text()
    for metric in ("nsd_mse", "nsd_rank", "nsd_ent", "nsd_acc"):
        assert metric in log, log[-2000:]
    generate(outside, checkpoint)
    interactive(outside, checkpoint)  # d_R from the phrase structure converted from the online parse


def test_a_criterion_of_auxiliary_losses_with_a_model_without_their_outputs_stops_at_start_up(outside):
    """The distance losses need a model that predicts distances: one line before the first batch, no crash.pt."""
    from .conftest import CLI_TINY, call, tool

    result = call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                   "--arch", "transformer_dep_rel", *CLI_TINY, "--optimizer", "adam", "--lr", "0.002",
                   "--max-tokens", "1500", "--max-update", "2", "--save-dir", "ckpt_no_outputs", "--no-progress-bar",
                   "--criterion", "label_smoothed_cross_entropy_with_nsd", "--label-smoothing", "0.1"],
                  cwd=outside, expect_ok=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("fairseq-train: error: --criterion label_smoothed_cross_entropy_with_nsd: --arch "
                           "transformer_dep_rel returns none of the outputs"), last
    assert not (outside / "ckpt_no_outputs" / "crash.pt").exists()
