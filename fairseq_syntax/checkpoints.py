"""fairseq's own checkpoint reads admit exactly the globals fairseq checkpoints hold, nothing else, and build
only models whose settings are data.

fairseq 0.12 reads checkpoints with torch's default ``weights_only``, which is ``True`` from
torch 2.6: importing the plugin adds the allow-list of
:mod:`fairseq_syntax_core.checkpoint_loader` (``argparse.Namespace``, NumPy scalars and dtypes)
to torch's process-wide one, before any checkpoint is read. Any other global in a checkpoint
still fails (as a one-line error naming the file, ``fairseq_syntax.compat``). Our own code
reads checkpoints with :func:`~fairseq_syntax_core.checkpoint_loader.load_checkpoint` only.

Settings are strings a checkpoint's author chose, and some of fairseq's models hand them to ``eval()``
(``fconv``'s layer specs, ``wav2vec2``'s feature layers...). :func:`model_class_problem` admits the models
of this plugin and fairseq's Transformer and LSTM (the baselines), whose list-valued settings go through
``fairseq.utils.eval_str_list``, which reads literals only once the plugin is loaded
(:func:`fairseq_syntax.fairseq_settings.install_strict_literal_lists`).
"""

import argparse
import contextlib
from typing import Any, Iterator, List, Mapping, Optional

from fairseq_syntax_core.checkpoint_loader import allow_fairseq_checkpoints, fairseq_checkpoint_globals
from fairseq_syntax_core import checkpoint_loader
from fairseq_syntax_core.errors import CheckpointError, InputError, UsageError
from fairseq_syntax_core.oneline import error_text, one_line

__all__ = ["allow_fairseq_checkpoints", "fairseq_checkpoint_globals", "model_class_problem", "DECODABLE_MODULES",
           "stored_criterion_problem",
           "stored_settings"]

#: the packages and modules whose model classes a checkpoint may name: ``type(model).__module__`` is one of them
#: or inside one (whole names: ``fairseq.models.transformer_lm`` is not inside ``fairseq.models.transformer``)
DECODABLE_MODULES = ("fairseq_syntax", "fairseq.models.transformer", "fairseq.models.lstm")
#: the criteria a checkpoint's stored settings may build (``fairseq-validate`` builds the stored one; some of
#: fairseq's, CTC's among them, run their settings as code): this plugin's and fairseq's translation losses
STORED_CRITERION_MODULES = ("fairseq_syntax", "fairseq.criterions.cross_entropy",
                            "fairseq.criterions.label_smoothed_cross_entropy", "fairseq.criterions.adaptive_loss")


def within(module: str, packages) -> bool:
    """Whether ``module`` is one of ``packages`` or inside one, by whole dotted names."""
    return any(module == package or module.startswith(package + ".") for package in packages)

allow_fairseq_checkpoints()


def _model_names(state: Mapping) -> List[Any]:
    """Every model name the checkpoint's settings give: ``arch`` and ``_name`` of its ``args`` (which fairseq
    turns into the settings whenever they are present) and of ``cfg.model`` (fairseq looks up ``_name``
    first, then ``arch``). Each must be admitted: a check of one alone is passed by another."""
    cfg = state.get("cfg")
    sources = [state.get("args"), cfg.get("model") if isinstance(cfg, Mapping) else None]
    names: List[Any] = []
    for model in sources:
        settings = vars(model) if isinstance(model, argparse.Namespace) else model if isinstance(model, Mapping) else {}
        names += [settings[key] for key in ("_name", "arch") if settings.get(key) is not None]
    return names


