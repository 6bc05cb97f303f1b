"""``syntax_transformer``: the one syntax-aware Transformer; each paper is a preset of its components.

Papers 003 and 002 act on the encoder input (``forward_embedding``: feature embeddings,
syntactic positional encodings, NSD), paper 001 and its baselines on encoder self-attention
(GPS term, PASCAL weights, structural positions), and paper 000 ("Dependency-Based Relative
Positional Encoding for Transformer NMT") on self-attention keys and values:

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

Input components (papers 003 and 002), all in :meth:`SyntaxTransformerEncoder.forward_embedding`:

* ``--syntax-features pos,label,parent`` / ``--syntax-feature-dim``: feature embeddings
  concatenated to the word embedding (paper 003 sec. III.B,
  :mod:`fairseq_syntax.modules.syntax_embedding`);
* ``--spe-features parent,depth``: syntactic positional encodings (paper 003 eq. 5,
  :mod:`fairseq_syntax.modules.syntactic_positional_encoding`);
* ``--nsd-input concat|add|linear``, ``--nsd-spe-lambda``, ``--nsd-predict``: the dependency
  syntactic distance as input (paper 002 eqs. 5-10), as positional encoding (eqs. 15-16) and as
  an output predicted from the encoder states (eq. 11; losses eqs. 19-20 in the criterion
  ``label_smoothed_cross_entropy_with_nsd``), :mod:`fairseq_syntax.modules.syntactic_distance`.

Dimensions: ``--encoder-embed-dim`` is the **word** embedding dimension; the encoder's model
dimension (layers, attention, FFN input, positional encodings) is
``encoder_embed_dim + n_features * syntax_feature_dim (+ nsd_embed_dim for --nsd-input concat)``
(:func:`encoder_model_dim`). The decoder keeps its own ``--decoder-embed-dim``; its
encoder-decoder attention reads the wider encoder states through fairseq's ``kdim``/``vdim``
(``TransformerDecoderLayerBase.build_encoder_attention`` uses ``cfg.encoder.embed_dim``). The
paper-003 presets size the decoder like the encoder's model dimension (as the paper's
OpenNMT-py models, one ``d_model`` for both sides), or like the encoder's word embeddings when
``--share-all-embeddings`` is given (the shared table has the word dimension).
"""

import argparse
import copy
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

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
from fairseq.modules import LayerNorm, PositionalEmbedding
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.quant_noise import quant_noise as apply_quant_noise_
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from fairseq.utils import safe_getattr

from fairseq_syntax_core import trees
from fairseq_syntax_core.errors import UsageError
from fairseq_syntax.modules.relative_attention import (
    RelativeEmbedding,
    RelativeInputs,
    RelativeMultiheadAttention,
    relative_bucket,
    sequence_relative_positions,
)
from fairseq_syntax.modules.parent_attention import ParentScaledWeights
from fairseq_syntax.modules.structural_position import (
    StructuralPositionEmbedding,
    structural_relative_buckets,
)
from fairseq_syntax.modules.syntactic_position import (
    SyntacticPathEncoder,
    SyntacticPositionLogits,
    same_sentence_mask,
)
from fairseq_syntax.modules.syntactic_distance import (
    NSD_DISTANCES,
    NSD_INPUT_MODES,
    NSD_LOGITS_KEY,
    NSD_MASK_KEY,
    DistanceEmbedding,
    DistancePredictor,
    nsd_positional_encoding,
)
from fairseq_syntax.modules.syntactic_positional_encoding import (
    SPE_DEFAULT_CONSTANTS,
    SPE_FEATURES,
    SyntacticPositionalEncoding,
)
from fairseq_syntax.modules.syntax_embedding import (
    SYNTAX_EMBED_FEATURES,
    SyntaxFeatureEmbedding,
    parse_feature_list,
    side_input,
)

__all__ = [
    "RelativeTransformerEncoderLayer",
    "RelativeTransformerDecoderLayer",
    "SyntaxTransformerEncoder",
    "SyntaxTransformerDecoder",
    "SyntaxTransformerModel",
    "SyntaxInputOptions",
    "encoder_model_dim",
    "paper003_heads",
    "DEPTH_KEY",
    "NSD_LOGITS_KEY",
]

DEPTH_KEY = "depth"
#: args attributes recorded from the task by ``SyntaxTransformerModel.build_model``
_VOCAB_ATTRS = ("syntax_num_pos", "syntax_pos_pad", "syntax_num_labels", "syntax_label_pad")
PARENTS_KEY = "parents"
LABELS_KEY = "labels"


def parse_layer_list(value: Any, num_layers: int, flag: str) -> Tuple[int, ...]:
    """``--gps-layers`` / ``--pascal-layers``: ``"0,2"``, ``"all"``, ``"none"`` or ``""`` -> sorted 0-based indices."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        items = [str(v) for v in value]
    else:
        text = str(value).strip().lower()
        if text in ("", "none", "-1"):
            return ()
        if text == "all":
            return tuple(range(num_layers))
        items = [t for t in text.replace(" ", "").split(",") if t]
    try:
        layers = sorted(set(int(t) for t in items))
    except ValueError:
        raise ValueError(f"{flag} takes comma-separated 0-based layer indices, 'all' or 'none', got {value!r}")
    bad = [i for i in layers if i < 0 or i >= num_layers]
    if bad:
        raise ValueError(f"{flag} {value!r}: layers {bad} out of range for {num_layers} encoder layers (0-based)")
    return tuple(layers)


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


def _parse_bool(value: Any) -> bool:
    """``--nsd-predict`` values: ``true/false``, ``1/0``, ``yes/no`` (or a bool from a preset)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", "none"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {value!r}")


