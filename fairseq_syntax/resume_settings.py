"""What fairseq-train does not say when it resumes a run from a checkpoint.

* **Mid-epoch, with other batching.** fairseq stores how many batches of the current epoch were trained
  (``extra_state.train_iterator.iterations_in_epoch``) and, on resume, skips that many batches of the epoch as
  this run builds them. Batches built with another ``--max-tokens``, ``--batch-size``,
  ``--required-batch-size-multiple``, ``--seed`` (the order), ``--distributed-world-size`` (the shards),
  ``--train-subset``, length limits or ``--num-batch-buckets`` are other batches: most of the epoch is skipped,
  or part of it trained twice, and the run exits 0. Refused; ``--reset-dataloader`` (fairseq: start again at
  epoch 1) or the stored settings resume it.
* **--reset-optimizer.** fairseq restarts the update count at 0 (``--max-update`` and the learning-rate
  schedule count from there) and says only "@ 0 updates". Warned, with the count the checkpoint had; the counts
  at which a run restarted are carried in its checkpoints' task state (``update_restarts``, through
  :data:`CARRIED_ENV` so that processes fairseq spawns see them), and ``fairseq-syntax-report record``
  refuses such a run: it is not one run under ``--max-update``. Likewise ``--reset-dataloader`` on a resume
  (fairseq starts the epochs again at epoch 1: ``epoch_restarts``).
* **Which run a checkpoint belongs to.** A run draws an identifier when it starts and every resume keeps it
  (``run_id`` in the task state, carried the same way): ``report record`` refuses a
  ``checkpoint_best.pt`` of another run left in the same folder.
* **Resumed from another checkpoint.** ``--restore-file`` naming anything but the run's own
  ``checkpoint_last.pt`` (another folder's, an earlier one, ``--continue-once``) is carried
  (``restored_from``), and ``report record`` refuses such a run; naming its own by a path is a run
  started again, finished at ``--max-update`` or ``--patience`` like one started by default.
"""

import argparse
import ast
import json
import logging
import os
import uuid
from typing import Any, Dict, List, Optional, Tuple

from fairseq_syntax_core.decoding_record import (  # noqa: F401
    EPOCH_RESTARTS_KEY, FINETUNED_KEY, METER_RESETS_KEY, RESTARTS_KEY, RESTORED_KEY, RUN_ID_KEY, SEEDS_KEY, STALLED_KEY,
    carried,
    carried_problem,
    epoch_restarts, meter_resets, stored_run_id, update_restarts,
)
from fairseq_syntax_core.oneline import one_line

logger = logging.getLogger(__name__)

#: the environment variable that hands what a run carries from the check to the task (and to the processes fairseq
#: spawns): one JSON object, keyed as the task state keeps it
CARRIED_ENV = "FAIRSEQ_SYNTAX_CARRIED"
#: the keys it holds: counts (lists of updates or seeds), and paths or the run's identifier (text)
COUNT_KEYS = (RESTARTS_KEY, EPOCH_RESTARTS_KEY, METER_RESETS_KEY, SEEDS_KEY)
TEXT_KEYS = (RUN_ID_KEY, FINETUNED_KEY, RESTORED_KEY)

#: the settings that decide how an epoch is cut into batches: (section, key, flag)
BATCHING = (("dataset", "max_tokens", "--max-tokens"), ("dataset", "batch_size", "--batch-size"),
            ("dataset", "required_batch_size_multiple", "--required-batch-size-multiple"),
            ("dataset", "train_subset", "--train-subset"), ("common", "seed", "--seed"),
            ("distributed_training", "distributed_world_size", "--distributed-world-size"),
            ("task", "max_source_positions", "--max-source-positions"),
            ("task", "max_target_positions", "--max-target-positions"),
            ("task", "num_batch_buckets", "--num-batch-buckets"),
            ("dataset", "update_ordered_indices_seed", "--update-ordered-indices-seed"),
            ("dataset", "grouped_shuffling", "--grouped-shuffling"),
            ("task", "data", "the data path"))