def model_class_problem(state: Any) -> Optional[str]:
    """Why the model a checkpoint's settings name must not be built here (see module doc), or None."""
    if not isinstance(state, Mapping):
        return None  # not a checkpoint's shape: the structure checks say so
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    for name in _model_names(state):  # none: fairseq refuses settings without a model
        if not isinstance(name, str):
            return f"its settings name a model by a {type(name).__name__}, not a name: refused"
        cls = ARCH_MODEL_REGISTRY.get(name) or MODEL_REGISTRY.get(name)
        module = getattr(cls, "__module__", "") or ""
        if cls is not None and within(module, DECODABLE_MODULES):
            continue
        known = "" if cls is not None else " (no such model is registered)"
        return (f"its settings build the model {one_line(name)[:60]!r}{known}, which is not one of this plugin's or "
                "fairseq's transformer/lstm: refused, as some of fairseq's models run their settings as code")
    return None


#: the tasks a checkpoint may name: fairseq-validate, awsl and the hub build the stored one (fairseq's
#: ``translation`` is refused by name later, as another data-bin format)
ADMITTED_TASKS = ("syntax_translation", "translation")


def stored_task_problem(state: Any) -> Optional[str]:
    """Why the task a checkpoint's settings name must not be built (fairseq-validate, awsl and the hub build it
    from the checkpoint, whatever ``--task`` says), or None."""
    if not isinstance(state, Mapping):
        return None
    cfg = state.get("cfg")
    task = cfg.get("task") if hasattr(cfg, "get") else None
    names = []
    if hasattr(task, "get"):
        names.append(task.get("_name"))
    args = state.get("args")
    if args is not None and hasattr(args, "task"):
        names.append(getattr(args, "task"))
    for name in names:
        if name not in ADMITTED_TASKS:
            shown = f"the task {one_line(name)[:60]!r}" if isinstance(name, str) else "no task"
            return (f"its settings name {shown} (cfg.task._name), not this plugin's syntax_translation: refused "
                    "(fairseq-validate, awsl and the hub build the task a checkpoint names)")
    return None


@contextlib.contextmanager
def stored_settings(from_checkpoint: bool, what: str = "model") -> Iterator[None]:
    """Building a model from a checkpoint's stored settings: a refusal names the checkpoint (the user gave no such
    flag), and what fairseq raises on settings it cannot build from is one line naming it too. Errors about
    the data-bin pass unchanged. ``what``: "model" or "criterion" (``fairseq-validate`` builds the stored one)."""
    path = checkpoint_loader.last_read or "the checkpoint"
    try:
        yield
    except InputError:
        raise
    except UsageError as error:
        if not from_checkpoint:
            raise
        message = f"{one_line(path)}: its stored settings: {error}"
        try:  # the same kind (a ModelOptionError stays a ValueError too)
            renamed = type(error)(message)
        except TypeError:
            renamed = UsageError(message)
        raise renamed from None
    except (ValueError, TypeError, RuntimeError, KeyError) as error:
        if not from_checkpoint:
            raise
        raise CheckpointError(path, None, f"fairseq cannot build the {what} its stored settings describe: "
                                          f"{error_text(error)}") from None
    except Exception as error:  # noqa: BLE001 - fairseq's bare ``Exception`` refusals (AdaptiveLoss's)
        if type(error) is not Exception:
            raise
        if from_checkpoint:
            raise CheckpointError(path, None, f"fairseq cannot build the {what} its stored settings describe: "
                                              f"{error_text(error)}") from None
        raise UsageError(f"fairseq cannot build the {what}: {error_text(error)}") from None


def stored_criterion_problem(cfg: Any) -> Optional[str]:
    """Why a criterion a checkpoint stored must not be built (a class outside :data:`STORED_CRITERION_MODULES`,
    or a label smoothing fairseq-train would refuse), or None."""
    from fairseq.criterions import CRITERION_REGISTRY

    from .optimizer_settings import optimizer_settings_error

    name = cfg.get("_name") if isinstance(cfg, Mapping) else getattr(cfg, "_name", None)
    cls = CRITERION_REGISTRY.get(name) if isinstance(name, str) else None
    if cls is None or not within(getattr(cls, "__module__", "") or "", STORED_CRITERION_MODULES):
        shown = one_line(name)[:60] if isinstance(name, str) else type(name).__name__
        return (f"its stored criterion {shown!r} is not one of this plugin's or fairseq's translation losses: refused, "
                "as some of fairseq's criteria run their settings as code")
    problem = optimizer_settings_error(argparse.Namespace(criterion=cfg))
    return f"its stored criterion settings: {problem}" if problem is not None else None


