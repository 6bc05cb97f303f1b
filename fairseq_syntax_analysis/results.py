"""``fairseq-syntax-report``: one JSON result per (model, seed) run, and the table rebuilt from all of them.

``record`` writes a run's result: model, flags, seed, updates, best epoch, how training ended
(early-stopped or capped), valid loss (the best value of the run's ``--best-checkpoint-metric``,
named in ``best_checkpoint_metric``; with ``--train-log``, the best checkpoint's validation metrics as
logged, the translation's own ``nll_loss`` among them, in ``best_valid``), commit, device, wall time,
and per test set the scores, sacreBLEU signatures, hypotheses and per-sentence sufficient statistics of
``fairseq-syntax-evaluate --statistics``, so paired tests can be recomputed without the references. ``table``
reads every result JSON under the given folders and prints (or writes) the Markdown table: mean and standard
deviation over seeds, and per seed sacreBLEU's paired bootstrap against the same seed of the baseline (and of
any ``--compare`` pair). ``claims`` (:mod:`.claims`) says whether each paper's direction of effect holds.

    fairseq-syntax-report record --out results/transformer_rel.seed1.json --model transformer_rel \\
        --seed 1 --save-dir checkpoints/transformer_rel.seed1 --max-update 2000 \\
        --eval test_2016_flickr=eval.json --wall-seconds 3600 --flags "--dropout 0.3"
    fairseq-syntax-report table examples/dep_rel/results/multi30k --baseline transformer \\
        --compare transformer_dep_rel:transformer_rel --markdown examples/dep_rel/results/multi30k/README.md
"""

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

from fairseq_syntax_core.argtypes import refuse_repeats
from fairseq_syntax_core.decoding_record import (  # noqa: F401
    IDENTITY_KEYS, run_identity, stored_run_id, training_data, update_restarts,
)
from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.jsonfile import read_json_file
from fairseq_syntax_core.oneline import one_line, quoted
from fairseq_syntax_core.fileio import atomic_write_all, check_distinct_outputs, check_output_path

from .commands import figure_writer, quiet_logging, run_command, text_writer
from . import claims
from .noise import noise_figure, noise_points  # the report's parts: one namespace for its command
from .result_format import (  # noqa: F401
    FORMAT, FORMAT_FAMILY, METRIC_KEYS, PROG, load_results, statistics_rows, test_problem,
)
from .table import compare_seeds, make_table  # noqa: F401
from .evaluation_file import read_evaluation, same_reference  # noqa: F401 (the report reads them here)
from .run_checks import (best_value_problem, decoding_problem, decoding_settings, logged_best_problem, one_run_problem,
                         run_id_problem, run_patience)
from .train_log import logged_run, logs_the_start, training_seconds, valid_metrics


