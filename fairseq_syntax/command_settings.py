"""Settings of fairseq's commands that fairseq takes without a word and then misreads, checked before each starts.

:func:`command_settings_error` is called by the wrapped ``call_main`` (:mod:`fairseq_syntax.compat`) with the
command's whole configuration:

* fairseq-train: :func:`fairseq_syntax.fairseq_settings.training_settings_error`, and a resume fairseq would
  misread (:mod:`fairseq_syntax.resume_settings`);
* fairseq-generate and fairseq-interactive ``--post-process``/``--remove-bpe``, fairseq-train ``--eval-bleu
  --eval-bleu-remove-bpe``: a way of joining pieces that is not the data-bin's (``sentencepiece`` deletes every
  space of subword-nmt output, and the score is of those strings). Refused like ``--bpe`` (``--allow-other-data-bin``:
  a warning);
* fairseq-validate ``--max-valid-steps``, ``--max-tokens-valid``, ``--batch-size-valid``: fairseq-validate reads
  none of them (the whole split is validated with ``--max-tokens``/``--batch-size``).
"""

import argparse
import contextlib
import logging
import os
import re
import shutil
import sys
from typing import Any, Optional, Tuple

from fairseq_syntax_core.oneline import one_line

from .fairseq_settings import training_settings_error
from .resume_settings import resume_error

logger = logging.getLogger(__name__)

#: the task whose data-bins record their segmentation (syntax.json)
TASK = "syntax_translation"
#: fairseq's post-processing values that take nothing off, and those that join subword-nmt pieces
LEAVES_PIECES = (None, "none")
JOINS_SUBWORD_NMT = ("subword_nmt", "@@ ", "@@")


def command_settings_error(cfg: Any, module: Optional[str]) -> Optional[str]:
    """Why the fairseq command of ``module`` (``fairseq_cli.train``...) must not start on ``cfg`` (its
    configuration, or the flat Namespace fairseq-generate may pass), or None."""
    if isinstance(cfg, argparse.Namespace):
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        cfg = convert_namespace_to_omegaconf(cfg)
    problem = shared_memory_error(cfg)
    if problem is not None:
        return problem
    multiple = getattr(getattr(cfg, "task", None), "required_seq_len_multiple", 1)
    if isinstance(multiple, int) and not isinstance(multiple, bool) and multiple < 1:  # a modulo by zero in a worker
        return f"--required-seq-len-multiple {multiple}: expected a number of tokens >= 1 (1, fairseq's default)"
    results_path = getattr(getattr(cfg, "common_eval", None), "results_path", None)
    if module in ("fairseq_cli.validate", "fairseq_cli.interactive") and results_path is not None:
        return (f"--results-path {one_line(str(results_path))[:80]}: only fairseq-generate writes a results file "
                f"(fairseq-{module.split('.')[-1]} writes to the terminal): leave it out, and redirect its output")
    if module == "fairseq_cli.interactive":
        problem = interactive_error(cfg)
        if problem is not None:
            return problem
    if getattr(getattr(cfg, "task", None), "load_alignments", False):
        return "--load-alignments: the syntax_translation task reads no alignment files: leave it out"
    groups = getattr(getattr(cfg, "generation", None), "diverse_beam_groups", -1)
    if module == "fairseq_cli.generate" and isinstance(groups, int) and groups > 1:  # fairseq indexes by sample id
        return (f"--diverse-beam-groups {groups}: fairseq-generate's diverse beam search fails on a data-bin split "
                "(fairseq indexes its groups by sentence id); decode those sentences with fairseq-interactive")
    lm_path = getattr(getattr(cfg, "generation", None), "lm_path", None)
    if module in ("fairseq_cli.generate", "fairseq_cli.interactive") and lm_path:
        return (f"--lm-path {one_line(str(lm_path))[:80]}: language-model fusion reads a fairseq language model "
                "(transformer_lm, ...), and checkpoints load here only for the translation models of this plugin "
                "and fairseq's transformer and lstm (a checkpoint's model runs its settings): leave it out")
    if module == "fairseq_cli.generate" and getattr(getattr(cfg, "generation", None), "constraints", None):
        return ("--constraints: the data-bin's splits carry no constraints (fairseq-interactive reads them from "
                "tab-separated input lines): leave it out")
    if module == "fairseq_cli.train":
        model = getattr(cfg, "model", None)
        for key in ("encoder_layers_to_keep", "decoder_layers_to_keep"):
            if getattr(model, key, None) not in (None, ""):  # fairseq's legacy build splits a list as text
                return (f"--{key.replace('_', '-')}: fairseq cannot build a model with it here (its legacy "
                        "transformer reads the parsed list as text: an AttributeError): leave it out")
        every_rank_reads_checkpoints(cfg)
        problem = (training_settings_error(cfg) or device_and_ema_error(cfg) or checkpointing_error(cfg)
                   or splits_error(cfg) or logging_error(cfg) or foreign_checkpoints_error(cfg)
                   or orphaned_checkpoints_error(cfg) or resume_error(cfg))
        if problem is not None:
            return problem
        task = getattr(cfg, "task", None)
        if getattr(task, "eval_bleu", False):
            return post_process_error(cfg, getattr(task, "eval_bleu_remove_bpe", None), "--eval-bleu-remove-bpe")
        return None
    if module in ("fairseq_cli.generate", "fairseq_cli.interactive"):
        return post_process_error(cfg, getattr(getattr(cfg, "common_eval", None), "post_process", None),
                                  "--post-process")
    if module == "fairseq_cli.validate":
        return validate_sizes_error(cfg)
    return None


