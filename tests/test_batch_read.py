"""A batch's side-file rows read at once (``row_gather``, ``collate_stored_trees``) equal the per-sentence reads."""

import numpy as np
import pytest
import torch
from fairseq.data import ConcatDataset
from fairseq.data.indexed_dataset import MMapIndexedDataset, MMapIndexedDatasetBuilder

import fairseq_syntax  # noqa: F401  (registers the task)
from fairseq_syntax.data.row_gather import gather_rows
from fairseq_syntax.data.syntax_features import append_eos, collate_stored_trees, collate_trees


def _write(path, rows, dtype=np.uint16):
    builder = MMapIndexedDatasetBuilder(str(path) + ".bin", dtype=dtype)
    for row in rows:
        builder.add_item(torch.tensor(row, dtype=torch.long))
    builder.finalize(str(path) + ".idx")
    return MMapIndexedDataset(str(path))


def _rows(rng, count, longest=9):
    # empty rows included: a source line of no pieces has no stored entry
    return [rng.integers(0, 500, size=int(rng.integers(0, longest + 1))).tolist() for _ in range(count)]


def _per_item(dataset, ids):
    return [dataset[int(i)].tolist() for i in ids]


def _split(values, sizes):
    return [row.tolist() for row in np.split(values, np.cumsum(sizes)[:-1])] if len(sizes) else []


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64])
def test_mmap_rows_equal_item_by_item_reads(tmp_path, dtype):
    rng = np.random.default_rng(3)
    dataset = _write(tmp_path / "s", _rows(rng, 40), dtype)
    ids = rng.permutation(40)[:25].tolist() + [7, 7]  # any order, repeats
    values, sizes = gather_rows(dataset, ids)
    assert values.dtype == np.int64 and sizes.tolist() == [len(r) for r in _per_item(dataset, ids)]
    assert _split(values, sizes) == _per_item(dataset, ids)


def test_sharded_rows_with_sample_ratios_equal_concat_dataset_reads(tmp_path):
    """A sharded data-bin's ``ConcatDataset``, with an upsampled shard, reads as fairseq's ``__getitem__`` does."""
    rng = np.random.default_rng(4)
    shards = [_write(tmp_path / f"s{k}", _rows(rng, n)) for k, n in enumerate((7, 12, 5))]
    concat = ConcatDataset(shards, sample_ratios=[1, 2, 1])
    ids = rng.permutation(len(concat)).tolist()
    values, sizes = gather_rows(concat, ids)
    assert _split(values, sizes) == _per_item(concat, ids)


def test_any_other_dataset_is_read_row_by_row():
    rows = [torch.tensor([3, 4]), torch.tensor([], dtype=torch.long), torch.tensor([9])]
    values, sizes = gather_rows(rows, [2, 0, 1])
    assert values.tolist() == [9, 3, 4] and sizes.tolist() == [1, 2, 0]
    values, sizes = gather_rows(rows, [])
    assert values.size == 0 and sizes.size == 0


def _tree(rng, n):
    # a line of one or more sentences (roots 0), some lines without a root and an empty one
    heads = np.zeros(n, dtype=np.int64)
    for i in range(n):
        if rng.random() < 0.8 and i > 0:
            heads[i] = int(rng.integers(1, n + 1))
    return heads


@pytest.mark.parametrize("left_pad", [True, False])
def test_batch_collation_equals_append_eos_then_collate_trees(left_pad):
    """``</s>`` on the last root, padding on the source's side, extra width: the per-sentence reference's values."""
    rng = np.random.default_rng(5)
    sizes = [0, 1, 6, 3, 11, 4]
    heads = [_tree(rng, n) for n in sizes]
    heads[3][:] = [2, 3, 1]  # no root at all: </s> takes head 0, as append_eos gives it
    labels = [rng.integers(4, 40, size=n) for n in sizes]
    pos = [rng.integers(4, 20, size=n) for n in sizes]
    sentences = [append_eos(torch.tensor(h), torch.tensor(l), torch.tensor(p), 2, 3) for h, l, p in zip(heads, labels, pos)]
    expected = collate_trees(sentences, 1, 0, left_pad=left_pad, length=15)
    got = collate_stored_trees(
        torch.tensor(np.concatenate(heads)), torch.tensor(np.concatenate(labels)), torch.tensor(np.concatenate(pos)),
        torch.tensor(sizes), 2, 3, 1, 0, left_pad=left_pad, length=15,
    )
    for name, a, b in zip(("heads", "labels", "pos", "real"), got, expected):
        assert a.tolist() == b.tolist(), name


def test_batch_wider_than_requested_length_takes_the_longest_sentence():
    got = collate_stored_trees(torch.tensor([0, 1, 1]), torch.tensor([5, 6, 7]), torch.tensor([5, 5, 5]),
                               torch.tensor([3]), 2, 2, 1, 1, left_pad=True, length=2)
    assert got[0].tolist() == [[0, 1, 1, 1]] and got[3].all()


def test_an_mmap_dataset_of_another_layout_is_read_row_by_row(tmp_path, monkeypatch):
    """``row_gather`` reads fairseq's private mmap fields; where a fairseq version lacks them it reads as fairseq does."""
    rng = np.random.default_rng(6)
    dataset = _write(tmp_path / "s", _rows(rng, 10))
    expected = _per_item(dataset, [4, 1, 9])
    monkeypatch.delattr(type(dataset._index), "sizes")
    monkeypatch.setattr(type(dataset), "__getitem__", lambda self, i: torch.tensor(expected[[4, 1, 9].index(i)]))
    values, sizes = gather_rows(dataset, [4, 1, 9])
    assert _split(values, sizes) == expected
