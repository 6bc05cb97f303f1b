"""Every option of ``syntax_transformer``: the components' options composed into one dataclass.

Each component owns its options, a dataclass in its own module (:mod:`.components`); this module
composes those registered into :class:`SyntaxModelConfig`, the single source of names, defaults
and help. fairseq builds the model's argparse options from it (:func:`add_syntax_args`, with
``gen_parser_from_dataclass(..., delete_default=True)`` as fairseq's ``transformer_legacy``
does): an option left off the command line stays unset, and the architecture
(:mod:`.architectures`) fills it, first from its preset row, then from the default here
(:func:`fill_unset`). The components read a validated, typed copy (:meth:`SyntaxModelConfig.from_args`).

Boolean options are switch pairs in fairseq's style, ``--nsd-predict`` / ``--no-nsd-predict``;
``--nsd-predict false`` (a value, the 0.1 spelling) still works. Earlier releases' spellings and
stored args are read by :mod:`.legacy`.

Every value is checked at start-up, while fairseq parses the command line (the architecture
function): each options class's ``check`` for its values and their contradictions,
:func:`check_model_sizes` (the heads, then each class's ``check_sizes``) for what depends on the
sizes. A bad value is a :class:`~.options.ModelOptionError` naming the flag and what it expects,
printed as one line.
"""

import argparse
from dataclasses import dataclass, fields
from typing import Any, Dict

from fairseq.dataclass import FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.utils import safe_getattr

from fairseq_syntax_core.checkpoint_loader import settings_size_problem

from .components import INPUT_COMPONENTS, OPTION_CLASSES
from .components.decoder_side import decoder_model_dim
from .components.nsd import target_nsd_consumes, uses_target_nsd
from .legacy import _GIVEN, RENAMED_FLAGS, RenamedOptionStore, upgrade_args
from .options import (
    ModelOptionError,
    ModelSizes,
    check_heads,
    flag_name,
    parse_bool,
    parse_layer_list,
    parse_name_list,
    to_float,
    to_int,
)

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
    "encoder_width",
    "decoder_model_dim",
    "target_nsd_consumes",
    "uses_target_nsd",
]


@dataclass
class SyntaxModelConfig(*reversed(OPTION_CLASSES), FairseqDataclass):  # type: ignore[misc]
    """The syntax components' options (fairseq's own Transformer options come from ``TransformerConfig``)."""

    @classmethod
    def from_args(cls, args: Any) -> "SyntaxModelConfig":
        """A typed, validated copy of the syntax options in ``args`` (Namespace or config); unset -> default.

        A value of the wrong type, out of its range, or contradicting another option raises
        :class:`ModelOptionError` naming the flag and what it expects (:meth:`validate`); the
        checks that need the model's sizes are :func:`check_model_sizes`.
        """
        values = {}
        for f in fields(cls):
            if f.name == "_name":
                continue
            value = safe_getattr(args, f.name, None)
            values[f.name] = f.default if value is None else value
        cfg = cls(**values)
        for f in fields(cls):
            if f.name == "_name":
                continue
            value = getattr(cfg, f.name)
            choices = f.metadata.get("choices")
            flag = flag_name(f.name)
            if f.type is bool or f.type == "bool":
                try:
                    setattr(cfg, f.name, parse_bool(value))
                except argparse.ArgumentTypeError as error:
                    raise ModelOptionError(f"{flag}: {error}") from None
            elif f.type in (int, "int"):
                setattr(cfg, f.name, to_int(value, flag))
            elif f.type in (float, "float"):
                setattr(cfg, f.name, to_float(value, flag))
            if choices is not None and getattr(cfg, f.name) not in choices:
                raise ModelOptionError(f"{flag} must be one of {list(choices)}, got {value!r}")
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Refuse values no model can use, and options that contradict each other: every options
        class's ``check``, in registration order."""
        for options in OPTION_CLASSES:
            check = getattr(options, "check", None)
            if check is not None:
                check(self)


def option_fields():
    """The syntax options (the composed dataclass's fields, without fairseq's ``_name``)."""
    return [f for f in fields(SyntaxModelConfig) if f.name != "_name"]


