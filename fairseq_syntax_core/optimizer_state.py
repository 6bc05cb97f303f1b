"""A checkpoint's optimizer state against the optimizer it is restored into (fairseq-train's resume,
``--restore-file``): torch maps it onto the parameters by position and checks little, and fairseq restores the
saved hyperparameters over the command line, so what does not fit fails in the first update, or trains
silently on forged settings. Used by :mod:`fairseq_syntax.compat`'s wrapper of the optimizer's restore.
"""

import os
from typing import Any, List, Mapping, Optional

import numpy as np
import torch

from .checkpoint_loader import _a, _real, _shown
from .errors import CheckpointError

__all__ = ["PER_WEIGHT_STATE", "NON_NEGATIVE_STATE", "optimizer_state_problem", "check_optimizer_state"]


#: optimizer state entries that hold one value per weight, so the shape of their parameter (torch's and fairseq's
#: Adam, AdamW, Adagrad, Adadelta, RMSprop, SGD's momentum, fairseq's Adafactor unfactored and NAG)
#: entries that every parameter's state holds when one holds them (torch's and fairseq's optimizers)
SHARED_STATE = ("step", "exp_avg")
#: per-weight entries that are means of squares (never negative)
NON_NEGATIVE_STATE = ("exp_avg_sq", "max_exp_avg_sq", "sum", "square_avg", "acc_delta")
PER_WEIGHT_STATE = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "sum", "square_avg", "acc_delta",
                    "grad_avg", "exp_inf", "ax", "prev", "step_size")
#: what a refusal of a checkpoint's optimizer state ends with
_RESET_OPTIMIZER = ("; resume with --reset-optimizer (the weights are kept, the optimizer starts afresh), or use "
                    "another checkpoint")


def optimizer_state_problem(saved: Any, groups: List[List[tuple]]) -> Optional[str]:
    """Why ``saved``, a checkpoint's ``last_optimizer_state`` (torch's ``Optimizer.state_dict()``), does not fit the
    optimizer it is loaded into, whose parameter groups hold parameters of the shapes ``groups``; or None.

    torch maps the saved state onto the parameters by position and checks only the number of parameters in each
    group; a per-weight entry (Adam's ``exp_avg``) of another shape or a step that is not a number fails in the
    first update (fairseq: a RuntimeError about tensor sizes naming no file).
    """
    if not isinstance(saved, Mapping) or not isinstance(saved.get("state"), Mapping) \
            or not isinstance(saved.get("param_groups"), list) \
            or not all(isinstance(g, Mapping) and isinstance(g.get("params"), list) for g in saved["param_groups"]):
        return f"its optimizer state is {_a(saved)} without torch's 'state' and 'param_groups'"
    saved_groups = saved["param_groups"]
    if len(saved_groups) != len(groups):
        return (f"its optimizer state has {len(saved_groups)} parameter groups, the optimizer {len(groups)} "
                "(another optimizer or model)")
    position = {}
    keys: Optional[set] = None
    for number, (saved_group, shapes) in enumerate(zip(saved_groups, groups), start=1):
        if len(saved_group["params"]) != len(shapes):
            return (f"its optimizer state holds {len(saved_group['params'])} parameters in group {number}, the model "
                    f"{len(shapes)} (another model, or a run with other --fp16 or optimizer settings)")
        for index, shape in zip(saved_group["params"], shapes):
            position[index] = (len(position) + 1, shape)
    total = len(position)
    required = {key for key in SHARED_STATE if any(isinstance(e, Mapping) and key in e for e in saved["state"].values())}
    for index, entries in saved["state"].items():
        if index not in position:
            return f"its optimizer state has an entry {_shown(index)} for no parameter of its groups"
        number, shape = position[index]
        if not isinstance(entries, Mapping):
            return f"its optimizer state for parameter {number} of {total} is {_a(entries)}, not a dict"
        keys = (keys or set()) | set(entries)
        missing = sorted(required - set(entries))
        if missing:  # entries every parameter has when one has them (Adafactor's others vary by shape)
            return (f"its optimizer state for parameter {number} of {total} has no {', '.join(missing)}, which the "
                    "other parameters have: forged, or damaged")
        for key, value in entries.items():
            where = f"its optimizer state for parameter {number} of {total}"
            if key == "step":
                if not _real(value) or (torch.is_tensor(value) and value.dim() > 0) \
                        or not np.isfinite(float(value)) or float(value) < 0:
                    return f"{where} has step {_shown(value)}, not a count"
            elif key in PER_WEIGHT_STATE:
                if not torch.is_tensor(value) or value.layout != torch.strided or value.is_meta:
                    return f"{where} has {key} {_a(value)}, not a dense tensor"
                if tuple(value.shape) != tuple(shape) or value.is_complex() or not value.is_floating_point():
                    return (f"{where} has {key} of shape {list(value.shape)} "
                            f"({str(value.dtype).replace('torch.', '')}), the parameter {list(shape)}: forged, or "
                            "from another model")
                if not bool(torch.isfinite(value).all()):
                    return f"{where} has {key} with NaN or infinite values: the update would be NaN"
                if key in NON_NEGATIVE_STATE and bool((value < 0).any()):
                    return f"{where} has {key} with negative values (a mean of squares): forged, or damaged"
    for number, group in enumerate(saved_groups, start=1):
        problem = _group_problem(group)
        if problem is not None:
            return f"its optimizer settings of parameter group {number} have {problem}"
        if group.get("amsgrad") is True and keys is not None and "max_exp_avg_sq" not in keys:
            return f"its optimizer settings of parameter group {number} ask for amsgrad, its state has no max_exp_avg_sq"
    return None


#: hyperparameters of torch's and fairseq's optimizers that are numbers (or tuples of numbers)
NUMERIC_SETTINGS = ("lr", "betas", "eps", "weight_decay", "momentum", "dampening", "lr_decay", "alpha", "initial_lr",
                    "rho", "clip_threshold", "decay_rate", "beta1", "initial_accumulator_value")


def _group_problem(group: Mapping) -> Optional[str]:
    """A saved parameter group's hyperparameter that fairseq would restore over the command line but cannot be right."""
    for key, value in group.items():
        if key == "params" or value is None or isinstance(value, bool) \
                or (isinstance(value, str) and key not in NUMERIC_SETTINGS):
            continue
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if not all(_real(v) and np.isfinite(float(v)) for v in values):
            return f"{key} {_shown(value)}, not finite numbers"
        if key == "betas" and not (len(values) == 2 and all(0 <= float(v) < 1 for v in values)):
            return f"betas {_shown(value)}: expected two coefficients in [0, 1)"
        if key in ("lr", "eps", "weight_decay", "momentum", "dampening", "lr_decay", "alpha") \
                and any(float(v) < 0 for v in values):
            return f"{key} {_shown(value)}: expected a value >= 0"
    return None


def check_optimizer_state(path: Optional[str], saved: Any, groups: List[List[tuple]]) -> None:
    """:func:`optimizer_state_problem` as one :class:`CheckpointError` naming ``path`` (the checkpoint read last)."""
    problem = optimizer_state_problem(saved, groups)
    if problem is not None:
        where = os.fspath(path) if path else "the checkpoint"
        raise CheckpointError(where, None, problem + _RESET_OPTIMIZER)
