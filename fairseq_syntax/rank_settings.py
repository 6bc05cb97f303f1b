"""Ranks of one fairseq-train started with other settings (by hand, ``torchrun``, a cluster script).

fairseq starts each rank from its own command line and never compares them: with another ``--lr``, ``--seed``
or ``--max-tokens`` each rank orders, cuts and steps differently, the copies of the model drift apart (only
rank 0's is saved), and the run exits 0. After the process group is up, every rank shares the settings that
must agree (:data:`SECTIONS`, the batching settings of :mod:`.resume_settings`) and all refuse in one line
naming the first that differs and the rank. Ranks fairseq spawns itself share one configuration.
"""

import functools
import inspect
import json
import logging
from typing import Any, Dict, Optional

from fairseq_syntax_core.errors import UsageError
from fairseq_syntax_core.oneline import one_line

from .resume_settings import BATCHING

logger = logging.getLogger(__name__)

#: keys of those sections that may differ between ranks (logging only; the data path is compared by content)
PER_RANK_KEYS = {"eval_bleu_print_samples", "data"}
#: the configuration sections every rank must share whole
SECTIONS = ("model", "task", "criterion", "optimizer", "lr_scheduler", "optimization")
#: sections whose settings may differ between ranks (rank, device, logging, checkpointing, loader workers) or are
#: compared by key (the batching ones)
PER_RANK_SECTIONS = ("common", "common_eval", "distributed_training", "dataset", "checkpoint", "bmuf", "generation",
                     "eval_lm", "interactive", "ema")


def rank_settings(cfg: Any) -> Dict[str, str]:
    """``{"section.key": value as JSON}`` of the settings every rank must share."""
    from omegaconf import OmegaConf

    settings: Dict[str, str] = {}
    per_rank = set()  # a legacy model's settings are the whole command line: leave out the other sections' keys
    for section in PER_RANK_SECTIONS:
        node = getattr(cfg, section, None)
        per_rank.update(node.keys() if hasattr(node, "keys") else vars(node) if node is not None else ())
    for section in SECTIONS:
        node = getattr(cfg, section, None)
        try:
            values = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else vars(node)
        except Exception:  # noqa: BLE001 - a section that cannot be read is not compared
            continue
        for key, value in (values or {}).items():
            if key in per_rank or key in PER_RANK_KEYS:
                continue
            settings[f"{section}.{key}"] = json.dumps(value, sort_keys=True, default=str)
    for section, key, _ in BATCHING:
        settings[f"{section}.{key}"] = json.dumps(getattr(getattr(cfg, section, None), key, None), default=str)
    settings["common.seed"] = json.dumps(getattr(getattr(cfg, "common", None), "seed", None))
    settings.pop("task.data", None)
    settings["the data path"] = json.dumps(_data_identity(getattr(getattr(cfg, "task", None), "data", None)))
    from .resume_settings import resumed_state

    settings["the checkpoint resumed"] = json.dumps(resumed_state(cfg), sort_keys=True)
    return settings


def _data_identity(data: Any) -> Any:
    """The data paths as what they hold (each one's syntax.json and dictionaries, by digest): the same data-bin
    named another way, or a copy on another node, is the same data."""
    import glob
    import os

    from fairseq_syntax_core.fileio import content_sha256

    if not isinstance(data, str):
        return data
    identity = []
    for path in data.split(":"):
        files = sorted(glob.glob(os.path.join(path, "dict.*.txt")) + glob.glob(os.path.join(path, "syntax.json")))
        try:
            identity.append(content_sha256(files) if files else os.path.realpath(path))
        except Exception:  # noqa: BLE001 - an unreadable data-bin is refused when the task reads it
            identity.append(os.path.realpath(path))
    return identity


def rank_settings_problem(cfg: Any) -> Optional[str]:
    """Why the ranks of this process group must not train together (the first setting that differs), or None."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, rank_settings(cfg))
    first = gathered[0] or {}
    for rank, theirs in enumerate(gathered[1:], start=1):
        for key in sorted(set(first) | set(theirs or {})):
            ours, other = first.get(key), (theirs or {}).get(key)
            if ours != other and key == "the checkpoint resumed":
                return (f"rank {rank} {_resume_text(other)}, rank 0 {_resume_text(ours)}: every rank must resume the "
                        "same checkpoint with the same --reset-* options (the same --save-dir or --restore-file)")
            if ours != other:
                flag = "--" + key.split(".", 1)[1].replace("_", "-") if "." in key else key
                return (f"rank {rank} was started with {flag} {one_line(str(other))[:60]}, rank 0 with "
                        f"{one_line(str(ours))[:60]} ({key}): every rank must train with the same settings")
    return None


def _resume_text(recorded: Optional[str]) -> str:
    """What a rank resumes, from its :func:`.resume_settings.resumed_state` as JSON."""
    try:
        state = json.loads(recorded or "{}")
    except ValueError:
        return "resumes something unreadable"
    what = "starts a new run" if state.get("updates") is None else f"resumes a checkpoint at update {state['updates']}"
    resets = [f"--{k.replace('_', '-')}" for k, v in sorted(state.items()) if k.startswith("reset_") and v]
    return what + (f" with {' '.join(resets)}" if resets else "") + \
        (" and --finetune-from-model" if state.get("finetune_from_model") else "")


def wrap_distributed_init(distributed_utils) -> bool:
    """``distributed_utils.distributed_init``: after it, :func:`rank_settings_problem` on every rank."""
    original = getattr(distributed_utils, "distributed_init", None)
    if original is None or getattr(original, "_fairseq_syntax", False):
        return original is not None
    if tuple(inspect.signature(original).parameters)[:1] != ("cfg",):
        logger.warning("fairseq's distributed_init has changed: ranks' settings will not be compared")
        return False

    @functools.wraps(original)
    def distributed_init(cfg, *args, **kwargs):
        rank = original(cfg, *args, **kwargs)
        problem = rank_settings_problem(cfg)
        if problem is not None:
            import torch.distributed as dist

            try:  # every rank refuses: leave the group first, or gloo's threads abort the process at exit
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - the refusal matters more than a clean teardown
                pass
            raise UsageError(problem)
        return rank

    distributed_init._fairseq_syntax = True  # type: ignore[attr-defined]
    distributed_utils.distributed_init = distributed_init
    return True
