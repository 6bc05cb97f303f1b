"""fairseq-train's optimizer, schedule, criterion and batching settings that fairseq takes without a word.

:func:`optimizer_settings_error` returns the one line naming the option, its value and what is accepted (or
None); :func:`fairseq_syntax.fairseq_settings.training_settings_error` calls it before anything is trained:

* ``--adam-betas``: fairseq's Adam reads them with ``eval`` when it is built (a ``NameError``/``SyntaxError``
  traceback for ``(0.9,nan)`` or ``(0.9,0.98``); a beta outside [0, 1) trains on NaN and exits 0.
* ``--adam-eps``, ``--warmup-init-lr``, ``--label-smoothing``: NaN or out of range, read without a check.
* ``--stop-min-lr`` at or above the first learning rate: fairseq stops before the first update and exits 0.
* any setting fairseq's optimizer or scheduler refuses when built (``--total-num-update 0`` of
  ``polynomial_decay``: a bare ``assert``): one line before ``--save-dir`` is made, not a traceback after.
* ``--batch-size``/``--max-tokens``/``--max-valid-steps`` below 1, ``--update-freq`` below 1,
  ``--save-interval-updates``/``--validate-interval-updates``/``--curriculum``/``--stop-time-hours`` below 0,
  ``--patience`` below -1: trained as something else, or a message that names no option.
* ``--end-learning-rate``, ``--min-lr``, ``--power`` below 0, ``--warmup-init-lr`` below 0 but -1, a scheduler whose
  first rate is below 0: training at a negative rate (gradient ascent) or stopping at once, exit 0;
  ``--force-anneal`` below 1 and ``--lr-patience`` below 0: read as "from the first epoch" and 0.
"""

import ast
import copy
import math
from typing import Optional, Tuple

