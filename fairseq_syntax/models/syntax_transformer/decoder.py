"""``SyntaxTransformerDecoder``: fairseq's Transformer decoder with our layers and the decoder components.

Layers: :class:`~.layers.SyntaxDecoderLayer` (Shaw relative positions, ``--decoder-rel-seq-k``).

Target-side ideas are decoder components (:mod:`.components.decoder_side`), built from the registry
in its order; this decoder knows none by name. Each may replace ``tgt_syntax`` for a training
forward, prepares its per-forward state, acts on the scaled word embedding (adding a term with the
positional embedding), and writes its outputs into ``extra`` from the final states. Ma et al.
(2019)'s target distances are :mod:`.components.target_nsd`.
"""

import copy
import math
from typing import Any, Dict, List, Optional, Set

import torch
from torch import Tensor

from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase

from .components.decoder_side import DECODER_COMPONENTS, DecoderBuildContext, DecoderComponent, decoder_model_dim
from .components.target_nsd import target_distances
from .config import SyntaxModelConfig
from .layers import SyntaxDecoderLayer, wrap_layer

__all__ = ["SyntaxTransformerDecoder", "with_decoder_dim"]


def with_decoder_dim(cfg: TransformerConfig, dim: int) -> TransformerConfig:
    """A copy of ``cfg`` whose ``decoder.embed_dim`` (the layers' width) is ``dim``; ``output_dim`` stays."""
    if cfg.decoder.embed_dim == dim:
        return cfg
    cfg = copy.deepcopy(cfg)
    cfg.decoder.embed_dim = dim
    return cfg