@dataclass(frozen=True)
class SyntaxInputOptions:
    """The input/output syntax components of the encoder, read from the model's args/cfg.

    See the module docstring; ``from_cfg`` accepts an ``argparse.Namespace`` or a
    ``TransformerConfig`` and fills absent options with "off".
    """

    features: Tuple[str, ...] = ()
    feature_dim: int = 32
    spe_features: Tuple[str, ...] = ()
    spe_constants: Tuple[Tuple[str, float], ...] = ()
    nsd_distance: str = "dependency"
    nsd_input: str = "none"
    nsd_embed_dim: int = 32
    nsd_spe_lambda: float = 0.0
    nsd_predict: bool = False
    nsd_max_distance: int = 64

    @classmethod
    def from_cfg(cls, cfg: Any) -> "SyntaxInputOptions":
        def get(name: str, default: Any) -> Any:
            value = safe_getattr(cfg, name, default)
            return default if value is None else value

        nsd_input = str(get("nsd_input", "none"))
        if nsd_input not in NSD_INPUT_MODES:
            raise ValueError(f"--nsd-input must be one of {list(NSD_INPUT_MODES)}, got {nsd_input!r}")
        nsd_distance = str(get("nsd_distance", "dependency"))
        if nsd_distance not in NSD_DISTANCES:
            raise ValueError(f"--nsd-distance must be one of {list(NSD_DISTANCES)}, got {nsd_distance!r}")
        return cls(
            features=parse_feature_list(get("syntax_features", None), tuple(SYNTAX_EMBED_FEATURES), "--syntax-features"),
            feature_dim=int(get("syntax_feature_dim", 32)),
            spe_features=parse_feature_list(get("spe_features", None), tuple(SPE_FEATURES), "--spe-features"),
            spe_constants=(
                ("parent", float(get("spe_parent_constant", SPE_DEFAULT_CONSTANTS["parent"]))),
                ("depth", float(get("spe_depth_constant", SPE_DEFAULT_CONSTANTS["depth"]))),
            ),
            nsd_distance=nsd_distance,
            nsd_input=nsd_input,
            nsd_embed_dim=int(get("nsd_embed_dim", 32)),
            nsd_spe_lambda=float(get("nsd_spe_lambda", 0.0)),
            nsd_predict=_parse_bool(get("nsd_predict", False)),
            nsd_max_distance=int(get("nsd_max_distance", 64)),
        )

    @property
    def uses_distance(self) -> bool:
        """Whether any NSD component (input, positional encoding, prediction) is on."""
        return self.nsd_input != "none" or self.nsd_spe_lambda > 0 or self.nsd_predict

    def model_dim(self, word_dim: int) -> int:
        """Encoder model dimension: word + concatenated parts (paper 003 Table IV; paper 002 eq. 8)."""
        dim = word_dim + len(self.features) * self.feature_dim
        if self.nsd_input == "concat":
            dim += self.nsd_embed_dim
        return dim

    def syntax_inputs(self) -> Set[str]:
        """``src_syntax`` keys these components consume (the NSD target included)."""
        keys = {SYNTAX_EMBED_FEATURES[f] for f in self.features}
        keys |= {SPE_FEATURES[f] for f in self.spe_features}
        if self.uses_distance:
            keys.add(NSD_DISTANCES[self.nsd_distance])
        return keys


def encoder_model_dim(cfg: Any) -> int:
    """The encoder's model dimension for ``cfg`` (args or ``TransformerConfig``), see module doc."""
    return SyntaxInputOptions.from_cfg(cfg).model_dim(int(safe_getattr(cfg, "encoder_embed_dim")))


def _with_encoder_dim(cfg: Any, dim: int) -> TransformerConfig:
    """A copy of ``cfg`` whose ``encoder.embed_dim`` is the encoder model dimension ``dim``.

    fairseq sizes the encoder layers and the decoder's encoder-attention ``kdim``/``vdim`` by
    ``cfg.encoder.embed_dim``; the word embeddings were already built from the original value.
    """
    cfg = TransformerConfig.from_namespace(cfg)
    if cfg.encoder.embed_dim == dim:
        return cfg
    cfg = copy.deepcopy(cfg)
    cfg.encoder.embed_dim = dim
    return cfg


def paper003_heads(model_dim: int) -> int:
    """Attention heads for a model dimension, as paper 003 Table IV chose them.

    Head dimension 64 where it divides the model dimension, else 32: 352 -> 11, 320 -> 5,
    608 -> 19, 576 -> 9 (Table IV), 512 -> 8. Otherwise the smallest divisor of the model
    dimension that is at least 32 is the head dimension.
    """
    for head_dim in (64, 32):
        if model_dim % head_dim == 0:
            return model_dim // head_dim
    head_dim = next(d for d in range(32, model_dim + 1) if model_dim % d == 0) if model_dim >= 32 else model_dim
    return model_dim // head_dim


