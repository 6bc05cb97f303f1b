"""Binarized syntax side-files beside fairseq's own ``data-bin`` files.

For a split ``S`` of a pair ``src-tgt`` and a parsed language ``L`` (the source now; the
target side later), with ``P = S.src-tgt.L``:

``P.head.{bin,idx}``
    int32, one per BPE piece: 1-based position of the piece's head within the line, 0 for
    a root. Integers stored as integers (no dictionary).
``P.deplabel.{bin,idx}``, ``P.pos.{bin,idx}``
    dependency-label and POS ids in ``dict.L.deplabel.txt`` / ``dict.L.pos.txt`` (fairseq
    ``Dictionary`` files, so ids 0-3 are fairseq's specials).
``P.conllu``
    the piece-level tree as CoNLL-U, for people to read; never read back by the task.

No stream holds the ``</s>`` that fairseq appends to the source: the dataset adds its
entry (see ``fairseq_syntax/data/syntax_dataset.py``), the same way at decoding time.
All are fairseq mmap indexed datasets, one item per line, in the line order of ``P.bin``.
"""

import os
from typing import Dict, Iterable, List

import numpy as np
import torch
from fairseq.data import Dictionary
from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder, best_fitting_int_dtype

from .word_tree import WordTree

HEAD = "head"
LABEL = "deplabel"
POS = "pos"
#: the streams this version stores per parsed language
STREAMS = (HEAD, LABEL, POS)


def dictionary_path(destdir: str, lang: str, stream: str) -> str:
    return os.path.join(destdir, f"dict.{lang}.{stream}.txt")


def stream_prefix(destdir: str, split: str, src: str, tgt: str, lang: str, stream: str) -> str:
    return os.path.join(destdir, f"{split}.{src}-{tgt}.{lang}.{stream}")


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


def write_streams(prefix_of: Dict[str, str], trees: Iterable[WordTree], dictionaries: Dict[str, Dictionary]) -> Dict[str, int]:
    """Write the head / label / POS streams of one split; returns unknown-symbol counts."""
    builders = {
        HEAD: MMapIndexedDatasetBuilder(prefix_of[HEAD] + ".bin", dtype=np.int32),
        LABEL: MMapIndexedDatasetBuilder(
            prefix_of[LABEL] + ".bin", dtype=best_fitting_int_dtype(len(dictionaries[LABEL]))
        ),
        POS: MMapIndexedDatasetBuilder(
            prefix_of[POS] + ".bin", dtype=best_fitting_int_dtype(len(dictionaries[POS]))
        ),
    }
    unknown = {LABEL: 0, POS: 0}
    for tree in trees:
        builders[HEAD].add_item(torch.from_numpy(np.asarray(tree.heads, dtype=np.int32)))
        for stream, symbols in ((LABEL, tree.labels), (POS, tree.pos)):
            ids = torch.tensor([dictionaries[stream].index(s) for s in symbols], dtype=torch.int64)
            unknown[stream] += int((ids == dictionaries[stream].unk()).sum())
            builders[stream].add_item(ids)
    for stream, builder in builders.items():
        builder.finalize(prefix_of[stream] + ".idx")
    return unknown
