"""What every component's options share: the field helper, value parsing, the error, the sizes.

A component's options are a dataclass of its own (fields made with :func:`opt`, a default and a
help text each), registered with the component (:mod:`.components.base`); :mod:`.config`
composes them into ``SyntaxModelConfig``, the one source of names, defaults and help of
``syntax_transformer``'s command line. Each options class may define ``check(self)`` (its values
and their contradictions) and ``check_sizes(self, sizes)`` (what depends on the model's sizes,
:class:`ModelSizes`); both run on the composed config, while fairseq parses the command line.
"""

import argparse
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from fairseq_syntax_core.errors import UsageError
from fairseq_syntax.modules.syntax_embedding import parse_feature_list

__all__ = [
    "ModelOptionError",
    "ModelSizes",
    "FEATURE_ALIASES",
    "FLOAT32_MAX",
    "opt",
    "flag_name",
    "to_int",
    "to_float",
    "parse_bool",
    "parse_name_list",
    "parse_layer_list",
    "check_heads",
    "check_positive",
    "fewer_heads",
]


class ModelOptionError(UsageError, ValueError):
    """A model option that cannot be built (unknown feature, layer out of range, heads that do not divide).

    A :class:`~fairseq_syntax_core.errors.UsageError`: the commands print it as one line,
    ``PROG: error: MESSAGE``, without a traceback.
    """



#: names accepted for a feature in 0.1 (``parent`` was the head position, the ``heads`` tensor)
FEATURE_ALIASES: Dict[str, str] = {"parent": "head"}
FLOAT32_MAX = 3.4028234663852886e38  # the encodings are computed in float32


@dataclass
class ModelSizes:
    """The sizes the architecture chose, for the checks that depend on them (``check_sizes``)."""

    word_dim: int  # --encoder-embed-dim
    model_dim: int  # the encoder width: the word width plus what the embedding-stage components add
    decoder_dim: int  # --decoder-embed-dim
    decoder_heads: int
    max_source_positions: int
    max_target_positions: int


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def to_int(value: Any, flag: str) -> int:
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


def to_float(value: Any, flag: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ModelOptionError(f"{flag}: expected a number, got {value!r}") from None


def opt(default: Any, help: str, choices: Optional[Tuple[str, ...]] = None, metavar: Optional[str] = None):
    metadata: Dict[str, Any] = {"help": help}
    if choices is not None:
        metadata["choices"] = choices
    if metavar is not None:
        metadata["metavar"] = metavar
    return field(default=default, metadata=metadata)



def check_positive(cfg: Any, names: Tuple[str, ...]) -> None:
    """Sizes and counts that must be >= 1 whether or not their component is on."""
    for name in names:
        value = getattr(cfg, name)
        if value < 1:
            raise ModelOptionError(f"{flag_name(name)} {value}: expected a positive integer")


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


def check_heads(dim: int, heads: int, flag: str, width: str) -> None:
    """At least one head, and heads that divide the width (a suggestion of fewer heads that would)."""
    if heads < 1:
        raise ModelOptionError(f"{flag} {heads}: expected at least 1 head")
    if dim % heads != 0:
        raise ModelOptionError(f"{width} is not divisible by {flag} {heads}; e.g. {flag} "
                               f"{fewer_heads(dim, heads)} would do")


def fewer_heads(dim: int, heads: int) -> int:
    """The most heads, at most ``heads``, that divide ``dim`` (for messages)."""
    return next(h for h in range(min(heads, dim), 0, -1) if dim % h == 0)