class RelativeTransformerEncoderLayer(TransformerEncoderLayerBase):
    """Encoder layer whose self-attention uses relative representations.

    Holds this layer's own tables: ``rel_seq_embed`` (``w^K, w^V`` of eqs.
    13-14, ``2k+1`` rows) and ``rel_dep_embed`` (eqs. 19-20, ``2l+1`` rows),
    each of size ``head_dim`` and shared across heads.
    """

    def __init__(self, cfg: TransformerConfig, return_fc: bool = False, layer_idx: int = 0) -> None:
        super().__init__(cfg, return_fc=return_fc)
        self.layer_idx = int(layer_idx)
        num_layers = int(cfg.encoder.layers)
        head_dim = self.embed_dim // cfg.encoder.attention_heads
        keys = not _bool_opt(cfg, "rel_no_keys")
        values = not _bool_opt(cfg, "rel_no_values")
        seq_k = _int_opt(cfg, "rel_seq_k")
        dep_l = _int_opt(cfg, "rel_dep_l")
        stru_k = _int_opt(cfg, "structural_k")
        # paper 001 eq. 5: this layer's own W_s^Q, W_s^K over the shared path encodings s
        self.gps_logits: Optional[SyntacticPositionLogits] = (
            SyntacticPositionLogits(
                int(safe_getattr(cfg, "gps_path_dim", 64) or 64), self.embed_dim, cfg.encoder.attention_heads
            )
            if self.layer_idx in parse_layer_list(safe_getattr(cfg, "gps_layers", None), num_layers, "--gps-layers")
            else None
        )
        # PASCAL: the (parameter-free) parent weights are computed once by the encoder
        self.pascal = self.layer_idx in parse_layer_list(
            safe_getattr(cfg, "pascal_layers", None), num_layers, "--pascal-layers"
        )
        # Wang et al. (2019b): this layer's own structural relative key/value tables
        self.rel_stru_embed: Optional[RelativeEmbedding] = (
            RelativeEmbedding(stru_k, head_dim, keys=keys, values=values) if stru_k > 0 else None
        )
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
        gps_states: Optional[Tensor] = None,
        same_sentence: Optional[Tensor] = None,
        parent_scale: Optional[Tensor] = None,
        rel_stru_buckets: Optional[Tensor] = None,
    ):
        """fairseq's encoder layer with relative self-attention and the paper 001 logit terms.

        Args:
            rel_seq_buckets: ``(T, T)`` row indices ``clip(j - i, k) + k``
                (eq. 15); computed from positions when None.
            rel_dep_buckets: ``(B, T, T)`` row indices
                ``clip(depth_j - depth_i, l) + l`` (eqs. 16, 19-20); required
                when this layer has dependency tables.
            gps_states: ``(B, T, d_s)`` path encodings ``s_i`` (paper 001 sec. 3.2), computed
                once per forward by the encoder; required in a ``--gps-layers`` layer.
            same_sentence: ``(B, 1, T, T)`` bool, where the eq. 5 syntax term is kept (sec. 3.3).
            parent_scale: ``(B, H, T, T)`` PASCAL ``logit_scale`` (computed once per forward);
                used in a ``--pascal-layers`` layer.
            rel_stru_buckets: ``(B, T, T)`` structural relative buckets (Wang et al. 2019b).
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
        if self.rel_stru_embed is not None:
            if rel_stru_buckets is None:
                raise ValueError(
                    "this encoder layer uses structural relative positions (--structural-k > 0) "
                    "but received no structural bucket indices"
                )
            relative.append((self.rel_stru_embed, rel_stru_buckets))
        attn_bias: Optional[Tensor] = None
        if self.gps_logits is not None:
            if gps_states is None:
                raise ValueError("this encoder layer is a --gps-layers layer but received no path encodings")
            attn_bias = self.gps_logits(gps_states, same_sentence)
        logit_scale: Optional[Tensor] = None
        if self.pascal:
            if parent_scale is None:
                raise ValueError("this encoder layer is a --pascal-layers layer but received no parent weights")
            logit_scale = parent_scale
        with self.self_attn.relative_scope(relative, attn_bias=attn_bias, logit_scale=logit_scale):
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
    """Transformer encoder with the syntax components of papers 000, 003 and 002.

    Extra forward input ``src_syntax: Optional[Dict[str, Tensor]]``: the source features
    listed by :meth:`syntax_inputs`, each a LongTensor ``(B, T)`` padded like ``src_tokens``
    (``"depth"`` for relative dependency depth, paper 000; ``"pos"``, ``"labels"``,
    ``"heads"`` for paper 003 embeddings; ``"heads"``, ``"depth"`` for paper 003 SPE;
    ``"distance"`` for paper 002).

    ``cfg.encoder.embed_dim`` is the word embedding dimension (that of ``embed_tokens``); the
    layers, positional encodings and final layer norm are built at the model dimension
    :func:`encoder_model_dim` (word + concatenated syntax embeddings).
    """

    def __init__(
        self,
        cfg: TransformerConfig,
        dictionary,
        embed_tokens: torch.nn.Embedding,
        return_fc: bool = False,
    ) -> None:
        opts = SyntaxInputOptions.from_cfg(cfg)
        word_dim = embed_tokens.embedding_dim
        model_dim = opts.model_dim(word_dim)
        # build_encoder_layer numbers the layers it builds (fairseq's base __init__ builds them)
        self._next_layer_idx = 0
        super().__init__(_with_encoder_dim(cfg, model_dim), dictionary, embed_tokens, return_fc=return_fc)
        cfg = self.cfg
        self.rel_seq_k = _int_opt(cfg, "rel_seq_k")
        self.rel_dep_l = _int_opt(cfg, "rel_dep_l")
        self.syntax_options = opts
        self.word_dim = word_dim
        self.model_dim = model_dim
        if model_dim != word_dim:
            # fairseq sized these by the word embedding; the input is now model_dim wide
            if self.embed_positions is not None:
                self.embed_positions = PositionalEmbedding(
                    cfg.max_source_positions, model_dim, self.padding_idx, learned=cfg.encoder.learned_pos
                )
            if self.layernorm_embedding is not None:
                self.layernorm_embedding = LayerNorm(model_dim, export=cfg.export)
            if self.quant_noise is not None:
                self.quant_noise = apply_quant_noise_(
                    torch.nn.Linear(model_dim, model_dim, bias=False),
                    cfg.quant_noise.pq,
                    cfg.quant_noise.pq_block_size,
                )
            if self.layer_norm is not None:
                self.layer_norm = LayerNorm(model_dim, export=cfg.export)
        scale = not cfg.no_scale_embedding
        # paper 002: d_D as input (eqs. 5-10), positional encoding (eqs. 15-16), output (eq. 11)
        self.nsd_key: Optional[str] = NSD_DISTANCES[opts.nsd_distance] if opts.uses_distance else None
        self.nsd_max_distance = opts.nsd_max_distance
        self.nsd_spe_lambda = opts.nsd_spe_lambda
        self.nsd_embed: Optional[DistanceEmbedding] = (
            DistanceEmbedding(opts.nsd_input, word_dim, opts.nsd_embed_dim, opts.nsd_max_distance, scale=scale)
            if opts.nsd_input != "none"
            else None
        )
        self.nsd_predictor: Optional[DistancePredictor] = (
            DistancePredictor(model_dim, opts.nsd_max_distance) if opts.nsd_predict else None
        )
        # paper 003: feature embeddings (sec. III.B) and syntactic positional encodings (eq. 5)
        self.syntax_embed: Optional[SyntaxFeatureEmbedding] = None
        if opts.features:
            vocab = {name: safe_getattr(cfg, name, None) for name in _VOCAB_ATTRS}
            needed = [n for f, n in (("pos", "syntax_num_pos"), ("label", "syntax_num_labels")) if f in opts.features]
            if any(vocab[n] is None for n in needed):
                raise ValueError(
                    f"--syntax-features {','.join(opts.features)} needs the label/POS dictionaries of the "
                    "syntax_translation task (SyntaxTransformerModel.build_model records their sizes)"
                )
            self.syntax_embed = SyntaxFeatureEmbedding(
                opts.features,
                opts.feature_dim,
                num_pos=int(vocab["syntax_num_pos"] or 1),
                pos_pad=int(vocab["syntax_pos_pad"] or 0),
                num_labels=int(vocab["syntax_num_labels"] or 1),
                label_pad=int(vocab["syntax_label_pad"] or 0),
                max_source_positions=cfg.max_source_positions,
                scale=scale,
            )
        self.spe: Optional[SyntacticPositionalEncoding] = (
            SyntacticPositionalEncoding(opts.spe_features, model_dim, dict(opts.spe_constants))
            if opts.spe_features
            else None
        )
        # paper 001 and its baselines: components computed once per forward, used per layer
        num_layers = int(cfg.encoder.layers)
        heads = int(cfg.encoder.attention_heads)
        self.gps_layers = parse_layer_list(safe_getattr(cfg, "gps_layers", None), num_layers, "--gps-layers")
        self.pascal_layers = parse_layer_list(
            safe_getattr(cfg, "pascal_layers", None), num_layers, "--pascal-layers"
        )
        self.structural_k = _int_opt(cfg, "structural_k")
        self.path_encoder: Optional[SyntacticPathEncoder] = None
        if self.gps_layers:
            num_labels = safe_getattr(cfg, "syntax_num_labels", None)
            if num_labels is None:
                raise ValueError(
                    "--gps-layers needs the dependency-label dictionary of the syntax_translation task "
                    "(SyntaxTransformerModel.build_model records its size)"
                )
            self.path_encoder = SyntacticPathEncoder(
                int(num_labels),
                int(safe_getattr(cfg, "gps_label_dim", 64) or 64),
                int(safe_getattr(cfg, "gps_path_dim", 64) or 64),
                padding_idx=safe_getattr(cfg, "syntax_label_pad", None),
            )
        self.parent_weights: Optional[ParentScaledWeights] = None
        if self.pascal_layers:
            parent_heads = int(safe_getattr(cfg, "pascal_heads", 5))
            if not 0 < parent_heads <= heads:
                raise ValueError(
                    f"--pascal-heads {parent_heads} must be in [1, --encoder-attention-heads {heads}]"
                )
            subword = safe_getattr(cfg, "syntax_subword_label", None)
            self.parent_weights = ParentScaledWeights(
                heads,
                parent_heads=parent_heads,
                variance=float(safe_getattr(cfg, "pascal_variance", 1.0)),
                subword_parent=str(safe_getattr(cfg, "pascal_subword_parent", "mean") or "mean"),
                subword_label=int(subword) if subword is not None and int(subword) >= 0 else None,
            )
        self.structural_pe: Optional[StructuralPositionEmbedding] = None
        if _parse_bool(safe_getattr(cfg, "structural_absolute", False) or False):
            if self.embed_positions is None:
                raise ValueError(
                    "--structural-absolute combines the depth with the sequential positions: "
                    "it needs positional embeddings (drop --no-token-positional-embeddings)"
                )
            self.structural_pe = StructuralPositionEmbedding(model_dim)

    def build_encoder_layer(self, cfg: TransformerConfig):
        idx = getattr(self, "_next_layer_idx", 0)
        self._next_layer_idx = idx + 1
        layer = RelativeTransformerEncoderLayer(cfg, return_fc=self.return_fc, layer_idx=idx)
        return _wrap_layer(layer, cfg)

    @property
    def uses_relative(self) -> bool:
        return self.rel_seq_k > 0 or self.rel_dep_l > 0

    def syntax_inputs(self) -> Set[str]:
        """Keys of ``src_syntax`` consumed by this encoder (and by its NSD loss)."""
        keys = set(self.syntax_options.syntax_inputs())
        if self.rel_dep_l > 0:
            keys.add(DEPTH_KEY)
        if self.path_encoder is not None:  # paper 001: label paths over the tree
            keys |= {PARENTS_KEY, LABELS_KEY, DEPTH_KEY}
        if self.parent_weights is not None:  # PASCAL: parent positions, words from <subword> arcs
            keys |= {PARENTS_KEY, LABELS_KEY}
        if self.structural_k > 0:  # Wang et al. 2019b relative: depths and root paths
            keys |= {PARENTS_KEY, DEPTH_KEY}
        if self.structural_pe is not None:  # absolute structural position: the depth
            keys.add(DEPTH_KEY)
        return keys

    def tree_components(
        self, src_tokens: Tensor, src_syntax: Optional[Dict[str, Tensor]]
    ) -> Dict[str, Optional[Tensor]]:
        """The per-forward syntax inputs of the layers, computed once for all of them (batched).

        ``gps_states`` ``(B, T, d_s)`` and ``same_sentence`` ``(B, 1, T, T)`` (paper 001),
        ``parent_scale`` ``(B, H, T, T)`` (PASCAL), ``rel_stru_buckets`` ``(B, T, T)``
        (Wang et al. 2019b); None where not configured.
        """
        out: Dict[str, Optional[Tensor]] = {
            "gps_states": None, "same_sentence": None, "parent_scale": None, "rel_stru_buckets": None,
        }
        if self.path_encoder is None and self.parent_weights is None and self.structural_k <= 0:
            return out
        parents = side_input(src_syntax, PARENTS_KEY, src_tokens, "the tree components of paper 001")
        if self.path_encoder is not None:
            labels = side_input(src_syntax, LABELS_KEY, src_tokens, "the syntactic path encoder (paper 001)")
            depth = side_input(src_syntax, DEPTH_KEY, src_tokens, "the syntactic path encoder (paper 001)")
            out["gps_states"] = self.path_encoder(parents, labels, depth, src_tokens.eq(self.padding_idx))
            out["same_sentence"] = same_sentence_mask(parents)
        if self.parent_weights is not None:
            labels = side_input(src_syntax, LABELS_KEY, src_tokens, "PASCAL (parent-scaled attention)")
            out["parent_scale"] = self.parent_weights(parents, labels)
        if self.structural_k > 0:
            depth = side_input(src_syntax, DEPTH_KEY, src_tokens, "structural relative positions")
            out["rel_stru_buckets"] = structural_relative_buckets(parents, depth, self.structural_k)
        return out

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
            dep = relative_bucket(trees.relative_depth(depth), self.rel_dep_l)  # eq. 16
        return seq, dep

    def forward_embedding(
        self,
        src_tokens: Tensor,
        token_embedding: Optional[Tensor] = None,
        src_syntax: Optional[Dict[str, Tensor]] = None,
    ) -> Tuple[Tensor, Tensor]:
        """Input of the first layer: the word embedding and the syntax input components.

        ``embed = [f_emb(x_word, e_NSD) ; E_pos ; E_label ; E_parent]`` (paper 002 eqs. 6, 8-10;
        paper 003 sec. III.B; absent parts dropped), then
        ``x = embed + PE(i) + SPE_003(parent, depth) + PE_NSD(d)`` (fairseq's positional
        encoding; paper 003 eq. 5; paper 002 eqs. 15-16), then fairseq's layernorm-embedding,
        dropout and quant-noise. Returns ``(x, embed)``, both ``(B, T, model_dim)``.
        """
        padding_mask = src_tokens.eq(self.padding_idx)
        if token_embedding is None:
            token_embedding = self.embed_tokens(src_tokens)
        x = self.embed_scale * token_embedding
        distance: Optional[Tensor] = None
        if self.nsd_embed is not None or self.nsd_spe_lambda > 0:
            assert self.nsd_key is not None
            distance = side_input(src_syntax, self.nsd_key, src_tokens, "the NSD input of paper 002")
        if self.nsd_embed is not None:
            x = self.nsd_embed(x, distance, padding_mask)
        if self.syntax_embed is not None:
            x = torch.cat([x, self.syntax_embed(src_syntax, src_tokens).to(x.dtype)], dim=-1)
        embed = x
        if self.structural_pe is not None:
            # Wang et al. 2019b: f(PE_seq(i), PE_stru(depth_i)) in place of the sequential position
            depth = side_input(src_syntax, DEPTH_KEY, src_tokens, "the absolute structural position")
            x = embed + self.structural_pe(self.embed_positions(src_tokens), depth, padding_mask).to(embed.dtype)
        elif self.embed_positions is not None:
            x = embed + self.embed_positions(src_tokens)
        if self.spe is not None:
            x = x + self.spe(src_syntax, src_tokens).to(x.dtype)
        if distance is not None and self.nsd_spe_lambda > 0:
            pe = nsd_positional_encoding(distance, self.nsd_max_distance, self.nsd_spe_lambda, self.model_dim)
            x = x + pe.to(x.dtype)
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
        return_nsd: bool = True,
    ):
        """See fairseq ``TransformerEncoderBase.forward``; ``src_syntax`` as above.

        With ``--nsd-predict`` (and ``return_nsd``) the output dict also holds
        ``"src_nsd_logits": [B x T x (2D+1)]``, the logits of paper 002 eq. 11.
        """
        return self.forward_scriptable(
            src_tokens, src_lengths, return_all_hiddens, token_embeddings, src_syntax, return_nsd
        )

    def forward_scriptable(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
        src_syntax: Optional[Dict[str, Tensor]] = None,
        return_nsd: bool = True,
    ):
        rel_seq, rel_dep = self.relative_buckets(src_tokens, src_syntax)
        tree = self.tree_components(src_tokens, src_syntax)

        # --- from fairseq TransformerEncoderBase.forward_scriptable ---
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        has_pads = (
            torch.tensor(src_tokens.device.type == "xla") or encoder_padding_mask.any()
        )
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings, src_syntax)
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
                **tree,
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
        out = {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [encoder_padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": encoder_states,  # List[T x B x C]
            "fc_results": fc_results,  # List[T x B x C]
            "src_tokens": [],
            "src_lengths": [src_lengths],
        }
        if return_nsd and self.nsd_predictor is not None:
            out[NSD_LOGITS_KEY] = [self.nsd_predictor(x).transpose(0, 1)]  # B x T x (2D+1), eq. 11
        return out

    @torch.jit.export
    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        """fairseq's reordering, keeping the NSD logits when present."""
        new = super().reorder_encoder_out(encoder_out, new_order)
        if len(encoder_out.get(NSD_LOGITS_KEY, [])) > 0:
            new[NSD_LOGITS_KEY] = [encoder_out[NSD_LOGITS_KEY][0].index_select(0, new_order)]
        return new

    def forward_torchscript(self, net_input: Dict[str, Any]):
        """Used by ``SequenceGenerator`` (``model.forward_encoder(net_input)``).

        ``src_syntax`` is a nested dict, which TorchScript's
        ``Dict[str, Tensor]`` cannot carry, so the eager path is always used.
        """
        return self.forward_non_torchscript(net_input)

    @torch.jit.unused
    def forward_non_torchscript(self, net_input: Dict[str, Any]):
        encoder_input = {k: v for k, v in net_input.items() if k != "prev_output_tokens"}
        return self.forward(**encoder_input, return_nsd=False)  # decoding needs no NSD logits


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

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """fairseq's, with a checkpoint that does not fit this data-bin reported as such."""
        try:
            return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        except RuntimeError as error:
            if "size mismatch" not in str(error):
                raise
            first = next((l.strip() for l in str(error).splitlines() if "size mismatch" in l), str(error))
            raise UsageError(
                "the checkpoint does not fit this data-bin: its dictionaries (words, labels or POS) have "
                f"other sizes ({first[:200]}). Decode with the data-bin it was trained on"
            ) from None

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
        """fairseq's hub loader, returning a hub interface that parses the user's own text."""
        from fairseq import hub_utils

        from fairseq_syntax.hub import SyntaxHubInterface

        x = hub_utils.from_pretrained(
            model_name_or_path, checkpoint_file, data_name_or_path, archive_map=cls.hub_models(), **kwargs
        )
        return SyntaxHubInterface(x["args"], x["task"], x["models"])

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
        # paper 003: syntax features as embeddings (sec. III.B) and as positional encodings (eq. 5)
        parser.add_argument(
            "--syntax-features",
            type=str,
            metavar="LIST",
            help="comma-separated subset of pos,label,parent (or 'none'): embeddings of the POS tag, "
            "dependency label and parent position of each source token, each --syntax-feature-dim wide, "
            "concatenated to the word embedding (paper 003 sec. III.B); the encoder model dimension is "
            "--encoder-embed-dim + n * --syntax-feature-dim",
        )
        parser.add_argument(
            "--syntax-feature-dim",
            type=int,
            metavar="N",
            help="dimension of each syntax feature embedding (paper 003: 32)",
        )
        parser.add_argument(
            "--spe-features",
            type=str,
            metavar="LIST",
            help="comma-separated subset of parent,depth (or 'none'): syntactic positional encodings of "
            "the parent position and the tree depth (root = 1), staggered as paper 003 eq. 5 and added "
            "with the ordinary positional encoding",
        )
        parser.add_argument(
            "--spe-parent-constant", type=float, metavar="C",
            help="c_f of paper 003 eq. 5 for the parent position (paper: 2000)",
        )
        parser.add_argument(
            "--spe-depth-constant", type=float, metavar="C",
            help="c_f of paper 003 eq. 5 for the tree depth (paper: 400)",
        )
        # paper 002: neural syntactic distance on the source side
        parser.add_argument(
            "--nsd-distance",
            choices=list(NSD_DISTANCES),
            help="which syntactic distance (paper 002): dependency = d_D(i) = i - h(i) (eq. 4)",
        )
        parser.add_argument(
            "--nsd-input",
            choices=list(NSD_INPUT_MODES),
            help="the distance as an input embedding combined with the word embedding (paper 002 "
            "eqs. 5-10): concat (eq. 8, adds --nsd-embed-dim to the model dimension), add (eq. 9), "
            "linear W[x;e]+b (eq. 10); none disables",
        )
        parser.add_argument(
            "--nsd-embed-dim", type=int, metavar="N",
            help="dimension of the distance embedding for --nsd-input concat (add/linear use the word dim)",
        )
        parser.add_argument(
            "--nsd-spe-lambda", type=float, metavar="LAMBDA",
            help="period parameter lambda_SPE of the distance positional encoding (paper 002 eqs. 15-16; "
            "paper's best 40); 0 disables",
        )
        parser.add_argument(
            "--nsd-predict", type=_parse_bool, metavar="BOOL",
            help="predict each source token's distance from the encoder states (paper 002 eq. 11); "
            "train with --criterion label_smoothed_cross_entropy_with_nsd",
        )
        # paper 001 (Xie et al. 2021): global syntactic position, and its two baselines
        parser.add_argument(
            "--gps-layers", type=str, metavar="LIST",
            help="0-based encoder layers (comma list, 'all' or 'none') whose self-attention adds the "
            "syntactic-position term of paper 001 eq. 5 (paper's best: 0, the bottom layer)",
        )
        parser.add_argument(
            "--gps-label-dim", type=int, metavar="N",
            help="dependency-label embedding size of the path LSTM (paper 001 sec. 3.2)",
        )
        parser.add_argument(
            "--gps-path-dim", type=int, metavar="N",
            help="hidden size d_s of the path LSTM, i.e. of the syntactic position s_i (paper 001 sec. 3.2)",
        )
        parser.add_argument(
            "--pascal-layers", type=str, metavar="LIST",
            help="0-based encoder layers (comma list, 'all' or 'none') with parent-scaled self-attention "
            "(PASCAL, Bugliarello & Okazaki 2020; paper: 0)",
        )
        parser.add_argument(
            "--pascal-heads", type=int, metavar="N",
            help="number of parent-scaled heads (the first N) in each PASCAL layer (paper: 5 of 8)",
        )
        parser.add_argument(
            "--pascal-variance", type=float, metavar="S2",
            help="variance sigma^2 of PASCAL's Gaussian centred on the parent (paper: 1)",
        )
        parser.add_argument(
            "--pascal-subword-parent", choices=["mean", "first", "tree"],
            help="parent position of split words for PASCAL: mean = middle of the parent word's pieces "
            "(paper), first = its first piece, tree = the piece tree as stored",
        )
        parser.add_argument(
            "--structural-k", type=int, metavar="K",
            help="clip of the structural relative positions of Wang et al. (2019b), used Shaw-style "
            "(own key/value tables) in every encoder layer; 0 disables",
        )
        parser.add_argument(
            "--structural-absolute", type=_parse_bool, metavar="BOOL",
            help="absolute structural position (tree depth) combined with the sequential position "
            "(Wang et al. 2019b): tanh(W_seq PE(i) + W_stru PE(depth_i) + b) replaces PE(i)",
        )
        parser.add_argument(
            "--nsd-max-distance", type=int, metavar="D",
            help="distances are clipped to [-D, D] for the embedding table, the positional encoding "
            "and the 2D+1 classes of the predictor",
        )

    @classmethod
    def build_model(cls, args, task):
        syntax_base_architecture(args)
        _record_syntax_vocab(args, task)
        model_dim = encoder_model_dim(args)
        heads = int(args.encoder_attention_heads)
        if model_dim % heads != 0:
            raise ValueError(
                f"the encoder model dimension {model_dim} (--encoder-embed-dim {args.encoder_embed_dim} "
                f"+ syntax embeddings) is not divisible by --encoder-attention-heads {heads}; "
                f"e.g. {paper003_heads(model_dim)} heads would do"
            )
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return SyntaxTransformerEncoder(
            TransformerConfig.from_namespace(args), src_dict, embed_tokens
        )

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        # the encoder-decoder attention reads encoder states of the encoder model dimension
        cfg = _with_encoder_dim(args, encoder_model_dim(args))
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
        """fairseq's forward; returns ``(decoder_out, extra)``.

        With ``--nsd-predict``, ``extra`` also holds the encoder's eq. 11 logits under
        ``"src_nsd_logits"`` (``[B x T x (2D+1)]``) and the source padding mask under
        ``"src_nsd_padding_mask"`` (``[B x T]``), for ``label_smoothed_cross_entropy_with_nsd``
        (one encoder pass serves the translation and the distance losses).
        """
        encoder_out = self.encoder(
            src_tokens,
            src_lengths=src_lengths,
            return_all_hiddens=return_all_hiddens,
            src_syntax=src_syntax,
        )
        decoder_out = self.decoder(
            prev_output_tokens,
            encoder_out=encoder_out,
            features_only=features_only,
            alignment_layer=alignment_layer,
            alignment_heads=alignment_heads,
            src_lengths=src_lengths,
            return_all_hiddens=return_all_hiddens,
        )
        if len(encoder_out.get(NSD_LOGITS_KEY, [])) > 0:
            decoder_out[1][NSD_LOGITS_KEY] = encoder_out[NSD_LOGITS_KEY]
            decoder_out[1][NSD_MASK_KEY] = encoder_out["encoder_padding_mask"]
        return decoder_out