# ------------------------------------------------------------------------------ record
def checkpoint_facts(save_dir: str, suffix: str = "") -> Dict:
    """Updates and epoch of ``checkpoint_last.pt``, best epoch and valid loss of ``checkpoint_best.pt``
    (read weights-only: a checkpoint holding anything but fairseq's own objects is refused, not run; one
    not shaped as fairseq's is refused as fairseq's readers refuse it)."""
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    facts: Dict = {}
    states: Dict = {}
    for which in ("last", "best"):
        path = os.path.join(save_dir, f"checkpoint_{which}{suffix}.pt")
        if not os.path.lexists(path):
            others = sorted(n for n in (os.listdir(save_dir) if os.path.isdir(save_dir) else [])
                            if re.fullmatch(rf"checkpoint_{which}(.+)\.pt", n) and n != f"checkpoint_{which}{suffix}.pt")
            hint = (f" (it holds {quoted(others[0], 60)}: give the run's --checkpoint-suffix)" if others
                    else ": the run did not save a checkpoint")
            raise InputError(path, None, f"not found{hint}")
        state = load_fairseq_checkpoint(path)
        extra = state.get("extra_state") or {}
        history = state.get("optimizer_history") or [{}]
        facts[f"{which}_updates"] = int(history[-1].get("num_updates", 0))
        problem = one_run_problem(state)
        if problem is not None:
            raise InputError(path, None, problem)
        states[which] = state
        iterator = extra.get("train_iterator") or {}
        for key in ("epoch", "iterations_in_epoch"):
            value = iterator.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InputError(path, None, f"is not a fairseq checkpoint: its train_iterator's {key} is "
                                 f"{quoted(value, 40)}, not a count (edited?)")
        facts[f"{which}_epoch"] = epoch_of(iterator)
        facts[f"{which}_identity"] = run_identity(state)
        facts[f"{which}_training_data"] = training_data(state)
        facts[f"{which}_run_id"] = stored_run_id(state)
        if which == "last":  # what the run carries of --patience, and the best validation value of the whole run
            facts.update(run_patience(state))
        if which == "best":
            best = extra.get("best", extra.get("val_loss"))
            if best is not None and (isinstance(best, bool) or not isinstance(best, (int, float))
                                     or not math.isfinite(best)):
                raise InputError(path, None, f"is not a fairseq checkpoint: its best validation value is "
                                 f"{quoted(best, 40)}, not a finite number (edited?)")
            facts["best_valid_loss"] = best
            saved = extra.get("val_loss")  # the validation value it was saved with: the best, for the best checkpoint
            if isinstance(best, (int, float)) and isinstance(saved, (int, float)) and not isinstance(saved, bool) \
                    and saved != best:
                raise InputError(path, None, f"was saved with the validation value {saved:g}, but records the run's "
                                 f"best as {best:g}: not the checkpoint fairseq saved as the best (a copy of another?)")
            cfg = state.get("cfg") if isinstance(state.get("cfg"), dict) else {}
            checkpointing = cfg.get("checkpoint") if isinstance(cfg.get("checkpoint"), dict) else {}
            metric = checkpointing.get("best_checkpoint_metric", "loss")
            facts["best_checkpoint_metric"] = (metric if isinstance(metric, str)
                                               and re.fullmatch(r"[A-Za-z0-9_]{1,64}", metric) else "loss")
    problem = run_id_problem(states["best"], states["last"]) or same_run_problem(facts) or \
        best_value_problem(states["best"], states["last"])
    if problem is not None:
        raise InputError(os.path.join(save_dir, f"checkpoint_best{suffix}.pt"), None, problem)
    return facts


SAME_RUN_KEYS = ("arch", "seed", "save_dir", "data")


def _decoded_differs(decoded: Dict, facts: Dict) -> List[str]:
    """What of a checkpoint a generate log says it decoded with is not of the run of ``facts``: its run identity
    (:data:`SAME_RUN_KEYS`, the run identifier), its training data, more updates than the run's last checkpoint
    has, or other updates than its best checkpoint has, when it was that checkpoint (a log of an earlier best)."""
    differ = _differing(decoded, facts["last_identity"], SAME_RUN_KEYS)
    ids = decoded.get("run_id"), facts.get("last_run_id")
    if all(isinstance(i, str) for i in ids) and ids[0] != ids[1]:
        differ.append(f"run {quoted(ids[0], 16)} (this folder's: {ids[1][:12]})")
    trained, ours = decoded.get("training_data"), facts.get("last_training_data")
    if isinstance(trained, dict) and isinstance(ours, dict) and trained != ours:
        differ.append("training_data")
    updates = decoded.get("updates")
    if isinstance(updates, int) and not isinstance(updates, bool) and updates > facts["last_updates"]:
        differ.append(f"updates ({updates}, the last checkpoint: {facts['last_updates']})")
    elif isinstance(updates, int) and updates != facts["best_updates"]:  # a result is its best checkpoint's
        differ.append(f"updates {updates}, not checkpoint_best.pt's {facts['best_updates']} (another checkpoint, or "
                      "an earlier best)")
    return differ


