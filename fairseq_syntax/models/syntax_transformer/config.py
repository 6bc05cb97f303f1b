"""Every option of ``syntax_transformer``: one dataclass, the single source of names, defaults and help.

fairseq builds the model's argparse options from it (:func:`add_syntax_args`, with
``gen_parser_from_dataclass(..., delete_default=True)`` as fairseq's ``transformer_legacy``
does): an option left off the command line stays unset, and the architecture
(:mod:`.architectures`) fills it, first from its preset row, then from the default here
(:func:`fill_unset`). The components read a validated, typed copy (:meth:`SyntaxModelConfig.from_args`).

Boolean options are switch pairs in fairseq's style, ``--nsd-predict`` / ``--no-nsd-predict``;
``--nsd-predict false`` (a value, the 0.1 spelling) still works. Options renamed since 0.1
keep their old spelling as an alias (:data:`RENAMED_FLAGS`; old and new spelling given with
different values are refused), and checkpoints that store the old names are upgraded on load
(:func:`upgrade_args`), so no renamed option falls back to its default unnoticed.

Every value is checked at start-up, while fairseq parses the command line (the architecture
function): :meth:`SyntaxModelConfig.validate` for each option and their contradictions,
:func:`check_model_sizes` for what depends on the sizes. A bad value is a
:class:`ModelOptionError` naming the flag and what it expects, printed as one line.
"""

import argparse
import math
from dataclasses import dataclass, field, fields
from typing import Any, Dict, Optional, Tuple

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.utils import safe_getattr

from fairseq_syntax_core.errors import UsageError
from fairseq_syntax.modules.syntactic_distance import NSD_DISTANCES, NSD_ROOTS, NSD_UNITS, nsd_distance_key
from fairseq_syntax.modules.target_distance import NSD_TARGET_PREDICT_FROM
from fairseq_syntax.modules.syntax_embedding import parse_feature_list

__all__ = [
    "ModelOptionError",
    "SyntaxModelConfig",
    "RENAMED_FLAGS",
    "add_syntax_args",
    "fill_unset",
    "upgrade_args",
    "parse_bool",
    "parse_layer_list",
    "parse_name_list",
    "duan_attention_heads",
    "check_model_sizes",
    "decoder_model_dim",
    "target_nsd_consumes",
    "uses_target_nsd",
]


class ModelOptionError(UsageError, ValueError):
    """A model option that cannot be built (unknown feature, layer out of range, heads that do not divide).

    A :class:`~fairseq_syntax_core.errors.UsageError`: the commands print it as one line,
    ``PROG: error: MESSAGE``, without a traceback.
    """


#: ``--syntax-features`` names -> ``src_syntax`` keys (Duan et al., paper 003 Table I)
FEATURE_KEYS: Dict[str, str] = {"pos": "pos", "label": "labels", "head": "heads"}
#: ``--spe-features`` names -> ``src_syntax`` keys (paper 003 eq. 5)
SPE_KEYS: Dict[str, str] = {"head": "heads", "depth": "depth"}
#: names accepted for a feature in 0.1 (``parent`` was the head position, the ``heads`` tensor)
FEATURE_ALIASES: Dict[str, str] = {"parent": "head"}
#: ``--nsd-distance`` -> ``src_syntax`` key (Ma et al., paper 002 eqs. 1-4; ``--nsd-roots line``: see nsd_distance_key)
NSD_DISTANCE_KEYS: Dict[str, str] = NSD_DISTANCES
NSD_INPUT_MODES = ("none", "concat", "add", "linear")
PASCAL_SUBWORD_PARENTS = ("mean", "first", "tree")
PASCAL_EOS_PARENTS = ("self", "last-root")
STRUCTURAL_DISTANCES = ("depth-sum", "tree-path")
#: clipping distances of relative positions (Shaw-style tables): >= 0, 0 turns them off
CLIP_OPTIONS = ("rel_seq_k", "rel_dep_l", "decoder_rel_seq_k", "structural_k")
#: sizes and counts that must be >= 1 whether or not their component is on
POSITIVE_INT_OPTIONS = ("syntax_feature_dim", "nsd_embed_dim", "nsd_max_distance", "gps_label_dim", "gps_path_dim",
                        "pascal_heads")
