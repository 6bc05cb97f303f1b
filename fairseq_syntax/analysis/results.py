"""``fairseq-syntax-report``: one JSON result per (model, seed) run, and the table rebuilt from all of them.

``record`` writes a run's result: model, flags, seed, updates, best epoch, how training ended
(early-stopped or capped), valid loss (the best value of the run's ``--best-checkpoint-metric``,
named in ``best_checkpoint_metric``; with ``--train-log``, the best checkpoint's validation metrics as
logged, the translation's own ``nll_loss`` among them, in ``best_valid``), commit, device, wall time,
and per test set the scores,
sacreBLEU signatures, hypotheses and per-sentence sufficient statistics of
``fairseq-syntax-evaluate --statistics``, so paired tests can be recomputed without the
references. ``table`` reads every result JSON under the given folders and prints (or writes)
the Markdown table: mean and standard deviation over seeds, and per seed sacreBLEU's paired
bootstrap against the same seed of the baseline (and of any ``--compare`` pair).

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
import statistics
import subprocess
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_syntax_core.errors import InputError, UsageError
from fairseq_syntax_core.jsonfile import read_json_file
from fairseq_syntax_core.oneline import one_line, quoted
from fairseq_syntax_preprocess.fileio import atomic_write_all, check_distinct_outputs, check_output_path

from .commands import figure_writer, quiet_logging, run_command, text_writer
from .rendering import legend, md_code, md_row, md_text, plot_text
from .train_log import valid_metrics
from .scoring import DEFAULT_SAMPLES, DEFAULT_SEED, corpus_score, make_metric, paired_bootstrap, statistics_width

PROG = "fairseq-syntax-report"
FORMAT = "fairseq-syntax-result/1"
#: any version of our result format (a newer one is named, not silently skipped)
FORMAT_FAMILY = "fairseq-syntax-result/"
METRIC_KEYS = ("BLEU", "chrF2")


# ------------------------------------------------------------------------------ record
def checkpoint_facts(save_dir: str) -> Dict:
    """Updates and epoch of ``checkpoint_last.pt``, best epoch and valid loss of ``checkpoint_best.pt``
    (read weights-only: a checkpoint holding anything but fairseq's own objects is refused, not run; one
    not shaped as fairseq's is refused as fairseq's readers refuse it)."""
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    facts: Dict = {}
    for which in ("last", "best"):
        path = os.path.join(save_dir, f"checkpoint_{which}.pt")
        if not os.path.lexists(path):
            raise InputError(path, None, "not found: the run did not save a checkpoint")
        state = load_fairseq_checkpoint(path)
        extra = state.get("extra_state") or {}
        history = state.get("optimizer_history") or [{}]
        facts[f"{which}_updates"] = int(history[-1].get("num_updates", 0))
        iterator = extra.get("train_iterator") or {}
        for key in ("epoch", "iterations_in_epoch"):
            value = iterator.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InputError(path, None, f"is not a fairseq checkpoint: its train_iterator's {key} is "
                                 f"{quoted(value, 40)}, not a count (edited?)")
        facts[f"{which}_epoch"] = epoch_of(iterator)
        if which == "best":
            best = extra.get("best", extra.get("val_loss"))
            if best is not None and (isinstance(best, bool) or not isinstance(best, (int, float))
                                     or not math.isfinite(best)):
                raise InputError(path, None, f"is not a fairseq checkpoint: its best validation value is "
                                 f"{quoted(best, 40)}, not a finite number (edited?)")
            facts["best_valid_loss"] = best
            cfg = state.get("cfg") if isinstance(state.get("cfg"), dict) else {}
            checkpointing = cfg.get("checkpoint") if isinstance(cfg.get("checkpoint"), dict) else {}
            metric = checkpointing.get("best_checkpoint_metric", "loss")
            facts["best_checkpoint_metric"] = (metric if isinstance(metric, str)
                                               and re.fullmatch(r"[A-Za-z0-9_]{1,64}", metric) else "loss")
    return facts


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
    if patience is not None and patience > 0 and facts["last_epoch"] - facts["best_epoch"] >= patience:
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
    return {
        "format": FORMAT, "model": model, "arch": arch, "seed": seed, "flags": flags,
        "max_update": max_update, "updates": updates, "epochs": facts["last_epoch"],
        "best_epoch": facts["best_epoch"], "best_updates": facts["best_updates"],
        "best_valid_loss": facts["best_valid_loss"],
        "best_checkpoint_metric": facts.get("best_checkpoint_metric", "loss"), "stopped": stopped,
        "commit": commit, "device": device, "wall_seconds": round(wall_seconds, 1), "tests": tests,
    }


def read_evaluation(path: str) -> Dict:
    """A ``fairseq-syntax-evaluate --statistics`` JSON of exactly one system, checked."""
    ev = read_json_file(path, remedy="expected a fairseq-syntax-evaluate JSON")
    systems = ev.get("systems") if isinstance(ev, dict) else None
    if not isinstance(systems, list) or not systems or not isinstance(systems[0], dict) \
            or not isinstance(systems[0].get("scores"), dict) or "sentences" not in ev:
        raise InputError(path, None, "is not a fairseq-syntax-evaluate JSON (no systems with scores)")
    if len(systems) != 1:
        raise InputError(path, None, f"evaluates {len(systems)} systems; a run's result needs the evaluation "
                         "of its own translations alone (fairseq-syntax-evaluate -b RUN=FILE)")
    name = systems[0].get("name")
    if not isinstance(ev.get("signatures"), dict) or not isinstance(ev.get("hypotheses", {}), dict):
        raise InputError(path, None, "is not a fairseq-syntax-evaluate JSON (its signatures and hypotheses are "
                         "objects): made by another tool, or edited?")
    stats = ev.get("statistics")
    stats = stats.get(name) if isinstance(stats, dict) and isinstance(name, str) else None
    if not isinstance(stats, dict) or not all(stats.get(m) is not None for m in METRIC_KEYS):
        raise InputError(path, None, "lacks per-sentence statistics: run fairseq-syntax-evaluate with --statistics")
    if not all(_statistics_rows(stats[m], m) and len(stats[m]) == ev["sentences"] for m in METRIC_KEYS):
        raise InputError(path, None, "is not a fairseq-syntax-evaluate JSON: its per-sentence statistics are not "
                         f"one row of counts per sentence for {' and '.join(METRIC_KEYS)} (edited?)")
    return ev


# ------------------------------------------------------------------------------- table
def _json_files(folder: str) -> List[str]:
    """``*.json`` under ``folder``, symbolic links to folders not followed."""
    found = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        found += [os.path.join(root, f) for f in sorted(files) if f.endswith(".json")]
    return found


def _number(value) -> bool:
    """A finite int or float (JSON's true/false are not numbers here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: the largest count a sentence's statistics can hold: evaluate refuses lines over 100,000 characters, so
#: no n-gram or character count comes near it, and sums over any test set stay exact in a float
MAX_SENTENCE_COUNT = 10 ** 7


def _count(value) -> bool:
    return _number(value) and 0 <= value <= MAX_SENTENCE_COUNT and float(value).is_integer()


def _statistics_rows(rows, metric: str) -> bool:
    """Per-sentence sufficient statistics of ``metric``: rows of its width of counts (whole numbers in
    ``[0, MAX_SENTENCE_COUNT]``: sacreBLEU's statistics are n-gram and character counts)."""
    width = statistics_width(metric)
    return isinstance(rows, list) and all(
        isinstance(r, list) and len(r) == width and all(_count(v) for v in r) for r in rows)


def _check_result(data: Dict, path: str) -> None:
    def damaged(what: str):
        return InputError(path, None, f"is a damaged {FORMAT} result: {what}")

    if not isinstance(data.get("model"), str) or not data["model"]:
        raise damaged("'model' must be a name")
    if not isinstance(data.get("seed"), int) or isinstance(data.get("seed"), bool):
        raise damaged("'seed' must be an integer")
    if not isinstance(data.get("stopped"), str):
        raise damaged("'stopped' must say how training ended")
    if not isinstance(data.get("updates"), int) or isinstance(data.get("updates"), bool):
        raise damaged("'updates' must be an integer")
    if not isinstance(data.get("tests"), dict) or not data["tests"]:
        raise damaged("'tests' must hold at least one test set")
    for name, test in data["tests"].items():
        if not isinstance(test, dict) or not isinstance(test.get("sentences"), int) \
                or isinstance(test.get("sentences"), bool) or test["sentences"] < 1:
            raise damaged(f"test set {quoted(name)} needs its number of sentences")
        scores, stats, sigs = test.get("scores"), test.get("statistics"), test.get("signatures")
        if not isinstance(scores, dict) or not all(_number(scores.get(m)) for m in METRIC_KEYS):
            raise damaged(f"test set {quoted(name)} needs finite {' and '.join(METRIC_KEYS)} scores")
        if not isinstance(sigs, dict) or not all(isinstance(sigs.get(m), str) for m in METRIC_KEYS):
            raise damaged(f"test set {quoted(name)} needs the sacreBLEU signature of each score")
        if not isinstance(stats, dict) or not all(
                _statistics_rows(stats.get(m), m) and len(stats[m]) == test["sentences"] for m in METRIC_KEYS):
            raise damaged(f"test set {quoted(name)} needs per-sentence statistics (one row per sentence of "
                          f"{' and '.join(f'{statistics_width(m)} counts for {m}' for m in METRIC_KEYS)})")
        for m in METRIC_KEYS:
            recomputed = corpus_score(make_metric(m), stats[m])
            if abs(recomputed - scores[m]) > 1e-6 * max(1.0, abs(scores[m])):
                raise damaged(f"test set {quoted(name)}: {m} is {scores[m]:g}, its per-sentence statistics give "
                              f"{recomputed:g} (edited?)")


def load_results(folders: Sequence[str]) -> List[Dict]:
    """Every result JSON under ``folders``: files of another format are skipped, damaged ones and
    a second result of the same (model, seed) are named."""
    results, seen, where = [], set(), {}
    for folder in folders:
        if not os.path.isdir(folder):
            raise InputError(folder, None, "is not a folder of results")
        for path in _json_files(folder):
            real = os.path.realpath(path)
            if real in seen:  # the same file reached twice (a folder given twice)
                continue
            seen.add(real)
            data = read_json_file(path, remedy="expected a JSON result")
            kind = data.get("format") if isinstance(data, dict) else None
            if isinstance(kind, str) and kind.startswith(FORMAT_FAMILY) and kind != FORMAT:
                print(f"{PROG}: warning: {one_line(path)}: format {quoted(kind)}, this version reads {FORMAT!r}: skipped "
                      "(a newer fairseq-syntax wrote it?)", file=sys.stderr)
            if kind == FORMAT:
                _check_result(data, path)
                key = (data["model"], data["seed"])
                if key in where:
                    raise InputError(path, None, f"is a second result of {quoted(key[0])} seed {key[1]} "
                                     f"(the first: {quoted(where[key])}): keep one")
                where[key] = path
                data["_path"] = path
                results.append(data)
    return results


def _mean_std(values: List[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def _settings(signature: str) -> str:
    """A sacreBLEU signature without its ``version:`` field (the settings that make scores comparable)."""
    return "|".join(field for field in signature.split("|") if not field.startswith("version:"))


def _check_same_sentences(a: Dict, b: Dict, test: str) -> None:
    """Two results of ``test`` must score the same sentences in the same order: sentence count,
    sacreBLEU signature, and the reference length of every sentence (BLEU's statistics hold it)."""
    ta, tb = a["tests"][test], b["tests"][test]
    if ta["sentences"] != tb["sentences"]:
        raise InputError(a["_path"], None, f"test set {quoted(test)} has {ta['sentences']} sentences, "
                         f"{tb['sentences']} in {quoted(b['_path'])}: not the same test set")
    for m in METRIC_KEYS:
        if _settings(ta["signatures"][m]) != _settings(tb["signatures"][m]):
            raise InputError(a["_path"], None, f"test set {quoted(test)} was scored with {m} "
                             f"{quoted(ta['signatures'][m])}, {quoted(b['_path'])} with {quoted(tb['signatures'][m])}: "
                             "scores of different settings cannot be compared")
    ref_a = [row[1] for row in ta["statistics"]["BLEU"]]
    ref_b = [row[1] for row in tb["statistics"]["BLEU"]]
    differ = next((i for i, (x, y) in enumerate(zip(ref_a, ref_b)) if x != y), None)
    if differ is not None:
        raise InputError(a["_path"], None, f"test set {quoted(test)}: sentence {differ} has a reference of "
                         f"{ref_a[differ]:g} words, {ref_b[differ]:g} in {quoted(b['_path'])}: the sentences are not in the same order "
                         "(or not the same references), so they cannot be paired")


def compare_seeds(results: List[Dict], system: str, baseline: str, test: str,
                  samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED) -> List[Dict]:
    """Per seed both models have: sacreBLEU's paired bootstrap (BLEU) of ``system`` against ``baseline``."""
    by_seed = {(r["model"], r["seed"]): r for r in results if test in r["tests"]}
    rows = []
    for (model, s), r in sorted(by_seed.items(), key=lambda kv: kv[0][1]):
        if model != system or (baseline, s) not in by_seed:
            continue
        b = by_seed[(baseline, s)]
        _check_same_sentences(r, b, test)
        res = paired_bootstrap("BLEU", b["tests"][test]["statistics"]["BLEU"], r["tests"][test]["statistics"]["BLEU"],
                               samples, seed)
        rows.append({"seed": s, **res.as_dict()})
    return rows


def _unpaired(results: List[Dict], system: str, baseline: str, test: str) -> str:
    """`` (seeds 3, 4 without a baseline run)``: the system's seeds the paired tests leave out."""
    have = {r["seed"] for r in results if r["model"] == baseline and test in r["tests"]}
    alone = sorted(r["seed"] for r in results if r["model"] == system and test in r["tests"] and r["seed"] not in have)
    if not alone:
        return ""
    seeds = f"seed{'s' if len(alone) > 1 else ''} {', '.join(map(str, alone))}"
    return f" ({seeds} without a {md_code(baseline)} run: not tested)"


def _verdict(rows: List[Dict], alpha: float) -> str:
    if not rows:
        return "-"
    better = sum(1 for r in rows if r["p_value"] < alpha and r["difference"] > 0)
    worse = sum(1 for r in rows if r["p_value"] < alpha and r["difference"] < 0)
    diffs = ", ".join(f"{r['difference']:+.2f} (p={r['p_value']:.3f})" for r in rows)
    parts = []
    if better:
        parts.append(f"{better}/{len(rows)} seeds significantly better")
    if worse:
        parts.append(f"{worse}/{len(rows)} seeds significantly worse")
    if not parts:
        parts.append(f"no significant difference in {len(rows)} seed{'s' if len(rows) > 1 else ''}")
    return f"{'; '.join(parts)}: {diffs}"


def make_table(results: List[Dict], baseline: str, compares: List[Tuple[str, str]], alpha: float = 0.05,
               command: Optional[str] = None) -> str:
    """The Markdown table(s), one per test set; ``command`` (the ``table`` command line that made it) closes it,
    so anyone can rebuild the table from the committed results and compare. Every name and field read from
    the results is escaped (:mod:`.rendering`): a row stays one row of its cells whatever a name holds."""
    tests = sorted({t for r in results for t in r["tests"]})
    out = []
    for test in tests:
        here = [r for r in results if test in r["tests"]]
        for r in here[1:]:
            _check_same_sentences(r, here[0], test)
        models = sorted({r["model"] for r in here}, key=lambda m: (m != baseline, m))
        out.append(f"**{md_text(test)}** ({here[0]['tests'][test]['sentences']} sentences; "
                   f"BLEU {md_text(here[0]['tests'][test]['signatures']['BLEU'])})\n")
        out.append(md_row(["model", "seeds", "training", "BLEU", "chrF2",
                           f"vs {md_code(baseline)} (paired bootstrap, BLEU, per seed)"]))
        out.append("|---|---|---|---|---|---|")
        for m in models:
            runs = sorted((r for r in here if r["model"] == m), key=lambda r: r["seed"])
            bleu = [r["tests"][test]["scores"]["BLEU"] for r in runs]
            chrf = [r["tests"][test]["scores"]["chrF2"] for r in runs]
            stops = sorted({r["stopped"] for r in runs})
            updates = "/".join(str(r["updates"]) for r in runs)
            training = f"{', '.join(stops)} ({updates} updates)"
            verdict = "(baseline)" if m == baseline else \
                _verdict(compare_seeds(here, m, baseline, test), alpha) + _unpaired(here, m, baseline, test)
            out.append(md_row([md_code(m), ",".join(str(r["seed"]) for r in runs), md_text(training),
                               _mean_std(bleu), _mean_std(chrf), verdict]))
        for system, base in compares:
            rows = compare_seeds(here, system, base, test)
            if rows:
                out.append(f"\n{md_code(system)} against {md_code(base)} (same seeds): {_verdict(rows, alpha)}"
                           + _unpaired(here, system, base, test))
        out.append("")
    out.append(f"Mean ± standard deviation over seeds. Significance: sacreBLEU's paired bootstrap "
               f"({DEFAULT_SAMPLES} resamples, seed {DEFAULT_SEED}), p < {alpha}, each seed against the same seed "
               "of the other model; a zero difference counts as p = 1.")
    if command:
        out.append(f"\nRebuilt from {len(results)} result file{'s' if len(results) != 1 else ''} by {md_code(command)}.")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------- parse-noise robustness
def noise_points(specs: Sequence[str]) -> Dict[str, List[Tuple[float, float]]]:
    """``MODEL:P=EVAL_JSON`` -> {model: [(p, BLEU), ...]} sorted by p."""
    points: Dict[str, List[Tuple[float, float]]] = {}
    for spec in specs:
        key, sep, path = spec.partition("=")
        model, sep2, p = key.rpartition(":")
        if not sep or not sep2 or not model:
            raise UsageError(f"--point {spec!r}: expected MODEL:P=EVAL_JSON")
        try:
            prob = float(p)
        except ValueError:
            prob = float("nan")
        if not 0.0 <= prob <= 1.0:
            raise UsageError(f"--point {spec!r}: {p!r} is not a probability in [0, 1]")
        if any(q == prob for q, _ in points.get(model, [])):
            raise UsageError(f"--point {spec!r}: {model} at p = {p} is given twice")
        ev = read_json_file(path, remedy="expected a fairseq-syntax-evaluate JSON")
        systems = ev.get("systems") if isinstance(ev, dict) else None
        if not isinstance(systems, list) or not systems or not isinstance(systems[0], dict) \
                or not isinstance(systems[0].get("scores"), dict) or "BLEU" not in systems[0]["scores"]:
            raise InputError(path, None, "is not a fairseq-syntax-evaluate JSON (no systems with a BLEU score)")
        if len(systems) != 1:
            raise InputError(path, None, f"evaluates {len(systems)} systems; a point needs the evaluation of that "
                             "model's translations alone (fairseq-syntax-evaluate -b MODEL=FILE)")
        bleu = systems[0]["scores"]["BLEU"]
        if not _number(bleu) or not 0 <= bleu <= 100:  # a JSON number: not true, not the string "1e308"
            raise InputError(path, None, f"has BLEU {quoted(bleu, 40)}: not a score in [0, 100] (damaged?)")
        points.setdefault(model, []).append((prob, float(bleu)))
    return {m: sorted(v) for m, v in points.items()}


def plot_noise(points: Dict[str, List[Tuple[float, float]]], path: str, title: str = "") -> None:
    """BLEU against the parse-noise probability p, one line per model, written to ``path`` (PNG)."""
    atomic_write_all([(path, figure_writer(noise_figure(points, title)))])


def noise_figure(points: Dict[str, List[Tuple[float, float]]], title: str = ""):
    """The figure of BLEU against the parse-noise probability p, one line per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    lines = [ax.plot([p for p, _ in pts], [b for _, b in pts], "o-")[0] for _model, pts in sorted(points.items())]
    ax.set_xlabel("p: probability that a word's parse is perturbed (test set)")
    ax.set_ylabel("BLEU")
    if title:
        ax.set_title(plot_text(title), fontsize=9)
    legend(ax, lines, sorted(points), loc="best", fontsize=8)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------- CLI
def table_command(args: argparse.Namespace) -> str:
    """The ``table`` command line that rebuilds a table (``--markdown`` left out: it names the output)."""
    argv = [PROG, "table", *args.folders, "--baseline", args.baseline]
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
    rec.add_argument("--arch", default=None, help="fairseq --arch (default: --model)")
    rec.add_argument("--seed", type=int, required=True)
    rec.add_argument("--flags", default="", help="the training flags that differ from the recipe's")
    rec.add_argument("--save-dir", required=True, help="the run's checkpoint folder")
    rec.add_argument("--train-log", default=None,
                     help="the run's fairseq-train log: the validation metrics of the best checkpoint's update "
                          "(loss, the translation's own nll_loss, nll_loss_fed ...) go into the result as best_valid")
    rec.add_argument("--valid-subset", default="valid",
                     help="the subset whose validation --train-log reads (fairseq-train's --valid-subset; default valid)")
    rec.add_argument("--max-update", type=int, required=True, help="the cap every model of the table shares")
    rec.add_argument("--patience", type=int, default=None,
                     help="fairseq-train's --patience (validation every epoch): a run that stopped before the cap "
                          "with this many epochs after its best one is labelled early-stopped; without it, with "
                          "fewer, or <= 0 (fairseq: early stopping off), 'stopped before the cap' (interrupted?)")
    rec.add_argument("--eval", action="append", default=[], metavar="TEST=EVAL_JSON", required=True,
                     help="fairseq-syntax-evaluate --statistics output of one test set (repeatable)")
    rec.add_argument("--wall-seconds", type=float, default=0.0)
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
    tab.add_argument("--alpha", type=float, default=0.05)
    tab.add_argument("--markdown", default=None, help="also write the table to this file")
    noise = sub.add_parser("noise", help="BLEU against parse noise p per model (fairseq-syntax-perturb)")
    noise.add_argument("--point", action="append", default=[], required=True, metavar="MODEL:P=EVAL_JSON")
    noise.add_argument("--plot", required=True, help="the PNG to write")
    noise.add_argument("--json", default=None, help="also write the points here")
    noise.add_argument("--title", default="")
    return p


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
        evaluations = {}
        for spec in args.eval:
            name, sep, path = spec.partition("=")
            if not sep or not name or not path:
                parser.error(f"--eval {spec!r}: expected TEST=EVAL_JSON")
            if name in evaluations:
                parser.error(f"--eval: test set {quoted(name)} given twice")
            evaluations[name] = read_evaluation(path)
        checkpoints = [os.path.join(args.save_dir, f"checkpoint_{w}.pt") for w in ("last", "best")]
        check_output_path(args.out, [p.partition("=")[2] for p in args.eval] + checkpoints, "--out")
        facts = checkpoint_facts(args.save_dir)
        result = build_result(args.model, args.arch or args.model, args.seed, args.flags, args.max_update,
                              facts, evaluations, args.commit or git_commit(args.repo), args.device,
                              args.wall_seconds, args.patience)
        if args.train_log:  # the best checkpoint's validation as logged: the translation's own loss too
            result["best_valid"] = valid_metrics(args.train_log, facts["best_updates"], args.valid_subset)
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
    compares = []
    for spec in args.compare:
        system, sep, base = spec.partition(":")
        if not sep or not system or not base:
            parser.error(f"--compare {spec!r}: expected SYSTEM:BASELINE")
        compares.append((system, base))
    if not 0.0 < args.alpha < 1.0:
        parser.error("--alpha must be a significance level in (0, 1), e.g. 0.05")
    results = load_results(args.folders)
    if not results:
        raise InputError(", ".join(args.folders), None, f"holds no {FORMAT} JSON results")
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
                  f"{quoted(sorted(models))})",
                  file=sys.stderr)
    text = make_table(results, args.baseline, compares, args.alpha, table_command(args))
    print(text)
    if args.markdown:
        atomic_write_all([(args.markdown, text_writer([text]))])
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