def _other_suffix(decoded: object, save_dir: str, suffix: str) -> Optional[str]:
    """The checkpoint a generate log says it decoded, when it is one of ``save_dir``'s named with another
    ``--checkpoint-suffix`` than ``suffix`` (another run in the same folder), else None."""
    path = decoded.get("checkpoint") if isinstance(decoded, dict) else None
    if not isinstance(path, str):
        return None
    try:
        if os.path.realpath(os.path.dirname(path) or ".") != os.path.realpath(save_dir):
            return None
    except (ValueError, UnicodeError):  # a NUL or a lone surrogate: no path
        raise InputError(quoted(path, 80), None, "is recorded as the decoded checkpoint but is no path (damaged?)") \
            from None
    match = re.fullmatch(r"checkpoint(?:_best|_last|\d+|_\d+_\d+)(.*)\.pt", os.path.basename(path))
    return path if match is not None and match.group(1) != suffix else None


def _shown(identity: Dict[str, object]) -> str:
    return ", ".join(f"{k} {quoted(v, 60)}" for k, v in sorted(identity.items())) or "no arch or seed recorded"


def _differing(recorded: Dict, given: Dict, keys: Sequence[str]) -> List[str]:
    return [k for k in keys if k in recorded and k in given and recorded[k] != given[k]]


def identity_problem(facts: Dict, arch: str, seed: int, max_update: Optional[int] = None) -> Optional[str]:
    """Why the checkpoints of ``--save-dir`` are not those of the run named by ``--arch``/``--seed``/``--max-update``
    (the cap checkpoint_last.pt was trained under), or None."""
    recorded = facts.get("last_identity") or {}
    given = {"arch": arch, "seed": seed, **({"max_update": max_update} if max_update is not None else {})}
    differ = _differing(recorded, given, list(given))
    if not differ:
        return None
    return (f"records {_shown({k: recorded[k] for k in differ})}, not the {' and '.join(differ)} given "
            f"({', '.join(f'--{k.replace(chr(95), chr(45))} {quoted(given[k], 40)}' for k in differ)}): the "
            "checkpoints of another run?")


def same_run_problem(facts: Dict) -> Optional[str]:
    """Why checkpoint_best.pt is not of checkpoint_last.pt's run (another folder, data-bin, architecture or seed,
    or saved after it), or None. A run resumed under another --save-dir or data path reads as another run."""
    last, best = facts.get("last_identity") or {}, facts.get("best_identity") or {}
    differ = _differing(best, last, SAME_RUN_KEYS)
    if differ:
        return (f"belongs to another run than checkpoint_last.pt: {_shown({k: best[k] for k in differ})} against "
                f"{_shown({k: last[k] for k in differ})}")
    if facts["best_updates"] > facts["last_updates"]:
        return (f"was saved at update {facts['best_updates']}, after checkpoint_last.pt ({facts['last_updates']} "
                "updates): the best checkpoint of another run")
    return None


def epoch_of(iterator_state: Dict) -> int:
    """The epoch a checkpoint was saved in, from fairseq's iterator state: saved at an epoch's end, the
    state already names the next epoch with no iterations in it (``EpochBatchIterator.state_dict``)."""
    epoch = int(iterator_state.get("epoch", 0))
    # a state without the count (a streaming iterator's, or an old checkpoint's) is taken as it is
    if epoch > 1 and "iterations_in_epoch" in iterator_state and iterator_state["iterations_in_epoch"] == 0:
        return epoch - 1
    return epoch


def git_commit(repo: str) -> str:
    """Short commit of ``repo``, ``+dirty`` when tracked files differ from it; ``unknown`` outside git."""
    try:
        commit = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def how_stopped(facts: Dict, max_update: int, patience: Optional[int]) -> str:
    """``capped at N updates``, ``early-stopped`` (``patience`` epochs passed after the best one, as
    fairseq's ``--patience`` stops a run validated every epoch) or, when nothing shows either,
    ``stopped before the cap``: an interrupted run reads so in the table, never as early-stopped."""
    if facts["last_updates"] >= max_update:
        return f"capped at {max_update} updates"
    stalled = facts.get("stalled")  # fairseq's own count, carried by the checkpoint
    if patience is not None and patience > 0 and (stalled >= patience if type(stalled) is int else
                                                  facts["last_epoch"] - facts["best_epoch"] >= patience):
        return "early-stopped"
    return "stopped before the cap"


