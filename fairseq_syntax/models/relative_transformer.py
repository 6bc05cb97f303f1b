"""Transformer with relative sequence positions and dependency relative depths.

Model ``syntax_transformer`` (paper 000, "Dependency-Based Relative Positional
Encoding for Transformer NMT"):

* ``--rel-seq-k K``: Shaw et al. (2018) relative positions ``clip(j - i, K)``
  in the encoder self-attention (paper 000 eqs. 11-15);
* ``--rel-dep-l L``: relative dependency depth ``clip(depth_j - depth_i, L)``
  in the encoder self-attention (eqs. 16-20), read from
  ``src_syntax["depth"]``;
* both together are summed (``Transformer_dep+rel``, eqs. 21-22);
* ``--decoder-rel-seq-k K``: Shaw relative positions in the decoder
  self-attention;
* ``--rel-no-keys`` / ``--rel-no-values``: drop the key (eqs. 12/18) or value
  (eqs. 11/17) representations (paper 000 Table 3 ablation).

Every layer has its own tables (Shaw et al.; paper 000 Section 4). Absolute
(sinusoidal) positions are kept unless ``--no-token-positional-embeddings``.
"""

import argparse
from typing import Any, Dict, List, Optional, Set, Tuple

import torch
from torch import Tensor

from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
    transformer_iwslt_de_en,
)
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from fairseq.utils import safe_getattr

from fairseq_syntax.modules.relative_attention import (
    RelativeEmbedding,
    RelativeInputs,
    RelativeMultiheadAttention,
    relative_bucket,
    sequence_relative_positions,
)

__all__ = [
    "RelativeTransformerEncoderLayer",
    "RelativeTransformerDecoderLayer",
    "SyntaxTransformerEncoder",
    "SyntaxTransformerDecoder",
    "SyntaxTransformerModel",
    "DEPTH_KEY",
]

DEPTH_KEY = "depth"


def _int_opt(cfg: Any, name: str) -> int:
    value = safe_getattr(cfg, name, 0)
    return int(value) if value is not None else 0


def _bool_opt(cfg: Any, name: str) -> bool:
    return bool(safe_getattr(cfg, name, False))


def _wrap_layer(layer: torch.nn.Module, cfg: Any) -> torch.nn.Module:
    """Activation checkpointing / FSDP wrapping exactly as fairseq's ``build_*_layer``."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    # if we are checkpointing, enforce that FSDP always wraps the checkpointed layer
    min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


class RelativeTransformerEncoderLayer(TransformerEncoderLayerBase):
    """Encoder layer whose self-attention uses relative representations.

    Holds this layer's own tables: ``rel_seq_embed`` (``w^K, w^V`` of eqs.
    13-14, ``2k+1`` rows) and ``rel_dep_embed`` (eqs. 19-20, ``2l+1`` rows),
    each of size ``head_dim`` and shared across heads.
    """

    def __init__(self, cfg: TransformerConfig, return_fc: bool = False) -> None:
        super().__init__(cfg, return_fc=return_fc)
        head_dim = self.embed_dim // cfg.encoder.attention_heads
        keys = not _bool_opt(cfg, "rel_no_keys")
        values = not _bool_opt(cfg, "rel_no_values")
        seq_k = _int_opt(cfg, "rel_seq_k")
        dep_l = _int_opt(cfg, "rel_dep_l")
        self.rel_seq_embed: Optional[RelativeEmbedding] = (
            RelativeEmbedding(seq_k, head_dim, keys=keys, values=values)
            if seq_k > 0
            else None
        )
        self.rel_dep_embed: Optional[RelativeEmbedding] = (
            RelativeEmbedding(dep_l, head_dim, keys=keys, values=values)
            if dep_l > 0
            else None
        )

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
        rel_seq_buckets: Optional[Tensor] = None,
        rel_dep_buckets: Optional[Tensor] = None,
    ):
        """fairseq's encoder layer with relative self-attention.

        Args:
            rel_seq_buckets: ``(T, T)`` row indices ``clip(j - i, k) + k``
                (eq. 15); computed from positions when None.
            rel_dep_buckets: ``(B, T, T)`` row indices
                ``clip(depth_j - depth_i, l) + l`` (eqs. 16, 19-20); required
                when this layer has dependency tables.
        """
        relative: RelativeInputs = []
        if self.rel_seq_embed is not None:
            relative.append((self.rel_seq_embed, rel_seq_buckets))
        if self.rel_dep_embed is not None:
            if rel_dep_buckets is None:
                raise ValueError(
                    "this encoder layer uses relative dependency depth (--rel-dep-l > 0) "
                    "but received no dependency bucket indices"
                )
            relative.append((self.rel_dep_embed, rel_dep_buckets))
        with self.self_attn.relative_scope(relative):
            return super().forward(x, encoder_padding_mask, attn_mask=attn_mask)


class RelativeTransformerDecoderLayer(TransformerDecoderLayerBase):
    """Decoder layer with Shaw relative positions in the self-attention.

    The relative distance ``j - i`` is computed inside the attention from the
    number of (cached) keys, so at incremental step ``t`` the query is at
    position ``t`` and the keys at ``0..t``. Beam reordering uses fairseq's
    incremental state (``prev_key``/``prev_value``) unchanged.
    """

    def __init__(
        self,
        cfg: TransformerConfig,
        no_encoder_attn: bool = False,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
    ) -> None:
        super().__init__(
            cfg,
            no_encoder_attn=no_encoder_attn,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
        )
        seq_k = _int_opt(cfg, "decoder_rel_seq_k")
        if seq_k > 0 and cfg.cross_self_attention:
            raise ValueError("--decoder-rel-seq-k is incompatible with --cross-self-attention")
        self.rel_seq_embed: Optional[RelativeEmbedding] = (
            RelativeEmbedding(
                seq_k,
                self.head_dim,
                keys=not _bool_opt(cfg, "rel_no_keys"),
                values=not _bool_opt(cfg, "rel_no_values"),
            )
            if seq_k > 0
            else None
        )

    def build_self_attention(
        self,
        embed_dim: int,
        cfg: TransformerConfig,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
    ):
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
        """fairseq's decoder layer; the self-attention adds ``a_ij`` (eqs. 11-12)."""
        relative: RelativeInputs = (
            [(self.rel_seq_embed, None)] if self.rel_seq_embed is not None else []
        )
        with self.self_attn.relative_scope(relative):
            return super().forward(
                x,
                encoder_out=encoder_out,
                encoder_padding_mask=encoder_padding_mask,
                incremental_state=incremental_state,
                prev_self_attn_state=prev_self_attn_state,
                prev_attn_state=prev_attn_state,
                self_attn_mask=self_attn_mask,
                self_attn_padding_mask=self_attn_padding_mask,
                need_attn=need_attn,
                need_head_weights=need_head_weights,
            )


