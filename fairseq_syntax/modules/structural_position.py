"""Structural position representations of Wang et al. (2019b, EMNLP), "Self-Attention with Structural Position Representations".

Definitions implemented (sec. 2.2 of the paper; Xie et al. 2021, sec. 2 summarises
them as "the length of the shortest path between two nodes on the dependency
tree as their relative distance, and the depth of each node as their absolute
position, in addition to each word's normal sequential position"):

* **Absolute structural position** ``abs(x_i)``: the distance of word ``i``
  from the origin of the dependency tree, the main verb, i.e. the root:
  ``depth_i`` (``src_syntax["depth"]``, :func:`fairseq_syntax_core.trees.tree_depth`).
  It is encoded with the same sinusoids as the sequential position (or a
  learned table, ``learned=True``) and combined with the sequential position
  encoding by a non-linear function ``f(PE_seq, PE_stru)``; we use
  ``f(a, b) = tanh(W_seq a + W_stru b + bias)`` (``combine="nonlinear"``, the
  default), or ``a + b`` (``combine="sum"``). The result replaces the
  sequential positional embedding added to the word embeddings
  (:class:`StructuralPositionEmbedding`).
* **Relative structural position** ``rel(x_i, x_j)``: ``abs(x_i) - abs(x_j)``
  when ``i`` and ``j`` lie on one root path (one is an ancestor of the other,
  or ``i = j``), otherwise ``sign(i - j) * (abs(x_i) + abs(x_j))`` (the path
  through the origin, signed by the sequential direction;
  :func:`fairseq_syntax_core.trees.structural_relative_position`). It is clipped to
  ``[-k, k]`` and used Shaw-style (relative keys and values), i.e. as bucket
  indices for the existing ``relative`` mechanism of
  :class:`~fairseq_syntax.modules.relative_attention.RelativeMultiheadAttention`
  (:func:`structural_relative_buckets`), next to the sequential relative
  positions.

How the encoder uses them (keys of ``src_syntax``: ``parents``, ``depth``)::

    # input: replaces x = embed_scale * tok + embed_positions(src_tokens)
    pe = self.structural_pe(self.embed_positions(src_tokens), src_syntax["depth"], pad)
    x = self.embed_scale * self.embed_tokens(src_tokens) + pe
    # attention: once per forward, then per layer with that layer's table
    stru = structural_relative_buckets(src_syntax["parents"], src_syntax["depth"], k)
    relative = [(layer.rel_seq_embed, None), (layer.rel_stru_embed, stru)]
    with layer.self_attn.relative_scope(relative): ...
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from fairseq.models.transformer.transformer_decoder import Linear
from fairseq.modules.sinusoidal_positional_embedding import SinusoidalPositionalEmbedding

from fairseq_syntax_core import trees
from fairseq_syntax.modules.relative_attention import relative_bucket

__all__ = [
    "COMBINE_RULES",
    "sinusoidal_encoding",
    "StructuralPositionEmbedding",
    "structural_relative_buckets",
]

COMBINE_RULES = ("nonlinear", "sum")


def sinusoidal_encoding(values: Tensor, dim: int) -> Tensor:
    """Transformer sinusoids of non-negative integer ``values (...)`` -> ``(..., dim)`` float32.

    The rows of fairseq's own table, ``SinusoidalPositionalEmbedding.get_embedding``
    (first half sines, second half cosines, ``10000^(-k / (dim/2 - 1))``; a zero column when
    ``dim`` is odd), built as long as the largest value needs (no table limit).
    """
    if dim < 4:
        raise ValueError(f"sinusoidal encoding needs dim >= 4, got {dim}")
    values = values.long()
    rows = int(values.max()) + 1 if values.numel() else 1
    if values.numel() and int(values.min()) < 0:
        raise ValueError(f"sinusoidal encoding needs non-negative values, got {int(values.min())}")
    table = SinusoidalPositionalEmbedding.get_embedding(rows, dim).to(values.device)
    return table[values]


class StructuralPositionEmbedding(nn.Module):
    """Absolute structural position combined with the sequential position (Wang et al. 2019b).

    ``forward(seq_pe, depth, padding_mask)`` returns ``f(PE_seq, PE_stru(depth))``
    ``(B, T, C)``, to be added to the (scaled) word embeddings in place of the
    sequential positional embedding (see the module docstring for ``f``).
    ``PE_stru`` is sinusoidal (default) or, with ``learned=True``, a table of
    ``max_depth + 1`` rows (deeper tokens share the last row). Padding rows are 0.
    """

    def __init__(
        self,
        embed_dim: int,
        combine: str = "nonlinear",
        learned: bool = False,
        max_depth: int = 255,
    ) -> None:
        super().__init__()
        if combine not in COMBINE_RULES:
            raise ValueError(f"unknown combine rule {combine!r}; choose from {COMBINE_RULES}")
        self.embed_dim = int(embed_dim)
        self.combine = combine
        self.learned = bool(learned)
        self.max_depth = int(max_depth)
        self.depth_embed: Optional[nn.Embedding] = None
        self._sinusoids: Optional[Tensor] = None  # PE_stru rows, cached (not a parameter or buffer)
        if learned:
            self.depth_embed = nn.Embedding(self.max_depth + 1, embed_dim)
            nn.init.normal_(self.depth_embed.weight, mean=0.0, std=embed_dim ** -0.5)
        self.seq_proj: Optional[nn.Linear] = None
        self.stru_proj: Optional[nn.Linear] = None
        if combine == "nonlinear":
            self.seq_proj = Linear(embed_dim, embed_dim, bias=True)  # fairseq's initialisation
            self.stru_proj = Linear(embed_dim, embed_dim, bias=False)

    def structural(self, depth: Tensor) -> Tensor:
        """``PE_stru(depth)`` ``(B, T, C)`` (float32 for sinusoids)."""
        if self.depth_embed is not None:
            return self.depth_embed(depth.long().clamp(0, self.max_depth))
        # a depth is below the row length (a tree of T tokens is at most T - 1 deep): the table's
        # size comes from the shape, not from the values (no host sync)
        rows = max(depth.size(-1), 1)
        table = self._sinusoids
        if table is None or table.size(0) < rows or table.device != depth.device:
            # built once per new length or device (a host-to-device copy), as fairseq caches its own
            table = SinusoidalPositionalEmbedding.get_embedding(max(rows, 256), self.embed_dim).to(depth.device)
            self._sinusoids = table
        return table[depth.long().clamp(0, rows - 1)]

    def forward(
        self, seq_pe: Tensor, depth: Tensor, padding_mask: Optional[Tensor] = None
    ) -> Tensor:
        """Combined absolute position representation ``(B, T, C)``, in ``seq_pe``'s dtype.

        Args:
            seq_pe: the sequential positional embedding ``(B, T, C)``
                (fairseq's ``embed_positions(src_tokens)``).
            depth: ``src_syntax["depth"]`` ``(B, T)``, the absolute structural position.
            padding_mask: ``(B, T)`` True at padding (rows set to 0).
        """
        stru = self.structural(depth).to(seq_pe.dtype)
        if self.combine == "sum":
            out = seq_pe + stru
        else:
            assert self.seq_proj is not None and self.stru_proj is not None
            out = torch.tanh(self.seq_proj(seq_pe) + self.stru_proj(stru))
        if padding_mask is not None:
            out = out.masked_fill(padding_mask.unsqueeze(-1), 0.0)
        return out

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, combine={self.combine!r}, learned={self.learned}, "
            f"max_depth={self.max_depth}"
        )


def structural_relative_buckets(
    parents: Tensor, depth: Optional[Tensor], max_distance: int, off_path: str = "depth-sum"
) -> Tensor:
    """Bucket indices ``clip(rel(x_i, x_j), k) + k`` ``LongTensor (B, T, T)`` (Wang et al. 2019b).

    ``rel`` is :func:`fairseq_syntax_core.trees.structural_relative_position`
    (query ``i`` = row, key ``j`` = column; ``off_path`` the reading for words not on one root
    path, ``depth-sum`` or ``tree-path``); use the result with a
    :class:`~fairseq_syntax.modules.relative_attention.RelativeEmbedding` of
    ``max_distance`` ``k`` in the attention's ``relative`` list. Compute once per
    forward and share it across layers.
    """
    rel = trees.structural_relative_position(parents, depth, off_path)
    return relative_bucket(rel, max_distance)
