"""``fairseq-syntax-report table``: mean and deviation over seeds, and per seed the paired bootstrap
against the same seed of the baseline (sacreBLEU's, recomputed from the stored statistics)."""

import re
import statistics
from typing import Dict, List, Optional, Tuple

from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.oneline import quoted

from .rendering import md_code, md_row, md_text
from .result_format import METRIC_KEYS
from .scoring import DEFAULT_SAMPLES, DEFAULT_SEED, paired_bootstrap


def _mean_std(values: List[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def _settings(signature: str) -> str:
    """A sacreBLEU signature without its ``version:`` field (the settings that make scores comparable)."""
    return "|".join(field for field in signature.split("|") if not field.startswith("version:"))


def _check_same_segmentation(a: Dict, b: Dict) -> None:
    """Two models compared must have trained on the same text: the same BPE codes and text dictionaries (a syntax
    model's data-bin adds stream dictionaries, which may differ), and the same parse perturbation (none)."""
    ta, tb = a.get("training_data"), b.get("training_data")
    if not isinstance(ta, dict) or not isinstance(tb, dict):
        return  # older results record none: the seeds' own check names them
    texts = lambda t: {k: v for k, v in (t.get("dictionaries_sha256") or {}).items()  # noqa: E731
                       if isinstance(k, str) and re.fullmatch(r"dict\.[^.]+\.txt", k)}
    differ = [what for what, x, y in (("BPE codes", ta.get("bpe_codes_sha256"), tb.get("bpe_codes_sha256")),
                                      ("perturbation of the parses", ta.get("perturbation"), tb.get("perturbation")))
              if x != y]
    common = set(texts(ta)) & set(texts(tb))
    differ += [name for name in sorted(common) if texts(ta)[name] != texts(tb)[name]]
    if differ:
        raise InputError(a["_path"], None, f"{quoted(a['model'])} trained on other data than {quoted(b['model'])} "
                         f"({quoted(b['_path'])}): their {', '.join(differ)[:200]} differ, so a difference in BLEU "
                         "is not the model's; train both on one data-bin")


def _check_same_sentences(a: Dict, b: Dict, test: str) -> None:
    """Two results of ``test`` must score the same sentences in the same order: sentence count,
    sacreBLEU signature, and the reference length of every sentence (BLEU's statistics hold it); and their models
    must have trained on the same text (:func:`_check_same_segmentation`)."""
    _check_same_segmentation(a, b)
    ta, tb = a["tests"][test], b["tests"][test]
    digests = ta.get("reference_sha256"), tb.get("reference_sha256")
    if (digests[0] is None) != (digests[1] is None):  # one older result: its references cannot be told apart
        has, lacks = (a, b) if digests[0] is not None else (b, a)
        raise InputError(lacks["_path"], None, f"test set {quoted(test)} records no reference_sha256, "
                         f"{quoted(has['_path'])} does: cannot tell whether they scored the same references "
                         "(evaluate and record it again, or drop the digest from neither)")
    if all(isinstance(d, str) for d in digests) and digests[0] != digests[1]:
        raise InputError(a["_path"], None, f"test set {quoted(test)} was scored against references of the digest "
                         f"{quoted(digests[0][:16])}..., {quoted(b['_path'])} against {quoted(digests[1][:16])}...: "
                         "not the same references, so they cannot be paired")
    if ta["sentences"] != tb["sentences"]:
        raise InputError(a["_path"], None, f"test set {quoted(test)} has {ta['sentences']} sentences, "
                         f"{tb['sentences']} in {quoted(b['_path'])}: not the same test set")
    searches = ta.get("search"), tb.get("search")
    if all(isinstance(x, dict) for x in searches) and searches[0] != searches[1]:
        raise InputError(a["_path"], None, f"test set {quoted(test)} was decoded with {quoted(searches[0], 120)}, "
                         f"{quoted(b['_path'])} with {quoted(searches[1], 120)}: scores of other searches cannot be "
                         "compared (decode both alike)")
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


def other_budget(results: List[Dict], system: str, baseline: str) -> Optional[str]:
    """``"not compared: trained under other update caps (768 against 2000)"`` when the two models' runs had other
    ``--max-update`` caps (the protocol gives every model of a comparison one budget), else None."""
    caps = [sorted({r["max_update"] for r in results if r["model"] == m}) for m in (system, baseline)]
    if caps[0] and caps[1] and caps[0] != caps[1]:
        shown = ["/".join(map(str, c)) for c in caps]
        return f"not compared: trained under other update caps ({shown[0]} against {shown[1]})"
    return None


def _unpaired(results: List[Dict], system: str, baseline: str, test: str) -> str:
    """`` (seeds 3, 4 without a baseline run)``: the system's seeds the paired tests leave out."""
    have = {r["seed"] for r in results if r["model"] == baseline and test in r["tests"]}
    alone = sorted(r["seed"] for r in results if r["model"] == system and test in r["tests"] and r["seed"] not in have)
    if not alone:
        return ""
    seeds = f"seed{'s' if len(alone) > 1 else ''} {', '.join(map(str, alone))}"
    return f" ({seeds} without a {md_code(baseline)} run: not tested)"


def p_text(p: float, alpha: float) -> str:
    """``p`` with 3 decimals, more where rounding would put it on the other side of ``alpha`` (0.001998 at 0.002)."""
    digits = 3
    while digits < 8 and (round(p, digits) < alpha) != (p < alpha):
        digits += 1
    return f"{p:.{digits}f}"


def _verdict(rows: List[Dict], alpha: float) -> str:
    if not rows:
        return "-"
    better = sum(1 for r in rows if r["p_value"] < alpha and r["difference"] > 0)
    worse = sum(1 for r in rows if r["p_value"] < alpha and r["difference"] < 0)
    diffs = ", ".join(f"{r['difference']:+.2f} (p={p_text(r['p_value'], alpha)})" for r in rows)
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
    compared = set()  # the --compare pairs that got a line
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
            verdict = "(baseline)" if m == baseline else other_budget(here, m, baseline) or \
                _verdict(compare_seeds(here, m, baseline, test), alpha) + _unpaired(here, m, baseline, test)
            out.append(md_row([md_code(m), ",".join(str(r["seed"]) for r in runs), md_text(training),
                               _mean_std(bleu), _mean_std(chrf), verdict]))
        for system, base in compares:
            rows = [] if other_budget(here, system, base) else compare_seeds(here, system, base, test)
            if other_budget(here, system, base) and any(r["model"] == system for r in here):
                compared.add((system, base))
                out.append(f"\n{md_code(system)} against {md_code(base)}: {other_budget(here, system, base)}")
            if rows:
                compared.add((system, base))
                out.append(f"\n{md_code(system)} against {md_code(base)} (same seeds): {_verdict(rows, alpha)}"
                           + _unpaired(here, system, base, test))
        out.append("")
    for system, base in compares:
        if (system, base) not in compared:
            out.append(f"{md_code(system)} against {md_code(base)}: not compared, no test set that both decoded "
                       "with a seed in common.\n")
    out.append(f"Mean ± standard deviation over seeds. Significance: sacreBLEU's paired bootstrap "
               f"({DEFAULT_SAMPLES} resamples, seed {DEFAULT_SEED}), p < {alpha}, each seed against the same seed "
               "of the other model; a zero difference counts as p = 1.")
    if command:
        out.append(f"\nRebuilt from {len(results)} result file{'s' if len(results) != 1 else ''} by {md_code(command)}.")
    return "\n".join(out) + "\n"