#: training settings fairseq takes from this run's command line on resume (the weights' shapes do not show them):
#: changed, the resumed run trains another system than its first updates did
TRAINING = (("model", "dropout", "--dropout"), ("model", "attention_dropout", "--attention-dropout"),
            ("model", "activation_dropout", "--activation-dropout"), ("model", "relu_dropout", "--relu-dropout"),
            ("model", "encoder_layerdrop", "--encoder-layerdrop"), ("model", "decoder_layerdrop", "--decoder-layerdrop"),
            ("criterion", "label_smoothing", "--label-smoothing"), ("optimization", "clip_norm", "--clip-norm"))
#: optimizer settings that fairseq does not take from the command line on resume (the stored param groups win)
OPTIMIZER_KEPT_EXCEPT = ("_name", "lr")


def resumed_checkpoint(cfg: Any) -> Optional[str]:
    """The checkpoint fairseq-train resumes (fairseq.checkpoint_utils.load_checkpoint's choice), or None: a new
    run, a ``--finetune-from-model`` start (fairseq resets everything) or a path this check does not open."""
    checkpoint = getattr(cfg, "checkpoint", None)
    restore = getattr(checkpoint, "restore_file", "checkpoint_last.pt")
    suffix = getattr(checkpoint, "checkpoint_suffix", "") or ""
    if not isinstance(restore, str) or "://" in restore:
        return None
    if restore == "checkpoint_last.pt":
        path = os.path.join(str(getattr(checkpoint, "save_dir", "checkpoints")), f"checkpoint_last{suffix}.pt")
        if not os.path.exists(path):
            path = getattr(checkpoint, "continue_once", None)
    else:
        path = restore.replace(".pt", f"{suffix}.pt")
    return path if isinstance(path, str) and os.path.isfile(path) else None