def _record_syntax_vocab(args, task) -> None:
    """Record the label/POS dictionary sizes and pads of the task in ``args``.

    Kept in the checkpoint's args like fairseq's other derived settings, so a model reloaded
    with a task that has no dictionaries still builds; a syntax_translation task overrides them.
    """
    for prefix, name in (("label", "label_dict"), ("pos", "pos_dict")):
        dictionary = getattr(task, name, None)
        if dictionary is None:
            continue
        plural = "labels" if prefix == "label" else "pos"
        setattr(args, f"syntax_num_{plural}", len(dictionary))
        setattr(args, f"syntax_{prefix}_pad", dictionary.pad())
        if prefix == "label":
            # PASCAL recovers words from the <subword> arcs of the piece trees (-1: none)
            setattr(args, "syntax_subword_label", dictionary.indices.get("<subword>", -1))


# ----------------------------------------------------------------------------
# architectures
# ----------------------------------------------------------------------------


def _relative_defaults(args, seq_k: int, dep_l: int, decoder_seq_k: int) -> None:
    args.rel_seq_k = safe_getattr(args, "rel_seq_k", seq_k)
    args.rel_dep_l = safe_getattr(args, "rel_dep_l", dep_l)
    args.decoder_rel_seq_k = safe_getattr(args, "decoder_rel_seq_k", decoder_seq_k)
    args.rel_no_keys = safe_getattr(args, "rel_no_keys", False)
    args.rel_no_values = safe_getattr(args, "rel_no_values", False)


