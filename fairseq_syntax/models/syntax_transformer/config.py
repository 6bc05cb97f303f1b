"""Every option of ``syntax_transformer``: one dataclass, the single source of names, defaults and help.

fairseq builds the model's argparse options from it (:func:`add_syntax_args`, with
``gen_parser_from_dataclass(..., delete_default=True)`` as fairseq's ``transformer_legacy``
does): an option left off the command line stays unset, and the architecture
(:mod:`.architectures`) fills it, first from its preset row, then from the default here
(:func:`fill_unset`). The components read a validated, typed copy (:meth:`SyntaxModelConfig.from_args`).

Boolean options are switch pairs in fairseq's style, ``--nsd-predict`` / ``--no-nsd-predict``;
``--nsd-predict false`` (a value, the 0.1 spelling) still works. Options renamed since 0.1
keep their old spelling as an alias (:data:`RENAMED_FLAGS`), and checkpoints that store the
old names are upgraded on load (:func:`upgrade_args`), so no renamed option falls back to
its default unnoticed.
"""

import argparse
from dataclasses import dataclass, field, fields
from typing import Any, Dict, Optional, Tuple

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.utils import safe_getattr

from fairseq_syntax.modules.syntax_embedding import parse_feature_list

__all__ = [
    "SyntaxModelConfig",
    "RENAMED_FLAGS",
    "add_syntax_args",
    "fill_unset",
    "upgrade_args",
    "parse_bool",
    "parse_layer_list",
    "parse_name_list",
    "duan_attention_heads",
]

#: ``--syntax-features`` names -> ``src_syntax`` keys (Duan et al., paper 003 Table I)
FEATURE_KEYS: Dict[str, str] = {"pos": "pos", "label": "labels", "head": "heads"}
#: ``--spe-features`` names -> ``src_syntax`` keys (paper 003 eq. 5)
SPE_KEYS: Dict[str, str] = {"head": "heads", "depth": "depth"}
#: names accepted for a feature in 0.1 (``parent`` was the head position, the ``heads`` tensor)
FEATURE_ALIASES: Dict[str, str] = {"parent": "head"}
#: ``--nsd-distance`` -> ``src_syntax`` key (Ma et al., paper 002 eq. 4)
NSD_DISTANCE_KEYS: Dict[str, str] = {"dependency": "distance"}
NSD_INPUT_MODES = ("none", "concat", "add", "linear")
PASCAL_SUBWORD_PARENTS = ("mean", "first", "tree")
PASCAL_EOS_PARENTS = ("self", "last-root")
STRUCTURAL_DISTANCES = ("depth-sum", "tree-path")


def _opt(default: Any, help: str, choices: Optional[Tuple[str, ...]] = None, metavar: Optional[str] = None):
    metadata: Dict[str, Any] = {"help": help}
    if choices is not None:
        metadata["choices"] = choices
    if metavar is not None:
        metadata["metavar"] = metavar
    return field(default=default, metadata=metadata)


