"""Whole-split validators of the side-file streams, vectorized with numpy (no torch, no fairseq).

A validator takes a stream's values flattened over the split and the per-sentence sizes, and
returns ``None`` or ``(sentence, message)`` for the first bad sentence (0-based). The registry
(:mod:`fairseq_syntax_core.databin`) names each stream's validator; the task runs them on load.
"""

from typing import Optional, Tuple

import numpy as np

Problem = Optional[Tuple[int, str]]

__all__ = ["Problem", "check_heads", "check_ids_below", "check_merges", "check_non_negative"]


def check_heads(flat: np.ndarray, sizes: np.ndarray) -> Problem:
    """Heads are 1-based positions within their line or 0 (a root), and every token reaches a root."""
    n = len(sizes)
    sizes = np.asarray(sizes, dtype=np.int64)
    sentence = np.repeat(np.arange(n), sizes)
    length = sizes[sentence]
    out_of_range = np.flatnonzero((flat < 0) | (flat > length))
    if len(out_of_range):
        k = int(out_of_range[0])
        return int(sentence[k]), f"head {flat[k]} is outside 0..{length[k]}"
    # pointer jumping over the whole split: a token that does not reach a root is on a cycle
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])[sentence]
    index = np.arange(len(flat))
    parent = np.where(flat == 0, index, starts + flat - 1)
    for _ in range(int(np.ceil(np.log2(max(int(sizes.max(initial=1)), 2)))) + 1):
        parent = parent[parent]
    stuck = np.flatnonzero(flat[parent] != 0)
    if len(stuck):
        k = int(stuck[0])
        return int(sentence[k]), f"token {k - starts[k] + 1} does not reach a root (a cycle in the stored heads)"
    return None


def check_ids_below(flat: np.ndarray, sizes: np.ndarray, limit: int) -> Problem:
    """Every id of a symbol stream indexes its dictionary of ``limit`` symbols."""
    bad = np.flatnonzero((flat < 0) | (flat >= limit))
    if len(bad):
        sentence = int(np.searchsorted(np.cumsum(np.asarray(sizes, dtype=np.int64)), bad[0], side="right"))
        return sentence, f"id {flat[bad[0]]} is outside its dictionary of {limit} symbols"
    return None


def check_non_negative(flat: np.ndarray, sizes: np.ndarray) -> Problem:
    """Values are >= 0 (node indices, counts)."""
    bad = np.flatnonzero(flat < 0)
    if len(bad):
        sentence = int(np.searchsorted(np.cumsum(np.asarray(sizes, dtype=np.int64)), bad[0], side="right"))
        return sentence, f"value {flat[bad[0]]} is negative"
    return None


def check_merges(flat: np.ndarray, sizes: np.ndarray) -> Problem:
    """Each sentence's merges form one binary tree (:func:`fairseq_syntax_core.phrase.merge_problem`).

    ``flat`` holds (left, right) pairs, so a sentence of ``m`` merges has size ``2m``; its
    leaves are ``0..m`` and merge ``k`` is node ``m + 1 + k``. Both children of merge ``k`` are
    below ``m + 1 + k``, and every node but the root ``2m`` is a child exactly once.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    odd = np.flatnonzero(sizes % 2)
    if len(odd):
        return int(odd[0]), f"{sizes[odd[0]]} values: merges are pairs"
    merges = sizes // 2
    sentence = np.repeat(np.arange(len(sizes)), sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    position = np.arange(len(flat)) - starts[sentence]
    limit = merges[sentence] + 1 + position // 2  # the merge's own node id
    in_range = (flat >= 0) & (flat < limit)
    problems = []
    bad = np.flatnonzero(~in_range)
    if len(bad):
        k = int(bad[0])
        problems.append((int(sentence[k]), f"merge {position[k] // 2} has child {flat[k]}: children must be nodes "
                                           f"below {limit[k]} (leaves 0..{merges[sentence[k]]}, then earlier merges)"))
    # every node id 0..2m-1 of a sentence is a child exactly once
    keys = (starts[sentence] + flat)[in_range]
    counts = np.bincount(keys, minlength=len(flat))
    twice = np.flatnonzero(counts > 1)
    if len(twice):
        s = int(np.searchsorted(starts, twice[0], side="right") - 1)
        problems.append((s, f"node {twice[0] - starts[s]} is the child of {counts[twice[0]]} merges"))
    return min(problems) if problems else None
