"""Binary Tree-LSTM (Tai et al. 2015, N-ary with N = 2), computed one tree level per step over a batch.

Eriguchi et al. 2016 sec. 3.1 builds every phrase node ``k`` of a binary tree
from its left and right children ``(h_l, c_l)``, ``(h_r, c_r)``:

    i   = sigmoid(U_i^l h_l + U_i^r h_r + b_i)
    f_l = sigmoid(U_fl^l h_l + U_fl^r h_r + b_fl)      one forget gate per child
    f_r = sigmoid(U_fr^l h_l + U_fr^r h_r + b_fr)
    o   = sigmoid(U_o^l h_l + U_o^r h_r + b_o)
    u   = tanh(U_u^l h_l + U_u^r h_r + b_u)
    c   = i * u + f_l * c_l + f_r * c_r
    h   = o * tanh(c)

(the equation of Eriguchi et al. (2016) lost its symbols in the text; this is Tai et al.'s N-ary unit with
N = 2, which the paper names). The five blocks are one linear map of ``[h_l; h_r]``; the
forget-gate biases start at 1.0 (sec. 4.2). The same unit, with parameters of its own, joins
the last sequential state and the root phrase state into the decoder's first state (sec. 3.2).

:class:`BinaryTreeLSTM` computes all merges of a batch bottom-up: the merges are ordered by
their height (:func:`fairseq_syntax_core.phrase_trees.phrase_heights`) and each step computes every
merge of one height in every sentence at once, so the number of sequential steps is the
height of the highest tree, never the number of nodes or sentences. The heights and the number of
merges per height come from the collater (``src_syntax["phrase_heights"]``,
``["phrase_level_sizes"]``: host ints), so the forward never waits for the GPU; without them they
are computed here (host syncs).
"""

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from fairseq_syntax_core import phrase_trees

__all__ = ["BinaryTreeLSTMCell", "BinaryTreeLSTM"]


class BinaryTreeLSTMCell(nn.Module):
    """One binary Tree-LSTM unit (module doc): ``(h_l, c_l, h_r, c_r) -> (h, c)``, any leading shape."""

    def __init__(self, dim: int, forget_bias: float = 1.0) -> None:
        super().__init__()
        self.dim = dim
        self.linear = nn.Linear(2 * dim, 5 * dim)
        nn.init.uniform_(self.linear.weight, -0.1, 0.1)
        nn.init.zeros_(self.linear.bias)
        with torch.no_grad():  # blocks: i, f_l, f_r, o, u
            self.linear.bias[dim : 3 * dim].fill_(forget_bias)

    def forward(self, h_l: Tensor, c_l: Tensor, h_r: Tensor, c_r: Tensor) -> Tuple[Tensor, Tensor]:
        i, f_l, f_r, o, u = self.linear(torch.cat([h_l, h_r], dim=-1)).chunk(5, dim=-1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(f_l) * c_l + torch.sigmoid(f_r) * c_r
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c


class BinaryTreeLSTM(nn.Module):
    """The phrase nodes of a batch of binary trees, bottom-up, one tree level per step."""

    def __init__(self, dim: int, forget_bias: float = 1.0) -> None:
        super().__init__()
        self.cell = BinaryTreeLSTMCell(dim, forget_bias)

    def forward(
        self, leaf_h: Tensor, leaf_c: Tensor, phrase: Tensor, phrase_mask: Tensor, n_leaves: Tensor,
        heights: Optional[Tensor] = None, level_sizes: Optional[Sequence[int]] = None,
    ) -> Tuple[Tensor, Tensor]:
        """Phrase states ``(h, c)``, each ``(B, N, d)``, zero at padding merges.

        ``leaf_h``/``leaf_c`` ``(B, L, d)``: leaf ``i`` of a row at column ``i`` (right-padded);
        ``phrase (B, N, 2)``, ``phrase_mask (B, N)``, ``n_leaves (B,)`` as
        :func:`fairseq_syntax_core.phrase_trees.phrase_parents` takes them; ``heights (B, N)`` and
        ``level_sizes`` as :func:`~fairseq_syntax_core.phrase_trees.merge_level_sizes` gives them, or None.
        """
        B, L, d = leaf_h.shape
        N = phrase_mask.size(1)
        if heights is None or level_sizes is None:  # not from the collater: counted here (host syncs)
            heights = phrase_trees.phrase_heights(phrase, phrase_mask, n_leaves)
            level_sizes = phrase_trees.merge_level_sizes(heights, phrase_mask)
        elif tuple(heights.shape) != (B, N) or sum(level_sizes) != B * N:
            raise ValueError(
                f"phrase_heights {tuple(heights.shape)} / phrase_level_sizes (sum {sum(level_sizes)}) do not "
                f"fit this batch's {B} x {N} merges (they come from the same collater call as the merges)"
            )
        if N == 0 or sum(level_sizes[1:]) == 0:
            zeros = leaf_h.new_zeros(B, N, d)
            return zeros, zeros
        columns = L + N
        n = n_leaves.to(phrase.device).long().view(B, 1, 1)
        child_column = torch.where(phrase < n, phrase, phrase - n + L)  # (B, N, 2)
        rows = torch.arange(B, device=phrase.device).view(B, 1, 1)
        child_flat = (rows * columns + child_column).view(B * N, 2)
        node_flat = (torch.arange(B, device=phrase.device).view(B, 1) * columns
                     + L + torch.arange(N, device=phrase.device).view(1, N)).view(-1)
        real = phrase_mask.view(-1)
        # merges sorted by height: each level is one contiguous slice of level_sizes merges
        level_of = torch.where(real, heights.to(phrase.device).view(-1), torch.zeros_like(real, dtype=torch.long))
        order = torch.argsort(level_of, stable=True)
        counts = list(level_sizes)
        h = torch.cat([leaf_h, leaf_h.new_zeros(B, N, d)], dim=1).view(B * columns, d)
        c = torch.cat([leaf_c, leaf_c.new_zeros(B, N, d)], dim=1).view(B * columns, d)
        start = counts[0]  # height 0: padding merges
        for size in counts[1:]:
            level = order[start : start + size]
            start += size
            left, right = child_flat[level, 0], child_flat[level, 1]
            new_h, new_c = self.cell(h[left], c[left], h[right], c[right])
            target = node_flat[level]
            h = h.index_copy(0, target, new_h)
            c = c.index_copy(0, target, new_c)
        h = h.view(B, columns, d)[:, L:]
        c = c.view(B, columns, d)[:, L:]
        return h, c
