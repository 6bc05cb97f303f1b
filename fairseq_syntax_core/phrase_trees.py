"""Binary phrase structures as batched trees: Eriguchi et al. (2016)'s tree-LSTM order and Ma et al. (2019)'s constituency
distances (eqs. 1-3).

A line's phrase structure is stored as its merges, ``phrase (B, N, 2)``: merge ``k`` joins two
columns (leaves ``0..L-1``, earlier merges ``L..L+k-1``), ``phrase_mask`` marks real merges and
``n_leaves`` counts each row's leaves (``fairseq_syntax_core/phrase.py`` reads and checks them).
The functions here are vectorised as :mod:`.trees` is (no loop over tokens or rows; loops over
``O(log N)`` pointer-jumping rounds or tree levels).
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from .trees import ancestor_matrix, tree_depth

__all__ = ["phrase_parents", "constituency_distances", "phrase_heights", "merge_level_sizes"]


def phrase_parents(phrase: Tensor, phrase_mask: Tensor, n_leaves: Tensor) -> Tensor:
    """Batched merges -> ``parents (B, L + N)`` over leaf and merge columns.

    ``phrase (B, N, 2)`` holds each row's merges in the stored form of
    :mod:`fairseq_syntax_core.phrase` (leaves ``0..n-1``, merge ``k`` is node ``n + k``),
    ``phrase_mask (B, N)`` marks real merges and ``n_leaves (B,)`` gives ``n``. Column ``i < L``
    (``L = max n``) is leaf ``i``, column ``L + k`` merge ``k``; every node points to its parent,
    the root, unused columns and the leaves of a row without a tree point to themselves. The
    result feeds :func:`tree_depth` and :func:`ancestor_matrix` like a dependency forest.
    """
    B, N = phrase_mask.shape
    L = int(n_leaves.max()) if B > 0 else 0
    C = L + N
    parents = torch.arange(C, device=phrase.device).expand(B, C).clone()
    if N == 0 or B == 0:
        return parents
    n = n_leaves.view(B, 1, 1).to(phrase.device)
    child_col = torch.where(phrase < n, phrase, phrase - n + L)  # (B, N, 2)
    merge_col = (L + torch.arange(N, device=phrase.device)).view(1, N, 1).expand(B, N, 2)
    valid = phrase_mask.unsqueeze(-1).expand(B, N, 2)
    rows = torch.arange(B, device=phrase.device).view(B, 1, 1).expand(B, N, 2)
    parents[rows[valid], child_col[valid]] = merge_col[valid]
    return parents


def constituency_distances(phrase: Tensor, phrase_mask: Tensor, n_leaves: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """Ma et al. (2019)'s syntactic distances of a binary phrase structure, one per word: ``(d_S, d_G, d_R)``.

    For words ``w_1..w_n`` (Ma et al. 2019, sec. 2, eqs. 1-3) and ``i < n``:

    * ``d_S(w_i)``: the height of the lowest common ancestor of ``w_i`` and ``w_{i+1}`` (Shen et
      al. 2018: a leaf has height 0, a node ``1 +`` its higher child's); ``d_S(w_n) = H``, the
      tree's height;
    * ``d_G(w_i)``: the number of common ancestors of ``w_i`` and ``w_{i+1}`` (Gomez-Rodriguez
      and Vilares 2018), the LCA included; ``d_G(w_n) = 0``;
    * ``d_R(w_1) = d_G(w_1)``, ``d_R(w_i) = d_G(w_i) - d_G(w_{i-1})`` for ``i >= 2``.

    Reading: the definitions are followed as stated, not eq. 2 (``d_S + d_G = H``). Counting
    the LCA among the common ancestors (as Gomez-Rodriguez and Vilares do), ``d_S + d_G`` is
    ``H + 1`` for ``i < n`` when every leaf is at depth ``H`` (``((a b) (c d))``: ``1 + 2``) and
    varies on other trees (``((a b) (c (d e)))``: ``1 + 2`` at ``a``, ``2 + 2`` at ``c``); eq. 2
    holds exactly only at ``w_n``. Inputs as :func:`phrase_parents`; outputs
    ``LongTensor (B, L)``, word ``i`` at column ``i``, zero beyond ``n``. A row without a tree
    has no common ancestors: all zeros.
    """
    B, N = phrase_mask.shape
    L = int(n_leaves.max()) if B > 0 else 0
    n_leaves = n_leaves.to(phrase.device).long()
    parents = phrase_parents(phrase, phrase_mask, n_leaves)
    depth = tree_depth(parents)  # (B, C)
    anc = ancestor_matrix(parents, depth)  # (B, C, C): [i, j] j is i or an ancestor of i
    columns = torch.arange(L, device=phrase.device)
    is_leaf = columns.unsqueeze(0) < n_leaves.unsqueeze(1)  # (B, L)
    # height of every node: the deepest leaf below it, measured from it
    below = anc[:, :L, :] & is_leaf.unsqueeze(-1)  # (B, L, C)
    span = depth[:, :L].unsqueeze(-1) - depth.unsqueeze(1)  # (B, L, C)
    height = torch.where(below, span, torch.full_like(span, -1)).amax(dim=1).clamp(min=0) if L else depth
    tree_height = torch.where(is_leaf, depth[:, :L], torch.zeros_like(depth[:, :L])).amax(dim=1) if L else \
        torch.zeros(B, dtype=torch.long, device=phrase.device)
    d_S = torch.zeros(B, L, dtype=torch.long, device=phrase.device)
    d_G = torch.zeros_like(d_S)
    if L > 1:
        common = anc[:, : L - 1, :] & anc[:, 1:L, :]  # (B, L-1, C): common ancestors of w_i, w_i+1
        pair_is_real = (columns[: L - 1].unsqueeze(0) + 1) < n_leaves.unsqueeze(1)
        common = common & pair_is_real.unsqueeze(-1)
        d_G[:, : L - 1] = common.sum(-1)
        lca_depth = torch.where(common, depth.unsqueeze(1), torch.full_like(common, -1, dtype=torch.long))
        lca = lca_depth.argmax(dim=-1)  # the deepest common ancestor
        d_S[:, : L - 1] = torch.where(common.any(-1), height.gather(1, lca), torch.zeros_like(lca))
    last = (n_leaves - 1).clamp(min=0).unsqueeze(1)
    has_words = (n_leaves > 0).unsqueeze(1)
    if L > 0:
        d_S.scatter_(1, last, torch.where(has_words, tree_height.unsqueeze(1), torch.zeros_like(last)))
        d_G.scatter_(1, last, torch.zeros_like(last))
    d_R = d_G.clone()
    if L > 1:
        d_R[:, 1:] = d_G[:, 1:] - d_G[:, :-1]
    d_R = torch.where(is_leaf, d_R, torch.zeros_like(d_R)) if L else d_R
    return d_S, d_G, d_R


def phrase_heights(phrase: Tensor, phrase_mask: Tensor, n_leaves: Tensor) -> Tensor:
    """Height of every merge, ``LongTensor (B, N)``: a leaf is 0, a merge ``1 +`` its higher child.

    The bottom-up schedule of a batched Tree-LSTM (Eriguchi et al. 2016, sec. 3.1): all merges of height
    ``h`` can be computed once those of heights ``< h`` are. Inputs as :func:`phrase_parents`;
    padding merges get 0. One round per tree level (no loop over nodes or sentences): a
    round raises every merge to ``1 +`` its children's current heights, until nothing changes.
    """
    B, N = phrase_mask.shape
    height = torch.zeros(B, N, dtype=torch.long, device=phrase.device)
    if N == 0 or B == 0:
        return height
    n = n_leaves.to(phrase.device).long().view(B, 1, 1)
    is_merge = phrase >= n
    child = (phrase - n).clamp(min=0, max=N - 1).view(B, 2 * N)
    for _ in range(N):
        below = torch.where(is_merge, height.gather(1, child).view(B, N, 2), torch.zeros_like(phrase))
        new = torch.where(phrase_mask, 1 + below.amax(dim=-1), torch.zeros_like(height))
        if torch.equal(new, height):
            break
        height = new
    return height


def merge_level_sizes(height: Tensor, phrase_mask: Tensor) -> Tuple[int, ...]:
    """Merges per height of a batch (:func:`phrase_heights`), slot 0 the padding merges: the slices of a
    bottom-up tree-LSTM. The collater computes it on the host (``src_syntax["phrase_level_sizes"]``), so
    that the GPU never waits for it."""
    level = torch.where(phrase_mask, height, torch.zeros_like(height)).reshape(-1)
    return tuple(int(c) for c in torch.bincount(level, minlength=1).tolist())