#: task settings a checkpoint stores that only the user of this run may give (fairseq-validate, awsl and the hub
#: build the task from the stored ones): a spaCy pipeline folder to load, and leave to decode on a data-bin the
#: model was not trained on
CALLER_ONLY_TASK_SETTINGS = {"syntax_parser": None, "allow_other_data_bin": False}


def caller_only_settings(state: Any, overrides: Optional[Mapping]) -> Any:
    """``state`` with :data:`CALLER_ONLY_TASK_SETTINGS` at their defaults in its ``cfg.task`` and ``args``, except
    those the caller gave (``overrides``: ``--model-overrides``, awsl's flag, the hub's keywords)."""
    given = overrides or {}
    if not isinstance(state, Mapping):
        return state
    cfg = state.get("cfg")
    sections = [cfg.get("task") if hasattr(cfg, "get") else None, state.get("args")]
    for section in sections:
        for key, default in CALLER_ONLY_TASK_SETTINGS.items():
            if key in given or section is None:
                continue
            if isinstance(section, argparse.Namespace):
                if hasattr(section, key):
                    setattr(section, key, default)
            elif hasattr(section, "get") and section.get(key) not in (None, default):
                section[key] = default
    if hasattr(cfg, "get"):
        caller_segmenters(cfg, given)
    return state


#: the stored sections a caller's name replaces whole (fairseq's override only sets the keys inside them)
SEGMENTER_SECTIONS = ("tokenizer", "bpe")


def caller_segmenters(cfg: Any, given: Mapping) -> None:
    """A tokenizer or segmenter the caller names (the hub's ``tokenizer=``/``bpe=``) replaces the stored section
    whole: fairseq's override keeps a stored section's ``_name``, languages and files, setting only the keys the
    caller gave in it. The section is rebuilt from the caller's name and keywords, as for a checkpoint without one."""
    from fairseq.dataclass.utils import overwrite_args_by_name
    from omegaconf import open_dict

    from omegaconf import DictConfig

    if not isinstance(cfg, DictConfig):
        return
    replaced = False
    for key in SEGMENTER_SECTIONS:
        if key in given and not isinstance(given[key], Mapping) and cfg.get(key) is not None:
            with open_dict(cfg):
                cfg[key] = None
            replaced = True
    if replaced:
        overwrite_args_by_name(cfg, dict(given))  # fairseq's own rebuild of a section the checkpoint lacks


def stored_types_problem(settings: Mapping[str, Any]) -> Optional[str]:
    """A checkpoint's stored model setting of another type than the model's option (``dropout='0.1'``: fairseq
    builds the model and fails in the first forward), named with its key, or None. The types are those the
    model's own command-line options parse to (``add_args``)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    model_class = ARCH_MODEL_REGISTRY.get(settings.get("arch")) if isinstance(settings.get("arch"), str) else None
    if model_class is None or not hasattr(model_class, "add_args"):
        return None
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    try:
        model_class.add_args(parser)
    except (argparse.ArgumentError, TypeError, ValueError):  # an option fairseq defines twice: not checked here
        return None
    for action in parser._actions:
        value = settings.get(action.dest)
        if action.type not in (int, float) or value is None or action.dest not in settings:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or (action.type is int and isinstance(value, float)):
            return (f"its stored setting {action.dest} is {one_line(repr(value))[:40]}, not the "
                    f"{'whole number' if action.type is int else 'number'} {action.option_strings[0]} takes (edited?)")
    return None
