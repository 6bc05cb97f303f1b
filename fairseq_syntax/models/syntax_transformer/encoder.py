"""``SyntaxTransformerEncoder``: fairseq's Transformer encoder with the registered components.

Extra forward input ``src_syntax: Optional[Dict[str, Tensor]]``: the source features listed
by :meth:`~SyntaxTransformerEncoder.syntax_inputs`, each a LongTensor ``(B, T)`` padded like
``src_tokens`` (see ``fairseq_syntax/data/syntax_features.py``).

Widths: ``cfg.encoder.embed_dim`` is the *word* embedding width (that of ``embed_tokens``);
the layers, positional encodings and final layer norm are built at the encoder width, the
word width plus what the embedding-stage input components add (:func:`encoder_model_dim`).
"""

import copy
import re
from typing import Any, Dict, List, Optional, Set, Tuple

import torch
from torch import Tensor, nn

from fairseq.models.transformer import TransformerConfig, TransformerEncoderBase
from fairseq.modules import LayerNorm, PositionalEmbedding
from fairseq.modules.quant_noise import quant_noise as apply_quant_noise_
from fairseq.utils import safe_getattr

from .components import ATTENTION_COMPONENTS, INPUT_COMPONENTS, OUTPUT_COMPONENTS, BuildContext, EncoderBatch
from .config import SyntaxModelConfig, encoder_width
from .layers import SyntaxEncoderLayer, wrap_layer

__all__ = ["SyntaxTransformerEncoder", "encoder_model_dim", "with_encoder_dim", "VOCAB_ATTRS"]

#: args attributes recorded from the task by ``SyntaxTransformerModel.build_model``
VOCAB_ATTRS = ("syntax_num_pos", "syntax_pos_pad", "syntax_num_labels", "syntax_label_pad",
               "syntax_subword_label", "syntax_label_eos")

#: parameter paths of 0.1 -> 0.2 (``upgrade_state_dict_named``)
_RENAMED_PARAMETERS: List[Tuple[str, str]] = [
    (r"layers\.(\d+)\.rel_seq_embed\.", r"layers.\1.attention_terms.shaw."),
    (r"layers\.(\d+)\.rel_dep_embed\.", r"layers.\1.attention_terms.dependency_depth."),
    (r"layers\.(\d+)\.rel_stru_embed\.", r"layers.\1.attention_terms.structural."),
    (r"layers\.(\d+)\.gps_logits\.", r"layers.\1.attention_terms.gps."),
    (r"path_encoder\.", r"attention_components.gps.path_encoder."),
    (r"nsd_embed\.", r"input_components.nsd_input.embed."),
    (r"syntax_embed\.", r"input_components.features.embed."),
    (r"structural_pe\.", r"input_components.structural_position.embed."),
    (r"nsd_predictor\.", r"output_components.nsd_predict."),  # 0.2-0.3: the predictor was wired by hand
]


def _context(cfg: Any, word_dim: int) -> BuildContext:
    encoder = getattr(cfg, "encoder", None)
    return BuildContext(
        cfg=SyntaxModelConfig.from_args(cfg),
        word_dim=word_dim,
        model_dim=word_dim,
        num_layers=int(encoder.layers if encoder is not None else cfg.encoder_layers),
        num_heads=int(encoder.attention_heads if encoder is not None else cfg.encoder_attention_heads),
        max_source_positions=int(cfg.max_source_positions),
        scale_embedding=not bool(cfg.no_scale_embedding),
        has_positions=not bool(cfg.no_token_positional_embeddings),
        vocab={name: safe_getattr(cfg, name, None) for name in VOCAB_ATTRS},
    )


def encoder_model_dim(cfg: Any) -> int:
    """The encoder width for ``cfg`` (args or ``TransformerConfig``): the word width plus what the
    embedding-stage components add (Duan et al. Table IV; Ma et al. eq. 8)."""
    return encoder_width(SyntaxModelConfig.from_args(cfg), int(safe_getattr(cfg, "encoder_embed_dim")))


def with_encoder_dim(cfg: Any, dim: int) -> TransformerConfig:
    """A copy of ``cfg`` whose ``encoder.embed_dim`` is the encoder width ``dim``.

    fairseq sizes the encoder layers and the decoder's encoder-attention ``kdim``/``vdim`` by
    ``cfg.encoder.embed_dim``; the word embeddings were already built from the original value.
    """
    cfg = TransformerConfig.from_namespace(cfg)
    if cfg.encoder.embed_dim == dim:
        return cfg
    cfg = copy.deepcopy(cfg)
    cfg.encoder.embed_dim = dim
    return cfg


