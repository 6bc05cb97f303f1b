"""Test sentences grouped by source length and by source tree depth, for scores per group.

Both are read from the data-bin's own parse of the split (its head and label streams), so they
count what the models saw: a sentence's length is its number of words (pieces that do not
continue a word, i.e. whose label is not ``<subword>``), its depth the largest number of arcs
from a root to a word (a single-word sentence has depth 0; pieces inside a word are not counted).
With a source file instead of a data-bin, the length is its whitespace-separated tokens and
there is no depth.

Bucket edges are given as ``[e1, e2, ...]``: buckets ``< e1``, ``e1 .. e2 - 1``, ..., ``>= ek``
(Xie et al. 2021, Figure 2 uses 20, 30, 40, 50 on WMT). ``auto`` picks the quintiles of the split, so
each bucket holds about a fifth of the sentences whatever the corpus.
"""

import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

import numpy as np
import torch

from fairseq_syntax_core import trees
from fairseq_syntax_core.databin import HEAD, LABEL, recorded_perturbation  # noqa: F401 (evaluate reads it here)

__all__ = ["SourceProfile", "profile_from_data_bin", "profile_from_text", "parse_edges", "bucket_of", "bucket_names"]

from fairseq_syntax_core.vocabulary import SUBWORD_LABEL  # noqa: E402


@dataclass
class SourceProfile:
    """Per test sentence: source length in words, and tree depth (None without a parse)."""

    lengths: np.ndarray
    depths: Optional[np.ndarray]
    origin: str
    #: each sentence as fairseq-generate prints its source (``S-`` lines): the data-bin's words, BPE joints undone
    texts: Optional[List[str]] = None
    #: the share of perturbed parses the data-bin records (fairseq-syntax-perturb's ``p``; 0: as parsed; the p of
    #: each round for a copy perturbed again; None without a data-bin)
    perturbation: Optional[Union[float, List[float]]] = None


def sentence_depth(heads: Sequence[int], is_word: Sequence[bool]) -> int:
    """Largest root-to-word arc count of one sentence (1-based heads, 0 = root; words only)."""
    heads_t = torch.as_tensor(np.asarray(heads, dtype=np.int64)).unsqueeze(0)
    if heads_t.numel() == 0:
        return 0
    depth = trees.tree_depth(trees.parents_from_heads(heads_t))[0].numpy()
    words = np.asarray(is_word, dtype=bool)
    return int(depth[words].max()) if words.any() else 0


def profile_from_data_bin(data_bin: str, split: str, source_lang: Optional[str], target_lang: Optional[str]) -> SourceProfile:
    """Lengths and depths of a split, from the data-bin's parse (checked as ``fairseq-train`` checks it)."""
    from fairseq_syntax.tasks.syntax_translation import SyntaxTranslationConfig, SyntaxTranslationTask

    cfg = SyntaxTranslationConfig(_name="syntax_translation", data=data_bin, source_lang=source_lang,
                                  target_lang=target_lang, dataset_impl="mmap", required_seq_len_multiple=1)
    task = SyntaxTranslationTask.setup_task(cfg)
    check_split(task, split, "--split")
    task.load_dataset(split)
    dataset = task.datasets[split]
    heads, labels = dataset.streams[HEAD.name], dataset.streams[LABEL.name]
    subword = task.label_dict.indices.get(SUBWORD_LABEL, -1)
    lengths, depths, texts = [], [], []
    for i in range(len(dataset)):
        lab = labels[i].numpy()
        is_word = lab != subword
        lengths.append(int(is_word.sum()))
        depths.append(sentence_depth(heads[i].numpy(), is_word))
        texts.append(task.src_dict.string(dataset.src[i], "subword_nmt"))
    p = recorded_perturbation(task.metadata, os.path.join(data_bin, "syntax.json"), split)
    return SourceProfile(np.asarray(lengths), np.asarray(depths), f"{data_bin} ({split}, {cfg.source_lang})", texts, p)


def check_split(task, split: str, flag: str) -> None:
    """A split the data-bin holds, or a one-line error listing those it does."""
    from fairseq_syntax_core.errors import UsageError

    splits = sorted((task.metadata.get("splits") or {}).keys())
    if split not in splits:
        raise UsageError(f"{flag} {split}: the data-bin {task.cfg.data} holds the splits {splits}")


def profile_from_text(lines: Sequence[str], path: str) -> SourceProfile:
    """Lengths (whitespace tokens) of a source file; no depths."""
    return SourceProfile(np.asarray([len(line.split()) for line in lines]), None, path)


def parse_edges(spec: str, values: np.ndarray) -> List[int]:
    """Bucket edges from ``"20,30,40,50"`` or ``"auto"`` (the quintiles of ``values``)."""
    if spec == "auto":
        if len(values) == 0:
            return []
        edges = sorted({int(np.ceil(q)) for q in np.quantile(values, [0.2, 0.4, 0.6, 0.8])})
        return [e for e in edges if e > int(np.min(values))]
    try:
        edges = [int(x) for x in spec.split(",")]
    except ValueError:
        raise ValueError(f"bucket edges {spec!r}: expected 'auto' or increasing integers such as 20,30,40,50") from None
    if not edges or any(b <= a for a, b in zip(edges, edges[1:])) or any(e < 1 for e in edges):
        raise ValueError(f"bucket edges {spec!r}: expected increasing positive integers such as 20,30,40,50")
    return edges


def bucket_of(values: np.ndarray, edges: Sequence[int]) -> np.ndarray:
    """Bucket index of every value (0: ``< edges[0]``, ..., ``len(edges)``: ``>= edges[-1]``)."""
    return np.searchsorted(np.asarray(edges), values, side="right")


def bucket_names(edges: Sequence[int]) -> List[str]:
    """``["<20", "20-29", ..., ">=50"]``; one bucket ``"all"`` without edges."""
    if not edges:
        return ["all"]
    names = [f"<{edges[0]}"]
    names += [f"{a}-{b - 1}" if b - 1 > a else f"{a}" for a, b in zip(edges, edges[1:])]
    names.append(f">={edges[-1]}")
    return names