_FLOAT32_MAX = 3.4028234663852886e38  # the encodings are computed in float32


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _to_int(value: Any, flag: str) -> int:
    """An integer option's value; ``2.5`` or ``"two"`` raise :class:`ModelOptionError` (no silent truncation)."""
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ModelOptionError(f"{flag}: expected an integer, got {value!r}")


def _to_float(value: Any, flag: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ModelOptionError(f"{flag}: expected a number, got {value!r}") from None


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
    nsd_distance: ChoiceEnum(tuple(NSD_DISTANCE_KEYS)) = _opt("dependency", "which source syntactic distance (paper 002): dependency = d_D(i) = "
                             "i - h(i) (eq. 4); constituency-height = d_S, the height of the lowest common ancestor "
                             "of pieces i and i+1 (eq. 1); constituency-depth = d_G, the number of their common "
                             "ancestors (eq. 1); constituency-relative = d_R, d_G(i) - d_G(i-1) (eq. 3); the "
                             "constituency ones from the data-bin's phrase structures", choices=tuple(NSD_DISTANCE_KEYS))
    nsd_roots: ChoiceEnum(NSD_ROOTS) = _opt("sentence", "i of a root in d_D = i - h(i) (paper 002 eq. 4, h(root) = 0) on a "
                           "line of several parser sentences: sentence = its position within its own sentence "
                           "(the paper parsed one sentence at a time), line = its position in the line (0.2's "
                           "d_D; checkpoints made before this option keep it)", choices=NSD_ROOTS)
    nsd_units: ChoiceEnum(NSD_UNITS) = _opt("piece", "units of d_D (paper 002 eq. 4): piece = positions and heads count BPE "
                           "pieces; word = they count words, as the paper's parses did, and every piece of a word "
                           "gets its word's distance (--nsd-distance dependency only)", choices=NSD_UNITS)
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
    # ---- Ma et al. 2019 (paper 002) secs. 3.1-3.3: neural syntactic distance on the TARGET side (the decoder).
    # Shares --nsd-distance, --nsd-max-distance and --nsd-embed-dim with the source; checks: _check_target_nsd
    nsd_target_input: ChoiceEnum(NSD_INPUT_MODES) = _opt("none", "the target distance as decoder input, combined "
                                 "with each input token's embedding by the source's combiners (paper 002 eq. 7 with "
                                 "eqs. 8-10): concat (widens the decoder by --nsd-embed-dim), add, linear; at "
                                 "generation the decoder's own prediction of the previous step is fed back (needs "
                                 "--nsd-target-predict); none disables", choices=NSD_INPUT_MODES)
    nsd_target_spe_lambda: float = _opt(0.0, "period lambda_SPE of the target distance positional encoding on the "
                                        "decoder input (paper 002 eqs. 15-16, fed back like --nsd-target-input); "
                                        "0 disables", metavar="LAMBDA")
    nsd_target_predict: bool = _opt(False, "predict the distance of each next target token beside the token, from "
                                    "the decoder's final states (paper 002 eq. 11); train with --criterion "
                                    "label_smoothed_cross_entropy_with_nsd")
    nsd_target_predict_from: ChoiceEnum(NSD_TARGET_PREDICT_FROM) = _opt(
        "state+token", "what the target's eq. 11 reads: state+token = the decoder state and the embedding of the "
        "token whose distance it predicts, so the distance fed back at generation is that of the token emitted; "
        "state = the state alone, before the token is chosen (checkpoints made before this option keep it)",
        choices=NSD_TARGET_PREDICT_FROM)
    nsd_target_sampling: float = _opt(
        1.0, "training only: the share of the decoder's input distances replaced by the model's own predictions "
        "(a first pass without gradient on the gold ones, as scheduled sampling): 1 = the decoder always trains on "
        "what it predicts, as it decodes; 0 = on the gold distances (teacher forcing, as before this option)",
        metavar="P")
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
        """A typed, validated copy of the syntax options in ``args`` (Namespace or config); unset -> default.

        A value of the wrong type, out of its range, or contradicting another option raises
        :class:`ModelOptionError` naming the flag and what it expects (:meth:`validate`); the
        checks that need the model's sizes are :func:`check_model_sizes`.
        """
        values = {}
        for f in fields(cls):
            value = safe_getattr(args, f.name, None)
            values[f.name] = f.default if value is None else value
        cfg = cls(**values)
        for f in fields(cls):
            value = getattr(cfg, f.name)
            choices = f.metadata.get("choices")
            flag = _flag(f.name)
            if f.type is bool or f.type == "bool":
                try:
                    setattr(cfg, f.name, parse_bool(value))
                except argparse.ArgumentTypeError as error:
                    raise ModelOptionError(f"{flag}: {error}") from None
            elif f.type in (int, "int"):
                setattr(cfg, f.name, _to_int(value, flag))
            elif f.type in (float, "float"):
                setattr(cfg, f.name, _to_float(value, flag))
            if choices is not None and getattr(cfg, f.name) not in choices:
                raise ModelOptionError(f"{flag} must be one of {list(choices)}, got {value!r}")
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Refuse values no model can use, and options that contradict each other.

        A value that would be silently ignored (a negative clip, a negative lambda), build a
        model without the component asked for (keys and values both off), or give NaN in
        forward (a non-finite or non-positive constant) is refused here, at start-up.
        """
        for name in CLIP_OPTIONS:
            value = getattr(self, name)
            if value < 0:
                raise ModelOptionError(f"{_flag(name)} {value}: expected a clipping distance >= 0 (0 turns it off)")
        relative = [f"{_flag(n)} {getattr(self, n)}" for n in CLIP_OPTIONS if getattr(self, n) > 0]
        if relative and not self.rel_keys and not self.rel_values:
            raise ModelOptionError(
                f"--no-rel-keys with --no-rel-values leaves the relative positions ({', '.join(relative)}) "
                "nothing to add (paper 000 Table 3 drops one of the two): keep the keys or the values, "
                "or turn the relative positions off with a clipping distance of 0"
            )
        for name in POSITIVE_INT_OPTIONS:
            value = getattr(self, name)
            if value < 1:
                raise ModelOptionError(f"{_flag(name)} {value}: expected a positive integer")
        for name in ("spe_head_constant", "spe_depth_constant"):
            value = getattr(self, name)
            if not 0 < value <= _FLOAT32_MAX:  # NaN fails too
                paper = {"spe_head_constant": 2000, "spe_depth_constant": 400}[name]
                raise ModelOptionError(
                    f"{_flag(name)} {value}: expected a finite number > 0 (c_f of paper 003 eq. 5; the paper: {paper})"
                )
        if not (self.nsd_spe_lambda == 0 or 1 < self.nsd_spe_lambda < math.inf):
            raise ModelOptionError(
                f"--nsd-spe-lambda {self.nsd_spe_lambda}: expected 0 (off) or a finite period > 1 "
                "(paper 002 eqs. 15-16; the paper's best: 40)"
            )
        if self.nsd_units != "piece" and self.nsd_distance != "dependency":
            raise ModelOptionError(
                f"--nsd-units {self.nsd_units}: word units work with --nsd-distance dependency; "
                f"--nsd-distance {self.nsd_distance} is over the phrase structure's leaves, the pieces"
            )
        if not 0 < self.pascal_variance < math.inf:
            raise ModelOptionError(
                f"--pascal-variance {self.pascal_variance}: expected a finite variance > 0 (paper: 1)"
            )
        if not 0 <= self.pascal_parent_ignoring < 1:
            raise ModelOptionError(
                f"--pascal-parent-ignoring {self.pascal_parent_ignoring}: expected a probability in [0, 1)"
            )
        _ = (self.feature_names, self.spe_names)  # unknown, repeated or empty names raise
        parse_layer_list(self.gps_layers, None, "--gps-layers")
        parse_layer_list(self.pascal_layers, None, "--pascal-layers")
        _check_target_nsd(self)  # target-side NSD (paper 002 secs. 3.1-3.3)

    # derived views used by several components
    @property
    def feature_names(self) -> Tuple[str, ...]:
        return parse_name_list(self.syntax_features, tuple(FEATURE_KEYS), "--syntax-features")

    @property
    def spe_names(self) -> Tuple[str, ...]:
        return parse_name_list(self.spe_features, tuple(SPE_KEYS), "--spe-features")

    @property
    def nsd_key(self) -> str:
        """The ``src_syntax`` key of the source distance (``--nsd-distance``, ``--nsd-roots``)."""
        return nsd_distance_key(str(self.nsd_distance), str(self.nsd_roots), str(self.nsd_units))

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


#: the 0.1 flags' spelling today, for messages
_NEW_SPELLING = {"--rel-no-keys": "--no-rel-keys", "--rel-no-values": "--no-rel-values",
                 "--spe-parent-constant": "--spe-head-constant"}
#: namespace attribute where the parser notes who set an option that has a 0.1 spelling (removed by fill_unset)
_GIVEN = "_syntax_renamed_options_given"


class _RenamedOptionStore(argparse.Action):
    """argparse's ``store`` (or, with ``fixed``, ``store_const``) for an option that has a 0.1 spelling.

    The old and the new spelling set one option: given both with different values
    (``--rel-no-keys --rel-keys``, ``--spe-parent-constant 100 --spe-head-constant 300``),
    argparse would let the last one win unnoticed; the command line is refused instead.
    """

    def __init__(self, option_strings, dest, fixed: Any = None, old: bool = False, **kwargs) -> None:
        if fixed is not None:
            kwargs["nargs"] = 0
        super().__init__(option_strings, dest, **kwargs)
        self.fixed = fixed
        self.old = old

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        value = self.fixed if self.fixed is not None else values
        given = dict(getattr(namespace, _GIVEN, None) or {})
        seen = given.get(self.dest, [])
        clash = next((s for s in seen if s[1] != self.old and s[2] != value), None)
        if clash is not None:
            old_flag = option_string if self.old else clash[0]
            parser.error(
                f"argument {option_string}: contradicts {clash[0]} ({old_flag} is 0.1's spelling of "
                f"{_NEW_SPELLING.get(old_flag, old_flag)}): give one of them"
            )
        given[self.dest] = seen + [(option_string, self.old, value)]
        setattr(namespace, _GIVEN, given)
        setattr(namespace, self.dest, value)


def add_syntax_args(parser) -> None:
    """The options of :class:`SyntaxModelConfig`, with no defaults (the architecture fills them).

    Booleans: ``--x`` (optionally ``--x true|false``) and ``--no-x``; added first, so that
    ``gen_parser_from_dataclass`` (which skips options already present) adds the rest.
    An option renamed since 0.1 keeps its old flag (hidden); old and new flag given with
    different values are refused (:class:`_RenamedOptionStore`).
    """
    renamed = {dest for dest, _ in RENAMED_FLAGS.values()}
    for f in fields(SyntaxModelConfig):
        flag = _flag(f.name)
        if f.type is not bool and f.type != "bool":
            if f.name in renamed:
                parser.add_argument(flag, dest=f.name, action=_RenamedOptionStore, type=float, default=None,
                                    metavar=f.metadata.get("metavar"), help=f.metadata["help"])
            continue
        if f.name in renamed:
            parser.add_argument(flag, dest=f.name, action=_RenamedOptionStore, nargs="?", const=True,
                                type=parse_bool, metavar="BOOL", default=argparse.SUPPRESS, help=f.metadata["help"])
            parser.add_argument("--no-" + flag[2:], dest=f.name, action=_RenamedOptionStore, fixed=False,
                                default=argparse.SUPPRESS, help=f"turn {flag} off")
            continue
        parser.add_argument(flag, dest=f.name, nargs="?", const=True, type=parse_bool, metavar="BOOL",
                            default=argparse.SUPPRESS, help=f.metadata["help"])
        parser.add_argument("--no-" + flag[2:], dest=f.name, action="store_false", default=argparse.SUPPRESS,
                            help=f"turn {flag} off")
    for old, (dest, const) in RENAMED_FLAGS.items():
        if const is None:
            parser.add_argument(old, dest=dest, action=_RenamedOptionStore, old=True, type=float,
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        else:
            parser.add_argument(old, dest=dest, action=_RenamedOptionStore, old=True, fixed=const,
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    gen_parser_from_dataclass(parser, SyntaxModelConfig(), delete_default=True)


def fill_unset(args: Any, preset: Dict[str, Any]) -> None:
    """Set every syntax option the command line left unset: from ``preset``, else the dataclass default.

    Then checks the values (:meth:`SyntaxModelConfig.from_args`): the architecture function runs
    while fairseq parses the command line, so a bad value stops the command before any work.
    """
    upgrade_args(args)
    if safe_getattr(args, _GIVEN, None) is not None:
        try:
            delattr(args, _GIVEN)  # the parser's note (not an option): never stored in a checkpoint
        except (AttributeError, KeyError, TypeError, ValueError):
            pass
    unknown = set(preset) - {f.name for f in fields(SyntaxModelConfig)}
    if unknown:
        raise KeyError(f"preset names unknown options {sorted(unknown)}")
    for f in fields(SyntaxModelConfig):
        if safe_getattr(args, f.name, None) is None:
            setattr(args, f.name, preset.get(f.name, f.default))
    SyntaxModelConfig.from_args(args)


def upgrade_args(args: Any) -> None:
    """Rename options stored by 0.1 checkpoints, and pin behaviours whose default changed since.

    Runs first in every architecture function (:func:`fill_unset`), which fairseq applies to
    a checkpoint's stored args before the model is built, so a stored ``rel_no_keys = True``
    becomes ``rel_keys = False`` instead of being dropped for the new default. 0.1's args are
    recognised by ``rel_no_keys``, which 0.1 always stored and 0.2 never does.
    """
    # a built model's args (a checkpoint) made before --nsd-roots: 0.1-0.2's d_D, roots at their line position
    if safe_getattr(args, "syntax_num_labels", None) is not None or safe_getattr(args, "rel_no_keys", None) is not None:
        if safe_getattr(args, "nsd_roots", None) is None:
            setattr(args, "nsd_roots", "line")
        if safe_getattr(args, "nsd_target_predict_from", None) is None:  # before the option: eq. 11 on h_t alone
            setattr(args, "nsd_target_predict_from", "state")
        if safe_getattr(args, "nsd_target_sampling", None) is None:  # before the option: teacher forcing
            setattr(args, "nsd_target_sampling", 0.0)
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
            setattr(args, name, _rename_names(value) or "none")  # 0.1 took "" for none
    _respell_0_1_values(args)


def _respell_0_1_values(args: Any) -> None:
    """Values 0.1 accepted that the checks now refuse on a command line, spelled as today: the same model.

    0.1 turned a component off with a clipping distance or NSD lambda <= 0, and with keys and
    values both off its relative tables had no rows (no parameters, no effect); it took ``""``
    for ``none`` and ignored a repeated layer.
    """
    def get(name):
        return safe_getattr(args, name, None)

    both_off = get("rel_keys") is not None and get("rel_values") is not None \
        and not parse_bool(get("rel_keys")) and not parse_bool(get("rel_values"))
    for name in CLIP_OPTIONS:
        value = get(name)
        if value is not None and (int(value) < 0 or (both_off and int(value) > 0)):
            setattr(args, name, 0)
    lam = get("nsd_spe_lambda")
    if lam is not None and not float(lam) > 0:  # NaN too
        setattr(args, "nsd_spe_lambda", 0.0)
    for name in ("gps_layers", "pascal_layers"):
        value = get(name)
        if not isinstance(value, str) or value.strip().lower() in ("none", "-1", "all"):
            continue
        items = [t for t in value.replace(" ", "").split(",") if t]
        try:
            layers = sorted(set(int(t) for t in items))
        except ValueError:
            continue  # refused with its flag by the checks
        setattr(args, name, ",".join(map(str, layers)) if layers else "none")


def _rename_names(value: str) -> str:
    return ",".join(FEATURE_ALIASES.get(n.strip(), n.strip()) for n in value.split(",") if n.strip())


def parse_name_list(value: Any, allowed: Tuple[str, ...], flag: str) -> Tuple[str, ...]:
    """``"pos,label"`` -> ``("pos", "label")`` in the canonical order of ``allowed``; 0.1's ``parent`` is ``head``.

    ``None`` and ``"none"`` give ``()``; an empty list (``""``, ``","``: an unset shell
    variable, not a choice), unknown or repeated names raise :class:`ModelOptionError` naming
    ``flag``.
    """
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    given = [v.strip() for v in items if v.strip()]
    if not given and not isinstance(value, str):
        return ()  # an empty list set by code
    if not given:
        raise ModelOptionError(f"{flag} {value!r}: expected a comma-separated subset of {','.join(allowed)}, "
                               "or 'none' to turn it off")
    names = [FEATURE_ALIASES.get(v, v) for v in given]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        aliases = [f"0.1's {old!r} is {new!r}" for old, new in FEATURE_ALIASES.items() if old in given]
        raise ModelOptionError(f"{flag} {value!r}: {', '.join(map(repr, repeated))} listed twice"
                               + (f" ({'; '.join(aliases)})" if aliases else "") + "; give each feature once")
    if "none" in names and len(names) > 1:
        raise ModelOptionError(f"{flag} {value!r}: 'none' turns the features off; it cannot be combined with others")
    try:
        return parse_feature_list(",".join(names), allowed, flag)
    except ValueError as error:
        raise ModelOptionError(str(error)) from None


def parse_layer_list(value: Any, num_layers: Optional[int], flag: str) -> Tuple[int, ...]:
    """``"0,2"``, ``"all"``, ``"none"`` (or 0.1's ``"-1"``) -> sorted 0-based layer indices.

    With ``num_layers`` None, only the spelling is checked (``"all"`` gives ``()``). An empty
    list (``""``: an unset shell variable, not a choice), a repeated or out-of-range layer
    raises :class:`ModelOptionError` naming ``flag``.
    """
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        items = [str(v) for v in value]
        if not items:
            return ()  # an empty list set by code
    else:
        text = str(value).strip().lower()
        if text in ("none", "-1"):
            return ()
        if text == "all":
            return tuple(range(num_layers)) if num_layers is not None else ()
        items = [t for t in text.replace(" ", "").split(",") if t]
    expected = "comma-separated 0-based layer indices, 'all' or 'none'"
    if not items:
        raise ModelOptionError(f"{flag} {value!r}: expected {expected} ('none' turns it off)")
    try:
        indices = [int(t) for t in items]
    except ValueError:
        raise ModelOptionError(f"{flag} takes {expected}, got {value!r}") from None
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
        raise ModelOptionError(f"{flag} {value!r}: layer(s) {repeated} listed twice; give each layer once")
    layers = sorted(indices)
    bad = [i for i in layers if i < 0 or (num_layers is not None and i >= num_layers)]
    if bad:
        where = f"for {num_layers} encoder layers (0-based)" if num_layers is not None else "(layers count from 0)"
        raise ModelOptionError(f"{flag} {value!r}: layers {bad} out of range {where}")
    return tuple(layers)


def _check_heads(dim: int, heads: int, flag: str, width: str) -> None:
    """At least one head, and heads that divide the width (a suggestion of fewer heads that would)."""
    if heads < 1:
        raise ModelOptionError(f"{flag} {heads}: expected at least 1 head")
    if dim % heads != 0:
        raise ModelOptionError(f"{width} is not divisible by {flag} {heads}; e.g. {flag} "
                               f"{_fewer_heads(dim, heads)} would do")


def check_model_sizes(args: Any, model_dim: int) -> None:
    """The checks that need the sizes the architecture chose; ``model_dim`` is the encoder width.

    Attention heads that divide the encoder and decoder widths, widths the sinusoidal
    encodings can stagger (paper 003 eq. 5, paper 002 eqs. 15-16), and clipping distances no
    larger than the longest relative position a sentence of ``--max-source-positions`` (or
    ``--max-target-positions``) tokens has: beyond it a table only grows (``2k + 1`` rows per
    layer), and a huge one fails allocating instead of training.
    """
    from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, DEFAULT_MAX_TARGET_POSITIONS

    syntax = SyntaxModelConfig.from_args(args)
    word_dim = safe_getattr(args, "encoder_embed_dim")
    heads = _to_int(safe_getattr(args, "encoder_attention_heads"), "--encoder-attention-heads")
    _check_heads(model_dim, heads, "--encoder-attention-heads",
                 f"the encoder model dimension {model_dim} (--encoder-embed-dim {word_dim} + syntax embeddings)")
    decoder_dim = _to_int(safe_getattr(args, "decoder_embed_dim", model_dim), "--decoder-embed-dim")
    decoder_heads = _to_int(safe_getattr(args, "decoder_attention_heads", heads), "--decoder-attention-heads")
    _check_heads(decoder_dim, decoder_heads, "--decoder-attention-heads", f"--decoder-embed-dim {decoder_dim}")
    n_spe = len(syntax.spe_names)
    if n_spe and model_dim % (2 * n_spe) != 0:
        raise ModelOptionError(
            f"--spe-features {','.join(syntax.spe_names)}: the encoder model dimension {model_dim} "
            f"(--encoder-embed-dim {word_dim} + syntax embeddings) must be divisible by {2 * n_spe} "
            f"(paper 003 eq. 5 staggers {n_spe} sin/cos pair(s))"
        )
    if syntax.nsd_spe_lambda > 0 and model_dim % 2 != 0:
        raise ModelOptionError(
            f"--nsd-spe-lambda {syntax.nsd_spe_lambda}: the distance positional encoding (paper 002 eqs. 15-16) "
            f"needs an even encoder model dimension, got {model_dim} (--encoder-embed-dim {word_dim} + syntax "
            "embeddings)"
        )
    if syntax.structural_absolute and model_dim < 4:
        raise ModelOptionError(
            f"--structural-absolute: the sinusoidal encoding of the depth needs an encoder model dimension >= 4, "
            f"got {model_dim}"
        )
    _check_target_nsd_sizes(syntax, decoder_dim, decoder_heads)
    src_max = int(safe_getattr(args, "max_source_positions", None) or DEFAULT_MAX_SOURCE_POSITIONS)
    tgt_max = int(safe_getattr(args, "max_target_positions", None) or DEFAULT_MAX_TARGET_POSITIONS)
    # structural positions sum two depths (depth-sum): up to twice the length
    bounds = {"rel_seq_k": (src_max, "--max-source-positions", src_max),
              "rel_dep_l": (src_max, "--max-source-positions", src_max),
              "structural_k": (2 * src_max, "--max-source-positions", src_max),
              "decoder_rel_seq_k": (tgt_max, "--max-target-positions", tgt_max)}
    for name, (bound, flag, length) in bounds.items():
        value = getattr(syntax, name)
        if value > bound:
            raise ModelOptionError(
                f"{_flag(name)} {value}: larger than any relative position in a sentence of {flag} {length} "
                f"tokens; expected at most {bound} (0 turns it off)"
            )


# --------------------------------------------------------------------------- target-side NSD (issue 14)


def target_nsd_consumes(syntax: "SyntaxModelConfig") -> bool:
    """Whether the decoder reads target distances (``--nsd-target-input`` or ``--nsd-target-spe-lambda``)."""
    return syntax.nsd_target_input != "none" or syntax.nsd_target_spe_lambda > 0


def uses_target_nsd(syntax: "SyntaxModelConfig") -> bool:
    """Whether any target-side NSD part (input, positional encoding, prediction) is on."""
    return target_nsd_consumes(syntax) or bool(syntax.nsd_target_predict)


def decoder_model_dim(syntax: "SyntaxModelConfig", word_dim: int) -> int:
    """The decoder width: the word width, plus ``--nsd-embed-dim`` with ``--nsd-target-input concat`` (eq. 8)."""
    return word_dim + (syntax.nsd_embed_dim if syntax.nsd_target_input == "concat" else 0)


def _check_target_nsd(syntax: "SyntaxModelConfig") -> None:
    """The target options' own values, and the combination generation cannot run."""
    if not 0.0 <= syntax.nsd_target_sampling <= 1.0:  # NaN too
        raise ModelOptionError(f"--nsd-target-sampling {syntax.nsd_target_sampling}: expected a share in [0, 1]")
    lam = syntax.nsd_target_spe_lambda
    if not (lam == 0 or 1 < lam < math.inf):
        raise ModelOptionError(
            f"--nsd-target-spe-lambda {lam}: expected 0 (off) or a finite period > 1 "
            "(paper 002 eqs. 15-16; the paper's best: 40)"
        )
    if target_nsd_consumes(syntax) and not syntax.nsd_target_predict:
        given = [f"--nsd-target-input {syntax.nsd_target_input}"] if syntax.nsd_target_input != "none" else []
        given += [f"--nsd-target-spe-lambda {lam:g}"] if lam > 0 else []
        raise ModelOptionError(
            f"{' with '.join(given)} needs --nsd-target-predict: the target distances are unknown at generation, "
            "where the decoder feeds back its own prediction of the previous step (paper 002 sec. 3.1)"
        )


def _check_target_nsd_sizes(syntax: "SyntaxModelConfig", word_dim: int, heads: int) -> None:
    """Decoder heads that divide the decoder width widened by ``concat``; an even width for the SPE."""
    dim = decoder_model_dim(syntax, word_dim)
    if dim != word_dim:
        _check_heads(dim, heads, "--decoder-attention-heads",
                     f"the decoder model dimension {dim} (--decoder-embed-dim {word_dim} + --nsd-embed-dim "
                     f"{syntax.nsd_embed_dim} of --nsd-target-input concat)")
    if syntax.nsd_target_spe_lambda > 0 and dim % 2 != 0:
        raise ModelOptionError(
            f"--nsd-target-spe-lambda {syntax.nsd_target_spe_lambda:g}: the distance positional encoding (paper 002 "
            f"eqs. 15-16) needs an even decoder model dimension, got {dim}"
        )


def _fewer_heads(dim: int, heads: int) -> int:
    """The most heads, at most ``heads``, that divide ``dim`` (for messages)."""
    return next(h for h in range(min(heads, dim), 0, -1) if dim % h == 0)


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
