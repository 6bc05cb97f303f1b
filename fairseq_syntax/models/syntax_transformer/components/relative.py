"""Relative positions in encoder self-attention, Shaw-style (own key/value tables in every layer).

* ``shaw``: Shaw et al. (2018), ``clip(j - i, k)`` (Omote et al., paper 000 eqs. 11-15);
* ``dependency_depth``: paper 000's relative dependency depth ``clip(depth_j - depth_i, l)``
  (eqs. 16-20; with ``shaw``, the two are summed, eqs. 21-22);
* ``structural``: Wang et al. (2019b)'s relative structural position, clipped to ``k``.

Each computes its bucket indices once per encoder forward; every layer looks them up in its
own tables (:class:`~.base.RelativeTableTerm`).
"""

from typing import Optional, Set, Tuple

from torch import Tensor

from fairseq_syntax_core import trees
from fairseq_syntax.modules.relative_attention import relative_bucket, sequence_relative_positions
from fairseq_syntax.modules.structural_position import structural_relative_buckets

from .base import AttentionComponent, BuildContext, EncoderBatch, RelativeTableTerm, register_attention

DEPTH, PARENTS = "depth", "parents"


class _RelativeComponent(AttentionComponent):
    """A clip distance, and one table per encoder layer."""

    def __init__(self, ctx: BuildContext, max_distance: int) -> None:
        super().__init__()
        self.max_distance = int(max_distance)
        self.keys = bool(ctx.cfg.rel_keys)
        self.values = bool(ctx.cfg.rel_values)
        self.num_layers = ctx.num_layers

    def layers(self) -> Tuple[int, ...]:
        return tuple(range(self.num_layers))

    def layer_term(self, layer_idx: int, embed_dim: int, num_heads: int) -> RelativeTableTerm:
        return RelativeTableTerm(self.max_distance, embed_dim // num_heads, keys=self.keys, values=self.values)

    def extra_repr(self) -> str:
        return f"max_distance={self.max_distance}"


@register_attention
class ShawRelative(_RelativeComponent):
    """``--rel-seq-k K``: buckets ``clip(j - i, k) + k`` ``(T, T)`` (paper 000 eqs. 13-15)."""

    name = "shaw"

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["ShawRelative"]:
        return cls(ctx, ctx.cfg.rel_seq_k) if ctx.cfg.rel_seq_k > 0 else None

    def prepare(self, batch: EncoderBatch) -> Tensor:
        src_len = batch.src_tokens.size(1)  # position differences do not depend on left padding
        return relative_bucket(sequence_relative_positions(src_len, src_len, batch.src_tokens.device),
                               self.max_distance)


@register_attention
class DependencyDepthRelative(_RelativeComponent):
    """``--rel-dep-l L``: buckets ``clip(depth_j - depth_i, l) + l`` ``(B, T, T)`` (paper 000 eqs. 16, 19-20)."""

    name = "dependency_depth"

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["DependencyDepthRelative"]:
        return cls(ctx, ctx.cfg.rel_dep_l) if ctx.cfg.rel_dep_l > 0 else None

    def inputs(self) -> Set[str]:
        return {DEPTH}

    def prepare(self, batch: EncoderBatch) -> Tensor:
        depth = batch.get(DEPTH, "the relative dependency depth (--rel-dep-l, paper 000)")
        return relative_bucket(trees.relative_depth(depth), self.max_distance)  # eq. 16


@register_attention
class StructuralRelative(_RelativeComponent):
    """``--structural-k K``: Wang et al. (2019b)'s relative structural positions, ``--structural-distance``."""

    name = "structural"

    def __init__(self, ctx: BuildContext, max_distance: int) -> None:
        super().__init__(ctx, max_distance)
        self.off_path = str(ctx.cfg.structural_distance)

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["StructuralRelative"]:
        return cls(ctx, ctx.cfg.structural_k) if ctx.cfg.structural_k > 0 else None

    def inputs(self) -> Set[str]:
        return {PARENTS, DEPTH}

    def prepare(self, batch: EncoderBatch) -> Tensor:
        parents = batch.get(PARENTS, "structural relative positions")
        depth = batch.get(DEPTH, "structural relative positions")
        return structural_relative_buckets(parents, depth, self.max_distance, self.off_path)

    def extra_repr(self) -> str:
        return f"max_distance={self.max_distance}, off_path={self.off_path!r}"
