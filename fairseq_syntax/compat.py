"""The plugin's only patches of fairseq, each wrapping one fairseq function at import time.

Some bad inputs fail inside fairseq before any plugin code runs, with a message that names
no file. The wrappers here turn exactly those failures into one-line errors
(:class:`~fairseq_syntax_preprocess.errors.UserError`, printed without a traceback by the hook
that :func:`install` sets) and change nothing else. Each names the fairseq version it was
written against and has a test (``tests/test_reliability.py``); a fairseq whose function no
longer has the expected signature is left unpatched, with a warning.

=====================================  ======================================  ===========
fairseq function                        what the wrapper adds                   fairseq
=====================================  ======================================  ===========
``checkpoint_utils.load_checkpoint_to_cpu``  an empty, truncated or non-checkpoint   0.12.2,
                                        file is a :class:`CheckpointError`      0.12.3 (main)
                                        naming it (fairseq: ``EOFError: Ran out
                                        of input`` or a zip error, no file)
=====================================  ======================================  ===========
"""

import functools
import inspect
import logging
import os
import pickle
import zipfile

from fairseq_syntax_preprocess.errors import CheckpointError
from fairseq_syntax_preprocess.interrupts import install_error_hook

logger = logging.getLogger(__name__)

#: the parameters of the wrapped fairseq function, as of fairseq 0.12.2 and main (0.12.3)
_LOAD_CHECKPOINT_PARAMS = ("path", "arg_overrides", "load_on_all_ranks")
_READ_ERRORS = (EOFError, RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError, OSError, KeyError)


def checkpoint_read_error(path: str, error: BaseException) -> CheckpointError:
    """The message for a checkpoint fairseq could not read."""
    size = os.path.getsize(path) if os.path.isfile(path) else None
    if size == 0:
        why = "the file is empty (0 bytes): its save was interrupted, or the disk was full"
    else:
        why = f"it cannot be read as a fairseq checkpoint ({type(error).__name__}: {str(error)[:200]})"
    return CheckpointError(
        path, None,
        f"{why}; expected a checkpoint written by fairseq-train. Use another one "
        "(checkpoint_best.pt, checkpoint_last.pt, an epoch checkpoint) or train again",
    )


def _wrap_load_checkpoint_to_cpu(checkpoint_utils) -> bool:
    original = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(original, "_fairseq_syntax", False):
        return True
    if tuple(inspect.signature(original).parameters)[:3] != _LOAD_CHECKPOINT_PARAMS:
        logger.warning("fairseq's load_checkpoint_to_cpu has changed: checkpoint errors will not name the file")
        return False

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            raise checkpoint_read_error(path, EOFError())
        try:
            return original(path, arg_overrides, load_on_all_ranks)
        except _READ_ERRORS as error:
            if isinstance(error, FileNotFoundError):
                raise
            raise checkpoint_read_error(path, error) from error

    load_checkpoint_to_cpu._fairseq_syntax = True  # type: ignore[attr-defined]
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
    return True


def install() -> None:
    """Apply every wrapper, and print this project's errors without tracebacks."""
    from fairseq import checkpoint_utils

    _wrap_load_checkpoint_to_cpu(checkpoint_utils)
    install_error_hook()