#: (section, key, least, what fairseq's default means): counts and intervals (None: not given).
#: ``--max-update``/``--max-epoch`` below 0: fairseq stops after one update, or trains nothing, and exits 0;
#: ``--validate-interval``/``--save-interval``/``--log-interval`` below 1: a ZeroDivisionError, the first two after
#: a whole epoch
COUNTS = (
    ("optimization", "max_update", 0, "0, fairseq's default: no limit"),
    ("optimization", "max_epoch", 0, "0, fairseq's default: no limit"),
    ("dataset", "validate_interval", 1, "fairseq's default: 1, every epoch"),
    ("checkpoint", "save_interval", 1, "fairseq's default: 1, every epoch"),
    ("common", "log_interval", 1, "fairseq's default: 100 updates"),
    ("dataset", "batch_size", 1, "not given: --max-tokens alone sizes the batches"),
    ("dataset", "batch_size_valid", 1, "not given: --batch-size"),
    ("dataset", "max_tokens", 1, "not given: --batch-size alone sizes the batches"),
    ("dataset", "max_tokens_valid", 1, "not given: --max-tokens"),
    ("checkpoint", "save_interval_updates", 0, "0, fairseq's default: save at epoch ends only"),
    ("checkpoint", "patience", -1, "-1, fairseq's default: no early stopping"),
    ("dataset", "validate_interval_updates", 0, "0, fairseq's default: at epoch ends only"),
    ("dataset", "curriculum", 0, "0, fairseq's default: no curriculum"),
    ("dataset", "max_valid_steps", 1, "not given: the whole validation set"),
    ("optimization", "stop_time_hours", 0, "0, fairseq's default: no time limit"),
    ("lr_scheduler", "warmup_updates", 0, "0: no warm-up"),
    ("lr_scheduler", "force_anneal", 1, "not given: no forced annealing"),
    ("lr_scheduler", "lr_patience", 0, "0, fairseq's default: shrink after one epoch without improvement"),
)
#: scheduler floors and exponents a negative value of which trains at a negative rate (gradient ascent, exit 0)
#: or stops before the first update: (key, what is expected)
SCHEDULE_FLOORS = (
    ("end_learning_rate", "a rate >= 0 (0, fairseq's default)"),
    ("min_lr", "a rate >= 0 (0, fairseq's default)"),
    ("power", "an exponent >= 0 (1, fairseq's default: linear decay)"),
)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _betas_error(betas) -> Optional[str]:
    """``--adam-betas``: two finite numbers in [0, 1), read as a literal (fairseq evaluates the string)."""
    shown = betas if isinstance(betas, str) else str(tuple(betas))
    expected = f"--adam-betas {shown}: expected two numbers in [0, 1) as a tuple, e.g. '(0.9, 0.98)'"
    if isinstance(betas, str):
        try:
            betas = ast.literal_eval(betas.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return expected
    try:
        values = list(betas)
    except TypeError:
        return expected
    if len(values) != 2 or not all(_is_number(b) and math.isfinite(b) and 0 <= b < 1 for b in values):
        return expected
    return None


#: optimizers and schedulers that need the model's parameter groups: not built on one parameter here
BUILT_WITH_THE_MODEL = ("composite", "pass_through")
#: what fairseq's optimizers and schedulers raise on settings they refuse (the rest: no check here)
_REFUSALS = (AssertionError, ValueError, ZeroDivisionError, OverflowError)


def _refusal(error: BaseException, cfg) -> str:
    """The line for a setting fairseq's optimizer or scheduler refused when built: its message, or for a bare
    ``assert`` the asserted source line."""
    import linecache
    import traceback

    text = " ".join(str(error).split())
    if not text:
        frames = traceback.extract_tb(error.__traceback__)
        text = (linecache.getline(frames[-1].filename, frames[-1].lineno).strip() if frames else "") or "refused"
    names = [f"--{flag} {getattr(getattr(cfg, section, None), '_name', None)}"
             for section, flag in (("optimizer", "optimizer"), ("lr_scheduler", "lr-scheduler"))]
    return f"{' '.join(names)}: fairseq refused their settings: {type(error).__name__}: {text[:200]}"


def _first_learning_rate(cfg) -> Tuple[Optional[float], Optional[str]]:
    """The rate fairseq-train compares with ``--stop-min-lr`` before its first update: the scheduler's rate after
    ``step_update(0)``, as the trainer sets it, built on a copy (schedulers write back their defaults); or the
    line for settings the optimizer or scheduler refuses (fairseq would fail after making --save-dir)."""
    try:
        import torch
        from fairseq import optim
        from fairseq.optim import lr_scheduler

        copied = copy.deepcopy(cfg)
        optimizer = optim.build_optimizer(copied.optimizer, [torch.nn.Parameter(torch.zeros(1))])
        scheduler = lr_scheduler.build_lr_scheduler(copied.lr_scheduler, optimizer)
        scheduler.step_update(0)
        return float(optimizer.get_lr()), None
    except _REFUSALS as error:
        return None, _refusal(error, cfg)
    except Exception:  # an optimizer that needs a GPU or a library not installed: fairseq says so itself
        return None, None


def optimizer_settings_error(cfg) -> Optional[str]:
    """Why fairseq-train must not start on these settings of ``cfg`` (module docstring), or None."""
    optimizer = getattr(cfg, "optimizer", None)
    betas = getattr(optimizer, "adam_betas", None)
    if betas is not None:
        problem = _betas_error(betas)
        if problem is not None:
            return problem
    eps = getattr(optimizer, "adam_eps", None)
    if _is_number(eps) and not (math.isfinite(eps) and eps >= 0):
        return f"--adam-eps {_text(eps)}: expected a finite epsilon >= 0 (fairseq's default: 1e-08)"
    momentum = getattr(optimizer, "momentum", None)  # sgd, nag: NaN trains to NaN weights and exits 0
    if _is_number(momentum) and not 0.0 <= momentum < 1.0:
        return f"--momentum {_text(momentum)}: expected a finite momentum in [0, 1) (0.99, nag's default)"
    adafactor_eps = getattr(optimizer, "adafactor_eps", None)  # fairseq eval()s it when it builds the optimizer
    if isinstance(adafactor_eps, str):
        import ast

        try:
            pair = ast.literal_eval(adafactor_eps)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pair = None
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(_is_number(v) and math.isfinite(v) and v >= 0
                                                                  for v in pair)):
            return (f"--adafactor-eps {_text(adafactor_eps)}: expected two finite epsilons >= 0 as a Python "
                    "tuple, e.g. '(1e-30, 1e-3)' (fairseq's default)")
    init = getattr(getattr(cfg, "lr_scheduler", None), "warmup_init_lr", None)
    if _is_number(init) and not math.isfinite(init):
        return (f"--warmup-init-lr {_text(init)}: expected a finite rate (-1, fairseq's default: 0 with "
                "--warmup-updates, else --lr)")
    smoothing = getattr(getattr(cfg, "criterion", None), "label_smoothing", None)
    if _is_number(smoothing) and not 0.0 <= smoothing < 1.0:  # NaN fails too
        return f"--label-smoothing {_text(smoothing)}: expected a share in [0, 1) (fairseq's recipes: 0.1)"
    for section, key, least, meaning in COUNTS:
        value = getattr(getattr(cfg, section, None), key, None)
        if _is_number(value) and value < least:
            what = "a number of hours" if key == "stop_time_hours" else "a count"
            return f"--{key.replace('_', '-')} {_text(value)}: expected {what} >= {least} ({meaning})"
    for key, expected in SCHEDULE_FLOORS:
        value = getattr(getattr(cfg, "lr_scheduler", None), key, None)
        if _is_number(value) and value < 0:
            return f"--{key.replace('_', '-')} {_text(value)}: expected {expected}"
    rates = [r for r in (getattr(getattr(cfg, "optimization", None), "lr", None) or []) if _is_number(r)]
    for key in ("end_learning_rate", "min_lr"):  # polynomial_decay would rise to it; cosine resets it to --lr
        value = getattr(getattr(cfg, "lr_scheduler", None), key, None)
        if rates and _is_number(value) and value > max(rates):
            return (f"--{key.replace('_', '-')} {_text(value)}: expected at most the peak rate, --lr "
                    f"{_text(max(rates))} (the schedule ends, or bottoms out, at it)")
    for key in ("init_lr_scale", "final_lr_scale"):  # tri_stage: factors of --lr; above 1 the rate climbs over it
        value = getattr(getattr(cfg, "lr_scheduler", None), key, None)
        if _is_number(value) and not 0 < value <= 1:
            return f"--{key.replace('_', '-')} {_text(value)}: expected a factor of --lr in (0, 1]"
    init = getattr(getattr(cfg, "lr_scheduler", None), "warmup_init_lr", None)
    if _is_number(init) and init < 0 and init != -1:
        return (f"--warmup-init-lr {_text(init)}: expected a rate >= 0, or -1 (fairseq's default: 0 with "
                "--warmup-updates, else --lr)")
    freqs = list(getattr(getattr(cfg, "optimization", None), "update_freq", None) or [])
    if any(not isinstance(f, int) or isinstance(f, bool) or f < 1 for f in freqs):
        return (f"--update-freq {','.join(_text(f) for f in freqs)}: expected batches per update >= 1 "
                "(one per epoch, the last for the rest: --update-freq 4)")
    if getattr(cfg, "optimizer", None) is None or getattr(cfg, "lr_scheduler", None) is None \
            or getattr(cfg.optimizer, "_name", None) in BUILT_WITH_THE_MODEL \
            or getattr(cfg.lr_scheduler, "_name", None) in BUILT_WITH_THE_MODEL:
        return None
    first, refused = _first_learning_rate(cfg)
    if refused is not None:
        return refused
    if first is not None and first < 0:
        return (f"--lr-scheduler {getattr(cfg.lr_scheduler, '_name', None)}: its first learning rate is {first:g}: "
                "expected a rate >= 0 (a negative rate trains away from the data)")
    stop = getattr(getattr(cfg, "optimization", None), "stop_min_lr", None)
    if _is_number(stop) and stop >= 0:
        if first is not None and first <= stop:
            return (f"--stop-min-lr {_text(stop)}: expected below the first learning rate, {first:g} (fairseq "
                    "would stop before the first update; with warm-up the first rate is --warmup-init-lr)")
    return None
