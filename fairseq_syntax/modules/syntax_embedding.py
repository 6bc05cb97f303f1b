"""Syntax features as input embeddings (Duan et al., section III.B, Tables II-IV).

POS tag, dependency label and head (parent) position of every source token each get an embedding
of ``--syntax-feature-dim`` dimensions (paper: 32), **concatenated** to the word embedding
("All these extra syntactic feature embeddings are concatenated to the original input
embedding as the model input", sec. III.B). The encoder's model dimension therefore grows to
``word_dim + n * feature_dim`` (paper Table IV: 256 + 3 x 32 = 352 with 11 heads; 512 + 3 x 32
= 608 with 19 heads).

Inputs (``net_input["src_syntax"]``, each ``(B, T)`` padded like ``src_tokens``):

=========  ==========  ========================================================================
feature    key         table
=========  ==========  ========================================================================
``pos``    ``pos``     ``len(task.pos_dict)`` rows, padding row ``pos_dict.pad()``
``label``  ``labels``  ``len(task.label_dict)`` rows, padding row ``label_dict.pad()``
``head``   ``heads``   ``max_source_positions + 1`` rows: the 1-based head ("parent") position of paper
                       003 Table I, 0 for a root (sec. IV.A); a learned table, as sec. III.B
                       stresses ("can be updated during training, which is essentially
                       important for effectively using parent position feature")
=========  ==========  ========================================================================

The parts are concatenated in the fixed order ``pos, label, head`` whatever the order given
on the command line, so a checkpoint's layout does not depend on how the flag was spelled.
Each table is initialised as fairseq initialises word embeddings (``N(0, dim^-1/2)``, padding
row zero) and scaled by ``sqrt(dim)`` like fairseq scales word embeddings (unless
``--no-scale-embedding``), so every part of the concatenated input starts at unit scale.
"""

import math
from typing import Dict, Optional, Sequence, Set, Tuple

import torch
from torch import Tensor, nn

from fairseq.models.transformer.transformer_base import Embedding

from fairseq_syntax_core.vocabulary import HEADS, LABELS, POS

__all__ = [
    "SYNTAX_EMBED_FEATURES",
    "SyntaxFeatureEmbedding",
    "parse_feature_list",
    "feature_embedding",
    "side_input",
]

#: feature name on the command line -> key of ``net_input["src_syntax"]`` (Duan et al. 2019, Table I)
SYNTAX_EMBED_FEATURES: Dict[str, str] = {"pos": POS, "label": LABELS, "head": HEADS}
#: the table names releases up to 0.2 gave in checkpoints -> today's (``upgrade_state_dict_named``)
LEGACY_TABLE_NAMES: Dict[str, str] = {"parent": "head"}


def parse_feature_list(value: Optional[object], allowed: Sequence[str], flag: str) -> Tuple[str, ...]:
    """``"pos,label"`` -> ``("pos", "label")`` in the canonical order of ``allowed``.

    ``None``, ``""`` and ``"none"`` give the empty tuple. A list or tuple is accepted as well
    (architecture functions may set one). Unknown or repeated names raise ``ValueError``
    naming ``flag``.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        names = [v.strip() for v in value.split(",") if v.strip()]
    else:
        names = [str(v).strip() for v in value]
    if names == ["none"]:
        return ()
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise ValueError(f"{flag}: unknown feature(s) {unknown}; choose from {list(allowed)} or 'none'")
    if len(set(names)) != len(names):
        raise ValueError(f"{flag}: a feature is listed twice in {value!r}")
    return tuple(n for n in allowed if n in names)


def feature_embedding(num_embeddings: int, dim: int, padding_idx: Optional[int]) -> nn.Embedding:
    """fairseq's word-embedding table (``N(0, dim^-1/2)``, pad row 0); without a padding row when None."""
    if padding_idx is not None:
        return Embedding(num_embeddings, dim, padding_idx)
    m = nn.Embedding(num_embeddings, dim)
    nn.init.normal_(m.weight, mean=0.0, std=dim ** -0.5)
    return m


