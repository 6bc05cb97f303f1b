"""Binarized syntax side-files beside fairseq's own ``data-bin`` files.

What is written, and under which names, is :mod:`fairseq_syntax_core.databin`'s registry;
this module writes every registered stream of a split, by looping over it:

``S.SRC-TGT.L.head.{bin,idx}``
    int32, one per BPE piece: 1-based position of the piece's head within the line, 0 for
    a root. Integers stored as integers (no dictionary).
``S.SRC-TGT.L.deplabel.{bin,idx}``, ``S.SRC-TGT.L.pos.{bin,idx}``
    dependency-label and POS ids in ``dict.L.deplabel.txt`` / ``dict.L.pos.txt`` (fairseq
    ``Dictionary`` files, so ids 0-3 are fairseq's specials).
``S.SRC-TGT.L.phrase.{bin,idx}``
    int32, the binary phrase structure as merges, ``(left, right)`` pairs flattened, ``n - 1``
    pairs for ``n`` pieces (none for a line without a tree; see
    :mod:`fairseq_syntax_core.phrase`).
``S.SRC-TGT.L.conllu``
    the piece-level tree as CoNLL-U, for people to read; never read back by the task.

No stream holds the ``</s>`` that fairseq appends to the source: the dataset adds its
entry (see ``fairseq_syntax/data/syntax_dataset.py``), the same way at decoding time.
"""

from typing import Dict, Iterable, List, Sequence

import numpy as np
import torch
from fairseq.data import Dictionary
from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder, best_fitting_int_dtype

from fairseq_syntax_core.databin import STREAMS, Stream

from .word_tree import WordTree


def build_tag_dictionary(values: Iterable[List[str]], reserved: Iterable[str] = ()) -> Dictionary:
    """A fairseq Dictionary of labels or POS tags, most frequent first (ties alphabetical)."""
    dictionary = Dictionary()
    for symbol in reserved:
        dictionary.add_symbol(symbol, n=0)
    for tags in values:
        for tag in tags:
            dictionary.add_symbol(tag)
    dictionary.finalize(threshold=0, nwords=-1, padding_factor=1)
    return dictionary


def _builder(prefix: str, stream: Stream, dictionaries: Dict[str, Dictionary]) -> MMapIndexedDatasetBuilder:
    dtype = stream.dtype or best_fitting_int_dtype(len(dictionaries[stream.name]))
    return MMapIndexedDatasetBuilder(prefix + ".bin", dtype=dtype)


class StreamWriter:
    """The open builders of the streams ``names`` of one split: add piece trees one at a time, then finalize."""

    def __init__(self, prefix_of: Dict[str, str], dictionaries: Dict[str, Dictionary], names: Sequence[str]) -> None:
        self.prefix_of, self.dictionaries = prefix_of, dictionaries
        self.streams = [STREAMS[name] for name in names]
        self.builders = {s.name: _builder(prefix_of[s.name], s, dictionaries) for s in self.streams}
        #: each symbol stream's count of symbols missing from its dictionary
        self.unknown = {s.name: 0 for s in self.streams if s.dictionary is not None}

    def add(self, tree: WordTree) -> None:
        for stream in self.streams:
            values = getattr(tree, stream.field)
            if stream.dictionary is None:
                self.builders[stream.name].add_item(
                    torch.from_numpy(np.asarray(values, dtype=stream.dtype).reshape(-1)))
                continue
            dictionary = self.dictionaries[stream.name]
            ids = torch.tensor([dictionary.index(v) for v in values], dtype=torch.int64)
            self.unknown[stream.name] += int((ids == dictionary.unk()).sum())
            self.builders[stream.name].add_item(ids)

    def finalize(self) -> Dict[str, int]:
        """Write every ``.idx``; returns the unknown-symbol counts."""
        for stream in self.streams:
            self.builders[stream.name].finalize(self.prefix_of[stream.name] + ".idx")
        return self.unknown


def write_streams(
    prefix_of: Dict[str, str], trees: Iterable[WordTree], dictionaries: Dict[str, Dictionary],
    names: Sequence[str],
) -> Dict[str, int]:
    """Write the streams ``names`` of one split; returns each symbol stream's unknown-symbol count."""
    writer = StreamWriter(prefix_of, dictionaries, names)
    for tree in trees:
        writer.add(tree)
    return writer.finalize()
