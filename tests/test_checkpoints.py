"""fairseq checkpoints load under torch's weights_only default, and nothing else is admitted."""

import argparse
import pickle

import numpy as np
import pytest
import torch

import fairseq_syntax  # noqa: F401  (admits the checkpoint globals)


class NotAllowed:
    pass


def test_fairseq_checkpoint_content_loads_weights_only(tmp_path):
    state = {"cfg": {"model": argparse.Namespace(arch="transformer_dep_rel", rel_dep_l=2)},
             "extra_state": {"best": np.float64(3.5)}, "model": {"w": torch.ones(2)}}
    torch.save(state, tmp_path / "checkpoint.pt")
    loaded = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert loaded["cfg"]["model"].rel_dep_l == 2 and float(loaded["extra_state"]["best"]) == 3.5


def test_other_globals_are_still_refused(tmp_path):
    torch.save({"x": NotAllowed()}, tmp_path / "bad.pt")
    with pytest.raises(pickle.UnpicklingError, match="NotAllowed"):
        torch.load(tmp_path / "bad.pt", weights_only=True)
