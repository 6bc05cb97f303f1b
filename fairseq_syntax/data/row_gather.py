"""Many rows of an indexed side-file at once: the rows of a whole batch in one vectorized read.

fairseq reads a dataset item by item (``dataset[i]``: a ``numpy.frombuffer``, a copy and a
``torch.from_numpy`` per row); three token streams per sentence made that Python overhead
cost more than fairseq's own source and target collation (``benchmarks/collate_speed.py``).
:func:`gather_rows` reads the rows of a batch from an ``MMapIndexedDataset`` with one fancy
index over its memory-mapped buffer, from a ``ConcatDataset`` of them (sharded data-bins, with
fairseq's sample ratios) by splitting the ids per shard, and from any other dataset row by row.
"""

from typing import Tuple

import numpy as np
from fairseq.data import ConcatDataset
from fairseq.data.indexed_dataset import MMapIndexedDataset

__all__ = ["gather_rows"]


def _has_mmap_internals(dataset: MMapIndexedDataset) -> bool:
    """The private fields :func:`_mmap_rows` reads (fairseq 0.10-0.12 and main); another layout reads row by row."""
    index = getattr(dataset, "_index", None)
    return getattr(dataset, "_bin_buffer", None) is not None and all(
        hasattr(index, name) for name in ("_pointers", "sizes", "dtype"))


def _mmap_rows(dataset: MMapIndexedDataset, ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    index = dataset._index
    sizes = index.sizes[ids].astype(np.int64)
    itemsize = np.dtype(index.dtype).itemsize
    first = index._pointers[ids] // itemsize  # element offset of each row in the .bin
    values = np.frombuffer(dataset._bin_buffer, dtype=index.dtype)
    starts = np.cumsum(sizes) - sizes  # each row's start in the flat output
    flat = np.repeat(first - starts, sizes) + np.arange(int(sizes.sum()), dtype=np.int64)
    return values[flat].astype(np.int64), sizes


def _concat_rows(dataset: ConcatDataset, ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    cumulative = np.asarray(dataset.cumulative_sizes, dtype=np.int64)
    shard = np.searchsorted(cumulative, ids, side="right")
    local = ids - np.concatenate([[0], cumulative])[shard]
    local = local % np.asarray(dataset.real_sizes, dtype=np.int64)[shard]  # sample ratios > 1 repeat a shard
    order = np.argsort(shard, kind="stable")  # the rows grouped by shard
    values, sizes = zip(*(gather_rows(dataset.datasets[int(k)], local[order[shard[order] == k]])
                          for k in np.unique(shard)))
    grouped_values, grouped_sizes = np.concatenate(values), np.concatenate(sizes)
    row_sizes = np.empty_like(grouped_sizes)
    row_sizes[order] = grouped_sizes
    grouped_starts = np.empty_like(grouped_sizes)
    grouped_starts[order] = np.cumsum(grouped_sizes) - grouped_sizes
    starts = np.cumsum(row_sizes) - row_sizes
    flat = np.repeat(grouped_starts - starts, row_sizes) + np.arange(int(row_sizes.sum()), dtype=np.int64)
    return grouped_values[flat], row_sizes


def gather_rows(dataset, ids) -> Tuple[np.ndarray, np.ndarray]:
    """Rows ``ids`` of an indexed dataset, concatenated: ``(values int64 (sum of sizes,), sizes (len(ids),))``.

    ``values`` holds row ``ids[0]``, then row ``ids[1]``, ...; equal to
    ``torch.cat([dataset[i] for i in ids])`` with the rows' lengths, for every dataset.
    """
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if len(ids) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if isinstance(dataset, MMapIndexedDataset) and _has_mmap_internals(dataset):
        return _mmap_rows(dataset, ids)
    if isinstance(dataset, ConcatDataset) and len(ids) > 1:
        return _concat_rows(dataset, ids)
    rows = [np.asarray(dataset[int(i)], dtype=np.int64).reshape(-1) for i in ids]
    return np.concatenate(rows), np.array([len(r) for r in rows], dtype=np.int64)
