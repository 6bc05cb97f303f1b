"""fairseq-train's checkpoint writes, made safe to fail: each names its file and leaves no partial one.

fairseq saves the first checkpoint of a save through ``FILE.tmp`` and a rename, then copies it to the others
(``checkpoint_best.pt``, ``checkpoint_last.pt``) with ``PathManager.copy``, which truncates the target and
writes it. A full disk, SIGTERM or kill -9 during that copy left a truncated ``checkpoint_last.pt`` (the file
the next run resumes), and a failed save its ``FILE.tmp``. Here:

* ``torch_persistent_save`` raises an OSError naming the checkpoint (fairseq: ``[Errno 28]`` naming no file, or
  torch's zip writer's ``RuntimeError``), printed as one line, and removes its ``FILE.tmp``;
* the copies go to ``TARGET.tmp`` and are renamed over the target, so a target is the old checkpoint or the new
  one, never part of one (a failed copy removes its ``.tmp``).
"""

import contextlib
import errno
import functools
import inspect
import logging
import os
import shutil

logger = logging.getLogger(__name__)

#: torch.save's messages when its zip writer could not write the file (the disk filled up meanwhile)
_TORCH_WRITE_FAILURES = ("PytorchStreamWriter", "inline_container")


def wrap_checkpoint_writes(checkpoint_utils) -> bool:
    """Wrap ``checkpoint_utils.torch_persistent_save`` and give ``checkpoint_utils`` an atomic copy."""
    return _wrap_torch_persistent_save(checkpoint_utils) & _atomic_copies(checkpoint_utils)


def _no_traceback(record: logging.LogRecord) -> bool:
    """A logging filter: drop fairseq's ERROR record of a traceback (the error itself is then one line)."""
    return not (record.levelno >= logging.ERROR and str(record.msg).startswith("Traceback"))


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        if os.path.lexists(path):
            os.remove(path)


def _wrap_torch_persistent_save(checkpoint_utils) -> bool:
    original = getattr(checkpoint_utils, "torch_persistent_save", None)
    if original is None or getattr(original, "_fairseq_syntax", False):
        return original is not None
    if tuple(inspect.signature(original).parameters)[:2] != ("obj", "filename"):
        logger.warning("fairseq's torch_persistent_save has changed: checkpoint write errors will not name the file")
        return False

    @functools.wraps(original)
    def torch_persistent_save(obj, filename, *args, **kwargs):
        fairseq_log = logging.getLogger(checkpoint_utils.__name__)
        fairseq_log.addFilter(_no_traceback)  # fairseq logs the traceback of a failed write before raising it
        try:
            return original(obj, filename, *args, **kwargs)
        except BaseException as error:
            if isinstance(filename, str) and "://" not in filename:
                _remove_quietly(filename + ".tmp")  # fairseq's atomic save writes there first
            if isinstance(error, OSError):
                if error.filename is not None or not error.strerror:
                    raise
                raise OSError(error.errno, error.strerror, str(filename)) from error
            if isinstance(error, RuntimeError) and any(mark in str(error) for mark in _TORCH_WRITE_FAILURES):
                raise OSError(errno.EIO, f"torch could not write the checkpoint ({str(error).splitlines()[0][:200]}"
                                         "); is the disk full?", str(filename)) from error
            raise
        finally:
            fairseq_log.removeFilter(_no_traceback)

    torch_persistent_save._fairseq_syntax = True  # type: ignore[attr-defined]
    checkpoint_utils.torch_persistent_save = torch_persistent_save
    return True


def _atomic_copies(checkpoint_utils) -> bool:
    """``checkpoint_utils.PathManager``: fairseq's, whose ``copy`` of local files writes ``DST.tmp`` and renames it."""
    manager = getattr(checkpoint_utils, "PathManager", None)
    if manager is None or getattr(manager, "_fairseq_syntax", False):
        return manager is not None
    if tuple(inspect.signature(manager.copy).parameters)[:2] != ("src_path", "dst_path"):
        logger.warning("fairseq's PathManager.copy has changed: checkpoint copies will not be atomic")
        return False

    class AtomicCopyPathManager(manager):
        _fairseq_syntax = True

        @staticmethod
        def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
            if "://" in str(src_path) or "://" in str(dst_path):
                return manager.copy(src_path, dst_path, overwrite=overwrite)
            temporary = f"{dst_path}.tmp"
            try:
                shutil.copyfile(src_path, temporary)
                os.replace(temporary, dst_path)
            except BaseException as error:
                _remove_quietly(temporary)
                if isinstance(error, OSError) and error.strerror:
                    raise OSError(error.errno, error.strerror, str(src_path), None, str(dst_path)) from error
                raise
            return True

    checkpoint_utils.PathManager = AtomicCopyPathManager
    return True
