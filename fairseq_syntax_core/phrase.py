"""Binary phrase structures of one sentence: the stored form, its checks, and where it comes from.

Eriguchi et al. 2016, sec. 3.1 encodes a sentence with a binary phrase structure
whose ``n - 1`` internal nodes are states of their own; Ma et al. (2019)'s constituency distances
(eqs. 1-3, :func:`fairseq_syntax_core.phrase_trees.constituency_distances`) read the same trees.

Stored form (the ``phrase`` stream of a data-bin, :mod:`.databin`): the **merges** of a
sentence of ``n`` leaves, an integer array ``(n - 1, 2)`` of (left child, right child). Leaves
are numbered ``0 .. n-1`` (their position in the line), internal node ``k`` (the k-th merge) is
``n + k``; merges are bottom-up (both children of merge ``k`` are below ``n + k``), so the root
is the last one, ``2n - 2``. A sentence without a tree (a fallback the user allowed) stores no
merge although ``n > 1``; a one-leaf sentence stores none either, its root being leaf 0.

Where trees come from (the pipeline records which in ``syntax.json``):

* imported brackets (``preprocess/ptb.py``), binarized and unary-collapsed there;
* :func:`from_dependency`, when only a dependency parse exists: each head absorbs its
  dependents one at a time, **nearest first** (distance in words; a tie goes to the left
  dependent), each together with its own already-built phrase, so every head's projection is
  a constituent. A dependent before its head becomes the left child, one after it the right.
  The roots of a line that holds several sentences are then joined left to right
  (``((S1 S2) S3)``). A projective tree gives contiguous constituents; a non-projective one
  gives a binary tree whose constituents may be discontinuous (every model here accepts it).

Subwords (:func:`expand_to_pieces`): the pieces of a split word form their own right-branching
subtree ``(p1 (p2 p3))``, built before the word-level merges, so the word is one node.
"""

from typing import List, Optional, Sequence

import numpy as np

__all__ = ["EMPTY", "from_dependency", "expand_to_pieces", "merge_problem", "right_branching"]

#: the merges of a tree with at most one leaf, or of a sentence without a tree
EMPTY = np.zeros((0, 2), dtype=np.int64)


def _as_merges(pairs: List[List[int]]) -> np.ndarray:
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def right_branching(leaves: Sequence[int], next_id: int) -> "tuple[List[List[int]], int, int]":
    """Merges joining ``leaves`` (node ids, in order) as ``(l1 (l2 (... ln)))``.

    Returns ``(merges, the subtree's top node id, the next free node id)``; new nodes are
    numbered from ``next_id`` bottom-up.
    """
    merges: List[List[int]] = []
    top = leaves[-1]
    for leaf in reversed(leaves[:-1]):
        merges.append([leaf, top])
        top, next_id = next_id, next_id + 1
    return merges, top, next_id


def from_dependency(heads: Sequence[int]) -> np.ndarray:
    """Merges of the binary phrase structure converted from a dependency tree (see module doc).

    ``heads``: 1-based head of each word, 0 for a root (the pipeline's stored form).
    """
    heads = np.asarray(heads, dtype=np.int64)
    n = len(heads)
    if n <= 1:
        return EMPTY.copy()
    dependents: List[List[int]] = [[] for _ in range(n)]
    roots = []
    for word, head in enumerate(heads.tolist()):
        if head == 0:
            roots.append(word)
        else:
            dependents[head - 1].append(word)
    # breadth-first from the roots; reversed, every dependent comes before its head
    order = list(roots)
    for word in order:
        order.extend(dependents[word])
    if len(order) != n:
        raise ValueError("the dependency tree has a cycle: not every word reaches a root")
    phrase = list(range(n))  # the node id of each word's phrase built so far
    merges: List[List[int]] = []
    next_id = n
    for word in reversed(order):
        for dependent in sorted(dependents[word], key=lambda d: (abs(d - word), d)):
            pair = [phrase[dependent], phrase[word]] if dependent < word else [phrase[word], phrase[dependent]]
            merges.append(pair)
            phrase[word], next_id = next_id, next_id + 1
    top = phrase[roots[0]]
    for root in roots[1:]:
        merges.append([top, phrase[root]])
        top, next_id = next_id, next_id + 1
    return _as_merges(merges)


def expand_to_pieces(word_merges: Optional[np.ndarray], word_of_piece: np.ndarray) -> np.ndarray:
    """Piece-level merges from word-level ones: each split word becomes a right-branching subtree.

    ``word_of_piece[p]`` is the 0-based word of piece ``p`` (non-decreasing). ``word_merges``
    None (a sentence without a tree) gives no merge at all.
    """
    word_of_piece = np.asarray(word_of_piece, dtype=np.int64)
    n_pieces = len(word_of_piece)
    if word_merges is None or n_pieces <= 1:
        return EMPTY.copy()
    n_words = int(word_of_piece[-1]) + 1
    starts = np.flatnonzero(np.r_[True, word_of_piece[1:] != word_of_piece[:-1]])
    ends = np.r_[starts[1:], n_pieces]
    merges: List[List[int]] = []
    next_id = n_pieces
    word_node = starts.copy()  # a one-piece word is its piece
    for w in np.flatnonzero(ends - starts > 1):
        part, word_node[w], next_id = right_branching(list(range(starts[w], ends[w])), next_id)
        merges.extend(part)
    internal = next_id - n_words  # word-level node n_words + k becomes internal + k
    word_merges = np.asarray(word_merges, dtype=np.int64).reshape(-1, 2)
    mapped = np.where(word_merges < n_words, word_node[np.minimum(word_merges, n_words - 1)], word_merges + internal)
    return np.concatenate([_as_merges(merges), mapped]) if len(merges) else mapped


def merge_problem(merges: np.ndarray, n_leaves: int) -> Optional[str]:
    """Why ``merges`` is not a binary tree over ``n_leaves`` leaves in the stored form, or None.

    No merge at all is accepted for any ``n_leaves`` (one leaf, or a sentence without a tree).
    """
    merges = np.asarray(merges)
    if merges.ndim != 2 or merges.shape[1] != 2:
        return f"merges must be pairs, found shape {merges.shape}"
    m = len(merges)
    if m == 0:
        return None
    if m != n_leaves - 1:
        return f"{m} merges for {n_leaves} leaves (a binary tree has n - 1)"
    limit = n_leaves + np.arange(m)[:, None]
    bad = np.argwhere((merges < 0) | (merges >= limit))
    if len(bad):
        k = int(bad[0][0])
        return f"merge {k} joins {merges[k].tolist()}: children must be nodes below {n_leaves + k}"
    counts = np.bincount(merges.reshape(-1), minlength=2 * m + 1)
    if counts.max() > 1:
        node = int(np.argmax(counts > 1))
        return f"node {node} is the child of {int(counts[node])} merges"
    return None