def resume_error(cfg: Any) -> Optional[str]:
    """Why fairseq-train must not resume as ``cfg`` asks, or None (after warning of a restarted update count)."""
    os.environ.pop(CARRIED_ENV, None)
    seed = getattr(getattr(cfg, "common", None), "seed", None)
    checkpoint = getattr(cfg, "checkpoint", None)
    path = resumed_checkpoint(cfg)
    resets = [getattr(checkpoint, f"reset_{k}", False) for k in ("optimizer", "dataloader", "meters")]
    own = path is not None and _own_last(checkpoint, path)  # a run started again, however --restore-file names it
    if path is None:
        _hand_on(RUN_ID_KEY, uuid.uuid4().hex)  # a run starts: its checkpoints carry this
        if type(seed) is int:
            _hand_on(SEEDS_KEY, [seed])
        start = getattr(checkpoint, "finetune_from_model", None)
        if start:  # fairseq reads those weights on this first launch only; later resumes forget the flag
            _hand_on(FINETUNED_KEY, os.path.normpath(str(start)))
        return None
    from fairseq_syntax_core.errors import CheckpointError

    try:
        state = _read(path)
    except CheckpointError as error:
        return str(error)
    damaged = carried_problem(state)
    if damaged is not None:
        return (f"{one_line(path)[:160]}: its task_state's {damaged} (edited?): resume from an intact checkpoint, or "
                "start the run again")
    updates = _updates(state)
    shown = f"{one_line(path)[:120]} was at update {updates}"
    # fairseq takes the update count from the optimizer state: without one (--no-save-optimizer-state) it counts
    # from 0 again, as with --reset-optimizer
    recount = resets[0] or state.get("last_optimizer_state") is None
    held = "" if resets[0] else " and holds no optimizer state (saved with --no-save-optimizer-state)"
    _carry(RESTARTS_KEY, update_restarts(state), recount, updates,
           f"{'--reset-optimizer: ' if resets[0] else ''}{shown}{held}; this run counts its updates from 0 again "
           "(--max-update and the learning-rate schedule too)")
    _carry(EPOCH_RESTARTS_KEY, epoch_restarts(state), resets[1], updates,
           f"--reset-dataloader: {shown}; fairseq starts the epochs again at epoch 1 (the batches trained are trained "
           "again)")
    if stored_run_id(state) is not None:  # a run started before runs carried one keeps none
        _hand_on(RUN_ID_KEY, stored_run_id(state))
    if isinstance(carried(state, FINETUNED_KEY), str):
        _hand_on(FINETUNED_KEY, carried(state, FINETUNED_KEY))
    _carry_seeds(state, seed, path)
    restored = carried(state, RESTORED_KEY)
    if isinstance(restored, str) or not own:  # the first checkpoint it was resumed from other than its own last
        _hand_on(RESTORED_KEY, restored if isinstance(restored, str) else os.path.normpath(path))
    _carry(METER_RESETS_KEY, meter_resets(state), resets[2], updates,
           f"--reset-meters: {shown}; fairseq forgets the best validation value, so the next validation replaces "
           "checkpoint_best.pt even if worse")
    _restore_patience(cfg, state, path, resets[2] or not own)
    cap = getattr(getattr(cfg, "optimization", None), "max_update", 0)
    if own and not resets[0] and isinstance(updates, int) and isinstance(cap, int) and 0 < cap <= updates:
        _finished(path, updates, cap)
    problem = _carried_state_error(cfg, state, path)
    if problem is not None:
        return problem
    changed = _training_changes(cfg, state.get("cfg")) if own and not any(resets) else []
    if changed:
        flag, stored, given = changed[0]
        return (f"{one_line(path)[:120]} was trained with {flag} {one_line(str(stored))[:40]}; this run gives "
                f"{one_line(str(given))[:40]}: resumed so, it is not the same run (its first updates trained another "
                f"system): resume with {flag} {one_line(str(stored))[:40]}, or train the new settings in another "
                "--save-dir")
    if resets[1]:
        return None
    extra = state.get("extra_state") if isinstance(state.get("extra_state"), dict) else {}
    iterator = extra.get("train_iterator") if isinstance(extra.get("train_iterator"), dict) else {}
    done = iterator.get("iterations_in_epoch", 0)
    if not isinstance(done, int) or isinstance(done, bool) or done <= 0:
        return None  # at an epoch's start: nothing is skipped
    differ = _batching_changes(cfg, state.get("cfg"))
    if not differ:
        return None
    flag, stored, given = differ[0]
    resume = f"without {flag}" if stored is None or stored is False else flag if stored is True else \
        f"with {flag} {one_line(str(stored))[:40]}" + (" (as named from where it was started)" if flag ==
                                                        "the data path" else "")
    return (f"{one_line(path)[:120]} stopped after {done} batches of epoch {iterator.get('epoch')}, batched with "
            f"{flag} {one_line(str(stored))[:40]}; this run batches with {flag} {one_line(str(given))[:40]}, and "
            f"fairseq would skip its first {done} batches, not those trained: resume {resume} (or "
            "--reset-dataloader: fairseq starts again at epoch 1)")


def _carry_seeds(state: dict, seed: Any, path: str) -> None:
    """The seeds the run trained under, carried: fairseq takes this resume's --seed at an epoch's start."""
    seeds = carried(state, SEEDS_KEY)
    if not isinstance(seeds, list) or not seeds:
        stored = (state.get("cfg") or {}).get("common") if isinstance(state.get("cfg"), dict) else None
        first = stored.get("seed") if isinstance(stored, dict) else None
        seeds = [first] if type(first) is int else []
    if type(seed) is int and seeds and seed != seeds[-1]:
        logger.warning(f"--seed {seed}: {one_line(path)[:120]} was trained with --seed {seeds[-1]}; this run goes on "
                       "with another seed, and fairseq-syntax-report record will not take it as one run")
    if type(seed) is int and (not seeds or seed != seeds[-1]):
        seeds = seeds + [seed]
    if seeds:
        _hand_on(SEEDS_KEY, seeds)


