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
