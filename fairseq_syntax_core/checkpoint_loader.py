"""The one way this project reads a checkpoint: torch's weights-only unpickler and fairseq's allow-list.

A ``.pt`` file is a pickle, and unpickling runs whatever callables the file names. torch's
weights-only unpickler refuses every global that is not on an allow-list, so a checkpoint can
only hold tensors, containers, numbers, strings and the few classes listed here. fairseq 0.12
training checkpoints of legacy (argparse) models pickle the model arguments as an
``argparse.Namespace`` inside ``cfg``, and a saved metric may be a NumPy number or numeric array (a best
score; ``--eval-bleu``'s counts):
:func:`fairseq_checkpoint_globals` names exactly these, and nothing else is admitted.

* :func:`load_checkpoint` is the reader for our own code (``fairseq-syntax-report record``, tests):
  it passes ``weights_only=True`` explicitly, with the allow-list, so no setting of torch or of the
  environment turns the check off, and every failure is one :class:`CheckpointError` naming the file.
* fairseq's own reads (``checkpoint_utils.load_checkpoint_to_cpu``: fairseq-train, -generate,
  -interactive, -validate, ``from_pretrained``, ``fairseq-syntax-awsl``) leave ``weights_only``
  to torch's default, which is ``True`` from torch 2.6 (``setup.py`` requires it).
  ``fairseq_syntax.checkpoints`` adds the allow-list to torch's global one when the plugin is
  imported (:func:`allow_fairseq_checkpoints`), and ``fairseq_syntax.compat`` refuses to let
  fairseq read when :func:`default_load_problem` says the default would unpickle anything.
* :func:`check_fairseq_state` is the one check that what a file holds is shaped as fairseq's
  readers index it (a dict of tensor weights, settings, optimizer history, ...): fairseq's reads
  (``fairseq_syntax.compat`` runs it before fairseq's own upgrade code touches the state), the
  provenance read and ``fairseq-syntax-report record`` (:func:`load_fairseq_checkpoint`) refuse
  anything else with one :class:`CheckpointError`, as they refuse an unreadable file.

This module imports only NumPy and PyTorch (never fairseq), so commands that only read
checkpoints need not import fairseq.
"""

import argparse
import os
import pickle
import re
import zipfile
from typing import Any, List, Mapping, MutableMapping, Optional

import numpy as np
import torch

from .errors import CheckpointError

#: the exceptions a read of a damaged or foreign checkpoint raises (fairseq's reads included)
READ_ERRORS = (EOFError, RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError, OSError, KeyError)
#: the torch version from which ``torch.load`` defaults to ``weights_only=True``
WEIGHTS_ONLY_DEFAULT_SINCE = (2, 6)
_TRUE = ("1", "y", "yes", "true")
#: how torch's weights-only unpickler names a global it refused (torch 2.6 to 2.13)
_REFUSED = (re.compile(r"GLOBAL (\S+) whose module \S+ is blocked"),
            re.compile(r"GLOBAL (\S+) was not an allowed global"),
            re.compile(r"Unsupported global: GLOBAL (\S+)"))
_WEIGHTS_ONLY_DETAIL = "WeightsUnpickler error:"
_DOCS = "Check the documentation of torch.load"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def fairseq_checkpoint_globals() -> List[object]:
    """The non-tensor globals that fairseq 0.12 training checkpoints contain."""
    allowed: List[object] = [argparse.Namespace, np.dtype, np.ndarray]
    for module_name in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            module = __import__(module_name, fromlist=["scalar"])
        except ImportError:
            continue
        # a NumPy number, and a numeric array: --eval-bleu's meters keep BLEU's counts as arrays
        allowed += [module.scalar, module._reconstruct]
        break
    dtypes = getattr(np, "dtypes", None)  # NumPy >= 1.25 pickles dtypes by class
    if dtypes is not None:
        allowed += [getattr(dtypes, name) for name in ("Float64DType", "Float32DType", "Int64DType", "Int32DType")
                    if hasattr(dtypes, name)]
    return allowed


def allow_fairseq_checkpoints() -> None:
    """Add :func:`fairseq_checkpoint_globals` to torch's process-wide allow-list (for fairseq's reads)."""
    torch.serialization.add_safe_globals(fairseq_checkpoint_globals())


