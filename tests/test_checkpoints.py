"""fairseq checkpoints load under torch's weights_only default, and nothing else is admitted."""

import argparse

import numpy as np
import pytest
import torch

import fairseq_syntax  # noqa: F401  (admits the checkpoint globals)
from fairseq_syntax_core.checkpoint_loader import fairseq_checkpoint_globals, load_checkpoint
from fairseq_syntax_core.errors import CheckpointError


class NotAllowed:
    pass


def test_fairseq_checkpoint_content_loads_weights_only(tmp_path):
    state = {"cfg": {"model": argparse.Namespace(arch="transformer_dep_rel", rel_dep_l=2)},
             "extra_state": {"best": np.float64(3.5)}, "model": {"w": torch.ones(2)}}
    torch.save(state, tmp_path / "checkpoint.pt")
    loaded = load_checkpoint(str(tmp_path / "checkpoint.pt"))
    assert loaded["cfg"]["model"].rel_dep_l == 2 and float(loaded["extra_state"]["best"]) == 3.5
    # fairseq's own reads (weights_only left to torch) see the same allow-list, process-wide
    assert set(fairseq_checkpoint_globals()) <= set(torch.serialization.get_safe_globals())


def test_other_globals_are_still_refused(tmp_path):
    torch.save({"x": NotAllowed()}, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=r"bad\.pt: the checkpoint holds an object that is not allowed "
                                              r"\([\w.]*NotAllowed\) and was not loaded"):
        load_checkpoint(str(tmp_path / "bad.pt"))
