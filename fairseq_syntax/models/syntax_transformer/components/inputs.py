"""Input components: what the encoder adds to its input, in this order.

Embedding stage (``embed = [f_emb(x_word, e_NSD) ; E_pos ; E_label ; E_head]``):

* ``nsd_input``: Ma et al. (2019) eqs. 5-10, the syntactic distance combined with the word;
* ``features``: Duan et al. (2019) sec. III.B, POS, label and head-position embeddings.

Then ``x = embed + PE(i)``, where the ``positions`` stage may replace fairseq's ``PE(i)``:

* ``structural_position``: Wang et al. (2019b), ``f(PE(i), PE(depth_i))`` replaces ``PE(i)``;

and the ``position`` stage adds to ``x``:

* ``spe``: Duan et al. 2019, eq. 5, syntactic positional encodings of head position and depth;
* ``nsd_position``: Ma et al. 2019, eqs. 15-16, the distance as a positional encoding.
"""

from dataclasses import dataclass
from typing import Dict, Optional, Set, Tuple

import torch
from torch import Tensor

from fairseq_syntax.modules.structural_position import StructuralPositionEmbedding
from fairseq_syntax.modules.syntactic_distance import DistanceEmbedding, nsd_positional_encoding
from fairseq_syntax.modules.syntactic_positional_encoding import SPE_FEATURES, SyntacticPositionalEncoding
from fairseq_syntax.modules.syntax_embedding import SYNTAX_EMBED_FEATURES, SyntaxFeatureEmbedding

from fairseq_syntax_core.vocabulary import DEPTH

from ..options import FLOAT32_MAX, ModelOptionError, ModelSizes, check_positive, opt, parse_name_list
from .base import BuildContext, EncoderBatch, InputComponent, register_input
from .nsd import NsdOptions
from .relative import StructuralOptions

#: ``--syntax-features`` names -> ``src_syntax`` keys (Duan et al. 2019, Table I)
FEATURE_KEYS: Dict[str, str] = SYNTAX_EMBED_FEATURES
#: ``--spe-features`` names -> ``src_syntax`` keys (Duan et al. 2019, eq. 5)
SPE_KEYS: Dict[str, str] = SPE_FEATURES


@dataclass
class FeatureOptions:
    """Duan et al. (2019) sec. III.B: feature embeddings concatenated to the word."""

    syntax_features: str = opt("none", "comma-separated subset of pos,label,head (or 'none'): embeddings of each "
                               "source token's POS tag, dependency label and head position, --syntax-feature-dim "
                               "each, concatenated to the word embedding (Duan et al. 2019, sec. III.B); the encoder width "
                               "becomes --encoder-embed-dim + n * --syntax-feature-dim", metavar="LIST")
    syntax_feature_dim: int = opt(32, "dimension of each syntax feature embedding (Duan et al. 2019: 32)", metavar="N")

    def check(self) -> None:
        check_positive(self, ("syntax_feature_dim",))
        _ = self.feature_names  # unknown, repeated or empty names raise

    @property
    def feature_names(self) -> Tuple[str, ...]:
        return parse_name_list(self.syntax_features, tuple(FEATURE_KEYS), "--syntax-features")


@dataclass
class SpeOptions:
    """Duan et al. (2019) eq. 5: syntactic positional encodings."""

    spe_features: str = opt("none", "comma-separated subset of head,depth (or 'none'): syntactic positional "
                            "encodings of the head position and the tree depth (root 1), staggered as Duan et al. (2019) "
                            "eq. 5, added with the ordinary positional encoding", metavar="LIST")
    spe_head_constant: float = opt(2000.0, "c_f of Duan et al. 2019, eq. 5 for the head position (paper: 2000)",
                                   metavar="C")
    spe_depth_constant: float = opt(400.0, "c_f of Duan et al. 2019, eq. 5 for the tree depth (paper: 400)", metavar="C")

    def check(self) -> None:
        for name in ("spe_head_constant", "spe_depth_constant"):
            value = getattr(self, name)
            if not 0 < value <= FLOAT32_MAX:  # NaN fails too
                paper = {"spe_head_constant": 2000, "spe_depth_constant": 400}[name]
                raise ModelOptionError(
                    f"--{name.replace('_', '-')} {value}: expected a number > 0 and at most {FLOAT32_MAX:.4g}, the "
                    f"largest float32 (c_f of Duan et al. 2019, eq. 5; the paper: {paper})"
                )
        _ = self.spe_names

    def check_sizes(self, sizes: ModelSizes) -> None:
        n_spe = len(self.spe_names)
        if n_spe and sizes.model_dim % (2 * n_spe) != 0:
            raise ModelOptionError(
                f"--spe-features {','.join(self.spe_names)}: the encoder model dimension {sizes.model_dim} "
                f"(--encoder-embed-dim {sizes.word_dim} + syntax embeddings) must be divisible by {2 * n_spe} "
                f"(Duan et al. 2019, eq. 5 staggers {n_spe} sin/cos pair(s))"
            )

    @property
    def spe_names(self) -> Tuple[str, ...]:
        return parse_name_list(self.spe_features, tuple(SPE_KEYS), "--spe-features")

