"""The result format of ``fairseq-syntax-report`` (one JSON per model and seed): its checks and loading.

A result holds, per test set, the scores, sacreBLEU signatures and per-sentence sufficient
statistics (counts), so that tables and paired tests are recomputed from the files alone; a file
whose scores its statistics do not give is refused as damaged.
"""

import hashlib
import json
import math
import os
import sys
from typing import Dict, List, Optional, Sequence

from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.jsonfile import read_json_file
from fairseq_syntax_core.oneline import one_line, quoted

from .scoring import corpus_score, make_metric, statistics_width

PROG = "fairseq-syntax-report"
FORMAT = "fairseq-syntax-result/1"
#: any version of our result format (a newer one is named, not silently skipped)
FORMAT_FAMILY = "fairseq-syntax-result/"
METRIC_KEYS = ("BLEU", "chrF2")


def _json_files(folder: str) -> List[str]:
    """``*.json`` under ``folder``, symbolic links to folders not followed."""
    found = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        found += [os.path.join(root, f) for f in sorted(files) if f.endswith(".json")]
    return found


def is_number(value) -> bool:
    """A finite int or float (JSON's true/false are not numbers here)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer of hundreds of digits: no float holds it
        return False


#: the largest count a sentence's statistics can hold: evaluate refuses lines over 100,000 characters, so
#: no n-gram or character count comes near it, and sums over any test set stay exact in a float
MAX_SENTENCE_COUNT = 10 ** 7


def _count(value) -> bool:
    return is_number(value) and 0 <= value <= MAX_SENTENCE_COUNT and float(value).is_integer()


def statistics_rows(rows, metric: str) -> bool:
    """Per-sentence sufficient statistics of ``metric``: rows of its width of counts (whole numbers in
    ``[0, MAX_SENTENCE_COUNT]``: sacreBLEU's statistics are n-gram and character counts)."""
    width = statistics_width(metric)
    return isinstance(rows, list) and all(
        isinstance(r, list) and len(r) == width and all(_count(v) for v in r) and _consistent(r, metric)
        for r in rows)


def _consistent(row: List, metric: str) -> bool:
    """Counts one sentence can have: BLEU's n-gram matches at most its n-grams, which its length gives
    (``[hyp, ref, match1..4, total1..4]``); chrF's matches at most either side's n-grams (``[hyp, ref, match]`` per
    order). Edited counts can otherwise give any score, over 100 too."""
    if metric == "BLEU":
        return all(row[2 + k] <= row[6 + k] == max(0, row[0] - k) for k in range(4))
    if metric.startswith("chrF"):
        return all(row[i + 2] <= min(row[i], row[i + 1]) for i in range(0, len(row) - 2, 3))
    return True


def _check_result(data: Dict, path: str) -> None:
    def damaged(what: str):
        return InputError(path, None, f"is a damaged {FORMAT} result: {what}")

    if not isinstance(data.get("model"), str) or not data["model"]:
        raise damaged("'model' must be a name")
    if not isinstance(data.get("seed"), int) or isinstance(data.get("seed"), bool):
        raise damaged("'seed' must be an integer")
    if not 0 <= data["seed"] < 2**32:  # numpy's range: fairseq seeds its batch order with numpy
        raise damaged(f"'seed' {data['seed']} is not a seed fairseq trains with (0 to 2^32 - 1)")
    if not isinstance(data.get("stopped"), str):
        raise damaged("'stopped' must say how training ended")
    counts = {key: data.get(key) for key in ("updates", "max_update")}
    if any(not isinstance(v, int) or isinstance(v, bool) for v in counts.values()):
        raise damaged("'updates' and 'max_update' must be integers")
    if not 0 <= counts["updates"] <= counts["max_update"]:
        raise damaged(f"'updates' {counts['updates']} is not a count of updates under the cap 'max_update' "
                      f"{counts['max_update']}")
    if not isinstance(data.get("tests"), dict) or not data["tests"]:
        raise damaged("'tests' must hold at least one test set")
    run_id = data.get("run_id")
    if run_id is not None and not (isinstance(run_id, str) and len(run_id) == 32
                                   and all(c in "0123456789abcdef" for c in run_id)):
        raise damaged("'run_id' must be the 32 hexadecimal digits of the run's identifier")
    if "training_data" in data and not isinstance(data["training_data"], dict):
        raise damaged("'training_data' must be an object (what the run's checkpoint records of its data)")
    for name, test in data["tests"].items():
        problem = test_problem(name, test)
        if problem is not None:
            raise damaged(problem)


def test_problem(name: str, test: object) -> Optional[str]:
    """What one test set of a result lacks for a table (its sentences, finite scores, signatures, per-sentence
    statistics that give its scores), or None."""
    if not isinstance(test, dict) or not isinstance(test.get("sentences"), int) \
            or isinstance(test.get("sentences"), bool) or test["sentences"] < 1:
        return f"test set {quoted(name)} needs its number of sentences"
    digest = test.get("reference_sha256")
    if digest is not None and not (isinstance(digest, str) and len(digest) == 64
                                   and all(c in "0123456789abcdef" for c in digest)):
        return f"test set {quoted(name)}: its reference_sha256 is not a SHA-256 digest (edited?)"
    scores, stats, sigs = test.get("scores"), test.get("statistics"), test.get("signatures")
    if not isinstance(scores, dict) or not all(is_number(scores.get(m)) for m in METRIC_KEYS):
        return f"test set {quoted(name)} needs finite {' and '.join(METRIC_KEYS)} scores"
    if not isinstance(sigs, dict) or not all(isinstance(sigs.get(m), str) for m in METRIC_KEYS):
        return f"test set {quoted(name)} needs the sacreBLEU signature of each score"
    if not isinstance(stats, dict) or not all(
            statistics_rows(stats.get(m), m) and len(stats[m]) == test["sentences"] for m in METRIC_KEYS):
        return (f"test set {quoted(name)} needs per-sentence statistics (one row per sentence of "
                f"{' and '.join(f'{statistics_width(m)} counts for {m}' for m in METRIC_KEYS)})")
    hyps = test.get("hypotheses")
    if hyps is not None and not (isinstance(hyps, list) and len(hyps) == test["sentences"]
                                 and all(isinstance(h, str) and "\n" not in h for h in hyps)):
        return f"test set {quoted(name)}: its hypotheses are not one line per sentence (edited?)"
    for m in METRIC_KEYS:
        recomputed = corpus_score(make_metric(m), stats[m])
        if abs(recomputed - scores[m]) > 1e-6 * max(1.0, abs(scores[m])):
            return f"test set {quoted(name)}: {m} is {scores[m]:g}, its per-sentence statistics give {recomputed:g} (edited?)"
    return None


def load_results(folders: Sequence[str]) -> List[Dict]:
    """Every result JSON under ``folders``: files of another format are skipped, damaged ones, a second result
    of the same (model, seed) and seeds of one model with another architecture, flags or cap are named."""
    results, seen, where, first = [], set(), {}, {}
    runs: Dict[str, str] = {}  # a run's identifier -> the result that records it
    translations: Dict[tuple, str] = {}  # (model, what a result's per-sentence statistics digest to -> its file
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
                if data.get("run_id") in runs:
                    raise InputError(path, None, f"records the run of {quoted(runs[data['run_id']])} (run "
                                     f"{data['run_id'][:12]}): one training run recorded as two results, under "
                                     "two names or seeds; keep one")
                if data.get("run_id"):
                    runs[data["run_id"]] = path
                data["_path"] = path
                _check_same_system(data, first.setdefault(data["model"], data))
                results.append(data)
    for data in results:  # once every result is read: a refusal above says nothing of copies
        digest = (data["model"], _statistics_digest(data))
        if digest in translations:  # possible on a toy test set that every run translates perfectly
            print(f"{PROG}: warning: {one_line(data['_path'])}: holds the per-sentence statistics of "
                  f"{one_line(translations[digest])} on every test set: the same translations as another seed "
                  "(a copy?)", file=sys.stderr)
        translations.setdefault(digest, data["_path"])
    return results


def _statistics_digest(data: Dict) -> str:
    """The SHA-256 of a result's per-sentence statistics on every test set (its translations, in effect)."""
    stats = {name: test["statistics"] for name, test in data["tests"].items()}
    return hashlib.sha256(json.dumps(stats, sort_keys=True).encode()).hexdigest()


#: what every seed of one model (one row of a table) shares: the seeds average one system
SAME_SYSTEM_KEYS = ("arch", "flags", "max_update", "best_checkpoint_metric")
#: what a result written before it recorded the key means
_SYSTEM_DEFAULTS = {"best_checkpoint_metric": "loss"}


def _check_same_system(result: Dict, first: Dict) -> None:
    """``result`` trains the system of ``first``, the first result of its model: else InputError naming both."""
    trained = result.get("training_data"), first.get("training_data")
    if (trained[0] is None) != (trained[1] is None):  # one older result: its training data cannot be told apart
        has, lacks = (result, first) if trained[0] is not None else (first, result)
        raise InputError(lacks["_path"], None, f"is {quoted(result['model'])} seed {lacks['seed']} and records no "
                         f"training_data, {quoted(has['_path'])} does: cannot tell whether the seeds of the row "
                         "trained on the same data (record it again from its checkpoints)")
    if all(isinstance(t, dict) for t in trained) and trained[0] != trained[1]:
        differ = sorted(k for k in set(trained[0]) | set(trained[1]) if trained[0].get(k) != trained[1].get(k))
        raise InputError(result["_path"], None, f"is {quoted(result['model'])} seed {result['seed']} trained on other "
                         f"data than {quoted(first['_path'])} (their checkpoints' {', '.join(map(quoted, differ))[:200]} "
                         "differ): the seeds of a row must be one system (name another model, e.g. a tag: MODEL.TAG)")
    for key in SAME_SYSTEM_KEYS:
        mine, theirs = (r.get(key, _SYSTEM_DEFAULTS.get(key)) for r in (result, first))
        if mine != theirs:
            raise InputError(result["_path"], None, f"is {quoted(result['model'])} seed {result['seed']} with {key} "
                             f"{quoted(mine, 80)}, but {quoted(first['_path'])} has {quoted(theirs, 80)}"
                             ": the seeds of a row must be one system (name another model, e.g. a tag: MODEL.TAG)")