class SyntaxTransformerDecoder(TransformerDecoderBase):
    """Transformer decoder whose layers may use Shaw relative positions, with the decoder components.

    A component's modules are registered under the names it gives (the target distances':
    ``nsd_input``, ``nsd_predictor``, ``nsd_feedback``); with no component on, the decoder is
    fairseq's, parameter for parameter.
    """

    def __init__(self, cfg: TransformerConfig, dictionary, embed_tokens, no_encoder_attn: bool = False,
                 output_projection=None) -> None:
        syntax = SyntaxModelConfig.from_args(cfg)
        word_dim = embed_tokens.embedding_dim
        model_dim = decoder_model_dim(syntax, word_dim)
        super().__init__(with_decoder_dim(cfg, model_dim), dictionary, embed_tokens,
                         no_encoder_attn=no_encoder_attn, output_projection=output_projection)
        if model_dim != word_dim:
            # a widening component's embedding already gives the layers' width; the scale stays the words'
            self.project_in_dim = None
            self.embed_scale = 1.0 if self.cfg.no_scale_embedding else math.sqrt(word_dim)
        self.syntax_cfg = syntax
        ctx = DecoderBuildContext(syntax, word_dim, model_dim, self.output_embed_dim,
                                  scale_embedding=not self.cfg.no_scale_embedding)
        built = (kind.build(ctx) for kind in DECODER_COMPONENTS)
        #: the decoder components, in registry order (plain objects: their modules are registered below)
        self.target_components: List[DecoderComponent] = [c for c in built if c is not None]
        for component in self.target_components:
            for name, module in component.modules().items():
                self.add_module(name, module)

    def build_decoder_layer(self, cfg: TransformerConfig, no_encoder_attn: bool = False):
        return wrap_layer(SyntaxDecoderLayer(cfg, no_encoder_attn), cfg)

    def target_syntax_inputs(self) -> Set[str]:
        """Keys of ``tgt_syntax`` / ``target_syntax`` the components read or predict (e.g. ``{"distance"}``, or empty)."""
        return set().union(*(c.target_inputs() for c in self.target_components))

    def training_outputs(self) -> Set[str]:
        """The ``extra`` keys of the components' outputs that only training losses read."""
        return set().union(*(c.output_keys() for c in self.target_components))

    # ------------------------------------------------------------------ forward

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        features_only: bool = False,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        src_lengths: Optional[Any] = None,
        return_all_hiddens: bool = False,
        tgt_syntax: Optional[Dict[str, Tensor]] = None,
    ):
        """fairseq's decoder forward; ``tgt_syntax`` holds the components' target inputs (see the module doc)."""
        if self.training and incremental_state is None:
            for component in self.target_components:
                tgt_syntax = component.training_inputs(self, prev_output_tokens, encoder_out, tgt_syntax)
        x, extra = self.extract_features(
            prev_output_tokens,
            encoder_out=encoder_out,
            incremental_state=incremental_state,
            full_context_alignment=full_context_alignment,
            alignment_layer=alignment_layer,
            alignment_heads=alignment_heads,
            tgt_syntax=tgt_syntax,
        )
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        tgt_syntax: Optional[Dict[str, Tensor]] = None,
    ):
        return self.extract_features_scriptable(
            prev_output_tokens, encoder_out, incremental_state, full_context_alignment, alignment_layer,
            alignment_heads, tgt_syntax,
        )

    def extract_features_scriptable(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        tgt_syntax: Optional[Dict[str, Tensor]] = None,
    ):
        """fairseq's, with the components acting after the word embedding and on the final states.

        Returns ``(features, extra)``; ``extra`` adds the components' outputs (the target distances':
        ``"tgt_nsd_logits"`` and ``"tgt_nsd_distance"``).
        """
        prepared = [c.prepare(self, prev_output_tokens, incremental_state, tgt_syntax) for c in self.target_components]

        full_tokens = prev_output_tokens
        # --- from fairseq TransformerDecoderBase.extract_features_scriptable (ve-fairseq 0.12.3) ---
        bs, slen = prev_output_tokens.size()
        if alignment_layer is None:
            alignment_layer = self.num_layers - 1

        enc: Optional[Tensor] = None
        padding_mask: Optional[Tensor] = None
        if encoder_out is not None and len(encoder_out["encoder_out"]) > 0:
            enc = encoder_out["encoder_out"][0]
        if encoder_out is not None and len(encoder_out["encoder_padding_mask"]) > 0:
            padding_mask = encoder_out["encoder_padding_mask"][0]

        # embed positions
        positions = None
        if self.embed_positions is not None:
            positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)

        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            if positions is not None:
                positions = positions[:, -1:]

        # Prevent torchscript exporting issue for dynamic quant embedding
        prev_output_tokens = prev_output_tokens.contiguous()
        # embed tokens and positions
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)

        syntax_positions: Optional[Tensor] = None
        for component, state in zip(self.target_components, prepared):
            x, term = component.embed(x, state, prev_output_tokens.eq(self.padding_idx))
            if term is not None:
                syntax_positions = term if syntax_positions is None else syntax_positions + term

        if self.quant_noise is not None:
            x = self.quant_noise(x)

        if self.project_in_dim is not None:
            x = self.project_in_dim(x)

        if positions is not None:
            x += positions
        if syntax_positions is not None:
            x = x + syntax_positions

        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)

        x = self.dropout_module(x)

        # B x T x C -> T x B x C
        x = x.transpose(0, 1)

        self_attn_padding_mask: Optional[Tensor] = None
        # fairseq tests `prev_output_tokens.eq(pad).any()` (a host sync); here the mask is always
        # given in training (all-False changes nothing) and left out in incremental decoding, whose
        # prefixes hold no padding (fairseq's generator writes no pad into them)
        if self.cross_self_attention or incremental_state is None:
            self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)

        # decoder layers
        attn: Optional[Tensor] = None
        inner_states: List[Optional[Tensor]] = [x]
        for idx, layer in enumerate(self.layers):
            if incremental_state is None and not full_context_alignment:
                self_attn_mask = self.buffered_future_mask(x)
            else:
                self_attn_mask = None

            x, layer_attn, _ = layer(
                x,
                enc,
                padding_mask,
                incremental_state,
                self_attn_mask=self_attn_mask,
                self_attn_padding_mask=self_attn_padding_mask,
                need_attn=bool((idx == alignment_layer)),
                need_head_weights=bool((idx == alignment_layer)),
            )
            inner_states.append(x)
            if layer_attn is not None and idx == alignment_layer:
                attn = layer_attn.float().to(x)

        if attn is not None:
            if alignment_heads is not None:
                attn = attn[:alignment_heads]

            # average probabilities over heads
            attn = attn.mean(dim=0)

        if self.layer_norm is not None:
            x = self.layer_norm(x)

        # T x B x C -> B x T x C
        x = x.transpose(0, 1)

        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        # --- end of fairseq's ---

        extra: Dict[str, Any] = {"attn": [attn], "inner_states": inner_states}
        for component, state in zip(self.target_components, prepared):
            component.outputs(self, x, full_tokens, incremental_state, state, extra)
        return x, extra

    def feedback_distances(self, prev_output_tokens: Tensor,
                           encoder_out: Optional[Dict[str, List[Tensor]]]) -> Tensor:
        """The input distances generation feeds (:meth:`~.components.target_nsd.TargetDistances.feedback_distances`)."""
        component = target_distances(self)
        if component is None:
            raise ValueError("this decoder reads no target distances (--nsd-target-input none, "
                             "--nsd-target-spe-lambda 0): nothing is fed back")
        return component.feedback_distances(self, prev_output_tokens, encoder_out)