def default_load_problem() -> Optional[str]:
    """Why a ``torch.load`` that leaves ``weights_only`` to torch (fairseq's) would unpickle any object, or None."""
    version = tuple(int(part) for part in re.findall(r"\d+", torch.__version__)[:2])
    if version < WEIGHTS_ONLY_DEFAULT_SINCE:
        return (f"torch {torch.__version__} would unpickle any object in this checkpoint (its torch.load "
                "defaults to weights_only=False); install torch>=2.6")
    forced_off = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0").lower() in _TRUE
    if forced_off and os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() not in _TRUE:
        return ("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set, with which fairseq would unpickle any object in this "
                "checkpoint (and run the code it names); unset it: fairseq checkpoints load weights-only")
    return None


def refused_global(error: BaseException) -> Optional[str]:
    """The global (``module.name``) that torch's weights-only unpickler refused in ``error``, or None."""
    if not isinstance(error, pickle.UnpicklingError):
        return None
    for pattern in _REFUSED:
        found = pattern.search(str(error))
        if found:
            return found.group(1).rstrip(".,;")
    return None


def _detail(error: BaseException) -> str:
    """The informative part of ``error`` on one line (torch's weights-only messages are mostly advice)."""
    text = _ANSI.sub("", str(error)).split(_DOCS)[0]
    if _WEIGHTS_ONLY_DETAIL in text:
        text = text.split(_WEIGHTS_ONLY_DETAIL, 1)[1]
    return " ".join(text.split())[:200]


#: what every message about a file that is not a usable checkpoint ends with
_USE_ANOTHER = ("; expected a checkpoint written by fairseq-train. Use another one "
                "(checkpoint_best.pt, checkpoint_last.pt, an epoch checkpoint) or train again")


def checkpoint_read_error(path: str, error: BaseException) -> CheckpointError:
    """The one-line message for a checkpoint that could not be read (``error`` is why)."""
    suffix = _USE_ANOTHER
    name = refused_global(error)
    if name is not None:
        return CheckpointError(path, None, f"the checkpoint holds an object that is not allowed ({name}) and was "
                               "not loaded: unpickling it could run code" + suffix)
    if isinstance(error, FileNotFoundError) or not os.path.lexists(path):
        return CheckpointError(path, None, "not found: no checkpoint file by this name")
    if os.path.isdir(path):
        return CheckpointError(path, None, "is a folder, not a checkpoint file" + suffix)
    size = os.path.getsize(path) if os.path.isfile(path) else None
    if size == 0:
        why = "the file is empty (0 bytes): its save was interrupted, or the disk was full"
    else:
        why = f"it cannot be read as a fairseq checkpoint ({type(error).__name__}: {_detail(error)})"
    return CheckpointError(path, None, why + suffix)


def load_checkpoint(path: str, mmap: bool = False) -> Any:
    """The checkpoint at ``path`` on CPU, read weights-only with fairseq's allow-list.

    Raises :class:`CheckpointError` naming ``path`` for any file that cannot be read so: missing,
    a folder, empty, truncated, not a torch file, or holding an object not on the allow-list.
    ``mmap``: the tensors stay in the file until used (for reading a checkpoint's settings only).
    """
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        # a FIFO would block the read forever, a device never ends
        raise CheckpointError(path, None, "is not a regular file (a FIFO, socket or device): expected a checkpoint "
                              "file written by fairseq-train")
    # torch maps only zip-format files (torch >= 1.6); an older file is read as a whole
    mmap = mmap and zipfile.is_zipfile(path)
    # torch's context removes on exit every global it was given, even one added process-wide
    # before (the plugin's, for fairseq's reads): give it only those not admitted already
    admitted = set(torch.serialization.get_safe_globals())
    missing = [name for name in fairseq_checkpoint_globals() if name not in admitted]
    try:
        with torch.serialization.safe_globals(missing):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as error:  # whatever a damaged or hostile file raises is the file's fault
        raise checkpoint_read_error(path, error) from None


# ------------------------------------------------------------------ the structure fairseq reads
#: parts of a checkpoint that fairseq's readers index as dicts when they are there
_SECTIONS = ("extra_state", "task_state")
#: parts that are dicts, or None when there was nothing to save (a criterion without parameters)
_OPTIONAL_SECTIONS = ("criterion", "last_optimizer_state")


