"""Checkpoints and command lines of earlier releases, read as today's: one module, keyed on the format.

A model's args carry ``syntax_format_version`` (:data:`MODEL_FORMAT`), written by the
architecture function when the model is first built and stored with the checkpoint. Formats:

* 1: release 0.1. Recognised by ``rel_no_keys``, which 0.1 always stored: options renamed
  since (:data:`RENAMED_FLAGS`), ``""`` for ``none``, negative clips for "off", PASCAL's
  ``</s>`` on the line's last root;
* 2: the 0.2 line before the format was stored (no ``syntax_format_version``, a built model's
  ``syntax_num_labels``): behaviours whose default changed since are pinned to what the
  model was trained with (``--nsd-roots line``, ``--nsd-target-predict-from state``,
  ``--nsd-target-sampling 0``) where the checkpoint does not store them;
* 3: this release, the first to store its format.

On the command line, 0.1's spellings stay aliases (:class:`RenamedOptionStore`); the old and the
new spelling given with different values are refused.
"""

import argparse
from typing import Any, Dict, Tuple

from fairseq.utils import safe_getattr

from fairseq_syntax_core.oneline import one_line

from .components.relative import CLIP_OPTIONS
from .options import FEATURE_ALIASES, parse_bool

__all__ = ["MODEL_FORMAT", "FORMAT_KEY", "RENAMED_FLAGS", "RenamedOptionStore", "model_format", "upgrade_args"]

#: the format of the args this release stores with a model
MODEL_FORMAT = 3
#: where it is stored (an attribute of the model's args, like the recorded dictionary sizes)
FORMAT_KEY = "syntax_format_version"


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


#: the 0.1 flags' spelling today, for messages
_NEW_SPELLING = {"--rel-no-keys": "--no-rel-keys", "--rel-no-values": "--no-rel-values",
                 "--spe-parent-constant": "--spe-head-constant"}
#: namespace attribute where the parser notes who set an option that has a 0.1 spelling (removed by fill_unset)
_GIVEN = "_syntax_renamed_options_given"


class RenamedOptionStore(argparse.Action):
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


def model_format(args: Any) -> int:
    """The format of ``args``: stored (3 on), else 1 for 0.1's args, 2 for a built model's, else today's."""
    stored = safe_getattr(args, FORMAT_KEY, None)
    if stored is not None:
        try:
            return int(stored)
        except (TypeError, ValueError):
            from .options import ModelOptionError

            raise ModelOptionError(f"{FORMAT_KEY} {one_line(repr(stored))[:40]}: expected an integer model format "
                                   "(the stored args of a checkpoint: edited?)") from None
    if safe_getattr(args, "rel_no_keys", None) is not None:
        return 1
    if safe_getattr(args, "syntax_num_labels", None) is not None:
        return 2
    return MODEL_FORMAT  # a command line: no model yet


def upgrade_args(args: Any) -> None:
    """Rename options stored by 0.1 checkpoints, and pin behaviours whose default changed since.

    Runs first in every architecture function (:func:`fill_unset`), which fairseq applies to
    a checkpoint's stored args before the model is built, so a stored ``rel_no_keys = True``
    becomes ``rel_keys = False`` instead of being dropped for the new default. 0.1's args are
    recognised by ``rel_no_keys``, which 0.1 always stored and 0.2 never does.
    Keyed on :func:`model_format`; afterwards ``args`` carry today's format. A format newer than
    this release is refused: its options may mean what this release cannot build.
    """
    version = model_format(args)
    if version > MODEL_FORMAT:
        from .options import ModelOptionError

        raise ModelOptionError(
            f"this model was saved by a newer fairseq-syntax (model format {version}; this release reads up to "
            f"{MODEL_FORMAT}): upgrade fairseq-syntax to load it"
        )
    setattr(args, FORMAT_KEY, MODEL_FORMAT)
    if version <= 2:  # made before these options: pin what the model was trained with
        if safe_getattr(args, "nsd_roots", None) is None:
            setattr(args, "nsd_roots", "line")
        if safe_getattr(args, "nsd_target_predict_from", None) is None:  # before the option: eq. 11 on h_t alone
            setattr(args, "nsd_target_predict_from", "state")
        if safe_getattr(args, "nsd_target_sampling", None) is None:  # before the option: teacher forcing
            setattr(args, "nsd_target_sampling", 0.0)
    if version > 1:
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