def add_syntax_args(parser) -> None:
    """The options of :class:`SyntaxModelConfig`, with no defaults (the architecture fills them).

    Booleans: ``--x`` (optionally ``--x true|false``) and ``--no-x``; added first, so that
    ``gen_parser_from_dataclass`` (which skips options already present) adds the rest.
    An option renamed since 0.1 keeps its old flag (hidden); old and new flag given with
    different values are refused (:class:`RenamedOptionStore`).
    """
    renamed = {dest for dest, _ in RENAMED_FLAGS.values()}
    for f in option_fields():
        flag = flag_name(f.name)
        if f.type is not bool and f.type != "bool":
            if f.name in renamed:
                parser.add_argument(flag, dest=f.name, action=RenamedOptionStore, type=float, default=None,
                                    metavar=f.metadata.get("metavar"), help=f.metadata["help"])
            continue
        if f.name in renamed:
            parser.add_argument(flag, dest=f.name, action=RenamedOptionStore, nargs="?", const=True,
                                type=parse_bool, metavar="BOOL", default=argparse.SUPPRESS, help=f.metadata["help"])
            parser.add_argument("--no-" + flag[2:], dest=f.name, action=RenamedOptionStore, fixed=False,
                                default=argparse.SUPPRESS, help=f"turn {flag} off")
            continue
        parser.add_argument(flag, dest=f.name, nargs="?", const=True, type=parse_bool, metavar="BOOL",
                            default=argparse.SUPPRESS, help=f.metadata["help"])
        parser.add_argument("--no-" + flag[2:], dest=f.name, action="store_false", default=argparse.SUPPRESS,
                            help=f"turn {flag} off")
    for old, (dest, const) in RENAMED_FLAGS.items():
        if const is None:
            parser.add_argument(old, dest=dest, action=RenamedOptionStore, old=True, type=float,
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        else:
            parser.add_argument(old, dest=dest, action=RenamedOptionStore, old=True, fixed=const,
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
    unknown = set(preset) - {f.name for f in option_fields()}
    if unknown:
        raise KeyError(f"preset names unknown options {sorted(unknown)}")
    for f in option_fields():
        if safe_getattr(args, f.name, None) is None:
            setattr(args, f.name, preset.get(f.name, f.default))
    SyntaxModelConfig.from_args(args)


def encoder_width(syntax: "SyntaxModelConfig", word_dim: int) -> int:
    """The encoder width: the word width plus what every embedding-stage input component adds
    (:meth:`~.components.base.InputComponent.added_width`, from the options alone)."""
    return int(word_dim) + sum(c.added_width(syntax) for c in INPUT_COMPONENTS if c.stage == "embedding")


def check_model_sizes(args: Any, model_dim: int) -> None:
    """The checks that need the sizes the architecture chose; ``model_dim`` is the encoder width.

    Attention heads that divide the encoder and decoder widths, then every options class's
    ``check_sizes`` (:class:`~.options.ModelSizes`): widths the sinusoidal encodings can
    stagger, clipping distances no larger than the longest relative position, and so on.
    """
    from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, DEFAULT_MAX_TARGET_POSITIONS

    syntax = SyntaxModelConfig.from_args(args)
    word_dim = safe_getattr(args, "encoder_embed_dim")
    heads = to_int(safe_getattr(args, "encoder_attention_heads"), "--encoder-attention-heads")
    check_heads(model_dim, heads, "--encoder-attention-heads",
                f"the encoder model dimension {model_dim} (--encoder-embed-dim {word_dim} + syntax embeddings)")
    decoder_dim = to_int(safe_getattr(args, "decoder_embed_dim", model_dim), "--decoder-embed-dim")
    decoder_heads = to_int(safe_getattr(args, "decoder_attention_heads", heads), "--decoder-attention-heads")
    if decoder_model_dim(syntax, decoder_dim) == decoder_dim:  # else the layers' (widened) width is checked below
        check_heads(decoder_dim, decoder_heads, "--decoder-attention-heads", f"--decoder-embed-dim {decoder_dim}")
    sizes = ModelSizes(
        word_dim=int(word_dim),
        model_dim=int(model_dim),
        decoder_dim=decoder_dim,
        decoder_heads=decoder_heads,
        max_source_positions=int(safe_getattr(args, "max_source_positions", None) or DEFAULT_MAX_SOURCE_POSITIONS),
        max_target_positions=int(safe_getattr(args, "max_target_positions", None) or DEFAULT_MAX_TARGET_POSITIONS),
    )
    for options in OPTION_CLASSES:
        check = getattr(options, "check_sizes", None)
        if check is not None:
            check(syntax, sizes)
    widened = decoder_model_dim(syntax, decoder_dim)  # after the components' own checks, which say more
    if widened != decoder_dim:
        check_heads(widened, decoder_heads, "--decoder-attention-heads",
                    f"the decoder model dimension {widened} (--decoder-embed-dim {decoder_dim} + what the decoder "
                    "components add)")
    settings = vars(args) if isinstance(args, argparse.Namespace) else {}
    problem = settings_size_problem(settings, "the model", ": no memory holds it (a typo?)", as_flags=True)
    if problem is not None:  # what a checkpoint of it would be refused for, refused before any work
        raise ModelOptionError(problem)


def duan_attention_heads(model_dim: int) -> int:
    """Attention heads for a model width, as Duan et al. (2019) Table IV chose them.

    Head dimension 64 where it divides the width, else 32: 352 -> 11, 320 -> 5, 608 -> 19,
    576 -> 9 (Table IV), 512 -> 8. Otherwise the smallest divisor of the width that is at
    least 32 is the head dimension.
    """
    for head_dim in (64, 32):
        if model_dim % head_dim == 0:
            return model_dim // head_dim
    head_dim = next(d for d in range(32, model_dim + 1) if model_dim % d == 0) if model_dim >= 32 else model_dim
    return model_dim // head_dim
