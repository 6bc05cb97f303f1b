"""``gps``: Xie et al. (2021)'s global syntactic position in encoder self-attention.

Once per forward, the path LSTM encodes every word's root-to-word label path into ``s_i``
(sec. 3.2); in each ``--gps-layers`` layer, that layer's own ``W_s^Q, W_s^K`` add the
decoupled syntax term ``(s_i W_s^Q)(s_j W_s^K)^T / sqrt(d_z)`` to the logits (eq. 5), kept
within a sentence (sec. 3.3).
"""

from dataclasses import dataclass
from typing import Optional, Set, Tuple

from torch import Tensor

from fairseq_syntax.modules.syntactic_position import (
    SyntacticPathEncoder,
    SyntacticPositionLogits,
    same_sentence_mask,
)

from fairseq_syntax_core.vocabulary import DEPTH, DEPTH_LEVEL_SIZES, LABELS, PARENTS

from ..options import check_positive, opt, parse_layer_list
from .base import (
    AttentionComponent,
    AttentionTerms,
    BuildContext,
    EncoderBatch,
    LayerTerm,
    register_attention,
)



@dataclass
class GpsOptions:
    """Xie et al. 2021: global syntactic position."""

    gps_layers: str = opt("none", "0-based encoder layers (comma list, 'all' or 'none') whose self-attention adds "
                          "the syntactic-position term of Xie et al. 2021, eq. 5 (the paper's best: 0)", metavar="LIST")
    gps_label_dim: int = opt(64, "dependency-label embedding size of the path LSTM (Xie et al. 2021, sec. 3.2; not "
                             "stated there)", metavar="N")
    gps_path_dim: int = opt(128, "hidden size d_s of the path LSTM, the syntactic position s_i (Xie et al. 2021 "
                            "sec. 3.2; not stated there)", metavar="N")

    def check(self) -> None:
        check_positive(self, ("gps_label_dim", "gps_path_dim"))
        parse_layer_list(self.gps_layers, None, "--gps-layers")


class SyntaxLogitTerm(SyntacticPositionLogits, LayerTerm):
    """A layer's ``W_s^Q, W_s^K`` (eq. 5)."""

    def term(self, prepared: Tuple[Tensor, Tensor]) -> AttentionTerms:
        states, same_sentence = prepared
        return AttentionTerms(attn_bias=self(states, same_sentence))


@register_attention
class GlobalSyntacticPosition(AttentionComponent):
    """``--gps-layers``, ``--gps-label-dim``, ``--gps-path-dim``."""

    name = "gps"
    options = GpsOptions

    def __init__(self, ctx: BuildContext, layers: Tuple[int, ...]) -> None:
        super().__init__()
        cfg = ctx.cfg
        vocab = ctx.require_vocab(("syntax_num_labels",), "--gps-layers")
        self._layers = layers
        self.path_dim = cfg.gps_path_dim
        self.path_encoder = SyntacticPathEncoder(
            vocab["syntax_num_labels"], cfg.gps_label_dim, cfg.gps_path_dim,
            padding_idx=ctx.vocab.get("syntax_label_pad"),
        )

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["GlobalSyntacticPosition"]:
        layers = parse_layer_list(ctx.cfg.gps_layers, ctx.num_layers, "--gps-layers")
        return cls(ctx, layers) if layers else None

    def inputs(self) -> Set[str]:
        return {PARENTS, LABELS, DEPTH}

    def layers(self) -> Tuple[int, ...]:
        return self._layers

    def layer_term(self, layer_idx: int, embed_dim: int, num_heads: int) -> SyntaxLogitTerm:
        return SyntaxLogitTerm(self.path_dim, embed_dim, num_heads)

    def prepare(self, batch: EncoderBatch) -> Tuple[Tensor, Tensor]:
        who = "the syntactic path encoder (Xie et al. 2021)"
        parents = batch.get(PARENTS, who)
        sizes = batch.src_syntax.get(DEPTH_LEVEL_SIZES) if batch.src_syntax is not None else None
        states = self.path_encoder(parents, batch.get(LABELS, who), batch.get(DEPTH, who), batch.padding_mask,
                                   level_sizes=sizes)
        return states, same_sentence_mask(parents)