def _own_last(checkpoint: Any, path: str) -> bool:
    """Whether ``path`` is the run's own ``checkpoint_last.pt`` in ``--save-dir`` (``--checkpoint-suffix``)."""
    suffix = getattr(checkpoint, "checkpoint_suffix", "") or ""
    last = os.path.join(str(getattr(checkpoint, "save_dir", "checkpoints")), f"checkpoint_last{suffix}.pt")
    try:  # a checkpoint_last.pt that links out of --save-dir is another folder's
        return os.path.samefile(path, last) and os.path.samefile(os.path.dirname(os.path.realpath(path)),
                                                                 os.path.dirname(last) or ".")
    except (OSError, ValueError):
        return False


def _carry(key: str, counts: List[int], reset: bool, updates: Any, warning: str) -> None:
    """One kind of restart a checkpoint carries: this resume's update count is added when it restarts (``reset``,
    with ``warning``), and the counts go to the task as ``key`` (and to the processes fairseq spawns)."""
    if reset and isinstance(updates, int) and updates > 0:
        counts.append(updates)
        logger.warning(f"{warning}, and fairseq-syntax-report record will not take it as one run")
    if counts:
        _hand_on(key, counts)


def _hand_on(key: str, value: Any) -> None:
    """Add ``key`` to what this process carries into the checkpoints it saves (:data:`CARRIED_ENV`)."""
    record = dict(_carried_record(), **{key: value})
    os.environ[CARRIED_ENV] = json.dumps(record, sort_keys=True)


def _carried_record() -> Dict[str, Any]:
    try:
        record = json.loads(os.environ.get(CARRIED_ENV, "{}"))
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def carried_now() -> Dict[str, Any]:
    """What this training process carries into the checkpoints it saves (:func:`resume_error` set it), keyed as the
    task state keeps it: only well-formed values (lists of counts, texts)."""
    kept: Dict[str, Any] = {}
    for key, value in _carried_record().items():
        if key in COUNT_KEYS and isinstance(value, list) and value:
            counts = [c for c in value if isinstance(c, int) and not isinstance(c, bool)]
            if counts:
                kept[key] = counts
        elif key in TEXT_KEYS and isinstance(value, str) and value:
            kept[key] = value
    return kept


def _restore_patience(cfg: Any, state: dict, path: str, forget: bool) -> None:
    """fairseq counts validations without improvement (``--patience``) in memory only: a resumed run counted from 0
    again, and a run that had stopped early trained on when started again. The count a checkpoint carries is given
    back to fairseq's counter; a run that had stopped early is finished."""
    import sys

    stalled, best = carried(state, STALLED_KEY), (state.get("extra_state") or {}).get("best")
    patience = getattr(getattr(cfg, "checkpoint", None), "patience", -1)
    counter = getattr(sys.modules.get("fairseq_cli.train"), "should_stop_early", None)
    if forget or type(stalled) is not int or stalled < 0 or not isinstance(patience, int) or patience <= 0:
        return
    if stalled >= patience:
        print(f"fairseq-train: {one_line(path)[:160]} stopped early: {stalled} validations without improvement, "
              f"--patience {patience}: the run is finished, nothing is trained or saved (raise --patience to train "
              "on)", file=sys.stderr)
        raise SystemExit(0)
    if counter is not None and isinstance(best, (int, float)) and not isinstance(best, bool):
        counter.best, counter.num_runs = best, stalled


def current_stalled() -> Optional[int]:
    """fairseq's count of validations without improvement in this process (:func:`_restore_patience`), or None."""
    import sys

    count = getattr(getattr(sys.modules.get("fairseq_cli.train"), "should_stop_early", None), "num_runs", None)
    return count if type(count) is int else None


def _finished(path: str, updates: int, cap: int) -> None:
    """Stop a run started again after it reached ``--max-update``: fairseq would train one more update (it checks
    the cap after each update) and replace the finished run's checkpoints. Exit 0: a rerun has nothing to do."""
    import sys

    print(f"fairseq-train: {one_line(path)[:160]} is at update {updates}, --max-update {cap}: the run is finished, "
          "nothing is trained or saved (raise --max-update to train on)", file=sys.stderr)
    raise SystemExit(0)


