"""``fairseq-syntax-report noise``: BLEU against the share of perturbed parses, one curve per model."""

import json
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_syntax_core.errors import InputError, UsageError
from fairseq_syntax_core.jsonfile import read_json_file
from fairseq_syntax_core.oneline import one_line, quoted

from .rendering import legend, plot_text
from .result_format import is_number, statistics_rows
from .run_checks import missing_record_problem
from .scoring import corpus_score, make_metric


def noise_points(specs: Sequence[str]) -> Dict[str, List[Tuple[float, float]]]:
    """``MODEL:P=EVAL_JSON`` -> {model: [(p, BLEU), ...]} sorted by p."""
    points: Dict[str, List[Tuple[float, float]]] = {}
    seen: Dict[str, Tuple[str, str, tuple]] = {}  # model -> its first point's file, system and (reference, sentences)
    runs: Dict[str, Tuple[str, Optional[str]]] = {}  # model -> its first point's file and the run its log records
    files: Dict[str, str] = {}  # a point's file (real path) -> its --point
    unrecorded: Optional[InputError] = None  # the first point whose log records nothing of what it decoded
    for spec in specs:
        key, sep, path = spec.partition("=")
        model, sep2, p = key.rpartition(":")
        if not sep or not sep2 or not model:
            raise UsageError(f"--point {spec!r}: expected MODEL:P=EVAL_JSON")
        if re.search(r"\.seed\d+$", model):  # the curve is the model's; its evaluation names the seed
            raise UsageError(f"--point {spec!r}: MODEL names a seed; expected {model.rsplit('.seed', 1)[0]!r} (the "
                             "evaluation's system is MODEL.seedN)")
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
        if not is_number(bleu) or not 0 <= bleu <= 100 + 1e-9:  # a JSON number, not true nor "1e308"; sacreBLEU
            # gives 100.00000000000004 for a perfect score
            raise InputError(path, None, f"has BLEU {quoted(bleu, 40)}: not a score in [0, 100] (damaged?)")
        system = systems[0].get("name")
        if not isinstance(system, str) or not re.fullmatch(re.escape(model) + r"\.seed\d+", system):
            raise InputError(path, None, f"evaluates the system {quoted(system, 60)}, not {quoted(model, 60)} (a "
                             f"point's JSON is that model's evaluation: fairseq-syntax-evaluate -b {one_line(model)}"
                             ".seedN=FILE)")
        real = os.path.realpath(path)
        if real in files:
            raise InputError(path, None, f"is given for two points ({files[real]} and {one_line(spec)}): one "
                             "evaluation is one p of one model")
        files[real] = one_line(spec)
        recorded = ev.get("perturbation")
        if recorded is None:  # the p of the data-bin decoded is what the point's p must be
            raise InputError(path, None, "records no perturbation: run fairseq-syntax-evaluate with --data-bin (the "
                             "data-bin decoded, clean or perturbed) so that the p of the point is checked")
        if isinstance(recorded, list):
            raise InputError(path, None, f"evaluates a data-bin perturbed more than once (p = {quoted(recorded, 40)} "
                             "in turn): a point is one p applied to the parses as made (perturb the clean data-bin)")
        if not (is_number(recorded) and abs(float(recorded) - prob) < 1e-9):
            raise InputError(path, None, f"evaluates a data-bin perturbed with p = {quoted(recorded, 20)} (its "
                             f"perturbation, from --data-bin), not the p = {p} its --point gives")
        test = (ev.get("reference"), ev.get("sentences"), ev.get("reference_sha256"))
        for other, (first_path, first_system, first_test) in seen.items():
            # the same content (evaluate records its digest), else the same path as typed (older evaluations)
            same = test[1:] == first_test[1:] if test[2] and first_test[2] else test == first_test
            if not same:
                raise InputError(path, None, f"scores against the reference {quoted(test[0], 80)} ({test[1]} "
                                 f"sentences), {first_path} against {quoted(first_test[0], 80)} ({first_test[1]}): "
                                 "every point must score one test set")
            if other == model and first_system != system:
                raise InputError(path, None, f"evaluates {quoted(system, 60)}, {first_path} {quoted(first_system, 60)}"
                                 f": the points of {quoted(model, 60)} must be one run's")
        _check_statistics(path, ev, system, bleu)
        _check_decoded(path, systems[0].get("decoded"), recorded)
        run = _decoded_run(systems[0])
        first_run = runs.setdefault(model, (path, run))
        if first_run[1] != run:
            raise InputError(path, None, f"evaluates translations of {_run_text(run)}, {first_run[0]} of "
                             f"{_run_text(first_run[1])}: the points of {quoted(model, 60)} must be one checkpoint's "
                             "(perturb the data-bin, not the model)")
        missing = missing_record_problem(systems[0].get("decoded"), "a noise point")
        if missing is not None and unrecorded is None:  # the p its log records is checked against --data-bin's
            unrecorded = InputError(path, None, missing)  # only with it (said after what the points contradict)
        seen.setdefault(model, (path, system, test))
        points.setdefault(model, []).append((prob, float(bleu)))
    if unrecorded is not None:
        raise unrecorded
    return {m: sorted(v) for m, v in points.items()}


