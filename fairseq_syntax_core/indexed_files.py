"""One check of a fairseq mmap indexed dataset's two files, before fairseq opens them.

fairseq reads a truncated ``.idx`` with ``ValueError: buffer is smaller than requested size``
(and its dataset's ``__del__`` then prints an ignored ``AttributeError``), and a truncated
``.bin`` only when a batch reaches the missing bytes. This costs a header read and a ``stat``,
and names the damaged file. Used by the task's load-time checks and by the pipeline's tools
(``fairseq-syntax-perturb``); it imports fairseq only when called.

:func:`open_indexed_dataset` opens one for reading as fairseq does, but an :class:`OSError` of the
system (too many open files, permission denied) is that error naming the file, not a damaged
file; a dataset (or index) that failed half-way through its construction is released without
fairseq's ``Exception ignored in MMapIndexedDataset.__del__``; and :func:`close_indexed_dataset`
gives its two file descriptors back at once (an error path that must remove a folder).
"""

import functools
import os

from .errors import DataBinError

__all__ = ["REBUILD", "check_indexed_dataset", "close_indexed_dataset", "open_indexed_dataset"]

#: what to do about a damaged data-bin (the end of every message about one)
REBUILD = "re-run fairseq-syntax-preprocess to rebuild the data-bin"


def check_indexed_dataset(prefix: str, remedy: str = REBUILD) -> None:
    """``PREFIX.idx`` is a readable fairseq mmap index and ``PREFIX.bin`` holds exactly its items.

    ``remedy`` ends every message (what the user should do, e.g. rebuild the data-bin).
    """
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    idx, bin_path = prefix + ".idx", prefix + ".bin"
    for path in (idx, bin_path):
        if os.path.exists(path) and not os.path.isfile(path):
            raise DataBinError(path, None, f"is not a regular file (a folder, a pipe or a device); {remedy}")
        if not os.path.isfile(path):
            other = bin_path if path == idx else idx
            there = f"its {other[-4:]} is there" if os.path.isfile(other) else f"so is its {other[-4:]}"
            raise DataBinError(path, None, f"missing ({there}); {remedy}")
    with open(idx, "rb") as handle:
        magic = handle.read(len(MMapIndexedDataset.Index._HDR_MAGIC))
    if magic != MMapIndexedDataset.Index._HDR_MAGIC:
        raise DataBinError(idx, None, f"is not a fairseq mmap index (wrong header); {remedy}")
    failure = None
    try:
        index = _guarded_classes()[1](idx)
        sizes, pointers, itemsize = index.sizes, index._pointers, index.dtype().itemsize
    except Exception as error:  # truncated or damaged: numpy/struct errors without the file name
        failure = _system_error(error, idx) or DataBinError(
            idx, None, f"is damaged or truncated ({type(error).__name__}: {error}); {remedy}")
    if failure is not None:  # raised here: the half-built index is released with the caught error
        raise failure
    expected = int(pointers[-1]) + int(sizes[-1]) * itemsize if len(sizes) else 0
    actual = os.path.getsize(bin_path)
    if actual != expected:
        how = "truncated" if actual < expected else "longer than its index says"
        raise DataBinError(
            bin_path, None,
            f"{how}: it holds {actual} bytes, {os.path.basename(idx)} describes {expected} "
            f"({len(sizes)} sentences); it was damaged or belongs to another run; {remedy}",
        )
    del index




def _system_error(error: BaseException, path: str):
    """An OSError of the system (an errno: too many open files, permissions) as itself, naming ``path`` where it
    names no file; None for anything else (the file's content is at fault)."""
    if isinstance(error, OSError) and error.errno is not None and error.strerror:
        return OSError(error.errno, error.strerror, error.filename if error.filename is not None else path)
    return None


@functools.lru_cache(maxsize=None)
def _guarded_classes():
    """fairseq's MMapIndexedDataset and its Index, whose ``__del__`` tolerates an object that failed half-way
    through ``__init__`` (fairseq's raises AttributeError, printed as ``Exception ignored in ...``) or was closed."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    class GuardedIndex(MMapIndexedDataset.Index):
        def __del__(self):
            if "_bin_buffer_mmap" in vars(self):
                super().__del__()

    class Dataset(MMapIndexedDataset):
        Index = GuardedIndex

        def __del__(self):
            if "_bin_buffer_mmap" in vars(self):
                super().__del__()

    return Dataset, GuardedIndex


def open_indexed_dataset(prefix: str):
    """fairseq's mmap dataset ``PREFIX.{idx,bin}`` (not checked: :func:`check_indexed_dataset` does that).

    A system error (too many open files, permission denied) is raised as that :class:`OSError`, naming the
    file; any other error is raised as fairseq gave it. A half-built dataset is released quietly.
    """
    failure = None
    try:
        return _guarded_classes()[0](prefix)
    except OSError as error:
        failure = _system_error(error, prefix + ".bin")
        if failure is None:
            raise
    raise failure  # outside the handler: nothing keeps the half-built dataset and its open files


def close_indexed_dataset(dataset) -> None:
    """Unmap a dataset of :func:`open_indexed_dataset` now (its two file descriptors), not when it is collected.

    Nothing read from it may be used afterwards unless copied (its items are views of the mapped ``.bin``
    when its dtype is int64)."""
    index = vars(dataset).get("_index")  # fairseq's lru_cache on __getitem__ keeps both objects alive
    dataset.__del__()
    if index is not None:
        index.__del__()