class SyntaxTransformerEncoder(TransformerEncoderBase):
    """Transformer encoder with relative sequence / dependency-depth self-attention.

    Extra forward input ``src_syntax: Optional[Dict[str, Tensor]]``; key
    ``"depth"`` is a LongTensor ``(B, T)`` of dependency-tree depths, padded
    like ``src_tokens`` (pad values are irrelevant: pad keys are masked).
    """

    def __init__(
        self,
        cfg: TransformerConfig,
        dictionary,
        embed_tokens: torch.nn.Embedding,
        return_fc: bool = False,
    ) -> None:
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.rel_seq_k = _int_opt(cfg, "rel_seq_k")
        self.rel_dep_l = _int_opt(cfg, "rel_dep_l")

    def build_encoder_layer(self, cfg: TransformerConfig):
        layer = RelativeTransformerEncoderLayer(cfg, return_fc=self.return_fc)
        return _wrap_layer(layer, cfg)

    @property
    def uses_relative(self) -> bool:
        return self.rel_seq_k > 0 or self.rel_dep_l > 0

    def syntax_inputs(self) -> Set[str]:
        """Keys of ``src_syntax`` consumed by this encoder."""
        return {DEPTH_KEY} if self.rel_dep_l > 0 else set()

    def relative_buckets(
        self, src_tokens: Tensor, src_syntax: Optional[Dict[str, Tensor]]
    ) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """Bucket indices shared by all layers.

        Returns:
            ``(seq, dep)``: ``seq`` is ``(T, T)`` with ``clip(j - i, k) + k``
            (eqs. 13-15; position differences are unaffected by left padding),
            ``dep`` is ``(B, T, T)`` with ``clip(depth_j - depth_i, l) + l``
            (eqs. 16, 19-20). Either is None when disabled.
        """
        bsz, src_len = src_tokens.size()
        seq: Optional[Tensor] = None
        dep: Optional[Tensor] = None
        if self.rel_seq_k > 0:
            seq = relative_bucket(
                sequence_relative_positions(src_len, src_len, src_tokens.device),
                self.rel_seq_k,
            )
        if self.rel_dep_l > 0:
            depth = src_syntax.get(DEPTH_KEY) if src_syntax is not None else None
            if depth is None:
                raise ValueError(
                    "syntax_transformer with --rel-dep-l > 0 needs the source "
                    "dependency depths: pass src_syntax={'depth': LongTensor(B, T)} "
                    "to the encoder (net_input['src_syntax'])"
                )
            if depth.shape != src_tokens.shape:
                raise ValueError(
                    f"src_syntax['depth'] has shape {tuple(depth.shape)}, "
                    f"expected src_tokens shape {tuple(src_tokens.shape)}"
                )
            depth = depth.to(device=src_tokens.device, dtype=torch.long)
            # dist_ij = depth(n_j) - depth(n_i)  (eq. 16)
            dep = relative_bucket(depth.unsqueeze(1) - depth.unsqueeze(2), self.rel_dep_l)
        return seq, dep

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
        src_syntax: Optional[Dict[str, Tensor]] = None,
    ):
        """See fairseq ``TransformerEncoderBase.forward``; ``src_syntax`` as above."""
        return self.forward_scriptable(
            src_tokens, src_lengths, return_all_hiddens, token_embeddings, src_syntax
        )

    def forward_scriptable(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
        src_syntax: Optional[Dict[str, Tensor]] = None,
    ):
        if not self.uses_relative:
            return super().forward_scriptable(
                src_tokens, src_lengths, return_all_hiddens, token_embeddings
            )
        rel_seq, rel_dep = self.relative_buckets(src_tokens, src_syntax)

        # --- from fairseq TransformerEncoderBase.forward_scriptable ---
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        has_pads = (
            torch.tensor(src_tokens.device.type == "xla") or encoder_padding_mask.any()
        )
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)
        # account for padding while computing the representation
        x = x * (
            1 - encoder_padding_mask.unsqueeze(-1).type_as(x) * has_pads.type_as(x)
        )
        # B x T x C -> T x B x C
        x = x.transpose(0, 1)

        encoder_states: List[Tensor] = []
        fc_results: List[Optional[Tensor]] = []
        if return_all_hiddens:
            encoder_states.append(x)

        for layer in self.layers:
            lr = layer(
                x,
                encoder_padding_mask=encoder_padding_mask if has_pads else None,
                rel_seq_buckets=rel_seq,
                rel_dep_buckets=rel_dep,
            )
            if isinstance(lr, tuple) and len(lr) == 2:
                x, fc_result = lr
            else:
                x = lr
                fc_result = None
            if return_all_hiddens:
                encoder_states.append(x)
                fc_results.append(fc_result)

        if self.layer_norm is not None:
            x = self.layer_norm(x)

        src_lengths = (
            src_tokens.ne(self.padding_idx)
            .sum(dim=1, dtype=torch.int32)
            .reshape(-1, 1)
            .contiguous()
        )
        return {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [encoder_padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": encoder_states,  # List[T x B x C]
            "fc_results": fc_results,  # List[T x B x C]
            "src_tokens": [],
            "src_lengths": [src_lengths],
        }

    def forward_torchscript(self, net_input: Dict[str, Any]):
        """Used by ``SequenceGenerator`` (``model.forward_encoder(net_input)``).

        ``src_syntax`` is a nested dict, which TorchScript's
        ``Dict[str, Tensor]`` cannot carry, so the eager path is always used.
        """
        return self.forward_non_torchscript(net_input)

    @torch.jit.unused
    def forward_non_torchscript(self, net_input: Dict[str, Any]):
        encoder_input = {k: v for k, v in net_input.items() if k != "prev_output_tokens"}
        return self.forward(**encoder_input)


class SyntaxTransformerDecoder(TransformerDecoderBase):
    """Transformer decoder whose layers may use Shaw relative positions."""

    def build_decoder_layer(self, cfg: TransformerConfig, no_encoder_attn: bool = False):
        layer = RelativeTransformerDecoderLayer(cfg, no_encoder_attn)
        return _wrap_layer(layer, cfg)


@register_model("syntax_transformer")
class SyntaxTransformerModel(TransformerModel):
    """fairseq (legacy, argparse) Transformer with relative / dependency positions.

    See the module docstring and paper 000. The model consumes
    ``net_input["src_syntax"]`` (a dict of side inputs, see
    :meth:`syntax_inputs`).
    """

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        super().add_args(parser)
        # no defaults here: architectures set them (fairseq convention)
        parser.add_argument(
            "--rel-seq-k",
            type=int,
            metavar="K",
            help="clipping distance k of Shaw relative positions clip(j-i, k) in the "
            "encoder self-attention (paper 000 eqs. 11-15); 0 disables",
        )
        parser.add_argument(
            "--rel-dep-l",
            type=int,
            metavar="L",
            help="clipping distance l of the relative dependency depth "
            "clip(depth_j - depth_i, l) in the encoder self-attention "
            "(paper 000 eqs. 16-20); 0 disables; needs src_syntax['depth']",
        )
        parser.add_argument(
            "--decoder-rel-seq-k",
            type=int,
            metavar="K",
            help="clipping distance k of Shaw relative positions in the decoder "
            "self-attention; 0 disables",
        )
        parser.add_argument(
            "--rel-no-keys",
            action="store_true",
            help="drop the relative key representations a^K/b^K (eq. 12/18 -> eq. 7)",
        )
        parser.add_argument(
            "--rel-no-values",
            action="store_true",
            help="drop the relative value representations a^V/b^V (eq. 11/17 -> eq. 5)",
        )

    @classmethod
    def build_model(cls, args, task):
        syntax_base_architecture(args)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return SyntaxTransformerEncoder(
            TransformerConfig.from_namespace(args), src_dict, embed_tokens
        )

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return SyntaxTransformerDecoder(
            cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention
        )

    def syntax_inputs(self) -> Set[str]:
        """Side inputs (keys of ``net_input['src_syntax']``) this model consumes."""
        return self.encoder.syntax_inputs()

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Tensor,
        prev_output_tokens: Tensor,
        return_all_hiddens: bool = True,
        features_only: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        src_syntax: Optional[Dict[str, Tensor]] = None,
    ):
        encoder_out = self.encoder(
            src_tokens,
            src_lengths=src_lengths,
            return_all_hiddens=return_all_hiddens,
            src_syntax=src_syntax,
        )
        return self.decoder(
            prev_output_tokens,
            encoder_out=encoder_out,
            features_only=features_only,
            alignment_layer=alignment_layer,
            alignment_heads=alignment_heads,
            src_lengths=src_lengths,
            return_all_hiddens=return_all_hiddens,
        )