def _tree_defaults(
    args,
    gps_layers: str = "none",
    gps_label_dim: int = 64,
    gps_path_dim: int = 128,
    pascal_layers: str = "none",
    pascal_heads: int = 5,
    structural_k: int = 0,
    structural_absolute: bool = False,
) -> None:
    """Defaults of the paper 001 components (off unless a preset turns them on; flags win)."""
    args.gps_layers = safe_getattr(args, "gps_layers", gps_layers)
    args.gps_label_dim = safe_getattr(args, "gps_label_dim", gps_label_dim)
    args.gps_path_dim = safe_getattr(args, "gps_path_dim", gps_path_dim)
    args.pascal_layers = safe_getattr(args, "pascal_layers", pascal_layers)
    args.pascal_heads = safe_getattr(args, "pascal_heads", pascal_heads)
    args.pascal_variance = safe_getattr(args, "pascal_variance", 1.0)
    args.pascal_subword_parent = safe_getattr(args, "pascal_subword_parent", "mean")
    args.structural_k = safe_getattr(args, "structural_k", structural_k)
    args.structural_absolute = safe_getattr(args, "structural_absolute", structural_absolute)


def _syntax_input_defaults(
    args,
    features: str = "none",
    spe_features: str = "none",
    nsd_input: str = "none",
    nsd_spe_lambda: float = 0.0,
    nsd_predict: bool = False,
) -> None:
    """Defaults of the paper 003 / paper 002 input components (off unless a preset turns them on)."""
    args.syntax_features = safe_getattr(args, "syntax_features", features)
    args.syntax_feature_dim = safe_getattr(args, "syntax_feature_dim", 32)
    args.spe_features = safe_getattr(args, "spe_features", spe_features)
    args.spe_parent_constant = safe_getattr(args, "spe_parent_constant", SPE_DEFAULT_CONSTANTS["parent"])
    args.spe_depth_constant = safe_getattr(args, "spe_depth_constant", SPE_DEFAULT_CONSTANTS["depth"])
    args.nsd_distance = safe_getattr(args, "nsd_distance", "dependency")
    args.nsd_input = safe_getattr(args, "nsd_input", nsd_input)
    args.nsd_embed_dim = safe_getattr(args, "nsd_embed_dim", 32)
    args.nsd_spe_lambda = safe_getattr(args, "nsd_spe_lambda", nsd_spe_lambda)
    args.nsd_predict = safe_getattr(args, "nsd_predict", nsd_predict)
    args.nsd_max_distance = safe_getattr(args, "nsd_max_distance", 64)


