"""Transformer layers whose self-attention takes the syntax components' terms.

Both reuse fairseq's layers unchanged (``TransformerEncoderLayerBase`` /
``TransformerDecoderLayerBase``) with :class:`RelativeMultiheadAttention` as self-attention;
the terms reach it through ``relative_scope`` for the duration of the layer's forward.
"""

from typing import Any, Dict, List, Optional

from torch import Tensor, nn

from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerConfig
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from fairseq.utils import safe_getattr

from fairseq_syntax.modules.relative_attention import RelativeEmbedding, RelativeMultiheadAttention

from .components.base import AttentionTerms, LayerTerm

__all__ = ["SyntaxEncoderLayer", "SyntaxDecoderLayer", "wrap_layer"]


def wrap_layer(layer: nn.Module, cfg: TransformerConfig) -> nn.Module:
    """Activation checkpointing and FSDP wrapping exactly as fairseq's ``build_*_layer``."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    # if we are checkpointing, enforce that FSDP always wraps the checkpointed layer
    min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


class SyntaxEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer; ``attention_terms`` holds each attention component's part here.

    ``attention_terms[name]`` is a :class:`~.components.base.LayerTerm` (this layer's own
    relative tables, eq. 5 projections, ...); :meth:`forward` receives the components'
    per-batch tensors (``prepared[name]``) and passes the combined terms to the self-attention.
    """

    def __init__(self, cfg: TransformerConfig, return_fc: bool = False, terms: Optional[Dict[str, LayerTerm]] = None):
        super().__init__(cfg, return_fc=return_fc)
        self.attention_terms = nn.ModuleDict(terms or {})

    def build_self_attention(self, embed_dim: int, cfg: TransformerConfig):
        return RelativeMultiheadAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            dropout=cfg.attention_dropout,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            xformers_att_config=cfg.encoder.xformers_att_config,
        )

    def forward(
        self,
        x: Tensor,
        encoder_padding_mask: Optional[Tensor],
        attn_mask: Optional[Tensor] = None,
        prepared: Optional[Dict[str, Any]] = None,
    ):
        """fairseq's encoder layer, its self-attention extended by the terms of this layer's components."""
        terms = AttentionTerms()
        for name, module in self.attention_terms.items():
            if prepared is None or name not in prepared:
                raise ValueError(f"this encoder layer uses the {name!r} component but received no inputs for it")
            terms.add(module.term(prepared[name]))
        if not terms.relative and terms.attn_bias is None and terms.logit_scale is None:
            return super().forward(x, encoder_padding_mask, attn_mask=attn_mask)
        with self.self_attn.relative_scope(terms.relative, attn_bias=terms.attn_bias, logit_scale=terms.logit_scale):
            return super().forward(x, encoder_padding_mask, attn_mask=attn_mask)


class SyntaxDecoderLayer(TransformerDecoderLayerBase):
    """Decoder layer with Shaw relative positions in the self-attention (``--decoder-rel-seq-k``).

    The relative distance ``j - i`` is computed inside the attention from the number of
    (cached) keys, so at incremental step ``t`` the query is at position ``t`` and the keys at
    ``0..t``. Beam reordering uses fairseq's incremental state unchanged.
    """

    def __init__(self, cfg: TransformerConfig, no_encoder_attn: bool = False, add_bias_kv: bool = False,
                 add_zero_attn: bool = False) -> None:
        super().__init__(cfg, no_encoder_attn=no_encoder_attn, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn)
        seq_k = int(safe_getattr(cfg, "decoder_rel_seq_k", 0) or 0)
        if seq_k > 0 and cfg.cross_self_attention:
            raise ValueError("--decoder-rel-seq-k is incompatible with --cross-self-attention")
        self.rel_seq_embed: Optional[RelativeEmbedding] = (
            RelativeEmbedding(
                seq_k, self.head_dim,
                keys=bool(safe_getattr(cfg, "rel_keys", True)),
                values=bool(safe_getattr(cfg, "rel_values", True)),
            )
            if seq_k > 0
            else None
        )

    def build_self_attention(self, embed_dim: int, cfg: TransformerConfig, add_bias_kv: bool = False,
                             add_zero_attn: bool = False):
        return RelativeMultiheadAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            dropout=cfg.attention_dropout,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            self_attention=not cfg.cross_self_attention,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            xformers_att_config=cfg.decoder.xformers_att_config,
        )

    def forward(
        self,
        x: Tensor,
        encoder_out: Optional[Tensor] = None,
        encoder_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        prev_self_attn_state: Optional[List[Tensor]] = None,
        prev_attn_state: Optional[List[Tensor]] = None,
        self_attn_mask: Optional[Tensor] = None,
        self_attn_padding_mask: Optional[Tensor] = None,
        need_attn: bool = False,
        need_head_weights: bool = False,
    ):
        """fairseq's decoder layer; the self-attention adds ``a_ij`` (Omote et al. 2019, eqs. 11-12)."""
        kwargs = dict(
            encoder_out=encoder_out, encoder_padding_mask=encoder_padding_mask,
            incremental_state=incremental_state, prev_self_attn_state=prev_self_attn_state,
            prev_attn_state=prev_attn_state, self_attn_mask=self_attn_mask,
            self_attn_padding_mask=self_attn_padding_mask, need_attn=need_attn,
            need_head_weights=need_head_weights,
        )
        if self.rel_seq_embed is None:
            return super().forward(x, **kwargs)
        with self.self_attn.relative_scope([(self.rel_seq_embed, None)]):
            return super().forward(x, **kwargs)