#: below these, fairseq's data-loader workers cannot pass batches (torch shares them as files in /dev/shm)
LEAST_FILE_SIZE_LIMIT = 64 << 20
LEAST_FREE_SHARED_MEMORY = 16 << 20


def shared_memory_error(cfg: Any) -> Optional[str]:
    """With data-loader workers (``--num-workers``, 1 by default): a file-size limit (``ulimit -f``) or a nearly
    full ``/dev/shm`` in which torch cannot grow the files it shares batches through. A worker that fails so stays
    alive, and the command waits for its batch forever."""
    workers = getattr(getattr(cfg, "dataset", None), "num_workers", 0)
    if not isinstance(workers, int) or workers <= 0:
        return None
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        limit = None
    advice = "fairseq's data-loader workers pass batches through shared-memory files and wait forever when " \
             "one cannot grow: give --num-workers 0 (batches made in the main process)"
    if limit is not None and limit != resource.RLIM_INFINITY and limit < LEAST_FILE_SIZE_LIMIT:
        return f"--num-workers {workers} with a file-size limit of {limit} bytes (ulimit -f): {advice}, or raise the limit"
    try:
        free = shutil.disk_usage("/dev/shm").free
    except OSError:  # no /dev/shm: torch shares otherwise
        return None
    if free < LEAST_FREE_SHARED_MEMORY:
        return (f"--num-workers {workers} with {free >> 20} MiB free in /dev/shm: {advice}, or free shared memory "
                "(a container's --shm-size)")
    return None


def every_rank_reads_checkpoints(cfg: Any) -> None:
    """With several ranks, each reads the resumed checkpoint itself (``--load-checkpoint-on-all-dp-ranks``):
    fairseq otherwise sends rank 0's copy to the others as a pickle that torch's weights-only reader refuses
    (an OmegaConf object), and every rank fails. Not for fully sharded runs, which load their own shards."""
    distributed = getattr(cfg, "distributed_training", None)
    world = getattr(distributed, "distributed_world_size", 1)
    checkpoint = getattr(cfg, "checkpoint", None)
    if isinstance(world, int) and world > 1 and checkpoint is not None \
            and getattr(distributed, "ddp_backend", None) != "fully_sharded" \
            and not getattr(checkpoint, "load_checkpoint_on_all_dp_ranks", False):
        with contextlib.suppress(Exception):  # a configuration that cannot take it keeps fairseq's way
            checkpoint.load_checkpoint_on_all_dp_ranks = True


