"""A fairseq ``LanguagePairDataset`` plus the source-side syntax streams of the same split."""

import logging
from typing import Dict, List, Optional, Set

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, Dictionary, LanguagePairDataset

from fairseq_syntax_core.errors import UserError

from .syntax_features import append_eos, collate_features, pad_values_for, sentence_features

logger = logging.getLogger(__name__)


class SideFileError(UserError, ValueError):
    """Side-files that do not match their source text."""


def check_symbol_ids(split: str, name: str, stream, dictionary_size: int) -> None:
    """Every id of a symbol stream indexes its dictionary (else an embedding lookup fails)."""
    flat = _flat(stream)
    bad = np.flatnonzero((flat < 0) | (flat >= dictionary_size))
    if len(bad):
        sizes = np.asarray(stream.sizes, dtype=np.int64)
        sentence = int(np.searchsorted(np.cumsum(sizes), bad[0], side="right"))
        raise SideFileError(
            f"split {split!r}, sentence {sentence}: the {name} side-file holds id {flat[bad[0]]}, outside its "
            f"dictionary of {dictionary_size} symbols"
        )


def check_streams(split: str, src_sizes: np.ndarray, heads, labels, pos) -> None:
    """Vectorized load-time checks: lengths, head ranges and cycles, over the whole split.

    Each source line holds ``n`` pieces plus ``</s>``, so every stream must hold ``n`` items.
    The error names the split and the (0-based) sentence index.
    """
    n = len(src_sizes)
    for name, stream in (("head", heads), ("deplabel", labels), ("pos", pos)):
        if len(stream) != n:
            raise SideFileError(
                f"split {split!r}: the {name} side-file has {len(stream)} sentences, the source {n}"
            )
        bad = np.flatnonzero(np.asarray(stream.sizes) + 1 != src_sizes)
        if len(bad):
            i = int(bad[0])
            raise SideFileError(
                f"split {split!r}, sentence {i}: the {name} side-file has {stream.sizes[i]} entries "
                f"for a source of {src_sizes[i] - 1} tokens (+ </s>); {len(bad)} sentences differ"
            )
    flat = _flat(heads)
    sizes = np.asarray(heads.sizes, dtype=np.int64)
    sentence = np.repeat(np.arange(n), sizes)
    length = sizes[sentence]
    out_of_range = np.flatnonzero((flat < 0) | (flat > length))
    if len(out_of_range):
        k = int(out_of_range[0])
        raise SideFileError(
            f"split {split!r}, sentence {sentence[k]}: head {flat[k]} is outside 0..{length[k]}"
        )
    # one pointer-jumping pass over the whole split: every token must reach a root
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])[sentence]
    index = np.arange(len(flat))
    parent = np.where(flat == 0, index, starts + flat - 1)
    for _ in range(int(np.ceil(np.log2(max(int(sizes.max(initial=1)), 2)))) + 1):
        parent = parent[parent]
    stuck = np.flatnonzero(flat[parent] != 0)
    if len(stuck):
        k = int(stuck[0])
        raise SideFileError(
            f"split {split!r}, sentence {sentence[k]}: token {k - starts[k] + 1} does not reach a "
            "root (a cycle in the stored heads)"
        )


def _flat(dataset) -> np.ndarray:
    buffer = getattr(dataset, "_bin_buffer", None)
    index = getattr(dataset, "_index", None)
    if buffer is not None and index is not None:
        return np.frombuffer(buffer, dtype=index.dtype).astype(np.int64)
    return np.concatenate([dataset[i].numpy() for i in range(len(dataset))]).astype(np.int64)


class SyntaxLanguagePairDataset(BaseWrapperDataset):
    """Adds ``net_input["src_syntax"]``: the features in ``requested``, padded like the source.

    ``requested`` is shared with the task, which fills it from the models it builds, so a
    model receives only the side inputs it consumes (nothing for fairseq's ``transformer``).
    """

    def __init__(
        self,
        dataset: LanguagePairDataset,
        heads,
        labels,
        pos,
        label_dict: Dictionary,
        pos_dict: Dictionary,
        requested: Set[str],
    ) -> None:
        super().__init__(dataset)
        self.heads, self.labels, self.pos = heads, labels, pos
        self.label_dict, self.pos_dict = label_dict, pos_dict
        self.requested = requested

    def __getattr__(self, name):
        # LanguagePairDataset attributes (src, tgt, left_pad_source, buckets, ...)
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __getitem__(self, index: int) -> Dict:
        item = self.dataset[index]
        if self.requested:
            heads, labels, pos = append_eos(
                self.heads[index], self.labels[index], self.pos[index],
                self.label_dict.eos(), self.pos_dict.eos(),
            )
            item["src_syntax"] = sentence_features(heads, labels, pos, self.requested)
        return item

    def collater(self, samples: List[Dict], pad_to_length: Optional[Dict[str, int]] = None) -> Dict:
        batch = self.dataset.collater(samples, pad_to_length=pad_to_length)
        if not samples or "src_syntax" not in samples[0] or not batch:
            return batch
        by_id = {s["id"]: s["src_syntax"] for s in samples}
        ordered = [by_id[int(i)] for i in batch["id"]]
        batch["net_input"]["src_syntax"] = collate_features(
            ordered,
            pad_values_for(self.label_dict.pad(), self.pos_dict.pad()),
            left_pad=self.dataset.left_pad_source,
            length=batch["net_input"]["src_tokens"].size(1),
        )
        return batch

    def num_tokens_vec(self, indices):
        return self.dataset.num_tokens_vec(indices)
