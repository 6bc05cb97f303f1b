"""Loading fairseq checkpoints under torch >= 2.6, whose ``torch.load`` defaults to ``weights_only=True``.

fairseq 0.12 calls ``torch.load(f, map_location="cpu")`` and its checkpoints pickle a few
non-tensor objects: the legacy model arguments (``argparse.Namespace``), the training
meters of ``fairseq.logging.meters`` and NumPy scalars in the saved metrics. Rather than
switching the safety off for every load in the process (``weights_only=False``), importing
the plugin adds exactly these classes to torch's allow-list
(``torch.serialization.add_safe_globals``). Anything else in a checkpoint still fails loudly.
"""

import argparse
import collections
from typing import List

import numpy as np
import torch


def fairseq_checkpoint_globals() -> List[object]:
    """The non-tensor classes that fairseq 0.12 training checkpoints contain."""
    from fairseq.logging import meters

    allowed: List[object] = [
        argparse.Namespace,
        collections.OrderedDict,
        meters.AverageMeter,
        meters.SumMeter,
        meters.TimeMeter,
        meters.StopwatchMeter,
        meters.MetersDict,
        np.dtype,
        np.ndarray,
        np.core.multiarray.scalar if hasattr(np, "core") else np.ndarray,
    ]
    for name in ("ConcatMeter",):
        if hasattr(meters, name):
            allowed.append(getattr(meters, name))
    # NumPy >= 1.25 pickles dtypes as numpy.dtypes.*DType classes
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        allowed += [getattr(dtypes, n) for n in ("Float64DType", "Float32DType", "Int64DType", "Int32DType") if hasattr(dtypes, n)]
    return allowed


def allow_fairseq_checkpoints() -> None:
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:  # torch >= 2.4
        add(fairseq_checkpoint_globals())


allow_fairseq_checkpoints()
