"""The one way this project reads a checkpoint: torch's weights-only unpickler and fairseq's allow-list.

A ``.pt`` file is a pickle, and unpickling runs whatever callables the file names. torch's
weights-only unpickler refuses every global that is not on an allow-list, so a checkpoint can
only hold tensors, containers, numbers, strings and the few classes listed here. fairseq 0.12
training checkpoints of legacy (argparse) models pickle the model arguments as an
``argparse.Namespace`` inside ``cfg``, and a saved metric (a best score) may be a NumPy number:
:func:`fairseq_checkpoint_globals` names exactly these, and nothing else is admitted.

* :func:`load_checkpoint` is the reader for our own code (``fairseq-syntax-report record``, tests):
  it passes ``weights_only=True`` explicitly, with the allow-list, so no setting of torch or of the
  environment turns the check off, and every failure is one :class:`CheckpointError` naming the file.
* fairseq's own reads (``checkpoint_utils.load_checkpoint_to_cpu``: fairseq-train, -generate,
  -interactive, -validate, ``from_pretrained``, ``fairseq-syntax-awsl``) leave ``weights_only``
  to torch's default, which is ``True`` from torch 2.6 (``setup.py`` requires it).
  ``fairseq_syntax.checkpoints`` adds the allow-list to torch's global one when the plugin is
  imported (:func:`allow_fairseq_checkpoints`), and ``fairseq_syntax.compat`` refuses to let
  fairseq read when :func:`default_load_problem` says the default would unpickle anything.

This module imports only NumPy and PyTorch (never fairseq), so commands that only read
checkpoints need not import fairseq.
"""

import argparse
import os
import pickle
import re
import zipfile
from typing import Any, List, Optional

import numpy as np
import torch

from .errors import CheckpointError

#: the exceptions a read of a damaged or foreign checkpoint raises (fairseq's reads included)
READ_ERRORS = (EOFError, RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError, OSError, KeyError)
#: the torch version from which ``torch.load`` defaults to ``weights_only=True``
WEIGHTS_ONLY_DEFAULT_SINCE = (2, 6)
_TRUE = ("1", "y", "yes", "true")
#: how torch's weights-only unpickler names a global it refused (torch 2.6 to 2.13)
_REFUSED = (re.compile(r"GLOBAL (\S+) whose module \S+ is blocked"),
            re.compile(r"GLOBAL (\S+) was not an allowed global"),
            re.compile(r"Unsupported global: GLOBAL (\S+)"))
_WEIGHTS_ONLY_DETAIL = "WeightsUnpickler error:"
_DOCS = "Check the documentation of torch.load"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


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
    """Add :func:`fairseq_checkpoint_globals` to torch's process-wide allow-list (for fairseq's reads)."""
    torch.serialization.add_safe_globals(fairseq_checkpoint_globals())


def default_load_problem() -> Optional[str]:
    """Why a ``torch.load`` that leaves ``weights_only`` to torch (fairseq's) would unpickle any object, or None."""
    version = tuple(int(part) for part in re.findall(r"\d+", torch.__version__)[:2])
    if version < WEIGHTS_ONLY_DEFAULT_SINCE:
        return (f"torch {torch.__version__} would unpickle any object in this checkpoint (its torch.load "
                "defaults to weights_only=False); install torch>=2.6")
    forced_off = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0").lower() in _TRUE
    if forced_off and os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() not in _TRUE:
        return ("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set, with which fairseq would unpickle any object in this "
                "checkpoint (and run the code it names); unset it: fairseq checkpoints load weights-only")
    return None


def refused_global(error: BaseException) -> Optional[str]:
    """The global (``module.name``) that torch's weights-only unpickler refused in ``error``, or None."""
    if not isinstance(error, pickle.UnpicklingError):
        return None
    for pattern in _REFUSED:
        found = pattern.search(str(error))
        if found:
            return found.group(1).rstrip(".,;")
    return None


def _detail(error: BaseException) -> str:
    """The informative part of ``error`` on one line (torch's weights-only messages are mostly advice)."""
    text = _ANSI.sub("", str(error)).split(_DOCS)[0]
    if _WEIGHTS_ONLY_DETAIL in text:
        text = text.split(_WEIGHTS_ONLY_DETAIL, 1)[1]
    return " ".join(text.split())[:200]


def checkpoint_read_error(path: str, error: BaseException) -> CheckpointError:
    """The one-line message for a checkpoint that could not be read (``error`` is why)."""
    suffix = ("; expected a checkpoint written by fairseq-train. Use another one "
              "(checkpoint_best.pt, checkpoint_last.pt, an epoch checkpoint) or train again")
    name = refused_global(error)
    if name is not None:
        return CheckpointError(path, None, f"the checkpoint holds an object that is not allowed ({name}) and was "
                               "not loaded: unpickling it could run code" + suffix)
    if isinstance(error, FileNotFoundError) or not os.path.lexists(path):
        return CheckpointError(path, None, "not found: no checkpoint file by this name")
    if os.path.isdir(path):
        return CheckpointError(path, None, "is a folder, not a checkpoint file" + suffix)
    size = os.path.getsize(path) if os.path.isfile(path) else None
    if size == 0:
        why = "the file is empty (0 bytes): its save was interrupted, or the disk was full"
    else:
        why = f"it cannot be read as a fairseq checkpoint ({type(error).__name__}: {_detail(error)})"
    return CheckpointError(path, None, why + suffix)


def load_checkpoint(path: str, mmap: bool = False) -> Any:
    """The checkpoint at ``path`` on CPU, read weights-only with fairseq's allow-list.

    Raises :class:`CheckpointError` naming ``path`` for any file that cannot be read so: missing,
    a folder, empty, truncated, not a torch file, or holding an object not on the allow-list.
    ``mmap``: the tensors stay in the file until used (for reading a checkpoint's settings only).
    """
    path = os.fspath(path)
    # torch's context removes on exit every global it was given, even one added process-wide
    # before (the plugin's, for fairseq's reads): give it only those not admitted already
    admitted = set(torch.serialization.get_safe_globals())
    missing = [name for name in fairseq_checkpoint_globals() if name not in admitted]
    try:
        with torch.serialization.safe_globals(missing):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as error:  # whatever a damaged or hostile file raises is the file's fault
        raise checkpoint_read_error(path, error) from None