def device_and_ema_error(cfg: Any) -> Optional[str]:
    """``--amp`` without a CUDA GPU (fairseq trains in fp32 and records ``amp``); ``--ema-update-freq`` below 1 and
    ``--ema-start-update`` below 0 (read as 1 and 0); an ``--ema-seed-model`` that is not a checkpoint holding
    EMA weights (fairseq: an IndexError or KeyError naming neither the file nor the option)."""
    common = getattr(cfg, "common", None)
    for flag in ("fp16", "memory_efficient_fp16"):
        if getattr(common, flag, False):
            import torch

            if getattr(common, "cpu", False) or not torch.cuda.is_available():
                return (f"--{flag.replace('_', '-')}: half precision needs a CUDA GPU, and this run is on the CPU: "
                        "leave it out")
    if getattr(common, "amp", False):
        import torch

        if getattr(common, "cpu", False) or not torch.cuda.is_available():
            return "--amp: mixed precision needs a CUDA GPU, and this run is on the CPU: leave it out"
    ema = getattr(cfg, "ema", None)
    if not getattr(ema, "store_ema", False):
        return None
    for key, least in (("ema_update_freq", 1), ("ema_start_update", 0)):
        value = getattr(ema, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value < least:
            return f"--{key.replace('_', '-')} {value}: expected a count >= {least}"
    seed = getattr(ema, "ema_seed_model", None)
    if isinstance(seed, str) and seed and os.path.isfile(seed):
        from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint
        from fairseq_syntax_core.errors import CheckpointError

        try:
            state = load_fairseq_checkpoint(seed, mmap=True)
        except CheckpointError as error:
            return f"--ema-seed-model {error}"
        extra = state.get("extra_state")
        if not isinstance(extra, dict) or not isinstance(extra.get("ema"), dict):
            return (f"--ema-seed-model {one_line(seed)[:80]}: holds no EMA weights (extra_state.ema): give a "
                    "checkpoint of a run trained with --store-ema")
    return None


#: validation values that are better smaller (fairseq's and this plugin's losses)
SMALLER_IS_BETTER = ("loss", "nll_loss", "ppl")


def checkpointing_error(cfg: Any) -> Optional[str]:
    """``--maximize-best-checkpoint-metric`` with a loss (checkpoint_best.pt would keep the worst), a best metric
    of ``bleu`` without ``--eval-bleu`` (refused only after an epoch), and ``--use-bmuf`` on one worker (it does
    nothing) or with ``--global-sync-iter`` below 1 (a division by zero after the warm-up)."""
    checkpoint = getattr(cfg, "checkpoint", None)
    metric = getattr(checkpoint, "best_checkpoint_metric", "loss")
    if getattr(checkpoint, "maximize_best_checkpoint_metric", False) and metric in SMALLER_IS_BETTER:
        return (f"--maximize-best-checkpoint-metric with --best-checkpoint-metric {metric}: a loss is better smaller, "
                "and checkpoint_best.pt would keep the worst: leave it out (or give a score, e.g. bleu)")
    if metric == "bleu" and not getattr(getattr(cfg, "task", None), "eval_bleu", False):
        return "--best-checkpoint-metric bleu: validation scores BLEU only with --eval-bleu: give it"
    problem = _cancelled_error(cfg)
    if problem is not None:
        return problem
    optimization = getattr(cfg, "optimization", None)
    if getattr(optimization, "use_bmuf", False):
        sync = getattr(getattr(cfg, "bmuf", None), "global_sync_iter", 1)
        if isinstance(sync, int) and sync < 1:
            return f"--global-sync-iter {sync}: expected a count >= 1"
        world = getattr(getattr(cfg, "distributed_training", None), "distributed_world_size", 1)
        if isinstance(world, int) and world <= 1:
            return ("--use-bmuf: block-wise model update filtering syncs several workers, and this run has one "
                    "(--distributed-world-size 1): it would do nothing; leave it out")
    return None


def _cancelled_error(cfg: Any) -> Optional[str]:
    """An option another one cancels (fairseq trains and exits 0 without doing what it asks): what is kept or
    stopped on without saving (``--no-save``) or without validating (``--disable-validation``, or a first
    validation after ``--max-update``)."""
    checkpoint, dataset = getattr(cfg, "checkpoint", None), getattr(cfg, "dataset", None)
    asks_validation = [f"--{key.replace('_', '-')} {getattr(checkpoint, key)}" for key, off in
                       (("patience", -1), ("keep_best_checkpoints", -1)) if getattr(checkpoint, key, off) != off]
    if getattr(checkpoint, "best_checkpoint_metric", "loss") != "loss":
        asks_validation.append(f"--best-checkpoint-metric {getattr(checkpoint, 'best_checkpoint_metric')}")
    if getattr(checkpoint, "no_save", False):
        saving = asks_validation[1:] if asks_validation[:1] and asks_validation[0].startswith("--patience") \
            else list(asks_validation)
        if getattr(checkpoint, "save_interval_updates", 0):
            saving.append(f"--save-interval-updates {getattr(checkpoint, 'save_interval_updates')}")
        if saving:
            return f"{saving[0]} with --no-save: nothing is saved, so it does nothing; leave one of them out"
    if getattr(dataset, "disable_validation", False) and asks_validation:
        return (f"{asks_validation[0]} with --disable-validation: it needs validation scores, which are never "
                "computed; leave one of them out")
    after, cap = getattr(dataset, "validate_after_updates", 0), getattr(getattr(cfg, "optimization", None),
                                                                        "max_update", 0)
    if asks_validation and isinstance(after, int) and isinstance(cap, int) and 0 < cap <= after:
        return (f"{asks_validation[0]} with --validate-after-updates {after} and --max-update {cap}: validation "
                "never runs; lower --validate-after-updates")
    return None


def interactive_error(cfg: Any) -> Optional[str]:
    """fairseq-interactive's readings of options it has no use for: ``--prefix-size`` (never passed to the search),
    ``--print-alignment soft`` (it unpacks soft alignments as hard ones, after the first rows), ``--replace-unk``
    without a file (fairseq opens a file named "@@ ") or with one not of ``SOURCE TARGET`` lines."""
    generation = getattr(cfg, "generation", None)
    if getattr(getattr(cfg, "interactive", None), "input", "-") == "-" and sys.stdin is None:
        return ("standard input is closed (<&-): fairseq-interactive reads its sentences there; give them on standard "
                "input, or --input FILE")
    buffer = getattr(getattr(cfg, "interactive", None), "buffer_size", 0)
    if isinstance(buffer, int) and not isinstance(buffer, bool) and buffer < 0:  # fairseq reads it as 1
        return f"--buffer-size {buffer}: expected a number of lines >= 1 (0: fairseq's default, 1)"
    prefix = getattr(generation, "prefix_size", 0)
    if isinstance(prefix, int) and prefix > 0:
        return f"--prefix-size {prefix}: fairseq-interactive has no reference to take a prefix from: leave it out"
    if getattr(generation, "score_reference", False):
        return ("--score-reference: fairseq-interactive reads source lines only, with no reference to score: "
                "score references with fairseq-generate --score-reference")
    if getattr(generation, "print_alignment", None) == "soft":
        return "--print-alignment soft: fairseq-interactive prints hard alignments only (fairseq-generate prints soft)"
    replace = getattr(generation, "replace_unk", None)
    if replace is not None:
        if not isinstance(replace, str) or not os.path.isfile(replace):
            return (f"--replace-unk {one_line(str(replace))[:80]}: expected an alignment dictionary file of "
                    "SOURCE TARGET lines (fairseq-interactive opens the value as a file)")
        from fairseq_syntax_core.fileio import read_lines

        for number, line in enumerate(read_lines(replace, "--replace-unk file"), start=1):
            if len(line.split()) < 2:
                return f"--replace-unk {one_line(replace)[:80]}:{number}: expected SOURCE TARGET"
    return None


def splits_error(cfg: Any) -> Optional[str]:
    """One split trained and validated (fairseq shares its epoch iterator: epochs count twice, sentences are
    dropped), ``--combine-valid-subsets`` with another ``--valid-subset`` (it validates on valid, valid1, ... and
    then looks the named one up), and fairseq's check of unused valid splits, which compares file names with
    split names (side-files never match): done here from the data-bin's syntax.json."""
    upsample = getattr(getattr(cfg, "task", None), "upsample_primary", 1)
    if isinstance(upsample, int) and upsample < 1 and upsample != -1:  # -1, fairseq main's default: once
        return f"--upsample-primary {upsample}: expected a factor >= 1 (1: the primary split once)"
    dataset = getattr(cfg, "dataset", None)
    valid = [v for v in str(getattr(dataset, "valid_subset", "valid")).split(",") if v]
    train = getattr(dataset, "train_subset", "train")
    disabled = getattr(dataset, "disable_validation", False)
    if train in valid and not disabled:
        return (f"--train-subset {one_line(train)[:40]} is also in --valid-subset: fairseq would share one iterator "
                "between them (epochs counted twice, sentences dropped from validation); validate on another split")
    if getattr(dataset, "combine_valid_subsets", False) and valid != ["valid"]:
        return (f"--combine-valid-subsets with --valid-subset {one_line(','.join(valid))[:60]}: fairseq validates on "
                "valid, valid1, ... whatever --valid-subset says; leave one of them out")
    if disabled or getattr(dataset, "ignore_unused_valid_subsets", False) or \
            getattr(dataset, "combine_valid_subsets", False):
        return None
    splits = _recorded_splits(cfg)
    unused = sorted({s for s in splits if re.fullmatch(r"valid\d*", s) and s not in valid})
    if unused:
        return (f"--valid-subset {one_line(','.join(valid))[:60]}: the data-bin also holds {', '.join(unused)}, "
                "which would not be validated: list them, or give --ignore-unused-valid-subsets (or "
                "--combine-valid-subsets)")
    with contextlib.suppress(Exception):  # fairseq's own check compares file names: ours replaces it
        dataset.ignore_unused_valid_subsets = True
    return None


#: fairseq-train's logging options and the libraries they need (fairseq only warns, and logs nowhere)
LOGGING_LIBRARIES = {"wandb_project": "wandb", "tensorboard_logdir": "tensorboardX",
                     "azureml_logging": "azureml.core", "aim_repo": "aim"}


def logging_error(cfg: Any) -> Optional[str]:
    """A logging option whose library is not installed (``--profile`` on the CPU fails in fairseq's cli_main, before
    any plugin code sees the settings: one line from the error hook)."""
    common = getattr(cfg, "common", None)
    for key, library in LOGGING_LIBRARIES.items():
        value = getattr(common, key, None)
        if not value:
            continue
        names = [library] + (["tensorboard"] if key == "tensorboard_logdir" else [])  # torch.utils.tensorboard's
        if not any(_importable(name) for name in names):
            return f"--{key.replace('_', '-')}: needs the {library.split('.')[0]} package, which is not installed"
    return None


def _importable(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


#: the checkpoints fairseq deletes when it keeps only some: its own patterns (fairseq.checkpoint_utils.save_checkpoint),
#: the --checkpoint-suffix and the --best-checkpoint-metric put into them as they are typed
PRUNED = {"keep_interval_updates": r"checkpoint_\d+_(\d+){suffix}\.pt",
          "keep_last_epochs": r"checkpoint(\d+){suffix}\.pt",
          "keep_best_checkpoints": r"checkpoint\.best_{metric}_(\d+\.?\d*){suffix}\.pt"}
#: what fairseq's pruning would read as a regular expression in a suffix or metric name
REGEX_SPECIALS = re.compile(r"[.^$*+?{}\[\]\\|()]")


def foreign_checkpoints_error(cfg: Any) -> Optional[str]:
    """A run that keeps only some checkpoints with a ``--checkpoint-suffix`` or metric name that fairseq's pruning
    reads as a regular expression (an error after the first save, or other files deleted); a new run (no
    checkpoint_last) of that kind into a ``--save-dir`` already holding files fairseq would delete as its own."""
    checkpoint = getattr(cfg, "checkpoint", None)
    keeps = [k for k in PRUNED if isinstance(getattr(checkpoint, k, -1), int) and getattr(checkpoint, k, -1) > 0]
    if not keeps:
        return None
    suffix = getattr(checkpoint, "checkpoint_suffix", "") or ""
    metric = str(getattr(checkpoint, "best_checkpoint_metric", "loss"))
    flag = f"--{keeps[0].replace('_', '-')}"
    for name, value in (("--checkpoint-suffix", suffix), ("--best-checkpoint-metric", metric)):
        if (name == "--checkpoint-suffix" or "keep_best_checkpoints" in keeps) and REGEX_SPECIALS.search(value):
            return (f"{name} {one_line(value)[:60]!r} with {flag}: fairseq finds the checkpoints to delete with a "
                    "regular expression holding it as typed, so its signs would match other files: use letters, "
                    "digits, '-' and '_'")
    save_dir = getattr(checkpoint, "save_dir", None)
    if not isinstance(save_dir, str) or not os.path.isdir(save_dir):
        return None
    if os.path.exists(os.path.join(save_dir, f"checkpoint_last{suffix}.pt")):
        return None  # resuming: the checkpoints there are the run's own
    patterns = [re.compile(PRUNED[k].format(suffix=suffix, metric=metric)) for k in keeps]
    found = sorted(name for name in os.listdir(save_dir) if any(p.fullmatch(name) for p in patterns))
    if found:
        return (f"--save-dir {one_line(save_dir)[:80]} holds {one_line(', '.join(found[:3]))}"
                f"{', ...' if len(found) > 3 else ''} and no checkpoint_last{suffix}.pt: a new run with {flag} "
                "would delete them as its own; give an empty folder")
    return None


#: the checkpoints fairseq-train writes besides checkpoint_last (epoch, update, best, best-of-metric)
_WRITTEN = r"checkpoint(?:\d+|_\d+_\d+|_best|\.best_.+){suffix}\.pt"


def orphaned_checkpoints_error(cfg: Any) -> Optional[str]:
    """A new run into a ``--save-dir`` that holds another run's checkpoints and no checkpoint_last to resume: a run
    killed while it saved its first checkpoint leaves ``checkpoint_1_5.pt`` and no ``checkpoint_last.pt``, and the
    rerun with the same flags started over, overwriting them without a word; so did ``--no-last-checkpoints``,
    ``--finetune-from-model`` and a ``--restore-file`` from elsewhere. Resuming from one of the folder's own
    checkpoints (``--restore-file`` inside it) is that run going on."""
    checkpoint = getattr(cfg, "checkpoint", None)
    save_dir = getattr(checkpoint, "save_dir", None)
    suffix = getattr(checkpoint, "checkpoint_suffix", "") or ""
    restore = getattr(checkpoint, "restore_file", "checkpoint_last.pt") or "checkpoint_last.pt"
    if not isinstance(save_dir, str) or not os.path.isdir(save_dir) or getattr(checkpoint, "no_save", False):
        return None
    if restore == "checkpoint_last.pt" and os.path.lexists(os.path.join(save_dir, f"checkpoint_last{suffix}.pt")):
        return None  # resuming the folder's own run (fairseq does, whatever --finetune-from-model says)
    default = restore == "checkpoint_last.pt" and not getattr(checkpoint, "finetune_from_model", None)
    opened = restore.replace(".pt", f"{suffix}.pt") if suffix else restore  # as fairseq opens --restore-file
    if not default and os.path.isfile(opened) and not getattr(checkpoint, "finetune_from_model", None) and \
            os.path.dirname(os.path.realpath(opened)) == os.path.realpath(save_dir):
        return None  # going on from one of the folder's own checkpoints
    pattern = re.compile(_WRITTEN.format(suffix=re.escape(suffix)))
    found = sorted((n for n in os.listdir(save_dir) if pattern.fullmatch(n)), key=_latest_first)
    if not found:
        return None
    held = f"{one_line(', '.join(found[:3]))}{', ...' if len(found) > 3 else ''}"
    if default and not getattr(checkpoint, "no_last_checkpoints", False):
        return (f"--save-dir {one_line(save_dir)[:80]} holds {held} and no checkpoint_last{one_line(suffix)[:40]}.pt "
                f"(a run killed while it saved its first checkpoint?): a new run would overwrite them; to resume that "
                f"run, copy the latest, {one_line(found[0])[:60]}, to checkpoint_last{one_line(suffix)[:40]}.pt there "
                "and run again; or give another --save-dir")
    return (f"--save-dir {one_line(save_dir)[:80]} holds {held}, checkpoints of another run: this run would "
            "overwrite them; give another --save-dir")


def _latest_first(name: str) -> Tuple:
    """Sort key of fairseq's checkpoint names, latest first: by epoch, then update (an epoch's own checkpoint after
    its updates'), best ones last. File times are no guide: ``cp -r`` makes them all new."""
    numbers = [int(n) for n in re.findall(r"\d+", name.split("_best")[0] if "best" in name else name)]
    if "best" in name or not numbers:
        return (1, 0, 0)
    return (0, -numbers[0], -(numbers[1] if len(numbers) > 1 else float("inf")))


def task_data_bin(cfg: Any) -> Optional[Tuple[str, dict]]:
    """The first data-bin folder of this plugin's task and its syntax.json, or None (another task, or a file the
    task itself names when it reads it)."""
    from fairseq import utils

    from fairseq_syntax.data.data_bin_checks import read_metadata
    from fairseq_syntax_core.databin import METADATA_FILE
    from fairseq_syntax_core.errors import UserError

    task = getattr(cfg, "task", None)
    data = getattr(task, "data", None)
    if getattr(task, "_name", None) != TASK or not isinstance(data, str) or not data:
        return None
    folder = utils.split_paths(data)[0]
    try:
        return folder, read_metadata(os.path.join(folder, METADATA_FILE))
    except UserError:
        return None


def _recorded_splits(cfg: Any) -> list:
    """The splits the first data-bin's syntax.json lists, and those fairseq finds by their files (none for
    another task or an unreadable file)."""
    found = task_data_bin(cfg)
    if found is None:
        return []
    folder, metadata = found
    splits = metadata.get("splits")
    binarized = [m.group(1) for m in map(re.compile(r"([A-Za-z0-9_]+)\.[^.]+-[^.]+\.[^.]+\.bin").fullmatch,
                                         os.listdir(folder)) if m]
    return (list(splits) if isinstance(splits, dict) else []) + binarized


def _recorded_segmentation(cfg: Any) -> Optional[dict]:
    """The ``bpe`` record of the first data-bin's syntax.json, or None."""
    found = task_data_bin(cfg)
    recorded = found[1].get("bpe") if found is not None else None
    return recorded if isinstance(recorded, dict) else None


def post_process_error(cfg: Any, value: Optional[str], flag: str) -> Optional[str]:
    """``value`` (how the command joins pieces: fairseq's ``post_process`` symbols) against the data-bin's
    segmentation: subword-nmt pieces are joined by ``subword_nmt``/``@@ ``, text without BPE by nothing."""
    recorded = _recorded_segmentation(cfg)
    if recorded is None or value in LEAVES_PIECES:
        return None
    name, separator = recorded.get("name"), recorded.get("separator", "@@")
    if name == "subword_nmt" and separator == "@@" and value in JOINS_SUBWORD_NMT:
        return None
    made = (f"segmented by subword-nmt, its pieces ending in {one_line(str(separator))[:20]}" if name == "subword_nmt"
            else "not segmented" if name == "none" else f"segmented by {one_line(str(name))[:40]}")
    remedy = "leave it out"
    if name == "subword_nmt" and separator == "@@":
        remedy = f"give {flag} subword_nmt" + (" (or --remove-bpe)" if flag == "--post-process" else "")
    message = (f"{flag} {one_line(str(value))[:40]}: the data-bin's text was {made} (its syntax.json), and this "
               "would join the output otherwise (the sentencepiece and letter ways delete every space)")
    if getattr(getattr(cfg, "task", None), "allow_other_data_bin", False):
        logger.warning(f"{message}; going on (--allow-other-data-bin)")
        return None
    return f"{message}: {remedy}, or give --allow-other-data-bin to go on"


def validate_sizes_error(cfg: Any) -> Optional[str]:
    """fairseq-validate reads ``--max-tokens``/``--batch-size`` for every split and no validation step limit."""
    dataset = getattr(cfg, "dataset", None)
    if dataset is None:
        return None
    if getattr(dataset, "max_valid_steps", None) is not None:
        return (f"--max-valid-steps {getattr(dataset, 'max_valid_steps')}: fairseq-validate does not read it (it "
                "validates the whole split): leave it out")
    for flag, key, used in (("--max-tokens-valid", "max_tokens_valid", "max_tokens"),
                            ("--batch-size-valid", "batch_size_valid", "batch_size")):
        value = getattr(dataset, key, None)
        if value is not None and value != getattr(dataset, used, None):
            return (f"{flag} {value}: fairseq-validate does not read it (it batches every split by "
                    f"--{used.replace('_', '-')}): leave it out, and size the batches with --{used.replace('_', '-')}")
    return None