def _check_decoded(path: str, decoded: object, recorded: object) -> None:
    """The evaluation's copy of its log's ``fairseq-syntax-decoded`` record must be one fairseq-generate writes, and
    say the p of the evaluation's ``perturbation`` (taken from ``--data-bin``): an edited top-level p made a clean
    score a noise point."""
    from fairseq_syntax_core.databin import recorded_perturbation
    from fairseq_syntax_core.decoding_record import MARK, parse_line

    if decoded is None:
        return
    if not isinstance(decoded, dict) or parse_line(f"{MARK}\t{json.dumps(decoded)}") is None:
        raise InputError(path, None, f"its copy of the log's {MARK} line is not what fairseq-generate writes (edited?)")
    search = decoded.get("search") if isinstance(decoded.get("search"), dict) else {}
    split = search.get("gen_subset") if isinstance(search.get("gen_subset"), str) else None
    logged = recorded_perturbation({"perturbation": decoded.get("perturbation")}, path, split)
    if isinstance(logged, list) or abs(float(logged) - float(recorded)) > 1e-9:
        raise InputError(path, None, f"says its translations were decoded with p = {quoted(recorded, 20)}, but the "
                         f"log's {MARK} line it keeps says p = {quoted(logged, 40)}: edited? (evaluate again)")


def _decoded_run(system: Dict) -> Optional[str]:
    """What the generate log of an evaluated system records of the checkpoints that decoded it (its
    ``fairseq-syntax-decoded`` line, kept by evaluate), as comparable text; None for logs without it."""
    decoded = system.get("decoded")
    if not isinstance(decoded, dict) or not isinstance(decoded.get("checkpoints"), list):
        return None
    # what a checkpoint is, not the paths it was typed by (absolute at one point, relative at another)
    return json.dumps([{k: v for k, v in c.items() if k not in ("checkpoint", "save_dir", "data")}
                       if isinstance(c, dict) else c for c in decoded["checkpoints"]], sort_keys=True)


def _run_text(run: Optional[str]) -> str:
    if run is None:
        return "a log that records no checkpoint (plain text, or an older fairseq-generate)"
    checkpoints = json.loads(run)
    shown = ", ".join(f"a checkpoint of seed {quoted(c.get('seed'), 12)} at {quoted(c.get('updates'), 12)} updates"
                      + (f" (run {quoted(c['run_id'], 12)})" if c.get("run_id") else "")
                      for c in checkpoints if isinstance(c, dict))
    return shown or "no checkpoint"


def _check_statistics(path: str, ev: Dict, system: str, bleu: float) -> None:
    """The BLEU of a point must be what its per-sentence statistics give, when the evaluation kept them (--statistics)."""
    stats = ev.get("statistics")
    if stats is None:
        return
    rows = stats.get(system, {}).get("BLEU") if isinstance(stats, dict) and isinstance(stats.get(system), dict) \
        else None
    if not statistics_rows(rows, "BLEU") or not rows or len(rows) != ev.get("sentences"):
        raise InputError(path, None, f"its statistics hold no per-sentence BLEU counts of {quoted(system, 60)}, one "
                         "row per sentence (damaged?)")
    recomputed = corpus_score(make_metric("BLEU"), rows)
    if abs(recomputed - bleu) > 1e-6 * max(1.0, abs(bleu)):
        raise InputError(path, None, f"has BLEU {bleu:g}, its per-sentence statistics give {recomputed:g} (edited?)")


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
