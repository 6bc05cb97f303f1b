"""fairseq's own settings that fairseq takes without a word and then ignores, misreads or fails on late.

Each check returns the one line that names the option, its value and what is accepted (or None);
:mod:`fairseq_syntax.compat` applies them where fairseq's commands start, before any work:

* :func:`distributed_cpu_error`, :func:`adopt_torchrun_on_cpu`: several ranks on a machine without GPU
  (``distributed.utils.call_main``);
* :func:`training_settings_error`: fairseq-train's ``--lr``, ``--clip-norm``, ``--keep-*`` counts and intervals,
  and :mod:`fairseq_syntax.optimizer_settings` (``call_main`` with fairseq-train's ``main``);
* :func:`generation_shards_error`: fairseq-generate's ``--num-shards``/``--shard-id``, which it does not read
  (``fairseq_cli.generate.main``, before the results file is opened).

Search settings are checked by the task when the generator is built (``search_settings.check_search``).
"""

import logging
import math
import os
import sys
from typing import Mapping, Optional

from fairseq_syntax.optimizer_settings import optimizer_settings_error
from fairseq_syntax_core.errors import UsageError
from fairseq_syntax_core.oneline import one_line


#: the environment torchrun (torch.distributed.launch) sets for each process
TORCHRUN_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
#: the --ddp-backend values whose wrapper runs on CPU modules (fairseq's LegacyDistributedDataParallel)
CPU_DDP_BACKENDS = ("legacy_ddp", "no_c10d")
CPU_RANK_FLAGS = (
    "--cpu --distributed-backend gloo --ddp-backend legacy_ddp --distributed-world-size N "
    "--distributed-rank R --distributed-no-spawn --distributed-init-method tcp://HOST:PORT"
)


def adopt_torchrun_on_cpu(dt, env: Mapping[str, str], default_world_size: int = 1) -> bool:
    """Under torchrun without GPU, set rank and world size from ``env`` as fairseq does on GPU.

    fairseq's ``_infer_torch_distributed_launch_init`` computes ``RANK % torch.cuda.device_count()``
    (a ZeroDivisionError without GPU), and on CPU its default ``--distributed-world-size`` is 1,
    with which it would not even look at the environment: each process would train alone on the
    whole data and write the same checkpoints. A torchrun of one process (``WORLD_SIZE=1``) is
    left alone; ``default_world_size`` is fairseq's default (``max(1, GPUs)``), not a user's value.
    Returns whether ``dt`` was set.
    """
    if dt.distributed_init_method is not None or not all(key in env for key in TORCHRUN_ENV):
        return False
    world = int(env["WORLD_SIZE"])
    if world <= 1:
        return False
    if dt.distributed_world_size not in (default_world_size, world):
        raise UsageError(
            f"--distributed-world-size {dt.distributed_world_size} disagrees with torchrun's WORLD_SIZE={world}: "
            "leave the flag out under torchrun"
        )
    dt.distributed_init_method = "env://"
    dt.distributed_world_size = world
    dt.distributed_rank = int(env["RANK"])
    dt.device_id = int(env.get("LOCAL_RANK", 0))
    dt.distributed_no_spawn = True
    return True


def distributed_cpu_error(cfg, gpus: int) -> Optional[str]:
    """Why fairseq cannot train ``cfg`` with several ranks on CPU (``gpus`` = 0 or ``--cpu``), or None.

    Only settings fairseq would run as a silent no-op or fail on obscurely are named; a
    single process, TPU and GPU runs are left to fairseq.
    """
    dt, common = cfg.distributed_training, cfg.common
    if dt.distributed_world_size <= 1 or getattr(common, "tpu", False):
        return None
    on_cpu = getattr(common, "cpu", False) or gpus == 0
    if not on_cpu:
        return None
    if gpus == 0 and not dt.distributed_no_spawn and not getattr(dt, "pipeline_model_parallel", False):
        return (
            f"--distributed-world-size {dt.distributed_world_size} without GPU: fairseq spawns one process "
            "per GPU, so it would start none and exit without training. On CPU start one process per rank "
            f"yourself, each with {CPU_RANK_FLAGS} (R = 0..N-1), or use torchrun (docs/scale_out.md)"
        )
    if dt.distributed_no_spawn and dt.distributed_init_method is None and not all(k in os.environ for k in TORCHRUN_ENV) \
            and "SLURM_JOB_NODELIST" not in os.environ and "SLURM_STEP_NODELIST" not in os.environ:
        return (
            "--distributed-no-spawn without --distributed-init-method: fairseq would look for GPUs to place "
            f"the ranks on; on CPU every rank needs {CPU_RANK_FLAGS}"
        )
    if dt.distributed_backend == "nccl":
        return (
            "--distributed-backend nccl needs GPUs: on CPU use --distributed-backend gloo "
            f"(with {CPU_RANK_FLAGS})"
        )
    if dt.ddp_backend not in CPU_DDP_BACKENDS:
        return (
            f"--ddp-backend {dt.ddp_backend} wraps the model with GPU device ids, which a CPU model refuses: "
            "on CPU use --ddp-backend legacy_ddp (fairseq's own gradient all-reduce)"
        )
    return None