def _paper003_sizes(args, word_dim: int, dropout: float) -> None:
    """Sizes of paper 003 Table IV from the word dimension and the selected features.

    Encoder: word ``word_dim``, model dimension ``word + n * feature_dim``, heads by
    :func:`paper003_heads`, FFN ``4 x`` model dimension (Table IV: 1408, 1280, 2432, 2304).
    Decoder: the encoder's model dimension (one ``d_model``, as in the paper), or the word
    dimension with ``--share-all-embeddings``; heads and FFN by the same rules. Any of them
    given on the command line wins.
    """
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", word_dim)
    model_dim = encoder_model_dim(args)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", paper003_heads(model_dim))
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 4 * model_dim)
    shared = bool(safe_getattr(args, "share_all_embeddings", False))
    args.decoder_embed_dim = safe_getattr(
        args, "decoder_embed_dim", args.encoder_embed_dim if shared else model_dim
    )
    args.decoder_attention_heads = safe_getattr(
        args, "decoder_attention_heads", paper003_heads(args.decoder_embed_dim)
    )
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 4 * args.decoder_embed_dim)
    args.dropout = safe_getattr(args, "dropout", dropout)
    base_architecture(args)


@register_model_architecture("syntax_transformer", "syntax_transformer")
def syntax_base_architecture(args) -> None:
    """Transformer_abs of paper 000 (no relative representations unless asked)."""
    _relative_defaults(args, 0, 0, 0)
    _syntax_input_defaults(args)
    _tree_defaults(args)
    base_architecture(args)


