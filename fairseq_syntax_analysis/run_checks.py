"""Whether the checkpoints of a save folder are one run from scratch under ``--max-update`` (``report record``).

A run is one when it started from no other weights (no ``--finetune-from-model``), counted its updates
once (no ``--reset-optimizer`` on a resume), went through its epochs once (no ``--reset-dataloader`` on a
resume: fairseq starts again at epoch 1), and when its best and last checkpoints carry the identifier the
run drew when it started (``run_id`` in the task state; checkpoints of runs started before runs carried
one are compared by what their settings record, :data:`SAME_RUN_KEYS`).
"""

from typing import Dict, Optional

from fairseq_syntax_core.decoding_record import (
    FINETUNED_KEY, RESTORED_KEY, SEARCH_KEY, SEEDS_KEY, STALLED_KEY, carried, carried_problem, epoch_restarts, meter_resets, stored_run_id, update_restarts,
)
from fairseq_syntax_core.databin import perturbation_rounds
from fairseq_syntax_core.oneline import quoted

__all__ = ["missing_record_problem", "decoding_problem", "decoding_settings", "best_value_problem", "logged_best_problem", "one_run_problem", "run_id_problem", "run_patience"]


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
    seeds = carried(state, SEEDS_KEY)
    if isinstance(seeds, list) and len(set(seeds)) > 1:
        return (f"was trained with --seed {seeds[0]}, then resumed with --seed {seeds[-1]}: its weights and first "
                "epochs are of the first seed, so it is not one run of either (train it again under one seed)")
    restored = carried(state, RESTORED_KEY)
    if restored:
        return (f"was resumed from {quoted(restored, 80)} (--restore-file or --continue-once), not from its own "
                "checkpoint_last.pt: the updates before came from that checkpoint's training, so it is not one run "
                "from scratch in this folder (record the run where it started, resuming it there)")
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


def _number(value: object) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def best_value_problem(best: Dict, last: Dict) -> Optional[str]:
    """Why checkpoint ``best`` is not the best of the run whose last checkpoint is ``last``: it was saved with
    another validation value than the best ``last`` records (an earlier best copied in), or None."""
    saved = _number((best.get("extra_state") or {}).get("val_loss"))
    run_best = _number((last.get("extra_state") or {}).get("best"))
    if saved is None or run_best is None or saved == run_best:
        return None
    return (f"was saved with the validation value {saved:g}, but checkpoint_last.pt records the run's best as "
            f"{run_best:g}: not the run's best checkpoint (an earlier one copied in?)")


def run_patience(last: Dict) -> Dict[str, object]:
    """``patience``: the ``--patience`` the run of checkpoint ``last`` was trained with; ``stalled``: fairseq's count
    of validations without improvement when it saved (absent where the checkpoint does not record them)."""
    cfg = last.get("cfg") if isinstance(last.get("cfg"), dict) else {}
    checkpoint = cfg.get("checkpoint") if isinstance(cfg.get("checkpoint"), dict) else {}
    facts: Dict[str, object] = {}
    if type(checkpoint.get("patience")) is int:
        facts["patience"] = checkpoint["patience"]
    if type(carried(last, STALLED_KEY)) is int:
        facts["stalled"] = carried(last, STALLED_KEY)
    return facts


def logged_best_problem(logged: Dict, facts: Dict) -> Optional[str]:
    """Why the validation a train log records at the best checkpoint's update is not the best checkpoint's (a log of
    another run in the same folder), or None. fairseq logs three decimals."""
    metric = facts.get("best_checkpoint_metric", "loss")
    value, best = _number(logged.get(metric)), _number(facts.get("best_valid_loss"))
    if value is None or best is None or abs(value - best) <= 0.0005 + 1e-9:
        return None
    return (f"logs {metric} {value:g} at update {facts.get('best_updates')}, but checkpoint_best.pt was saved with "
            f"{best:g}: the log of another run (in the same folder?)")


def missing_record_problem(record: object, needed: str = "a result") -> Optional[str]:
    """Why an evaluation without the ``fairseq-syntax-decoded`` record of its log cannot be used (every check of
    the run would be skipped: a cut log passed for a complete one), or None when it has one."""
    if isinstance(record, dict) and isinstance(record.get("checkpoints"), list) and record["checkpoints"]:
        return None
    return ("evaluates translations whose log has no fairseq-syntax-decoded line (plain text, a fairseq-generate "
            f"log cut before its last lines, or one of a release before it was written): {needed} needs the "
            "complete log of fairseq-generate, which records what it decoded; decode again")


def decoding_problem(record: object) -> Optional[str]:
    """Why the translations a generate log's ``fairseq-syntax-decoded`` record describes are not a test score of
    the run (parses perturbed, sampled, a validation split, or no record at all), or None."""
    missing = missing_record_problem(record)
    if missing is not None:
        return missing
    search = record.get(SEARCH_KEY) if isinstance(record.get(SEARCH_KEY), dict) else {}
    subset = search.get("gen_subset") if isinstance(search.get("gen_subset"), str) else None
    if perturbation_rounds(record.get("perturbation"), subset):  # the decoded split's parses, p = 0 as parsed
        return (f"evaluates translations of a data-bin whose parses were perturbed ({quoted(record['perturbation'], 80)}"
                ", its generate log records): a result is the clean test score; perturbed ones go to report noise")
    if search.get("sampling"):
        return "evaluates sampled translations (--sampling, its generate log records): a result is a beam search's"
    if isinstance(subset, str) and subset.rstrip("0123456789") in ("train", "valid"):
        return (f"evaluates translations of the split {quoted(subset, 40)} (--gen-subset, its generate log records): "
                "a result scores a test split")
    return None


def decoding_settings(record: object) -> Optional[Dict[str, object]]:
    """The search settings a generate log's record holds (beam, length limits, penalties), or None."""
    search = record.get(SEARCH_KEY) if isinstance(record, dict) else None
    if not isinstance(search, dict):
        return None
    return {k: v for k, v in sorted(search.items()) if k != "gen_subset" and isinstance(v, (str, int, float))}