def _carried_state_error(cfg: Any, state: dict, path: str) -> Optional[str]:
    """What fairseq carries over from the checkpoint into a run that reads it otherwise: the learning-rate
    scheduler's state under another ``--lr-scheduler`` (a bare KeyError), the best validation value of another
    ``--best-checkpoint-metric`` (compared with the new metric: checkpoint_best.pt frozen). Warns that
    ``--finetune-from-model`` is not read when the run resumes its own checkpoint (fairseq's rule)."""
    checkpoint = getattr(cfg, "checkpoint", None)
    stored = state.get("cfg") if isinstance(state.get("cfg"), dict) else {}
    shown = one_line(path)[:120]
    finetune = getattr(checkpoint, "finetune_from_model", None)
    if finetune and getattr(checkpoint, "restore_file", "checkpoint_last.pt") == "checkpoint_last.pt":
        logger.warning(f"--finetune-from-model {one_line(str(finetune))[:80]}: {shown} exists, so fairseq resumes "
                       "that run and does not read the model (it does on a first launch only; another --save-dir "
                       "starts the fine-tuning)")
    reset_optimizer = getattr(checkpoint, "reset_optimizer", False)
    scheduler = stored.get("lr_scheduler") if isinstance(stored.get("lr_scheduler"), dict) else {}
    before, now = scheduler.get("_name"), getattr(getattr(cfg, "lr_scheduler", None), "_name", None)
    if not (reset_optimizer or getattr(checkpoint, "reset_lr_scheduler", False)) and isinstance(before, str) \
            and isinstance(now, str) and before != now:
        return (f"{shown} was trained with --lr-scheduler {one_line(before)[:40]}, and fairseq would load its "
                f"state into {one_line(now)[:40]}: resume with --lr-scheduler {one_line(before)[:40]}, or give "
                "--reset-lr-scheduler")
    optimizer = stored.get("optimizer") if isinstance(stored.get("optimizer"), dict) else {}
    ours = getattr(cfg, "optimizer", None)
    overrides = str(getattr(checkpoint, "optimizer_overrides", "{}") or "{}").replace(" ", "")
    if not reset_optimizer and overrides == "{}" and optimizer.get("_name") == getattr(ours, "_name", None):
        for key, value in optimizer.items():
            now = getattr(ours, key, value)
            if key not in OPTIMIZER_KEPT_EXCEPT and _literal(now) != _literal(value):
                flag = f"--{key.replace('_', '-')}"
                return (f"{shown} was trained with {flag} {one_line(str(value))[:40]}, and fairseq restores the "
                        f"optimizer's state with it, not this run's {one_line(str(now))[:40]}: resume with the stored "
                        "value, or give --reset-optimizer (or --optimizer-overrides)")
    extra = state.get("extra_state") if isinstance(state.get("extra_state"), dict) else {}
    saved = stored.get("checkpoint") if isinstance(stored.get("checkpoint"), dict) else {}
    if "best" in extra and not (reset_optimizer or getattr(checkpoint, "reset_meters", False)):
        for key, flag in (("best_checkpoint_metric", "--best-checkpoint-metric"),
                          ("maximize_best_checkpoint_metric", "--maximize-best-checkpoint-metric")):
            if key in saved and saved[key] != getattr(checkpoint, key, saved[key]):
                return (f"{shown} kept its best checkpoint by {flag} {one_line(str(saved[key]))[:40]}, and fairseq "
                        f"would compare that best value with {one_line(str(getattr(checkpoint, key)))[:40]}: resume "
                        "with the stored setting, or give --reset-meters (the best starts over)")
    return None