# ----------------------------------------------------------------------------
# architectures
# ----------------------------------------------------------------------------


def _relative_defaults(args, seq_k: int, dep_l: int, decoder_seq_k: int) -> None:
    args.rel_seq_k = safe_getattr(args, "rel_seq_k", seq_k)
    args.rel_dep_l = safe_getattr(args, "rel_dep_l", dep_l)
    args.decoder_rel_seq_k = safe_getattr(args, "decoder_rel_seq_k", decoder_seq_k)
    args.rel_no_keys = safe_getattr(args, "rel_no_keys", False)
    args.rel_no_values = safe_getattr(args, "rel_no_values", False)


@register_model_architecture("syntax_transformer", "syntax_transformer")
def syntax_base_architecture(args) -> None:
    """Transformer_abs of paper 000 (no relative representations unless asked)."""
    _relative_defaults(args, 0, 0, 0)
    base_architecture(args)


@register_model_architecture("syntax_transformer", "syntax_transformer_iwslt_de_en")
def syntax_transformer_iwslt_de_en(args) -> None:
    _relative_defaults(args, 0, 0, 0)
    transformer_iwslt_de_en(args)


@register_model_architecture("syntax_transformer", "transformer_rel")
def transformer_rel(args) -> None:
    """Transformer_rel: Shaw et al. (k=2) in encoder and decoder self-attention."""
    _relative_defaults(args, 2, 0, 2)
    base_architecture(args)