@register_input
class DistanceInput(InputComponent):
    """Ma et al. 2019, eqs. 5-10: ``--nsd-input concat|add|linear``."""

    name = "nsd_input"
    stage = "embedding"
    options = NsdOptions

    def __init__(self, ctx: BuildContext) -> None:
        super().__init__()
        cfg = ctx.cfg
        self.key = cfg.nsd_key
        self.embed = DistanceEmbedding(
            str(cfg.nsd_input), ctx.word_dim, cfg.nsd_embed_dim, cfg.nsd_max_distance, scale=ctx.scale_embedding
        )

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["DistanceInput"]:
        return cls(ctx) if ctx.cfg.nsd_input != "none" else None

    def inputs(self) -> Set[str]:
        return {self.key}

    @classmethod
    def added_width(cls, cfg) -> int:
        return cfg.nsd_embed_dim if cfg.nsd_input == "concat" else 0  # eq. 8 widens; eqs. 9-10 do not

    def forward(self, x: Tensor, batch: EncoderBatch) -> Tensor:
        distance = batch.get(self.key, "the NSD input of Ma et al. (2019)")
        return self.embed(x, distance, batch.padding_mask)


@register_input
class FeatureEmbeddings(InputComponent):
    """Duan et al. 2019, sec. III.B: ``--syntax-features pos,label,head``, concatenated to the word."""

    name = "features"
    stage = "embedding"
    options = FeatureOptions

    def __init__(self, ctx: BuildContext) -> None:
        super().__init__()
        cfg = ctx.cfg
        self.features = cfg.feature_names
        needed = tuple(n for f, n in (("pos", "syntax_num_pos"), ("label", "syntax_num_labels")) if f in self.features)
        ctx.require_vocab(needed, f"--syntax-features {','.join(self.features)}")
        vocab = {k: int(v) if v is not None else None for k, v in ctx.vocab.items()}
        self.embed = SyntaxFeatureEmbedding(
            tuple(self.features),
            cfg.syntax_feature_dim,
            num_pos=vocab.get("syntax_num_pos") or 1,
            pos_pad=vocab.get("syntax_pos_pad") or 0,
            num_labels=vocab.get("syntax_num_labels") or 1,
            label_pad=vocab.get("syntax_label_pad") or 0,
            max_source_positions=ctx.max_source_positions,
            scale=ctx.scale_embedding,
        )

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["FeatureEmbeddings"]:
        return cls(ctx) if ctx.cfg.feature_names else None

    def inputs(self) -> Set[str]:
        return {FEATURE_KEYS[f] for f in self.features}

    @classmethod
    def added_width(cls, cfg) -> int:
        return len(cfg.feature_names) * cfg.syntax_feature_dim  # Duan et al. Table IV

    def forward(self, x: Tensor, batch: EncoderBatch) -> Tensor:
        return torch.cat([x, self.embed(batch.src_syntax, batch.src_tokens).to(x.dtype)], dim=-1)


@register_input
class StructuralPosition(InputComponent):
    """Wang et al. (2019b): the absolute structural position (depth) combined with ``PE(i)``."""

    name = "structural_position"
    stage = "positions"
    options = StructuralOptions

    def __init__(self, ctx: BuildContext) -> None:
        super().__init__()
        if not ctx.has_positions:
            raise ValueError(
                "--structural-absolute combines the depth with the sequential positions: "
                "it needs positional embeddings (drop --no-token-positional-embeddings)"
            )
        self.embed = StructuralPositionEmbedding(ctx.model_dim)

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["StructuralPosition"]:
        return cls(ctx) if ctx.cfg.structural_absolute else None

    def inputs(self) -> Set[str]:
        return {DEPTH}

    def forward(self, positions: Tensor, batch: EncoderBatch) -> Tensor:
        depth = batch.get(DEPTH, "the absolute structural position")
        return self.embed(positions, depth, batch.padding_mask)


@register_input
class SyntacticPositions(InputComponent):
    """Duan et al. 2019, eq. 5: ``--spe-features head,depth``."""

    name = "spe"
    stage = "position"
    options = SpeOptions

    def __init__(self, ctx: BuildContext) -> None:
        super().__init__()
        cfg = ctx.cfg
        self.features = cfg.spe_names
        constants = {"head": cfg.spe_head_constant, "depth": cfg.spe_depth_constant}
        self.encoding = SyntacticPositionalEncoding(
            tuple(self.features), ctx.model_dim, constants
        )

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["SyntacticPositions"]:
        return cls(ctx) if ctx.cfg.spe_names else None

    def inputs(self) -> Set[str]:
        return {SPE_KEYS[f] for f in self.features}

    def forward(self, x: Tensor, batch: EncoderBatch) -> Tensor:
        return x + self.encoding(batch.src_syntax, batch.src_tokens).to(x.dtype)


@register_input
class DistancePositions(InputComponent):
    """Ma et al. 2019, eqs. 15-16: ``--nsd-spe-lambda``."""

    name = "nsd_position"
    stage = "position"
    options = NsdOptions

    def __init__(self, ctx: BuildContext) -> None:
        super().__init__()
        cfg = ctx.cfg
        self.key = cfg.nsd_key
        self.max_distance = cfg.nsd_max_distance
        self.lam = cfg.nsd_spe_lambda
        self.dim = ctx.model_dim

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["DistancePositions"]:
        return cls(ctx) if ctx.cfg.nsd_spe_lambda > 0 else None

    def inputs(self) -> Set[str]:
        return {self.key}

    def forward(self, x: Tensor, batch: EncoderBatch) -> Tensor:
        distance = batch.get(self.key, "the NSD positional encoding of Ma et al. (2019)")
        return x + nsd_positional_encoding(distance, self.max_distance, self.lam, self.dim).to(x.dtype)

    def extra_repr(self) -> str:
        return f"lambda={self.lam}, max_distance={self.max_distance}"
