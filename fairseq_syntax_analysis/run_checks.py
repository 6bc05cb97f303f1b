"""Whether the checkpoints of a save folder are one run from scratch under ``--max-update`` (``report record``).

A run is one when it started from no other weights (no ``--finetune-from-model``), counted its updates
once (no ``--reset-optimizer`` on a resume), went through its epochs once (no ``--reset-dataloader`` on a
resume: fairseq starts again at epoch 1), and when its best and last checkpoints carry the identifier the
run drew when it started (``run_id`` in the task state; checkpoints of runs started before runs carried
one are compared by what their settings record, :data:`SAME_RUN_KEYS`).
"""

from typing import Dict, Optional

from fairseq_syntax_core.decoding_record import (
    FINETUNED_KEY, carried, carried_problem, epoch_restarts, meter_resets, stored_run_id, update_restarts,
)
from fairseq_syntax_core.oneline import quoted

__all__ = ["one_run_problem", "run_id_problem"]


def one_run_problem(state: Dict) -> Optional[str]:
    """Why the run that saved checkpoint ``state`` is not one run from scratch, or None."""
    damaged = carried_problem(state)
    if damaged is not None:
        return f"its task_state's {damaged} (edited?): what it carries of its run cannot be read"
    stored = state.get("cfg") if isinstance(state.get("cfg"), dict) else {}
    started = stored.get("checkpoint") if isinstance(stored.get("checkpoint"), dict) else {}
    start = started.get("finetune_from_model") or carried(state, FINETUNED_KEY)
    if start:
        return (f"records --finetune-from-model {quoted(start, 80)}: its run started from "
                "those weights (fairseq reads them on a first launch), so it is not one run from scratch under "
                "--max-update")
    history = state.get("optimizer_history") or [{}]
    counts = [h.get("num_updates") for h in history if isinstance(h, dict) and isinstance(h.get("num_updates"), int)]
    restarted = update_restarts(state) or [counts[i - 1] for i in range(1, len(counts)) if counts[i] < counts[i - 1]]
    if restarted:
        return (f"counted {restarted[0]} updates, then again from 0: a resume with --reset-optimizer restarted its "
                "count, so it is not one run under --max-update (train it again without the reset)")
    forgotten = meter_resets(state)
    if forgotten:
        return (f"was resumed at update {forgotten[0]} with --reset-meters: fairseq forgot the best validation value, "
                "so checkpoint_best.pt need not be the run's best (train it again without the reset)")
    again = epoch_restarts(state)
    if again:
        return (f"was resumed at update {again[0]} with --reset-dataloader: fairseq started its epochs again at "
                "epoch 1 and trained the batches of the epochs before twice, so it is not one run (train it again "
                "without the reset)")
    return None


def run_id_problem(best: Dict, last: Dict) -> Optional[str]:
    """Why checkpoint ``best`` was not saved by the run of checkpoint ``last`` by their run identifiers, or None."""
    ids = stored_run_id(best), stored_run_id(last)
    if ids[0] == ids[1]:
        return None
    if None in ids:
        return (f"{'records no run identifier' if ids[0] is None else f'is of run {ids[0][:12]}'}, checkpoint_last.pt "
                f"{'records none' if ids[1] is None else f'is of run {ids[1][:12]}'}: another run's checkpoint left in "
                "the folder (or edited)")
    return (f"is of run {ids[0][:12]}, checkpoint_last.pt of run {ids[1][:12]}: the best checkpoint of another run "
            "left in the folder")
