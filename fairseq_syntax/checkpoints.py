"""Loading fairseq checkpoints under torch >= 2.6, whose ``torch.load`` defaults to ``weights_only=True``.

fairseq 0.12 calls ``torch.load(f, map_location="cpu")``; its checkpoints of legacy
(argparse) models pickle the model arguments as an ``argparse.Namespace`` inside ``cfg``,
which the weights-only unpickler refuses ("Unsupported global: argparse.Namespace").
Rather than switching the safety off for every load in the process (``weights_only=False``),
importing the plugin adds exactly the classes fairseq checkpoints hold to torch's allow-list
(``torch.serialization.add_safe_globals``): ``argparse.Namespace``, and the NumPy scalar and
dtype reconstructors that appear when a saved metric (a best score) is a NumPy number.
Any other global in a checkpoint still fails loudly.
"""

import argparse
from typing import List

import numpy as np
import torch


def fairseq_checkpoint_globals() -> List[object]:
    """The non-tensor globals that fairseq 0.12 training checkpoints contain."""
    allowed: List[object] = [argparse.Namespace, np.dtype]
    for module_name in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            module = __import__(module_name, fromlist=["scalar"])
        except ImportError:
            continue
        allowed.append(module.scalar)
        break
    dtypes = getattr(np, "dtypes", None)  # NumPy >= 1.25 pickles dtypes by class
    if dtypes is not None:
        allowed += [getattr(dtypes, name) for name in ("Float64DType", "Float32DType", "Int64DType") if hasattr(dtypes, name)]
    return allowed


def allow_fairseq_checkpoints() -> None:
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:  # torch >= 2.4
        add(fairseq_checkpoint_globals())


allow_fairseq_checkpoints()