def _paper003_base(args) -> None:
    _paper003_sizes(args, word_dim=512, dropout=0.1)


def _paper003_small(args) -> None:
    _paper003_sizes(args, word_dim=256, dropout=0.3)


def _register_preset(
    name: str,
    sizes: Callable[[Any], None],
    doc: str,
    relative: Tuple[int, int, int] = (0, 0, 0),
    inputs: Optional[Dict[str, Any]] = None,
    tree: Optional[Dict[str, Any]] = None,
) -> None:
    """Register architecture ``name``: component defaults, then sizes (flags given by the user win).

    ``relative`` is (encoder k, encoder l, decoder k) of paper 000; ``inputs`` the paper 003/002
    input components (:func:`_syntax_input_defaults`); ``tree`` the paper 001 components
    (:func:`_tree_defaults`); ``sizes`` fairseq's ``base_architecture``,
    ``transformer_iwslt_de_en`` or the paper 003 sizes.
    """

    def architecture(args) -> None:
        _relative_defaults(args, *relative)
        _syntax_input_defaults(args, **(inputs or {}))
        _tree_defaults(args, **(tree or {}))
        sizes(args)

    architecture.__name__ = architecture.__qualname__ = name
    architecture.__doc__ = doc
    register_model_architecture("syntax_transformer", name)(architecture)