def _a(value: Any) -> str:
    """``a list``, ``an int``, ``None``: what a value is, for messages."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _settings_problem(state: dict) -> Optional[str]:
    """What of ``args`` and ``cfg`` (the settings fairseq builds the task and the model from) is unusable."""
    args, cfg = state.get("args"), state.get("cfg")
    if args is not None and not isinstance(args, argparse.Namespace):
        return f"its 'args' is {_a(args)}, not fairseq's argparse.Namespace of settings"
    if cfg is not None:
        if not isinstance(cfg, Mapping):
            return f"its 'cfg' is {_a(cfg)}, not a dict of settings"
        for name, section in cfg.items():
            if not isinstance(name, str):
                return f"its 'cfg' has a key {name!r} that is not a section name"
            if name.startswith("_"):  # FairseqConfig's _name
                continue
            if section is not None and not isinstance(section, (Mapping, argparse.Namespace)):
                return f"its cfg['{name}'] is {_a(section)}, not a section of settings"
    for settings in (args, cfg.get("model") if isinstance(cfg, Mapping) else None):
        version = (vars(settings) if isinstance(settings, argparse.Namespace) else settings or {}).get(
            "syntax_format_version") if isinstance(settings, (argparse.Namespace, Mapping)) else None
        if version is not None and not _count(version, 1000):
            return f"its model format syntax_format_version {_shown(version)} is not a format number"
    if args is None:
        if cfg is None:
            return "it holds neither 'cfg' nor 'args' (the settings the model was trained with)"
        for name in ("model", "task"):
            if cfg.get(name) is None:
                return f"its 'cfg' has no '{name}' settings"
    return None


def _training_state_problem(state: dict) -> Optional[str]:
    """What of the optimizer history and the extra state (which fairseq upgrades and resumes from) is unusable."""
    if "optimizer_history" in state:
        history = state["optimizer_history"]
        if not isinstance(history, list) or not history or not all(isinstance(h, Mapping) for h in history):
            return f"its 'optimizer_history' is {_a(history)}, not a non-empty list of dicts"
        updates = history[-1].get("num_updates", 0)
        if isinstance(updates, bool) or not isinstance(updates, (int, np.integer)):
            return f"its optimizer_history's num_updates is {_a(updates)}, not a whole number"
        if not 0 <= int(updates) <= MAX_UPDATES:
            return f"its optimizer_history's num_updates {_shown(updates)} is not a count of updates (0 to {MAX_UPDATES})"
    elif not ("best_loss" in state and "optimizer" in state):  # fairseq upgrades its oldest checkpoints' keys
        return "it holds no 'optimizer_history'"
    if "extra_state" not in state and "epoch" not in state:  # the same (the oldest kept the epoch on top)
        return "it holds no 'extra_state'"
    for name in _SECTIONS:
        if name in state and not isinstance(state[name], Mapping):
            return f"its '{name}' is {_a(state[name])}, not a dict"
    for name in _OPTIONAL_SECTIONS:
        if state.get(name) is not None and not isinstance(state[name], Mapping):
            return f"its '{name}' is {_a(state[name])}, not a dict"
    extra = state.get("extra_state") or {}
    iterator = extra.get("train_iterator")
    if iterator is not None and not isinstance(iterator, Mapping):
        return f"its extra_state's train_iterator is {_a(iterator)}, not a dict"
    for key, bound in (("epoch", MAX_EPOCHS), ("iterations_in_epoch", MAX_UPDATES)):
        value = (iterator or {}).get(key)
        if value is not None and not _count(value, bound):
            return f"its train_iterator's {key} {_shown(value)} is not a count (0 to {bound})"
    for key in ("best", "previous_training_time"):  # fairseq compares and adds them as numbers
        value = extra.get(key)
        if value is not None and not _real(value):
            return f"its extra_state's {key} {_shown(value)} is not a number"
    metrics = extra.get("metrics")
    if metrics is not None and not (isinstance(metrics, Mapping) and all(isinstance(v, (list, tuple))
                                                                         for v in metrics.values())):
        return f"its extra_state's metrics is {_a(metrics)}, not fairseq's dict of meters"
    return None


def _count(value: Any, bound: int) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= int(value) <= bound


def _real(value: Any) -> bool:
    if torch.is_tensor(value):
        return value.numel() == 1 and not value.is_complex()
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def structure_problem(state: Any) -> Optional[str]:
    """What in ``state`` is not shaped as fairseq's readers index a checkpoint, or None.

    fairseq 0.12 (``checkpoint_utils.load_checkpoint_to_cpu`` and ``_upgrade_state_dict``,
    ``load_model_ensemble_and_task``, ``Trainer.load_checkpoint``) indexes a checkpoint without
    looking: a file that loads weights-only but holds something else (a list, a string, an
    ``argparse.Namespace``, a dict with a string for its weights) fails there with a
    ``TypeError``, ``AttributeError`` or ``RuntimeError`` naming no file.
    """
    if not isinstance(state, dict):
        return f"it holds {_a(state)}, not fairseq's dict of weights and settings"
    model = state.get("model")
    if not isinstance(model, Mapping):
        return "it holds no 'model' (the weights)" if model is None else \
            f"its 'model' is {_a(model)}, not a dict of tensors (the weights)"
    for key, value in model.items():
        if not isinstance(key, str):
            return f"its 'model' has a key {_shown(key)} that is not a parameter name"
        if not torch.is_tensor(value):
            return f"its 'model' entry {_shown(key)} is {_a(value)}, not a tensor"
        if value.layout != torch.strided or value.is_meta or value.is_quantized:
            kind = "meta" if value.is_meta else "quantized" if value.is_quantized else str(value.layout).split(".")[-1]
            return f"its 'model' entry {_shown(key)} is a {kind} tensor, not dense weights"
        if value.is_complex() or (key.endswith((".weight", ".bias")) and not value.is_floating_point()):
            return f"its 'model' entry {_shown(key)} holds {value.dtype} numbers, not real-valued weights"
    return _settings_problem(state) or _training_state_problem(state)


def check_fairseq_state(path: str, state: Any) -> Any:
    """``state`` (read from ``path``) if fairseq's readers can index it; else the one-line
    :class:`CheckpointError` naming ``path`` and what is wrong (:func:`structure_problem`)."""
    problem = structure_problem(state)
    if problem is not None:
        raise CheckpointError(os.fspath(path), None, f"it is not a fairseq checkpoint: {problem}" + _USE_ANOTHER)
    problem = size_problem(state) or interpolation_problem(state)
    if problem is not None:
        raise CheckpointError(os.fspath(path), None, problem + _USE_ANOTHER)
    drop_file_settings(state)
    return state


#: model settings naming a file fairseq reads while it builds the model (pretrained embeddings): a checkpoint's
#: weights replace what they would load, so a stored one is dropped, never opened (a FIFO would hang the load)
FILE_SETTINGS = ("encoder_embed_path", "decoder_embed_path")


def drop_file_settings(state: Any) -> Any:
    """``state`` with the :data:`FILE_SETTINGS` of its ``cfg['model']`` and ``args`` set to None (in place; also
    in fairseq's own reading of it, where ``cfg`` is an omegaconf DictConfig)."""
    if not isinstance(state, Mapping):
        return state
    cfg = state.get("cfg")
    for settings in (cfg.get("model") if isinstance(cfg, Mapping) else None, state.get("args")):
        for key in FILE_SETTINGS:
            if isinstance(settings, argparse.Namespace) and getattr(settings, key, None) is not None:
                setattr(settings, key, None)
            elif isinstance(settings, MutableMapping) and settings.get(key) is not None:
                settings[key] = None
    return state


def interpolation_problem(state: Any) -> Optional[str]:
    """A setting of the checkpoint's ``cfg`` or ``args`` holding an omegaconf reference (``${oc.env:HOME}``,
    ``${task.data}``): fairseq would resolve it when the setting is read (an environment variable, another
    setting). fairseq-train stores settings resolved, so a genuine checkpoint holds none."""
    settings = [("cfg", state.get("cfg")), ("args", state.get("args"))] if isinstance(state, Mapping) else []
    stack = [(name, value, 0) for name, value in settings]
    while stack:
        where, value, depth = stack.pop()
        if isinstance(value, argparse.Namespace):
            value = vars(value)
        if isinstance(value, str) and "${" in value:
            return f"its setting {_shown(where, 80)[1:-1]} holds a reference {_shown(value, 40)}: settings read from a file " \
                   "are values, not references to resolve"
        if depth < 8 and isinstance(value, Mapping):
            stack.extend((f"{where}.{k}", v, depth + 1) for k, v in value.items() if isinstance(k, str))
        elif depth < 8 and isinstance(value, (list, tuple)):
            stack.extend((f"{where}[{i}]", v, depth + 1) for i, v in enumerate(value[:1000]))
    return None


#: model settings that size tensors built before the weights are loaded (positions, distances, widths ...)
_SIZE_OPTION = re.compile(r"(positions|max_distance|_dim|_layers|_heads|_size|_k|_l)$")
#: widths, and what a width is multiplied by in one tensor (another width, a number of positions or distances)
_WIDTH = re.compile(r"_dim$")
_EXTENT = re.compile(r"(positions|max_distance|_dim)$")
#: the largest such setting a checkpoint may hold: a forged one would allocate without bound
MAX_SIZE_OPTION = 1 << 20
#: the most elements one tensor built from the settings may have (4 GiB of float32)
MAX_TENSOR_ELEMENTS = 1 << 30
#: the most updates a checkpoint may say it was trained for, and the most epochs
MAX_UPDATES = 10 ** 12
MAX_EPOCHS = 10 ** 9
#: the most elements the weights built from the settings may have in all (layers x width x width or FFN)
MAX_MODEL_ELEMENTS = 1 << 34
#: the deepest stack of layers a setting may ask for (DeepNet's 1,000 encoder layers are within it)
MAX_LAYERS = 4096


def _shown(value: Any, limit: int = 60) -> str:
    """``value`` for a message: on one line, shortened (names and numbers read from a file)."""
    text = repr(value) if isinstance(value, str) else str(value)
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
                   for c in text)
    return text if len(text) <= limit else text[:limit] + "..."