@dataclass
class SyntaxModelConfig(FairseqDataclass):
    """The syntax components' options (fairseq's own Transformer options come from ``TransformerConfig``)."""

    # ---- Omote et al. 2019 (paper 000) and Shaw et al. 2018: relative positions in self-attention
    rel_seq_k: int = _opt(0, "clip k of Shaw et al.'s relative positions clip(j-i, k) in the encoder "
                          "self-attention (paper 000 eqs. 11-15); 0 disables", metavar="K")
    rel_dep_l: int = _opt(0, "clip l of the relative dependency depth clip(depth_j - depth_i, l) in the encoder "
                          "self-attention (paper 000 eqs. 16-20); 0 disables", metavar="L")
    decoder_rel_seq_k: int = _opt(0, "clip k of Shaw et al.'s relative positions in the decoder self-attention; "
                                  "0 disables", metavar="K")
    rel_keys: bool = _opt(True, "relative key representations a^K/b^K (--no-rel-keys: eq. 12/18 -> eq. 7, "
                          "paper 000 Table 3)")
    rel_values: bool = _opt(True, "relative value representations a^V/b^V (--no-rel-values: eq. 11/17 -> eq. 5, "
                            "paper 000 Table 3)")
    # ---- Duan et al. (paper 003): feature embeddings (sec. III.B) and syntactic positional encodings (eq. 5)
    syntax_features: str = _opt("none", "comma-separated subset of pos,label,head (or 'none'): embeddings of each "
                                "source token's POS tag, dependency label and head position, --syntax-feature-dim "
                                "each, concatenated to the word embedding (paper 003 sec. III.B); the encoder width "
                                "becomes --encoder-embed-dim + n * --syntax-feature-dim", metavar="LIST")
    syntax_feature_dim: int = _opt(32, "dimension of each syntax feature embedding (paper 003: 32)", metavar="N")
    spe_features: str = _opt("none", "comma-separated subset of head,depth (or 'none'): syntactic positional "
                             "encodings of the head position and the tree depth (root 1), staggered as paper 003 "
                             "eq. 5, added with the ordinary positional encoding", metavar="LIST")
    spe_head_constant: float = _opt(2000.0, "c_f of paper 003 eq. 5 for the head position (paper: 2000)",
                                    metavar="C")
    spe_depth_constant: float = _opt(400.0, "c_f of paper 003 eq. 5 for the tree depth (paper: 400)", metavar="C")
    # ---- Ma et al. 2019 (paper 002): neural syntactic distance
    nsd_distance: ChoiceEnum(tuple(NSD_DISTANCE_KEYS)) = _opt("dependency", "which syntactic distance (paper 002): dependency = d_D(i) = i - h(i) "
                             "(eq. 4)", choices=tuple(NSD_DISTANCE_KEYS))
    nsd_input: ChoiceEnum(NSD_INPUT_MODES) = _opt("none", "the distance as input, combined with the word embedding (paper 002 eqs. 5-10): "
                          "concat (eq. 8, widens the encoder by --nsd-embed-dim), add (eq. 9), linear W[x;e]+b "
                          "(eq. 10); none disables", choices=NSD_INPUT_MODES)
    nsd_embed_dim: int = _opt(32, "dimension of the distance embedding for --nsd-input concat (add and linear use "
                              "the word dimension)", metavar="N")
    nsd_spe_lambda: float = _opt(0.0, "period lambda_SPE of the distance positional encoding (paper 002 eqs. 15-16; "
                                 "the paper's best 40); 0 disables", metavar="LAMBDA")
    nsd_predict: bool = _opt(False, "predict each source token's distance from the encoder states (paper 002 eq. 11); "
                             "train with --criterion label_smoothed_cross_entropy_with_nsd")
    nsd_max_distance: int = _opt(64, "distances are clipped to [-D, D] for the embedding table, the positional "
                                 "encoding and the 2D+1 classes of the predictor", metavar="D")
    # ---- Xie et al. 2021 (paper 001): global syntactic position
    gps_layers: str = _opt("none", "0-based encoder layers (comma list, 'all' or 'none') whose self-attention adds "
                           "the syntactic-position term of paper 001 eq. 5 (the paper's best: 0)", metavar="LIST")
    gps_label_dim: int = _opt(64, "dependency-label embedding size of the path LSTM (paper 001 sec. 3.2; not "
                              "stated there)", metavar="N")
    gps_path_dim: int = _opt(128, "hidden size d_s of the path LSTM, the syntactic position s_i (paper 001 "
                             "sec. 3.2; not stated there)", metavar="N")
    # ---- Bugliarello & Okazaki 2020: parent-scaled self-attention (PASCAL)
    pascal_layers: str = _opt("none", "0-based encoder layers (comma list, 'all' or 'none') with parent-scaled "
                              "self-attention (PASCAL; the paper: 0)", metavar="LIST")
    pascal_heads: int = _opt(5, "number of parent-scaled heads (the first N) in each PASCAL layer (the paper: "
                             "5 of 8 on WMT16 En-Ro, 8 of 8 on NC11 De-En, 2 of 8 on NC11 En-De)", metavar="N")
    pascal_variance: float = _opt(1.0, "variance sigma^2 of PASCAL's Gaussian centred on the parent (paper: 1)",
                                  metavar="S2")
    pascal_parent_ignoring: float = _opt(0.0, "PASCAL's parent-ignoring regulariser: in training, leave a token's "
                                         "row unscaled with this probability (paper: 0.4 for NC11 En-De, "
                                         "else 0)", metavar="P")
    pascal_subword_parent: ChoiceEnum(PASCAL_SUBWORD_PARENTS) = _opt("mean", "parent position of split words: mean = middle of the parent word's "
                                      "pieces (the paper), first = its first piece, tree = the piece tree as "
                                      "stored", choices=PASCAL_SUBWORD_PARENTS)
    pascal_eos_parent: ChoiceEnum(PASCAL_EOS_PARENTS) = _opt("self", "parent of the appended </s>: self (PASCAL's code) or last-root (the "
                                  "data-bin's tree, and 0.1's behaviour)", choices=PASCAL_EOS_PARENTS)
    # ---- Wang et al. 2019b: structural positions
    structural_k: int = _opt(0, "clip k of Wang et al. (2019b)'s structural relative positions, used Shaw-style "
                             "(own key/value tables) in every encoder layer; 0 disables", metavar="K")
    structural_distance: ChoiceEnum(STRUCTURAL_DISTANCES) = _opt("depth-sum", "structural relative position of two words not on one root path: "
                                    "depth-sum = sign(i-j)(depth_i + depth_j), the path through the root (our "
                                    "reading of Wang et al. 2019b); tree-path = the shortest tree path, signed "
                                    "(paper 001's description of it)", choices=STRUCTURAL_DISTANCES)
    structural_absolute: bool = _opt(False, "absolute structural position (tree depth) combined with the "
                                     "sequential one (Wang et al. 2019b): tanh(W_seq PE(i) + W_stru PE(depth_i) "
                                     "+ b) replaces PE(i)")

    @classmethod
    def from_args(cls, args: Any) -> "SyntaxModelConfig":
        """A typed, validated copy of the syntax options in ``args`` (Namespace or config); unset -> default."""
        values = {}
        for f in fields(cls):
            value = safe_getattr(args, f.name, None)
            values[f.name] = f.default if value is None else value
        cfg = cls(**values)
        for f in fields(cls):
            value = getattr(cfg, f.name)
            choices = f.metadata.get("choices")
            flag = "--" + f.name.replace("_", "-")
            if f.type is bool or f.type == "bool":
                setattr(cfg, f.name, parse_bool(value))
            elif f.type in (int, "int"):
                setattr(cfg, f.name, int(value))
            elif f.type in (float, "float"):
                setattr(cfg, f.name, float(value))
            if choices is not None and getattr(cfg, f.name) not in choices:
                raise ValueError(f"{flag} must be one of {list(choices)}, got {value!r}")
        return cfg

    # derived views used by several components
    @property
    def feature_names(self) -> Tuple[str, ...]:
        return parse_name_list(self.syntax_features, tuple(FEATURE_KEYS), "--syntax-features")

    @property
    def spe_names(self) -> Tuple[str, ...]:
        return parse_name_list(self.spe_features, tuple(SPE_KEYS), "--spe-features")

    @property
    def uses_nsd(self) -> bool:
        """Whether any NSD component (input, positional encoding, prediction) is on."""
        return self.nsd_input != "none" or self.nsd_spe_lambda > 0 or self.nsd_predict