@register_model_architecture("syntax_transformer", "transformer_rel_iwslt_de_en")
def transformer_rel_iwslt_de_en(args) -> None:
    _relative_defaults(args, 2, 0, 2)
    transformer_iwslt_de_en(args)


@register_model_architecture("syntax_transformer", "transformer_dep")
def transformer_dep(args) -> None:
    """Transformer_dep: relative dependency depth (l=2), encoder only (eqs. 17-20)."""
    _relative_defaults(args, 0, 2, 0)
    base_architecture(args)


@register_model_architecture("syntax_transformer", "transformer_dep_iwslt_de_en")
def transformer_dep_iwslt_de_en(args) -> None:
    _relative_defaults(args, 0, 2, 0)
    transformer_iwslt_de_en(args)


@register_model_architecture("syntax_transformer", "transformer_dep_rel")
def transformer_dep_rel(args) -> None:
    """Transformer_dep+rel: k=2 and l=2 summed in the encoder (eqs. 21-22), k=2 in the decoder."""
    _relative_defaults(args, 2, 2, 2)
    base_architecture(args)


@register_model_architecture("syntax_transformer", "transformer_dep_rel_iwslt_de_en")
def transformer_dep_rel_iwslt_de_en(args) -> None:
    _relative_defaults(args, 2, 2, 2)
    transformer_iwslt_de_en(args)