def _stored_settings(state: dict) -> List[tuple]:
    cfg = state.get("cfg") if isinstance(state.get("cfg"), dict) else {}
    found = []
    for where, settings in (("args", state.get("args")), ("cfg['model']", cfg.get("model"))):
        items = dict(vars(settings)) if isinstance(settings, argparse.Namespace) else \
            dict(settings) if isinstance(settings, Mapping) else None
        if items is not None:
            found.append((where, items))
    return found


def settings_size_problem(settings: Mapping, where: str,
                          consequence: str = ", which fairseq would build before loading the weights: edited?",
                          as_flags: bool = False) -> Optional[str]:
    """Why model settings (``where``: stored args, cfg, --model-overrides, the command line) would build tensors
    beyond any model: a size setting out of ``0..MAX_SIZE_OPTION`` or not a whole number, or a width times a
    width or a length over :data:`MAX_TENSOR_ELEMENTS`. fairseq builds the model before it loads the weights."""
    def named(key: str, value: Any) -> str:
        return f"--{key.replace('_', '-')} {_shown(value, 30)}" if as_flags else f"{key} = {_shown(value, 30)}"

    sizes = {}
    for key, value in settings.items():
        if not (isinstance(key, str) and _SIZE_OPTION.search(key)) or isinstance(value, bool) or value is None:
            continue
        if "batch" in key:  # --batch-size and its kin size batches, not the model (fairseq-train checks them)
            continue
        if as_flags and isinstance(value, str) and value.isascii() and value.isdigit():  # fairseq parses some
            value = int(value)  # command-line sizes as text (--decoder-output-dim): a number all the same
        if isinstance(value, str) and not key.endswith("_layers"):  # a size fairseq builds from (layer *lists*
            # such as --gps-layers "0,2" are strings by design; layer counts are ints)
            return f"{where} setting {named(key, value)} is not a number{consequence}"
        if isinstance(value, (int, float, np.integer, np.floating)):
            whole = np.isfinite(value) and float(value).is_integer()
            if not whole or not 0 <= value <= MAX_SIZE_OPTION:
                return (f"{where} setting {named(key, value)} is beyond any model size (a whole number "
                        f"from 0 to {MAX_SIZE_OPTION}){consequence}")
            sizes[key] = int(value)
    widths = sorted(((v, k) for k, v in sizes.items() if _WIDTH.search(k)), reverse=True)
    extents = sorted(((v, k) for k, v in sizes.items() if _EXTENT.search(k)), reverse=True)
    if widths and extents and widths[0][0] * extents[0][0] > MAX_TENSOR_ELEMENTS:
        (width, wkey), (extent, ekey) = widths[0], extents[0]
        both = f"{named(wkey, width)} squared" if wkey == ekey else f"{named(wkey, width)} and {named(ekey, extent)}"
        return (f"{where} settings {both} make a tensor of {width * extent} elements (at most "
                f"{MAX_TENSOR_ELEMENTS}){consequence}")
    layers = sorted(((v, k) for k, v in sizes.items() if k.endswith("_layers")), reverse=True)
    if layers and layers[0][0] > MAX_LAYERS:  # each layer is dozens of Python modules: a million of them never end
        return (f"{where} setting {named(layers[0][1], layers[0][0])} is beyond any model's depth (at most "
                f"{MAX_LAYERS} layers){consequence}")
    wide = sorted(((v, k) for k, v in sizes.items() if k.endswith("_dim")), reverse=True)
    if layers and len(wide) >= 1:
        (count, lkey), (width, wkey) = layers[0], wide[0]
        inner = wide[1][0] if len(wide) > 1 else width
        if count * width * max(inner, 1) > MAX_MODEL_ELEMENTS:
            return (f"{where} settings {named(lkey, count)} and {named(wkey, width)} make layers of more than "
                    f"{MAX_MODEL_ELEMENTS} weights in all{consequence}")
    return None