_PAPER003_EMBED = {"features": "pos,label,parent"}
_PAPER003_SPE = {"features": "pos,label", "spe_features": "parent,depth"}
_PAPER002_NSD = {"nsd_input": "linear", "nsd_spe_lambda": 40.0, "nsd_predict": True}

# name, sizes, docstring, components. Each paper's base preset uses fairseq's base sizes (6+6,
# 512, 8 heads) unless its paper says otherwise; `_iwslt_de_en` presets are the small variants.
PRESETS = [
    ("syntax_transformer_iwslt_de_en", transformer_iwslt_de_en,
     "Transformer_abs at transformer_iwslt_de_en sizes.", {}),
    # paper 000 (Omote et al. 2019)
    ("transformer_rel", base_architecture,
     "Transformer_rel: Shaw et al. (k=2) in encoder and decoder self-attention (paper 000 eqs. 11-15).",
     {"relative": (2, 0, 2)}),
    ("transformer_rel_iwslt_de_en", transformer_iwslt_de_en, "transformer_rel, small.", {"relative": (2, 0, 2)}),
    ("transformer_dep", base_architecture,
     "Transformer_dep: relative dependency depth (l=2), encoder only (paper 000 eqs. 16-20).",
     {"relative": (0, 2, 0)}),
    ("transformer_dep_iwslt_de_en", transformer_iwslt_de_en, "transformer_dep, small.", {"relative": (0, 2, 0)}),
    ("transformer_dep_rel", base_architecture,
     "Transformer_dep+rel: k=2 and l=2 summed in the encoder (paper 000 eqs. 21-22), k=2 in the decoder.",
     {"relative": (2, 2, 2)}),
    ("transformer_dep_rel_iwslt_de_en", transformer_iwslt_de_en, "transformer_dep_rel, small.",
     {"relative": (2, 2, 2)}),
    # paper 003 (Duan et al.)
    ("transformer_syntax_embed", _paper003_base,
     "POS, label and parent-position embeddings concatenated to the word (paper 003 Tables II-IV, En-De): "
     "word 512 + 3 x 32 = 608, 19 heads, FFN 2432, dropout 0.1.", {"inputs": _PAPER003_EMBED}),
    ("transformer_syntax_embed_iwslt_de_en", _paper003_small,
     "Paper 003 Table IV De-En: word 256 + 3 x 32 = 352, 11 heads, FFN 1408, dropout 0.3.",
     {"inputs": _PAPER003_EMBED}),
    ("transformer_syntax_spe", _paper003_base,
     "POS and label embeddings + SPE of parent position and depth (paper 003 Table II row 4, Table V): "
     "word 512 + 2 x 32 = 576, 9 heads, FFN 2304, dropout 0.1.", {"inputs": _PAPER003_SPE}),
    ("transformer_syntax_spe_iwslt_de_en", _paper003_small,
     "Paper 003 Table IV De-En with SPE: 256 + 2 x 32 = 320, 5 heads, FFN 1280, dropout 0.3.",
     {"inputs": _PAPER003_SPE}),
    # paper 002 (Ma et al. 2019)
    ("transformer_nsd", base_architecture,
     "Dependency NSD d_D as input (paper 002 eq. 10, linear), PE (lambda 40) and output (eq. 11); "
     "train with --criterion label_smoothed_cross_entropy_with_nsd.", {"inputs": _PAPER002_NSD}),
    ("transformer_nsd_iwslt_de_en", transformer_iwslt_de_en, "transformer_nsd, small.",
     {"inputs": _PAPER002_NSD}),
    # paper 001 (Xie et al. 2021) and its baselines; label embeddings 64 and path LSTM 128 (base),
    # 32 and 64 (small): paper 001 does not state them
    ("transformer_gps", base_architecture,
     "Global syntactic position (paper 001 secs. 3.2-3.3): the eq. 5 syntax term in encoder layer 0 "
     "(the paper's best, Table 3).", {"tree": {"gps_layers": "0", "gps_label_dim": 64, "gps_path_dim": 128}}),
    ("transformer_gps_iwslt_de_en", transformer_iwslt_de_en, "transformer_gps, small (path LSTM 32 -> 64).",
     {"tree": {"gps_layers": "0", "gps_label_dim": 32, "gps_path_dim": 64}}),
    ("transformer_pascal", base_architecture,
     "PASCAL (Bugliarello & Okazaki 2020): 5 of 8 heads of encoder layer 0 parent-scaled, variance 1.",
     {"tree": {"pascal_layers": "0", "pascal_heads": 5}}),
    ("transformer_pascal_iwslt_de_en", transformer_iwslt_de_en,
     "PASCAL, small: 3 of its 4 heads (5/8 rounded up), layer 0, variance 1.",
     {"tree": {"pascal_layers": "0", "pascal_heads": 3}}),
    ("transformer_structural", base_architecture,
     "Structural positions (Wang et al. 2019b): absolute (depth with the sequential position) and relative "
     "(clip 8, Shaw-style keys and values) in every encoder layer; sequential positions kept.",
     {"tree": {"structural_k": 8, "structural_absolute": True}}),
    ("transformer_structural_iwslt_de_en", transformer_iwslt_de_en, "transformer_structural, small.",
     {"tree": {"structural_k": 8, "structural_absolute": True}}),
]

for _name, _sizes, _doc, _components in PRESETS:
    _register_preset(_name, _sizes, _doc, **_components)
