"""``pascal``: parent-scaled self-attention of Bugliarello & Okazaki (2020), sec. 3.

Once per forward, the Gaussian weights ``D_p`` centred on every token's parent (1 in heads
that are not parent-scaled); in each ``--pascal-layers`` layer they multiply the scores
before the softmax, ``N = S * D_p``. No parameters.

Settings of the paper, by corpus (``--pascal-heads`` of 8, ``--pascal-parent-ignoring``):
WMT16 En-Ro 5 heads, 0; NC11 De-En 8 heads, 0; NC11 En-De 2 heads, 0.4. Layer 0 and
variance 1 throughout. ``</s>`` is its own parent, as in PASCAL's code (``--pascal-eos-parent``).
"""

import math
from dataclasses import dataclass
from typing import Optional, Set, Tuple

from torch import Tensor

from fairseq.dataclass import ChoiceEnum

from fairseq_syntax.modules.parent_attention import ParentScaledWeights

from fairseq_syntax_core.vocabulary import LABELS, PARENTS

from ..options import ModelOptionError, check_positive, opt, parse_layer_list
from .base import AttentionComponent, AttentionTerms, BuildContext, EncoderBatch, LayerTerm, register_attention

PASCAL_SUBWORD_PARENTS = ("mean", "first", "tree")
PASCAL_EOS_PARENTS = ("self", "last-root")


@dataclass
class PascalOptions:
    """Bugliarello & Okazaki 2020: parent-scaled self-attention (PASCAL)."""

    pascal_layers: str = opt("none", "0-based encoder layers (comma list, 'all' or 'none') with parent-scaled "
                             "self-attention (PASCAL; the paper: 0)", metavar="LIST")
    pascal_heads: int = opt(5, "number of parent-scaled heads (the first N) in each PASCAL layer (the paper: "
                            "5 of 8 on WMT16 En-Ro, 8 of 8 on NC11 De-En, 2 of 8 on NC11 En-De)", metavar="N")
    pascal_variance: float = opt(1.0, "variance sigma^2 of PASCAL's Gaussian centred on the parent (paper: 1)",
                                 metavar="S2")
    pascal_parent_ignoring: float = opt(0.0, "PASCAL's parent-ignoring regulariser: in training, leave a token's "
                                        "row unscaled with this probability (paper: 0.4 for NC11 En-De, "
                                        "else 0)", metavar="P")
    pascal_subword_parent: ChoiceEnum(PASCAL_SUBWORD_PARENTS) = opt(  # type: ignore[valid-type]
        "mean", "parent position of split words: mean = middle of the parent word's pieces (the paper), first = "
        "its first piece, tree = the piece tree as stored", choices=PASCAL_SUBWORD_PARENTS)
    pascal_eos_parent: ChoiceEnum(PASCAL_EOS_PARENTS) = opt(  # type: ignore[valid-type]
        "self", "parent of the appended </s>: self (PASCAL's code) or last-root (the data-bin's tree, and 0.1's "
        "behaviour)", choices=PASCAL_EOS_PARENTS)

    def check(self) -> None:
        check_positive(self, ("pascal_heads",))
        if not 0 < self.pascal_variance < math.inf:
            raise ModelOptionError(
                f"--pascal-variance {self.pascal_variance}: expected a finite variance > 0 (paper: 1)"
            )
        if not 0 <= self.pascal_parent_ignoring < 1:
            raise ModelOptionError(
                f"--pascal-parent-ignoring {self.pascal_parent_ignoring}: expected a probability in [0, 1)"
            )
        parse_layer_list(self.pascal_layers, None, "--pascal-layers")


class ParentScaleTerm(LayerTerm):
    """A PASCAL layer: the shared weights as its score scale."""

    def term(self, prepared: Tensor) -> AttentionTerms:
        return AttentionTerms(logit_scale=prepared)


@register_attention
class ParentScaledAttention(AttentionComponent):
    """``--pascal-layers``, ``--pascal-heads``, ``--pascal-variance``, ``--pascal-parent-ignoring``, ..."""

    name = "pascal"
    options = PascalOptions

    def __init__(self, ctx: BuildContext, layers: Tuple[int, ...]) -> None:
        super().__init__()
        cfg = ctx.cfg
        heads = ctx.num_heads
        if not 0 < cfg.pascal_heads <= heads:
            raise ValueError(f"--pascal-heads {cfg.pascal_heads} must be in [1, --encoder-attention-heads {heads}]")
        subword = ctx.vocab.get("syntax_subword_label")
        eos = ctx.vocab.get("syntax_label_eos")
        self._layers = layers
        self.weights = ParentScaledWeights(
            heads,
            parent_heads=cfg.pascal_heads,
            variance=cfg.pascal_variance,
            subword_parent=str(cfg.pascal_subword_parent),
            subword_label=int(subword) if subword is not None and int(subword) >= 0 else None,
            parent_ignoring=cfg.pascal_parent_ignoring,
            eos_label=int(eos) if eos is not None else 2,  # fairseq's Dictionary puts </s> at 2
            eos_self=cfg.pascal_eos_parent == "self",
        )

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["ParentScaledAttention"]:
        layers = parse_layer_list(ctx.cfg.pascal_layers, ctx.num_layers, "--pascal-layers")
        return cls(ctx, layers) if layers else None

    def inputs(self) -> Set[str]:
        return {PARENTS, LABELS}

    def layers(self) -> Tuple[int, ...]:
        return self._layers

    def layer_term(self, layer_idx: int, embed_dim: int, num_heads: int) -> ParentScaleTerm:
        return ParentScaleTerm()

    def prepare(self, batch: EncoderBatch) -> Tensor:
        who = "PASCAL (parent-scaled attention)"
        return self.weights(batch.get(PARENTS, who), batch.get(LABELS, who))