def _number(value) -> str:
    """A setting's value as the user typed it (``-1``, ``nan``, ``0.5``)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


#: fairseq's checkpoint counts (``--keep-*``): -1, the default, keeps every checkpoint; the least other value
KEEP_COUNTS = {"keep_interval_updates": 1, "keep_last_epochs": 1, "keep_best_checkpoints": 1,
               "keep_interval_updates_pattern": 1}


def training_settings_error(cfg) -> Optional[str]:
    """Why fairseq-train must not start on ``cfg``: a setting fairseq takes without a word and then misreads, or None.

    * ``--lr``: a rate <= 0 or not finite. fairseq stops at once on a negative one (the rate is below
      ``--stop-min-lr``) and exits 0 without training; NaN trains on NaN.
    * ``--clip-norm``: negative or NaN. fairseq clips only when the norm is > 0, so either is "no clipping".
    * ``--keep-interval-updates``, ``--keep-last-epochs``, ``--keep-best-checkpoints``: below -1. fairseq keeps only
      when the count is > 0, so 0 or -2 keeps every checkpoint; ``--keep-interval-updates-pattern`` 0 divides by zero at
      the first save, after the first interval has been trained.
    """
    optimization, checkpoint = getattr(cfg, "optimization", None), getattr(cfg, "checkpoint", None)
    rates = list(getattr(optimization, "lr", None) or [])
    if optimization is not None and not rates:  # --lr "": fairseq indexes the empty list when it first sets the rate
        return "--lr (empty): expected learning rates > 0 (one per epoch, the last for the rest: --lr 0.0005)"
    for rate in rates:
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (math.isfinite(rate) and rate > 0):
            return (f"--lr {','.join(_number(r) for r in rates)}: expected learning rates > 0 (finite; one per "
                    "epoch, the last for the rest: --lr 0.0005)")
    clip = getattr(optimization, "clip_norm", 0.0)
    if isinstance(clip, (int, float)) and not (math.isfinite(clip) and clip >= 0):
        return f"--clip-norm {_number(clip)}: expected a gradient norm >= 0 (0, fairseq's default: no clipping)"
    problem = _limits_error(cfg) or _tpu_error(cfg) or optimizer_settings_error(cfg)
    if problem is not None:
        return problem
    for key, least in KEEP_COUNTS.items():
        count = getattr(checkpoint, key, -1)
        if isinstance(count, int) and count != -1 and count < least:
            return (f"--{key.replace('_', '-')} {count}: expected a count >= {least}, or -1 (fairseq's default: "
                    f"{'keep every checkpoint' if key != 'keep_interval_updates_pattern' else 'no pattern'})")
    return None


def _tpu_error(cfg) -> Optional[str]:
    """``--bf16``, ``--memory-efficient-bf16`` and ``--tpu``: fairseq runs them on a TPU only (bf16 sets ``--tpu``),
    through torch_xla; without it the trainer fails with a traceback after the model is built."""
    import importlib.util

    common = getattr(cfg, "common", None)
    if not getattr(common, "tpu", False) or importlib.util.find_spec("torch_xla") is not None:
        return None
    flag = next((f"--{key.replace('_', '-')}" for key in ("memory_efficient_bf16", "bf16")
                 if getattr(common, key, False)), "--tpu")
    return (f"{flag}: fairseq runs it only on a TPU, through torch_xla, which is not installed (on a GPU: --fp16 "
            "or --memory-efficient-fp16)")


def _limits_error(cfg) -> Optional[str]:
    """``--weight-decay`` negative or not finite (NaN weights from the first step); a scheduler setting not finite
    (NaN rates after update 0) or ``--lr-shrink`` outside (0, 1]; ``--restore-file`` naming no file (fairseq
    trained from scratch and exited 0); ``--ema-decay`` outside [0, 1]; ``--checkpoint-suffix`` with a path
    separator (the model lost at the first save). The counts and intervals are
    :data:`fairseq_syntax.optimizer_settings.COUNTS`."""
    decay = getattr(getattr(cfg, "optimizer", None), "weight_decay", None)
    if isinstance(decay, (int, float)) and not isinstance(decay, bool) and not (math.isfinite(decay) and decay >= 0):
        return f"--weight-decay {_number(decay)}: expected a finite weight decay >= 0 (0, fairseq's default: none)"
    scheduler = getattr(cfg, "lr_scheduler", None)
    settings = {key: scheduler.get(key) for key in scheduler.keys()} if hasattr(scheduler, "keys") else {}
    for key, value in settings.items():
        if isinstance(value, float) and not math.isfinite(value):
            return f"--{key.replace('_', '-')} {_number(value)}: expected a finite number"
    shrink = settings.get("lr_shrink")
    if isinstance(shrink, (int, float)) and not isinstance(shrink, bool) and not 0.0 < shrink <= 1.0:
        return f"--lr-shrink {_number(shrink)}: expected a factor in (0, 1] (the rate is multiplied by it)"
    checkpoint = getattr(cfg, "checkpoint", None)
    suffix = getattr(checkpoint, "checkpoint_suffix", "") or ""
    if isinstance(suffix, str) and (os.sep in suffix or "\0" in suffix or (os.altsep or os.sep) in suffix):
        return (f"--checkpoint-suffix {one_line(suffix)[:40]}: expected a file-name suffix without a path separator "
                "(fairseq would write into a folder that does not exist, at the first save)")
    restore = getattr(checkpoint, "restore_file", "checkpoint_last.pt")
    opened = restore.replace(".pt", f"{suffix}.pt") if isinstance(restore, str) else restore  # as fairseq does
    if isinstance(restore, str) and restore != "checkpoint_last.pt" and "://" not in restore \
            and not os.path.exists(opened):
        with_suffix = f" (with --checkpoint-suffix fairseq opens {one_line(opened)[:80]})" if opened != restore else ""
        return (f"--restore-file {one_line(restore)[:80]}: no such checkpoint{with_suffix} (left out: resume from "
                "--save-dir)")
    ema = getattr(cfg, "ema", None)
    rate = getattr(ema, "ema_decay", None)
    if getattr(ema, "store_ema", False) and isinstance(rate, (int, float)) and not 0.0 <= rate <= 1.0:  # NaN too
        return f"--ema-decay {_number(rate)}: expected a decay in [0, 1] (fairseq's default: 0.9999)"
    return None


def generation_shards_error(cfg) -> Optional[str]:
    """Why fairseq-generate must not start with ``--num-shards``/``--shard-id`` as given, or None.

    fairseq 0.12's generate reads neither: it shards its batches by ``--distributed-world-size`` and
    ``--distributed-rank``, so ``--num-shards 2 --shard-id 1`` decodes every sentence, as do ``--num-shards 0``
    and ``--shard-id 5 --num-shards 2``.
    """
    dataset = getattr(cfg, "dataset", cfg)  # fairseq's DictConfig, or the Namespace fairseq-generate passes
    shards, shard = getattr(dataset, "num_shards", 1), getattr(dataset, "shard_id", 0)
    if not isinstance(shards, int) or not isinstance(shard, int):
        return None
    if shards < 1:
        return f"--num-shards {shards}: expected a number of shards >= 1"
    if not 0 <= shard < shards:
        return f"--shard-id {shard}: expected a shard of --num-shards {shards}, from 0 to {shards - 1}"
    if shards > 1:
        return (f"--num-shards {shards} --shard-id {shard}: fairseq-generate does not read these and would decode "
                f"every sentence; shard with --distributed-world-size {shards} --distributed-rank {shard}")
    return None


def strict_literal_list(original):
    """fairseq's ``dataclass.utils.eval_str_list`` (how it reads ``--lr``, ``--update-freq``, ``--adam-betas``...),
    refusing literals that are not numbers or lists of them.

    fairseq evaluates the text with ``ast.literal_eval`` and maps the element type over it, so ``--lr True`` trains
    at 1.0 and ``--lr '{1: 2}'`` at 1.0 (the dict's key). A boolean, dict, set, string or None inside a number list
    is refused here as argparse refuses a value of the wrong type (``argument --lr: ...``).
    """

    def eval_str_list(x, x_type=float):
        value = original(x, x_type)
        if isinstance(x, str) and x.strip() and x_type in (int, float):
            import ast

            try:
                literal = ast.literal_eval(x)
            except (ValueError, SyntaxError):
                return value  # fairseq has already refused it, or read it some other way
            items = literal if isinstance(literal, (list, tuple)) else [literal]
            if isinstance(literal, (dict, set, frozenset)) or any(
                    isinstance(item, bool) or not isinstance(item, (int, float)) for item in items):
                import argparse

                example = "4" if x_type is int else "0.0005"
                raise argparse.ArgumentTypeError(f"{x!r} is not a number or numbers separated by commas (e.g. {example})")
        return value

    eval_str_list._fairseq_syntax = True  # type: ignore[attr-defined]
    return eval_str_list


class NotALiteral(UsageError, ValueError):
    """A setting that fairseq would hand to ``eval()`` and that is not a plain Python literal."""


def _literal(x: str):
    import ast

    try:
        return ast.literal_eval(x)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise NotALiteral(
            f"a model setting holds {one_line(x)[:80]!r}, which is not a Python literal (a number, a list of numbers, "
            "True/False): fairseq would run it with eval(); refused (a checkpoint's settings or --model-overrides)"
        ) from None


def literal_str_list(x, type=float):  # noqa: A002 (fairseq's signature)
    """``fairseq.utils.eval_str_list`` without ``eval``: the text must be a literal."""
    if x is None:
        return None
    if isinstance(x, str):
        x = _literal(x)
    try:
        return list(map(type, x))
    except TypeError:
        return [type(x)]


def literal_str_dict(x, type=dict):  # noqa: A002
    """``fairseq.utils.eval_str_dict`` without ``eval``."""
    if x is None:
        return None
    return _literal(x) if isinstance(x, str) else x


def literal_bool(x, default=False):
    """``fairseq.utils.eval_bool`` without ``eval``."""
    if x is None:
        return default
    try:
        return bool(_literal(x) if isinstance(x, str) else x)
    except TypeError:
        return default


#: fairseq's readers of settings that call ``eval()`` -> their literal-only replacements
LITERAL_READERS = {"eval_str_list": literal_str_list, "eval_str_dict": literal_str_dict, "eval_bool": literal_bool}


def install_strict_literal_lists() -> None:
    """No setting is ever run as code, and number lists are numbers.

    * ``fairseq.utils.eval_str_list``/``eval_str_dict``/``eval_bool`` call ``eval()`` on strings that can come
      from a checkpoint's settings (the transformer decoder's ``adaptive_softmax_cutoff``, the LSTM's): they, and
      the names ``fairseq.options`` imported from them, read literals only (:func:`literal_str_list`...);
    * fairseq's number-list options (``--lr``...) are read with :func:`strict_literal_list`: fairseq's parsers
      look ``eval_str_list`` up in their module when they convert a value, so replacing it there is enough.
    """
    from fairseq import options, utils
    from fairseq.dataclass import utils as dataclass_utils

    if not getattr(dataclass_utils.eval_str_list, "_fairseq_syntax", False):
        dataclass_utils.eval_str_list = strict_literal_list(dataclass_utils.eval_str_list)
    for name, reader in LITERAL_READERS.items():
        for module in (utils, options):
            if hasattr(module, name):
                setattr(module, name, reader)


def _file_handler_error(handler: logging.FileHandler, record: logging.LogRecord) -> None:
    """A log file that cannot be written (``--log-file /dev/full``, a full disk) ends the command with one line
    naming it; logging's default prints a traceback for every record and the command exits 0."""
    error = sys.exc_info()[1]
    if isinstance(error, OSError) and error.strerror:
        raise OSError(error.errno, error.strerror, handler.baseFilename) from None
    logging.Handler.handleError(handler, record)


def _not_the_composition_dump(record: logging.LogRecord) -> bool:
    """fairseq logs every setting (thousands of characters) before a setting hydra refuses; the error names it."""
    return not str(record.msg).startswith("Error when composing. Overrides:")


def install_setting_guards() -> None:
    """:func:`install_strict_literal_lists`; a log file that fails is one line (:func:`_file_handler_error`); a
    setting hydra refuses is the error's one line alone (:func:`_not_the_composition_dump`)."""
    install_strict_literal_lists()
    logging.FileHandler.handleError = _file_handler_error  # type: ignore[method-assign]
    composing = logging.getLogger("fairseq.dataclass.utils")
    if _not_the_composition_dump not in composing.filters:
        composing.addFilter(_not_the_composition_dump)