def size_problem(state: dict, overrides: Optional[Mapping] = None) -> Optional[str]:
    """Why the model settings stored in ``state`` (``args``, ``cfg.model``), with ``overrides``
    (``--model-overrides``) applied, cannot be built, or None (:func:`settings_size_problem`)."""
    if overrides is not None and not isinstance(overrides, Mapping):
        return f"--model-overrides: expected a dict of settings ({{'key': value}}), found a {type(overrides).__name__}"
    for where, settings in _stored_settings(state) or [("args", {})]:
        for key in ("arch", "_name"):  # fairseq builds the stored model whatever it says: only the record changes
            if overrides and key in overrides and key in settings and overrides[key] != settings[key]:
                return (f"--model-overrides {key}={str(overrides[key])[:60]!r}: fairseq would still build the stored "
                        f"{str(settings[key])[:60]!r} and record the other name; a checkpoint's model is not overridden")
        if overrides:
            settings = {**settings, **{k: v for k, v in overrides.items() if isinstance(k, str)}}
            where = f"{where} (with --model-overrides)"
        problem = settings_size_problem(settings, f"its stored {where}")
        if problem is not None:
            return problem
    return None


#: the checkpoint fairseq read last (set by the plugin's wrapper of its reader): fairseq loads the weights
#: right after reading each file, so a mismatch in them is this file's
last_read: Optional[str] = None