class SyntaxTransformerEncoder(TransformerEncoderBase):
    """Transformer encoder with input and attention components (see :mod:`.components`).

    ``input_components`` and ``attention_components`` hold the components the options turn on,
    by name; each layer holds its parts of the attention components (``attention_terms``).
    ``output_components`` read the final states for the training losses (with ``--nsd-predict``,
    ``nsd_predict``: each token's distance, Ma et al. 2019, eq. 11).
    """

    def __init__(self, cfg: TransformerConfig, dictionary, embed_tokens: nn.Embedding, return_fc: bool = False):
        word_dim = embed_tokens.embedding_dim
        ctx = _context(cfg, word_dim)
        inputs = [c for c in (cls.build(ctx) for cls in INPUT_COMPONENTS if cls.stage == "embedding") if c]
        ctx.model_dim = encoder_width(ctx.cfg, word_dim)
        inputs += [c for c in (cls.build(ctx) for cls in INPUT_COMPONENTS if cls.stage != "embedding") if c]
        if sum(c.stage == "positions" for c in inputs) > 1:
            raise ValueError("at most one component may replace the positional embedding")
        attention = [c for c in (cls.build(ctx) for cls in ATTENTION_COMPONENTS) if c]
        outputs = [c for c in (cls.build(ctx) for cls in OUTPUT_COMPONENTS) if c]
        self._attention_list = attention  # read by build_encoder_layer during fairseq's __init__
        self._next_layer_idx = 0
        super().__init__(with_encoder_dim(cfg, ctx.model_dim), dictionary, embed_tokens, return_fc=return_fc)
        del self._attention_list
        cfg = self.cfg
        self.syntax_cfg = ctx.cfg
        self.word_dim = word_dim
        self.model_dim = ctx.model_dim
        self.input_components = nn.ModuleDict({c.name: c for c in inputs})
        self.attention_components = nn.ModuleDict({c.name: c for c in attention})
        self.output_components = nn.ModuleDict({c.name: c for c in outputs})
        if self.model_dim != word_dim:
            self._resize(cfg, self.model_dim)

    @property
    def nsd_predictor(self) -> Optional[nn.Module]:
        """The source distance predictor (``--nsd-predict``, Ma et al. 2019, eq. 11), or None."""
        return self.output_components["nsd_predict"] if "nsd_predict" in self.output_components else None

    @property
    def nsd_key(self) -> Optional[str]:
        """The ``src_syntax`` key of the distances the predictor learns (None without ``--nsd-predict``)."""
        predictor = self.nsd_predictor
        return predictor.key if predictor is not None else None

    def _resize(self, cfg: TransformerConfig, dim: int) -> None:
        """fairseq sized these by the word embedding; the input is now ``dim`` wide."""
        if self.embed_positions is not None:
            self.embed_positions = PositionalEmbedding(
                cfg.max_source_positions, dim, self.padding_idx, learned=cfg.encoder.learned_pos
            )
        if self.layernorm_embedding is not None:
            self.layernorm_embedding = LayerNorm(dim, export=cfg.export)
        if self.quant_noise is not None:
            self.quant_noise = apply_quant_noise_(
                nn.Linear(dim, dim, bias=False), cfg.quant_noise.pq, cfg.quant_noise.pq_block_size
            )
        if self.layer_norm is not None:
            self.layer_norm = LayerNorm(dim, export=cfg.export)

    def build_encoder_layer(self, cfg: TransformerConfig):
        idx = self._next_layer_idx
        self._next_layer_idx = idx + 1
        embed_dim, heads = cfg.encoder.embed_dim, cfg.encoder.attention_heads
        terms = {c.name: c.layer_term(idx, embed_dim, heads) for c in self._attention_list if idx in c.layers()}
        layer = SyntaxEncoderLayer(cfg, return_fc=self.return_fc, terms=terms)
        return wrap_layer(layer, cfg)

    def syntax_inputs(self) -> Set[str]:
        """Keys of ``src_syntax`` consumed by this encoder's components (and by their outputs' losses)."""
        keys: Set[str] = set()
        for parts in (self.input_components, self.attention_components, self.output_components):
            for component in parts.values():
                keys |= component.inputs()
        return keys

    def component_layers(self, name: str) -> Tuple[int, ...]:
        """The layers an attention component acts in (``()`` when it is off)."""
        component = self.attention_components[name] if name in self.attention_components else None
        return component.layers() if component is not None else ()

    def forward_embedding(
        self,
        src_tokens: Tensor,
        token_embedding: Optional[Tensor] = None,
        src_syntax: Optional[Dict[str, Tensor]] = None,
        batch: Optional[EncoderBatch] = None,
    ) -> Tuple[Tensor, Tensor]:
        """Input of the first layer: the word embedding and the input components.

        ``embed`` = the embedding stage applied to ``embed_scale * E_word``;
        ``x = embed + PE(i)`` (or the ``positions`` stage's replacement), then the ``position``
        stage's terms, then fairseq's layernorm-embedding, dropout and quant-noise.
        Returns ``(x, embed)``, both ``(B, T, model_dim)``.
        """
        if batch is None:
            batch = EncoderBatch(src_tokens, src_syntax, self.padding_idx)
        if token_embedding is None:
            token_embedding = self.embed_tokens(src_tokens)
        x = self.embed_scale * token_embedding
        components = list(self.input_components.values())
        for component in components:
            if component.stage == "embedding":
                x = component(x, batch)
        embed = x
        if self.embed_positions is not None:
            positions = self.embed_positions(src_tokens)
            for component in components:
                if component.stage == "positions":
                    positions = component(positions, batch)
            x = embed + positions
        for component in components:
            if component.stage == "position":
                x = component(x, batch)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        return x, embed

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
        src_syntax: Optional[Dict[str, Tensor]] = None,
        return_outputs: bool = True,
    ):
        """See fairseq ``TransformerEncoderBase.forward``; ``src_syntax`` as above.

        With ``return_outputs`` the output dict also holds each output component's output under its
        ``output_key`` (``--nsd-predict``: ``"src_nsd_logits": [B x T x (2D+1)]``, Ma et al. 2019, eq. 11).
        """
        return self.forward_scriptable(
            src_tokens, src_lengths, return_all_hiddens, token_embeddings, src_syntax, return_outputs
        )

    def forward_scriptable(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
        src_syntax: Optional[Dict[str, Tensor]] = None,
        return_outputs: bool = True,
    ):
        batch = EncoderBatch(src_tokens, src_syntax, self.padding_idx)
        prepared = {name: c.prepare(batch) for name, c in self.attention_components.items()}

        # --- from fairseq TransformerEncoderBase.forward_scriptable ---
        encoder_padding_mask = batch.padding_mask
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings, src_syntax, batch)
        # account for padding while computing the representation; unlike fairseq, no `has_pads`
        # test (a host sync): an all-False mask changes nothing
        x = x * (1 - encoder_padding_mask.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C

        encoder_states: List[Tensor] = []
        fc_results: List[Optional[Tensor]] = []
        if return_all_hiddens:
            encoder_states.append(x)
        for layer in self.layers:
            lr = layer(x, encoder_padding_mask=encoder_padding_mask, prepared=prepared)
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

        src_lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        out = {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [encoder_padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": encoder_states,  # List[T x B x C]
            "fc_results": fc_results,  # List[T x B x C]
            "src_tokens": [],
            "src_lengths": [src_lengths],
        }
        if return_outputs:
            for component in self.output_components.values():
                out[component.output_key] = [component(x, batch)]  # batch first
        return out

    @torch.jit.export
    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        """fairseq's reordering, keeping the output components' outputs when present."""
        new = super().reorder_encoder_out(encoder_out, new_order)
        for key in self.output_keys():
            if len(encoder_out.get(key, [])) > 0:
                new[key] = [encoder_out[key][0].index_select(0, new_order)]
        return new

    def output_keys(self) -> List[str]:
        """The keys under which the output components put their outputs."""
        return [component.output_key for component in self.output_components.values()]

    def forward_torchscript(self, net_input: Dict[str, Any]):
        """Used by ``SequenceGenerator``; ``src_syntax`` (a nested dict) keeps it on the eager path."""
        return self.forward_non_torchscript(net_input)

    @torch.jit.unused
    def forward_non_torchscript(self, net_input: Dict[str, Any]):
        # the decoder's inputs (tgt_syntax: target-side NSD) are not the encoder's
        encoder_input = {k: v for k, v in net_input.items() if k not in ("prev_output_tokens", "tgt_syntax")}
        return self.forward(**encoder_input, return_outputs=False)  # decoding needs no training outputs

    def upgrade_state_dict_named(self, state_dict, name):
        """fairseq's upgrades, then the parameter paths of 0.1 checkpoints moved to the components."""
        state_dict = super().upgrade_state_dict_named(state_dict, name)
        prefix = f"{name}." if name else ""
        for key in list(state_dict.keys()):
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix):]
            for old, new in _RENAMED_PARAMETERS:
                renamed = re.sub("^" + old, new, rest)
                if renamed != rest:
                    state_dict[prefix + renamed] = state_dict.pop(key)
                    break
        return state_dict