def build_result(model: str, arch: str, seed: int, flags: str, max_update: int, facts: Dict,
                 evaluations: Dict[str, Dict], commit: str, device: str, wall_seconds: float,
                 patience: Optional[int] = None) -> Dict:
    """The result of one run (see the module docstring)."""
    updates = facts["last_updates"]
    stopped = how_stopped(facts, max_update, patience)
    tests = {}
    for name, ev in evaluations.items():
        system = ev["systems"][0]
        tests[name] = {
            "sentences": ev["sentences"],
            "scores": system["scores"],
            "signatures": ev["signatures"],
            "statistics": ev["statistics"][system["name"]],
            "hypotheses": ev.get("hypotheses", {}).get(system["name"]),
        }
        if isinstance(ev.get("reference_sha256"), str):  # which references, however their path was typed
            tests[name]["reference_sha256"] = ev["reference_sha256"]
    trained_on = {"training_data": facts["last_training_data"]} if facts.get("last_training_data") else {}
    run = {"run_id": facts["last_run_id"]} if facts.get("last_run_id") else {}  # one run is one result
    return {
        **trained_on, **run,
        "format": FORMAT, "model": model, "arch": arch, "seed": seed, "flags": flags,
        "max_update": max_update, "updates": updates, "epochs": facts["last_epoch"],
        "best_epoch": facts["best_epoch"], "best_updates": facts["best_updates"],
        "best_valid_loss": facts["best_valid_loss"],
        "best_checkpoint_metric": facts.get("best_checkpoint_metric", "loss"), "stopped": stopped,
        "commit": commit, "device": device, "wall_seconds": round(wall_seconds, 1), "tests": tests,
    }


def table_command(args: argparse.Namespace) -> str:
    """The ``table`` command line that rebuilds a table (``--markdown`` left out: it names the output)."""
    argv = [PROG, "table", *args.folders, "--baseline", args.baseline]
    if args.models:
        argv += ["--models", args.models]
    for spec in args.compare:
        argv += ["--compare", spec]
    if args.alpha != 0.05:
        argv += ["--alpha", repr(args.alpha)]  # every digit: the command gives the same table again
    return shlex.join(argv)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="write one run's result JSON")
    rec.add_argument("--out", required=True)
    rec.add_argument("--model", required=True, help="the run's name (the arch, or arch + variant tag)")
    rec.add_argument("--arch", default=None, help="fairseq --arch (default: --model up to its first '.'); refused if the checkpoints record another")
    rec.add_argument("--seed", type=int, required=True)
    rec.add_argument("--flags", default="", help="the training flags that differ from the recipe's")
    rec.add_argument("--save-dir", required=True, help="the run's checkpoint folder")
    rec.add_argument("--checkpoint-suffix", default="",
                     help="fairseq-train's --checkpoint-suffix of the run (its checkpoint_last/_best carry it)")
    rec.add_argument("--train-log", default=None,
                     help="the run's fairseq-train log: the validation metrics of the best checkpoint's update "
                          "(loss, the translation's own nll_loss, nll_loss_fed ...) go into the result as best_valid")
    rec.add_argument("--valid-subset", default="valid",
                     help="fairseq-train's --valid-subset: the validation --train-log reads is its first subset's "
                          "(the one fairseq selects checkpoints on; default valid)")
    rec.add_argument("--max-update", type=int, required=True, help="the cap every model of the table shares")
    rec.add_argument("--patience", type=int, default=None,
                     help="fairseq-train's --patience (validation every epoch): a run that stopped before the cap "
                          "with this many epochs after its best one is labelled early-stopped; without it, with "
                          "fewer, or <= 0 (fairseq: early stopping off), 'stopped before the cap' (interrupted?)")
    rec.add_argument("--eval", action="append", default=[], metavar="TEST=EVAL_JSON", required=True,
                     help="fairseq-syntax-evaluate --statistics output of one test set (repeatable)")
    rec.add_argument("--wall-seconds", type=float, default=0.0,
                     help="the run's wall time; with --train-log and --eval-seconds it is computed instead: the "
                          "training time the log holds, summed over a resumed run's invocations, plus --eval-seconds")
    rec.add_argument("--eval-seconds", type=float, default=None,
                     help="the time taken to decode and score the test sets (with --train-log: see --wall-seconds)")
    rec.add_argument("--device", default="cpu")
    rec.add_argument("--repo", default=".", help="the checkout whose commit trained the run (default: the current folder)")
    rec.add_argument("--commit", default=None,
                     help="the commit that trained the run, taken when training started (default: --repo's commit "
                          "now, which differs when the checkout changed during training)")
    tab = sub.add_parser("table", help="the Markdown table of every result under the folders")
    tab.add_argument("folders", nargs="+")
    tab.add_argument("--baseline", default="transformer")
    tab.add_argument("--compare", action="append", default=[], metavar="SYSTEM:BASELINE",
                     help="a further pair to test seed by seed (repeatable)")
    tab.add_argument("--models", default=None, metavar="LIST",
                     help="comma-separated models to keep (the baseline and the --compare pairs are always kept); "
                          "default: every model under the folders")
    tab.add_argument("--alpha", type=float, default=0.05)
    tab.add_argument("--markdown", default=None, help="also write the table to this file")
    noise = sub.add_parser("noise", help="BLEU against parse noise p per model (fairseq-syntax-perturb)")
    noise.add_argument("--point", action="append", default=[], required=True, metavar="MODEL:P=EVAL_JSON")
    noise.add_argument("--plot", required=True, help="the PNG to write")
    noise.add_argument("--json", default=None, help="also write the points here")
    noise.add_argument("--title", default="")
    claims.add_parser(sub)
    return refuse_repeats(p)


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    return run_command(PROG, _main, argv)