def side_input(src_syntax: Optional[Dict[str, Tensor]], key: str, like: Tensor, who: str) -> Tensor:
    """``src_syntax[key]`` as a LongTensor on ``like``'s device, with a clear error if absent."""
    value = src_syntax.get(key) if src_syntax is not None else None
    if value is None:
        raise ValueError(
            f"{who} needs the source feature {key!r}: pass src_syntax={{{key!r}: LongTensor(B, T)}} "
            "(net_input['src_syntax']; the syntax_translation task adds what model.syntax_inputs() lists)"
        )
    if value.shape != like.shape:
        raise ValueError(f"src_syntax[{key!r}] has shape {tuple(value.shape)}, expected {tuple(like.shape)}")
    return value.to(device=like.device, dtype=torch.long)


class SyntaxFeatureEmbedding(nn.Module):
    """Concatenated POS / label / head-position embeddings (Duan et al. 2019, sec. III.B).

    Args:
        features: subset of ``("pos", "label", "head")`` (any order; see module doc).
        dim: dimension of each feature embedding (``--syntax-feature-dim``, paper 32).
        num_pos, pos_pad: size and padding index of the POS dictionary (``task.pos_dict``).
        num_labels, label_pad: the same for the dependency-label dictionary.
        max_source_positions: the head table has ``max_source_positions + 1`` rows
            (head positions ``0..T``, 0 = root).
        scale: multiply each embedding by ``sqrt(dim)`` (fairseq's embedding scale).
    """

    def __init__(
        self,
        features: Sequence[str],
        dim: int,
        num_pos: int,
        pos_pad: int,
        num_labels: int,
        label_pad: int,
        max_source_positions: int,
        scale: bool = True,
    ) -> None:
        super().__init__()
        self.features: Tuple[str, ...] = parse_feature_list(
            list(features), tuple(SYNTAX_EMBED_FEATURES), "--syntax-features"
        )
        if not self.features:
            raise ValueError("SyntaxFeatureEmbedding needs at least one feature")
        if dim <= 0:
            raise ValueError(f"--syntax-feature-dim must be positive, got {dim}")
        self.dim = dim
        self.scale = math.sqrt(dim) if scale else 1.0
        self.tables = nn.ModuleDict()
        if "pos" in self.features:
            self.tables["pos"] = feature_embedding(num_pos, dim, pos_pad)
        if "label" in self.features:
            self.tables["label"] = feature_embedding(num_labels, dim, label_pad)
        if "head" in self.features:
            # 0 is a real value (root), so no padding row: padding positions are zeroed by the encoder
            self.tables["head"] = feature_embedding(max_source_positions + 1, dim, None)

    def upgrade_state_dict_named(self, state_dict: Dict[str, Tensor], name: str) -> None:
        """Checkpoints of releases up to 0.2 name the head table ``tables.parent``."""
        prefix = f"{name}.tables." if name else "tables."
        for old, new in LEGACY_TABLE_NAMES.items():
            for suffix in ("weight",):
                key = f"{prefix}{old}.{suffix}"
                if key in state_dict and f"{prefix}{new}.{suffix}" not in state_dict:
                    state_dict[f"{prefix}{new}.{suffix}"] = state_dict.pop(key)

    @property
    def output_dim(self) -> int:
        """``n * feature_dim``: what the concatenation adds to the model dimension."""
        return self.dim * len(self.features)

    def syntax_inputs(self) -> Set[str]:
        """Keys of ``src_syntax`` read by :meth:`forward`."""
        return {SYNTAX_EMBED_FEATURES[f] for f in self.features}

    def forward(self, src_syntax: Optional[Dict[str, Tensor]], src_tokens: Tensor) -> Tensor:
        """``(B, T, n * dim)``: the feature embeddings, in the order ``pos, label, head``."""
        parts = [
            self.tables[f](side_input(src_syntax, SYNTAX_EMBED_FEATURES[f], src_tokens, f"--syntax-features {f}"))
            for f in self.features
        ]
        out = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]
        return out * self.scale
