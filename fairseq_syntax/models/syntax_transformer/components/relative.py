"""Relative positions in encoder self-attention, Shaw-style (own key/value tables in every layer).

* ``shaw``: Shaw et al. (2018), ``clip(j - i, k)`` (Omote et al. 2019, eqs. 11-15);
* ``dependency_depth``: Omote et al. (2019)'s relative dependency depth ``clip(depth_j - depth_i, l)``
  (eqs. 16-20; with ``shaw``, the two are summed, eqs. 21-22);
* ``structural``: Wang et al. (2019b)'s relative structural position, clipped to ``k``.

Each computes its bucket indices once per encoder forward; every layer looks them up in its
own tables (:class:`~.base.RelativeTableTerm`).
"""

from dataclasses import dataclass
from typing import Optional, Set, Tuple

from torch import Tensor

from fairseq.dataclass import ChoiceEnum

from fairseq_syntax_core import trees
from fairseq_syntax_core.vocabulary import DEPTH, PARENTS
from fairseq_syntax.modules.relative_attention import relative_bucket, sequence_relative_positions
from fairseq_syntax.modules.structural_position import structural_relative_buckets

from ..options import ModelOptionError, ModelSizes, flag_name, opt
from .base import AttentionComponent, BuildContext, EncoderBatch, RelativeTableTerm, register_attention

STRUCTURAL_DISTANCES = ("depth-sum", "tree-path")
#: clipping distances of relative positions (Shaw-style tables): >= 0, 0 turns them off
CLIP_OPTIONS = ("rel_seq_k", "rel_dep_l", "decoder_rel_seq_k", "structural_k")


def _check_clip(cfg, name: str, bound: int, flag: str, length: int) -> None:
    value = getattr(cfg, name)
    if value > bound:
        raise ModelOptionError(
            f"{flag_name(name)} {value}: larger than any relative position in a sentence of {flag} {length} "
            f"tokens; expected at most {bound} (0 turns it off)"
        )


@dataclass
class RelativeOptions:
    """Omote et al. 2019 and Shaw et al. 2018: relative positions in self-attention."""

    rel_seq_k: int = opt(0, "clip k of Shaw et al.'s relative positions clip(j-i, k) in the encoder "
                         "self-attention (Omote et al. 2019, eqs. 11-15); 0 disables", metavar="K")
    rel_dep_l: int = opt(0, "clip l of the relative dependency depth clip(depth_j - depth_i, l) in the encoder "
                         "self-attention (Omote et al. 2019, eqs. 16-20); 0 disables", metavar="L")
    decoder_rel_seq_k: int = opt(0, "clip k of Shaw et al.'s relative positions in the decoder self-attention; "
                                 "0 disables", metavar="K")
    rel_keys: bool = opt(True, "relative key representations a^K/b^K (--no-rel-keys: eq. 12/18 -> eq. 7, "
                         "Omote et al. 2019, Table 3)")
    rel_values: bool = opt(True, "relative value representations a^V/b^V (--no-rel-values: eq. 11/17 -> eq. 5, "
                           "Omote et al. 2019, Table 3)")

    def check(self) -> None:
        """A negative clip would be silently off; keys and values both off leave the tables nothing to add."""
        for name in CLIP_OPTIONS:
            value = getattr(self, name)
            if value < 0:
                raise ModelOptionError(f"{flag_name(name)} {value}: expected a clipping distance >= 0 (0 turns it off)")
        relative = [f"{flag_name(n)} {getattr(self, n)}" for n in CLIP_OPTIONS if getattr(self, n) > 0]
        if relative and not self.rel_keys and not self.rel_values:
            raise ModelOptionError(
                f"--no-rel-keys with --no-rel-values leaves the relative positions ({', '.join(relative)}) "
                "nothing to add (Omote et al. 2019, Table 3 drops one of the two): keep the keys or the values, "
                "or turn the relative positions off with a clipping distance of 0"
            )

    def check_sizes(self, sizes: ModelSizes) -> None:
        """A clip beyond the longest relative position of a sentence only grows the tables (2k + 1 rows)."""
        src, tgt = sizes.max_source_positions, sizes.max_target_positions
        _check_clip(self, "rel_seq_k", src, "--max-source-positions", src)
        _check_clip(self, "rel_dep_l", src, "--max-source-positions", src)
        _check_clip(self, "decoder_rel_seq_k", tgt, "--max-target-positions", tgt)


@dataclass
class StructuralOptions:
    """Wang et al. 2019b: structural positions (relative here, absolute in :mod:`.inputs`)."""

    structural_k: int = opt(0, "clip k of Wang et al. (2019b)'s structural relative positions, used Shaw-style "
                            "(own key/value tables) in every encoder layer; 0 disables", metavar="K")
    structural_distance: ChoiceEnum(STRUCTURAL_DISTANCES) = opt(  # type: ignore[valid-type]
        "depth-sum", "structural relative position of two words not on one root "
                                   "path: depth-sum = sign(i-j)(depth_i + depth_j), the path through the root (our "
                                   "reading of Wang et al. 2019b); tree-path = the shortest tree path, signed "
                                   "(Xie et al. (2021)'s description of it)", choices=STRUCTURAL_DISTANCES)
    structural_absolute: bool = opt(False, "absolute structural position (tree depth) combined with the "
                                    "sequential one (Wang et al. 2019b): tanh(W_seq PE(i) + W_stru PE(depth_i) "
                                    "+ b) replaces PE(i)")

    def check_sizes(self, sizes: ModelSizes) -> None:
        src = sizes.max_source_positions
        _check_clip(self, "structural_k", 2 * src, "--max-source-positions", src)  # depth-sum: two depths
        if self.structural_absolute and sizes.model_dim < 4:
            raise ModelOptionError(
                "--structural-absolute: the sinusoidal encoding of the depth needs an encoder model dimension >= 4, "
                f"got {sizes.model_dim}"
            )


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
    """``--rel-seq-k K``: buckets ``clip(j - i, k) + k`` ``(T, T)`` (Omote et al. 2019, eqs. 13-15)."""

    name = "shaw"
    options = RelativeOptions

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["ShawRelative"]:
        return cls(ctx, ctx.cfg.rel_seq_k) if ctx.cfg.rel_seq_k > 0 else None

    def prepare(self, batch: EncoderBatch) -> Tensor:
        src_len = batch.src_tokens.size(1)  # position differences do not depend on left padding
        return relative_bucket(sequence_relative_positions(src_len, src_len, batch.src_tokens.device),
                               self.max_distance)


@register_attention
class DependencyDepthRelative(_RelativeComponent):
    """``--rel-dep-l L``: buckets ``clip(depth_j - depth_i, l) + l`` ``(B, T, T)`` (Omote et al. 2019, eqs. 16, 19-20)."""

    name = "dependency_depth"
    options = RelativeOptions

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["DependencyDepthRelative"]:
        return cls(ctx, ctx.cfg.rel_dep_l) if ctx.cfg.rel_dep_l > 0 else None

    def inputs(self) -> Set[str]:
        return {DEPTH}

    def prepare(self, batch: EncoderBatch) -> Tensor:
        depth = batch.get(DEPTH, "the relative dependency depth (--rel-dep-l, Omote et al. 2019)")
        return relative_bucket(trees.relative_depth(depth), self.max_distance)  # eq. 16


@register_attention
class StructuralRelative(_RelativeComponent):
    """``--structural-k K``: Wang et al. (2019b)'s relative structural positions, ``--structural-distance``."""

    name = "structural"
    options = StructuralOptions

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