def _main(argv: Optional[Sequence[str]] = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    quiet_logging()
    if args.command == "record":
        if args.max_update < 1:
            parser.error("--max-update must be the positive update cap the runs shared")
        if not math.isfinite(args.wall_seconds) or args.wall_seconds < 0:
            parser.error("--wall-seconds must be a non-negative number of seconds")
        if args.eval_seconds is not None and not (math.isfinite(args.eval_seconds) and args.eval_seconds >= 0):
            parser.error("--eval-seconds must be a non-negative number of seconds")
        evaluations, eval_paths = {}, {}
        for spec in args.eval:
            name, sep, path = spec.partition("=")
            if not sep or not name or not path:
                parser.error(f"--eval {spec!r}: expected TEST=EVAL_JSON")
            if name in evaluations:
                parser.error(f"--eval: test set {quoted(name)} given twice")
            evaluations[name], eval_paths[name] = read_evaluation(path), path
            test = (evaluations[name].get("reference"), evaluations[name]["sentences"])
            for other in list(evaluations)[:-1]:
                if same_reference(evaluations[other], evaluations[name]):
                    raise InputError(path, None, f"scores the reference {quoted(test[0], 80)} ({test[1]} sentences), "
                                     f"as the --eval of {quoted(other, 40)} does (the same text): one evaluation per "
                                     "test set")
            reference = test[0]
            if isinstance(reference, str) and name not in os.path.basename(reference):
                print(f"{PROG}: warning: --eval {one_line(name)[:40]}: {one_line(path)} scores the reference "
                      f"{quoted(reference, 80)}, whose name is not the test set's: is it that test set?", file=sys.stderr)
        if os.sep in args.checkpoint_suffix or "\0" in args.checkpoint_suffix:
            parser.error("--checkpoint-suffix: expected a file-name suffix without a path separator")
        checkpoints = [os.path.join(args.save_dir, f"checkpoint_{w}{args.checkpoint_suffix}.pt")
                       for w in ("last", "best")]
        check_output_path(args.out, [p.partition("=")[2] for p in args.eval] + checkpoints
                          + ([args.train_log] if args.train_log else []), "--out")
        facts = checkpoint_facts(args.save_dir, args.checkpoint_suffix)
        arch = args.arch or args.model.split(".")[0]  # a model name is its architecture and a tag
        problem = identity_problem(facts, arch, args.seed, args.max_update)
        if problem is not None:
            raise InputError(checkpoints[0], None, problem)
        searches = {}
        for test, ev in evaluations.items():
            record = ev["systems"][0].get("decoded")
            problem = decoding_problem(record)
            if problem is not None:
                raise InputError(eval_paths[test], None, problem)
            if decoding_settings(record) is not None:
                searches[test] = decoding_settings(record)
            read = record.get("checkpoints") if isinstance(record, dict) else None
            if isinstance(read, list) and len(read) > 1:
                raise InputError(eval_paths[test], None, f"evaluates translations of an ensemble of {len(read)} "
                                 "checkpoints (its generate log records them): a result is one run's checkpoint_best.pt")
            for decoded in read if isinstance(read, list) else []:
                try:
                    other = _other_suffix(decoded, args.save_dir, args.checkpoint_suffix)
                except InputError as error:
                    raise InputError(eval_paths[test], None, error.path + ": " + error.message) from None
                if other is not None:
                    raise InputError(eval_paths[test], None, f"evaluates translations of {quoted(other, 120)}, a "
                                     f"checkpoint of --save-dir named with another --checkpoint-suffix than "
                                     f"{quoted(args.checkpoint_suffix, 40)}: record that run (its suffix)")
                differ = _decoded_differs(decoded, facts) if isinstance(decoded, dict) else []
                if differ:  # the log's own record of the checkpoints that made the translations
                    raise InputError(eval_paths[test], None, f"evaluates translations a checkpoint of another run "
                                     f"made (its generate log records {', '.join(differ)} other than those of "
                                     f"{one_line(args.save_dir)}'s checkpoints): another run's translations?")
            system = ev["systems"][0].get("name")
            if system != f"{args.model}.seed{args.seed}":  # a name without its seed could be any seed's
                raise InputError(eval_paths[test], None,
                                 f"evaluates the system {quoted(system, 60)}, not --model {quoted(args.model, 60)} "
                                 f"seed {args.seed} (fairseq-syntax-evaluate -b {one_line(args.model)}.seed{args.seed}"
                                 "=FILE names it so): the evaluation of another run?")
        stored = facts.get("patience")  # the run's own --patience: the one given must be it
        if args.patience is not None and isinstance(stored, int) and args.patience != stored:
            raise InputError(checkpoints[0], None, f"was trained with --patience {stored}, not the --patience "
                             f"{args.patience} given: the label early-stopped is fairseq's count under the run's own")
        if args.patience is None and isinstance(stored, int) and stored > 0:
            args.patience = stored
        if args.train_log:
            logged = logged_run(args.train_log)
            differ = _differing(logged, facts["last_identity"], ("arch", "seed", "save_dir"))
            if not differ and logged.get("run_id") and facts.get("last_run_id") \
                    and logged["run_id"] != facts["last_run_id"]:
                raise InputError(args.train_log, None, f"logs the run {logged['run_id']}, not the run "
                                 f"{facts['last_run_id']} of {one_line(checkpoints[0])}: another run's log (of the same "
                                 "architecture, seed and folder)?")
            if differ:
                raise InputError(args.train_log, None, f"logs the run {_shown({k: logged[k] for k in differ})}, "
                                 f"not that of {one_line(checkpoints[0])} ("
                                 f"{_shown({k: facts['last_identity'][k] for k in differ})}): another run's log?")
        result = build_result(args.model, arch, args.seed, args.flags, args.max_update,
                              facts, evaluations, args.commit or git_commit(args.repo), args.device,
                              args.wall_seconds, args.patience)
        for test, search in searches.items():  # how each test set was decoded: a table compares like with like
            result["tests"][test]["search"] = search
        for test, scored in result["tests"].items():  # what a table needs of each, or the --eval file is named now
            problem = test_problem(test, scored)
            if problem is not None:
                raise InputError(eval_paths[test], None, f"cannot be recorded: {problem}")
        if args.train_log:  # the best checkpoint's validation as logged: the translation's own loss too
            result["best_valid"] = valid_metrics(args.train_log, facts["best_updates"], args.valid_subset)
            problem = logged_best_problem(result["best_valid"], facts)
            if problem is not None:
                raise InputError(args.train_log, None, problem)
            train_seconds = training_seconds(args.train_log)  # every invocation of a resumed run
            if train_seconds is not None and not logs_the_start(args.train_log):
                raise InputError(args.train_log, None, "begins with a resume (fairseq-train loaded a checkpoint; no "
                                 "'No existing checkpoint found' line): it logs part of the run, and the training "
                                 "time would be that part's; give the log every invocation of the run was appended to")
            if train_seconds is not None:
                result["train_seconds"] = round(train_seconds, 1)
                if args.eval_seconds is not None:
                    result["wall_seconds"] = round(train_seconds + args.eval_seconds, 1)
        if result["stopped"] == "stopped before the cap":
            print(f"{PROG}: warning: {one_line(args.save_dir)}: the run stopped at {result['updates']} of {args.max_update} "
                  "updates and nothing shows it was early stopping (give --patience): interrupted?", file=sys.stderr)
        atomic_write_all([(args.out, text_writer([json.dumps(result, indent=1) + "\n"]))])
        print(f"wrote {one_line(args.out)}", file=sys.stderr)
        return 0
    if args.command == "noise":
        inputs = [spec.partition("=")[2] for spec in args.point]
        check_output_path(args.plot, inputs, "--plot")
        if args.json:
            check_output_path(args.json, inputs, "--json")
        check_distinct_outputs([("--plot", args.plot), ("--json", args.json)])
        points = noise_points(args.point)
        outputs = [(args.plot, figure_writer(noise_figure(points, args.title)))]
        if args.json:
            outputs.append((args.json, text_writer([json.dumps(points, indent=1) + "\n"])))
        atomic_write_all(outputs)
        for model, pts in sorted(points.items()):
            print(f"{one_line(model)}\t" + "\t".join(f"p={p:g}: {b:.2f}" for p, b in pts))
        return 0
    if args.command == "claims":
        return claims.main(args, parser)
    compares = []
    for spec in args.compare:
        system, sep, base = spec.partition(":")
        if not sep or not system or not base or system == base:
            parser.error(f"--compare {spec!r}: expected SYSTEM:BASELINE, two models")
        compares.append((system, base))
    claims.check_table_options(args, parser)  # --alpha, --markdown
    results = load_results(args.folders)
    if not results:
        raise InputError(", ".join(args.folders), None, f"holds no {FORMAT} JSON results")
    if args.models is not None:
        wanted = [m for m in args.models.split(",") if m]
        if not wanted:
            parser.error("--models: expected a comma-separated list of model names")
        for name in wanted:
            if name not in {r["model"] for r in results}:
                print(f"{PROG}: warning: --models {quoted(name)}: no result of that model yet", file=sys.stderr)
        keep = set(wanted) | {args.baseline} | {m for pair in compares for m in pair}
        results = [r for r in results if r["model"] in keep]
        if not results:
            raise InputError(", ".join(args.folders), None, f"holds no result of --models {quoted(args.models)}")
    if args.markdown:
        check_output_path(args.markdown, [r["_path"] for r in results], "--markdown")
        for folder in args.folders:
            inside = os.path.commonpath([os.path.realpath(args.markdown), os.path.realpath(folder)])
            if inside == os.path.realpath(folder) and args.markdown.lower().endswith(".json"):
                raise InputError(args.markdown, None, f"--markdown would replace a .json file under {folder}, "
                                 "where results are read: name it .md")
    models = {r["model"] for r in results}
    for name, flag in [(args.baseline, "--baseline")] + [(m, "--compare") for pair in compares for m in pair]:
        if name not in models:
            print(f"{PROG}: warning: {flag} {quoted(name)}: no result of that model yet (models: "
                  f"{quoted(sorted(models))})", file=sys.stderr)
    text = make_table(results, args.baseline, compares, args.alpha, table_command(args))
    print(text)
    if args.markdown:
        atomic_write_all([(args.markdown, text_writer([text]))])
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