def _literal(value: Any) -> Any:
    """A setting fairseq reads as a Python literal (``--adam-betas '(0.9, 0.98)'``) as its value, spaces aside."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value
    return value


def _training_changes(cfg: Any, stored: Any) -> List[Tuple[str, Any, Any]]:
    """(flag, stored value, this run's value) of each :data:`TRAINING` setting that differs (a Namespace section of
    a legacy model read by its attributes); settings either side does not hold are not compared."""
    if not isinstance(stored, dict):
        return []
    changes = []
    for section, key, flag in TRAINING:
        old = stored.get(section)
        old = vars(old) if isinstance(old, argparse.Namespace) else old
        if not isinstance(old, dict) or old.get(key) is None:
            continue
        new = getattr(getattr(cfg, section, None), key, None)
        if new is None:
            continue
        if _literal(new) != _literal(old[key]):
            changes.append((flag, old[key], new))
    return changes


def _batching_changes(cfg: Any, stored: Any) -> List[Tuple[str, Any, Any]]:
    """(flag, stored value, this run's value) of each batching setting that differs; none when not stored."""
    if not isinstance(stored, dict):
        return []
    changes = []
    for section, key, flag in BATCHING:
        old = stored.get(section)
        if not isinstance(old, dict) or key not in old:
            continue
        new = getattr(getattr(cfg, section, None), key, old[key])
        if key == "data" and isinstance(new, str) and isinstance(old[key], str):  # data-bins, one per epoch
            same = [os.path.realpath(p) for p in new.split(":")] == [os.path.realpath(p) for p in old[key].split(":")]
            if not same:
                changes.append((flag, old[key], new))
            continue
        if new != old[key]:
            changes.append((flag, old[key], new))
    return changes


#: update counts of the checkpoints read here, by (path, size, modification time): the ranks' comparison after
#: the process group is up does not read again what the start-up check read (the state itself is not kept: a
#: mapped file would hold a replaced checkpoint's disk space)
_updates_read: dict = {}


def _key(path: str) -> tuple:
    stat = os.stat(path)
    return os.path.realpath(path), stat.st_size, stat.st_mtime_ns


def _read(path: str) -> dict:
    """The fairseq checkpoint at ``path`` (memory-mapped); its update count is noted."""
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    state = load_fairseq_checkpoint(path, mmap=True)
    _updates_read[_key(path)] = _updates(state)
    return state


def _updates(state: dict) -> Optional[int]:
    """The update count a checkpoint's last optimizer history entry records, or None."""
    history = state.get("optimizer_history")
    last = history[-1] if isinstance(history, list) and history else None
    return last.get("num_updates") if isinstance(last, dict) else None


def resumed_state(cfg: Any) -> dict:
    """What this process resumes (the checkpoint's update count, or None for a new run) and the resets it asks for:
    every rank of a run must agree (:mod:`.rank_settings`)."""
    checkpoint = getattr(cfg, "checkpoint", None)
    path = resumed_checkpoint(cfg)
    updates = None
    if path is not None:
        from fairseq_syntax_core.errors import CheckpointError

        try:
            key = _key(path)
            updates = _updates_read[key] if key in _updates_read else _updates(_read(path))
        except CheckpointError:
            updates = "unreadable"
    resets = {k: bool(getattr(checkpoint, k, False)) for k in ("reset_optimizer", "reset_dataloader",
                                                                 "reset_lr_scheduler", "reset_meters")}
    return {"updates": updates if path is not None else None, **resets,
            "finetune_from_model": getattr(checkpoint, "finetune_from_model", None) is not None}


def current_restarts(key: str = RESTARTS_KEY) -> List[int]:
    """The counts this training process carries (:func:`carried_now`): restarts of the update count
    (``update_restarts``), of the epochs (``epoch_restarts``), meter resets, or the seeds trained under."""
    return list(carried_now().get(key, []))


def current_seeds() -> List[int]:
    """The seeds this run trained under (carried), the one it started with first."""
    return current_restarts(SEEDS_KEY)


def current_restored() -> Optional[str]:
    """The checkpoint other than its own last that this run was resumed from (carried), or None."""
    return carried_now().get(RESTORED_KEY)


def current_finetuned() -> Optional[str]:
    """The weights this run started from (``--finetune-from-model`` of its first launch), or None."""
    return carried_now().get(FINETUNED_KEY)


def current_run_id() -> Optional[str]:
    """The identifier of the run this training process continues or starts (None: a run older than identifiers)."""
    return carried_now().get(RUN_ID_KEY)