#: old flag spelling -> (new destination, value transform). ``--rel-no-keys`` meant ``rel_keys = False``.
RENAMED_FLAGS: Dict[str, Tuple[str, Any]] = {
    "--rel-no-keys": ("rel_keys", False),
    "--rel-no-values": ("rel_values", False),
    "--spe-parent-constant": ("spe_head_constant", None),
}
#: stored option names of 0.1 checkpoints -> (new name, value transform)
_RENAMED_ARGS = {
    "rel_no_keys": ("rel_keys", lambda v: not parse_bool(v)),
    "rel_no_values": ("rel_values", lambda v: not parse_bool(v)),
    "spe_parent_constant": ("spe_head_constant", float),
}


def parse_bool(value: Any) -> bool:
    """``true/false``, ``1/0``, ``yes/no``, ``on/off`` (or a bool) -> bool."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", "none"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {value!r}")


def add_syntax_args(parser) -> None:
    """The options of :class:`SyntaxModelConfig`, with no defaults (the architecture fills them).

    Booleans: ``--x`` (optionally ``--x true|false``) and ``--no-x``; added first, so that
    ``gen_parser_from_dataclass`` (which skips options already present) adds the rest.
    """
    for f in fields(SyntaxModelConfig):
        if f.type is not bool and f.type != "bool":
            continue
        flag = "--" + f.name.replace("_", "-")
        parser.add_argument(flag, dest=f.name, nargs="?", const=True, type=parse_bool, metavar="BOOL",
                            default=argparse.SUPPRESS, help=f.metadata["help"])
        parser.add_argument("--no-" + flag[2:], dest=f.name, action="store_false", default=argparse.SUPPRESS,
                            help=f"turn {flag} off")
    for old, (dest, const) in RENAMED_FLAGS.items():
        if const is None:
            parser.add_argument(old, dest=dest, type=float, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        else:
            parser.add_argument(old, dest=dest, action="store_const", const=const, default=argparse.SUPPRESS,
                                help=argparse.SUPPRESS)
    gen_parser_from_dataclass(parser, SyntaxModelConfig(), delete_default=True)


def fill_unset(args: Any, preset: Dict[str, Any]) -> None:
    """Set every syntax option the command line left unset: from ``preset``, else the dataclass default."""
    upgrade_args(args)
    unknown = set(preset) - {f.name for f in fields(SyntaxModelConfig)}
    if unknown:
        raise KeyError(f"preset names unknown options {sorted(unknown)}")
    for f in fields(SyntaxModelConfig):
        if safe_getattr(args, f.name, None) is None:
            setattr(args, f.name, preset.get(f.name, f.default))


def upgrade_args(args: Any) -> None:
    """Rename options stored by 0.1 checkpoints, and pin behaviours whose default changed since.

    Runs first in every architecture function (:func:`fill_unset`), which fairseq applies to
    a checkpoint's stored args before the model is built, so a stored ``rel_no_keys = True``
    becomes ``rel_keys = False`` instead of being dropped for the new default. 0.1's args are
    recognised by ``rel_no_keys``, which 0.1 always stored and 0.2 never does.
    """
    if safe_getattr(args, "rel_no_keys", None) is None:
        return
    for old, (new, convert) in _RENAMED_ARGS.items():
        value = safe_getattr(args, old, None)
        if value is not None and safe_getattr(args, new, None) is None:
            setattr(args, new, convert(value))
        if value is not None:
            try:
                delattr(args, old)
            except (AttributeError, KeyError, TypeError, ValueError):  # a read-only config keeps it
                setattr(args, old, None)
    # 0.1 centred PASCAL's </s> on the line's last root (0.2 follows PASCAL's code: its own parent)
    if safe_getattr(args, "pascal_eos_parent", None) is None:
        setattr(args, "pascal_eos_parent", "last-root")
    for name in ("syntax_features", "spe_features"):
        value = safe_getattr(args, name, None)
        if isinstance(value, str):
            setattr(args, name, _rename_names(value))


def _rename_names(value: str) -> str:
    return ",".join(FEATURE_ALIASES.get(n.strip(), n.strip()) for n in value.split(",") if n.strip())


def parse_name_list(value: Any, allowed: Tuple[str, ...], flag: str) -> Tuple[str, ...]:
    """``"pos,label"`` -> ``("pos", "label")`` in the canonical order of ``allowed``; 0.1's ``parent`` is ``head``.

    ``None``, ``""`` and ``"none"`` give ``()``; unknown or repeated names raise ``ValueError``
    naming ``flag`` (:func:`~fairseq_syntax.modules.syntax_embedding.parse_feature_list`).
    """
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    names = [FEATURE_ALIASES.get(v.strip(), v.strip()) for v in items if v.strip()]
    return parse_feature_list(",".join(names), allowed, flag)


def parse_layer_list(value: Any, num_layers: int, flag: str) -> Tuple[int, ...]:
    """``"0,2"``, ``"all"``, ``"none"`` or ``""`` -> sorted 0-based layer indices."""
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


def duan_attention_heads(model_dim: int) -> int:
    """Attention heads for a model width, as Duan et al. (paper 003) Table IV chose them.

    Head dimension 64 where it divides the width, else 32: 352 -> 11, 320 -> 5, 608 -> 19,
    576 -> 9 (Table IV), 512 -> 8. Otherwise the smallest divisor of the width that is at
    least 32 is the head dimension.
    """
    for head_dim in (64, 32):
        if model_dim % head_dim == 0:
            return model_dim // head_dim
    head_dim = next(d for d in range(32, model_dim + 1) if model_dim % d == 0) if model_dim >= 32 else model_dim
    return model_dim // head_dim