def state_dict_mismatch(error: BaseException) -> Optional[str]:
    """The one line for torch's "Error(s) in loading state_dict" anywhere in ``error``'s chain (a checkpoint
    whose weights are not those of the model its settings build: another architecture or size), or None."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        if isinstance(error, RuntimeError) and text.startswith("Error(s) in loading state_dict"):
            counts = []
            for kind, pattern in (("missing", r'Missing key\(s\) in state_dict: (.*)'),
                                  ("unexpected", r'Unexpected key\(s\) in state_dict: (.*)')):
                match = re.search(pattern, text)
                if match:
                    keys = re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(1))
                    counts.append(f"{len(keys)} {kind} (e.g. {_shown(keys[0]) if keys else '?'})")
            shapes = re.findall(r"size mismatch for (\S+?):", text)
            if shapes:
                counts.append(f"{len(shapes)} of another shape (e.g. {_shown(shapes[0])})")
            where = f"{_shown(last_read, 200)[1:-1]}: " if last_read else ""
            return (f"{where}the checkpoint's weights do not fit the model its settings build"
                    + (f": {'; '.join(counts)} parameters" if counts else "")
                    + ". A checkpoint of another architecture or size? Give --arch and sizes as it was trained, "
                    "or another checkpoint")
        error = error.__cause__ or error.__context__
    return None


def load_fairseq_checkpoint(path: str, mmap: bool = False) -> dict:
    """:func:`load_checkpoint`, then :func:`check_fairseq_state`: a fairseq checkpoint, or one CheckpointError."""
    return check_fairseq_state(path, load_checkpoint(path, mmap=mmap))


from .optimizer_state import PER_WEIGHT_STATE, check_optimizer_state, optimizer_state_problem  # noqa: E402,F401
