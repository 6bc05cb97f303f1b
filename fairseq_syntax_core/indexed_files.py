"""One check of a fairseq mmap indexed dataset's two files, before fairseq opens them.

fairseq reads a truncated ``.idx`` with ``ValueError: buffer is smaller than requested size``
(and its dataset's ``__del__`` then prints an ignored ``AttributeError``), and a truncated
``.bin`` only when a batch reaches the missing bytes. This costs a header read and a ``stat``,
and names the damaged file. Used by the task's load-time checks and by the pipeline's tools
(``fairseq-syntax-perturb``); it imports fairseq only when called.
"""

import os

from .errors import DataBinError

__all__ = ["REBUILD", "check_indexed_dataset"]

#: what to do about a damaged data-bin (the end of every message about one)
REBUILD = "re-run fairseq-syntax-preprocess to rebuild the data-bin"


def check_indexed_dataset(prefix: str, remedy: str = REBUILD) -> None:
    """``PREFIX.idx`` is a readable fairseq mmap index and ``PREFIX.bin`` holds exactly its items.

    ``remedy`` ends every message (what the user should do, e.g. rebuild the data-bin).
    """
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    idx, bin_path = prefix + ".idx", prefix + ".bin"
    for path in (idx, bin_path):
        if not os.path.isfile(path):
            raise DataBinError(path, None, f"missing (its {'.bin' if path == idx else '.idx'} is there); {remedy}")
    with open(idx, "rb") as handle:
        magic = handle.read(len(MMapIndexedDataset.Index._HDR_MAGIC))
    if magic != MMapIndexedDataset.Index._HDR_MAGIC:
        raise DataBinError(idx, None, f"is not a fairseq mmap index (wrong header); {remedy}")
    try:
        index = MMapIndexedDataset.Index(idx)
        sizes, pointers, itemsize = index.sizes, index._pointers, index.dtype().itemsize
    except Exception as error:  # truncated or damaged: numpy/struct errors without the file name
        raise DataBinError(idx, None, f"is damaged or truncated ({type(error).__name__}: {error}); {remedy}") from None
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


