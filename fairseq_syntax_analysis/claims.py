"""``fairseq-syntax-report claims``: does each paper's direction of effect hold here?

A claim is a paper's statement that its model translates better than a baseline. The command reads the
result JSON of one folder per claim (``fairseq-syntax-report record``), pairs the model's seeds with the
baseline's (sacreBLEU's paired bootstrap, as ``table`` does) and writes one Markdown row per claim and test
set: BLEU mean ± sd of both, the difference and p of every seed, and the verdict:

* **holds**: better in more than half of the paired seeds, significantly, and worse in none;
* **reversed**: significantly worse in more than half, better in none;
* **same direction, not significant**: the mean paired difference is positive, but not as above;
* **not reproduced**: the mean paired difference is zero or negative.

    fairseq-syntax-report claims \\
        --claim "Omote et al. (2019)" examples/dep_rel/results/multi30k transformer_dep_rel transformer_rel \\
        --claim "Eriguchi et al. (2016)" examples/tree2seq/results/multi30k tree2seq lstm --markdown claims.md
"""

import argparse
import os
import shlex
import statistics
from typing import Dict, List, Sequence, Tuple

from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.fileio import atomic_write_all, check_output_path
from fairseq_syntax_core.oneline import quoted

from .commands import text_writer
from .rendering import md_code, md_row, md_text
from .result_format import FORMAT, PROG, load_results
from .scoring import DEFAULT_SAMPLES, DEFAULT_SEED
from .table import _check_same_sentences, _mean_std, compare_seeds, other_budget, p_text

__all__ = ["Claim", "add_parser", "check_table_options", "claims_table", "direction", "main"]

#: (paper, results folder, model, baseline)
Claim = Tuple[str, str, str, str]


def add_parser(sub: "argparse._SubParsersAction") -> None:
    """The ``claims`` subcommand of ``fairseq-syntax-report``."""
    claims = sub.add_parser("claims", help="whether each paper's model beats its baseline here, seed by seed")
    claims.add_argument("--claim", action="append", nargs=4, required=True,
                        metavar=("PAPER", "FOLDER", "MODEL", "BASELINE"),
                        help="the paper (a label), the folder of result JSON, its model and the baseline it claims "
                             "to beat (repeatable; rows keep this order)")
    claims.add_argument("--alpha", type=float, default=0.05)
    claims.add_argument("--markdown", default=None, help="also write the table to this file")


def direction(rows: List[Dict], alpha: float) -> str:
    """The verdict on "MODEL beats BASELINE" from the per-seed paired tests (see the module's docstring)."""
    if not rows:
        return "not tested: no seed of both"
    better = sum(1 for r in rows if r["p_value"] < alpha and r["difference"] > 0)
    worse = sum(1 for r in rows if r["p_value"] < alpha and r["difference"] < 0)
    seeds = f"{len(rows)} seed{'s' if len(rows) > 1 else ''}"
    if better * 2 > len(rows) and not worse:
        return f"**holds** (significant in {better} of {seeds})"
    if worse * 2 > len(rows) and not better:
        return f"**reversed** (significantly worse in {worse} of {seeds})"
    mean = statistics.mean(r["difference"] for r in rows)
    if mean > 0:
        return f"same direction, not significant ({better} of {seeds} significant)"
    return f"not reproduced (mean difference {mean:+.2f} over {seeds})"


def _device_kind(result: Dict) -> str:
    """``cpu`` or ``cuda`` (the kind of device a result's ``device`` names, e.g. "cpu, 1 thread(s), 2 cores")."""
    device = str(result.get("device") or "unknown")
    return device.replace(":", ",").split(",")[0].strip().lower() or "unknown"


def _bleu(runs: List[Dict], test: str) -> str:
    return _mean_std([r["tests"][test]["scores"]["BLEU"] for r in runs])


def claims_table(claims: Sequence[Claim], loaded: Dict[str, List[Dict]], alpha: float = 0.05,
                 command: str = "") -> str:
    """The Markdown table of the claims; ``loaded`` holds each folder's results. Every name is escaped."""
    out = [md_row(["paper", "claim", "test set", "seeds", "BLEU", "baseline BLEU",
                   "difference per seed (paired p)", "direction here"]), "|---|---|---|---|---|---|---|---|"]
    files = set()
    for paper, folder, model, baseline in claims:
        results = [r for r in loaded[folder] if r["model"] in (model, baseline)]
        files.update(r["_path"] for r in results)
        tests = sorted({t for r in results if r["model"] == model for t in r["tests"]}
                       & {t for r in results if r["model"] == baseline for t in r["tests"]})
        if not tests:
            out.append(md_row([md_text(paper), f"{md_code(model)} > {md_code(baseline)}", "-", "-", "-", "-", "-",
                               "not tested: no test set with results of both"]))
        for test in tests:
            here = [r for r in results if test in r["tests"]]
            for r in here[1:]:  # every seed of both scored the same sentences (as ``table`` checks)
                _check_same_sentences(r, here[0], test)
            runs = {m: sorted((r for r in here if r["model"] == m), key=lambda r: r["seed"]) for m in (model, baseline)}
            budget = other_budget(here, model, baseline)
            rows = [] if budget else compare_seeds(here, model, baseline, test)
            seeds = " / ".join(",".join(str(r["seed"]) for r in runs[m]) for m in (model, baseline))
            paired = ", ".join(f"{r['difference']:+.2f} (p={p_text(r['p_value'], alpha)})" for r in rows) or "-"
            kinds = {m: sorted({_device_kind(r) for r in runs[m]}) for m in (model, baseline)}
            verdict = budget or direction(rows, alpha)
            if kinds[model] != kinds[baseline]:  # the protocol runs a model and its baseline on one kind of device
                verdict += (f"; runs on other devices ({md_text(', '.join(kinds[model]))} against "
                            f"{md_text(', '.join(kinds[baseline]))})")
            out.append(md_row([md_text(paper), f"{md_code(model)} > {md_code(baseline)}", md_text(test), seeds,
                               _bleu(runs[model], test), _bleu(runs[baseline], test), paired, verdict]))
    out.append("")
    out.append(f"Seeds: the model's / the baseline's. Paired p: sacreBLEU's paired bootstrap ({DEFAULT_SAMPLES} "
               f"resamples, seed {DEFAULT_SEED}) of each seed against the same seed of the baseline; significant at "
               f"p < {alpha}. A direction **holds** when more than half of the paired seeds are significantly better "
               "and none significantly worse.")
    if command:
        out.append(f"\nRebuilt from {len(files)} result file{'s' if len(files) != 1 else ''} by {md_code(command)}.")
    return "\n".join(out) + "\n"


def claims_command(args: argparse.Namespace) -> str:
    """The command line that rebuilds the table (``--markdown`` left out)."""
    argv = [PROG, "claims"]
    for claim in args.claim:
        argv += ["--claim", *claim]
    if args.alpha != 0.05:
        argv += ["--alpha", repr(args.alpha)]
    return shlex.join(argv)


def check_table_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``--alpha`` and ``--markdown`` of ``table`` and ``claims``: a level some p can be below, and a file name."""
    if not 0.0 < args.alpha < 1.0:
        parser.error("--alpha must be a significance level in (0, 1), e.g. 0.05")
    if args.alpha <= 1.0 / (DEFAULT_SAMPLES + 1):
        parser.error(f"--alpha {args.alpha:g}: no paired bootstrap of {DEFAULT_SAMPLES} resamples gives a p below "
                     f"1/{DEFAULT_SAMPLES + 1}, so nothing could be significant")
    if args.markdown is not None and not args.markdown.strip():
        parser.error("--markdown '': expected a file name")


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Check the claims, read their folders, print the table and write it to ``--markdown``."""
    check_table_options(args, parser)
    loaded: Dict[str, List[Dict]] = {}
    seen = set()
    for paper, folder, model, baseline in args.claim:
        if not paper.strip() or not model or not baseline or model == baseline:
            parser.error(f"--claim {quoted(paper, 40)} {quoted(folder, 80)} {quoted(model, 40)} {quoted(baseline, 40)}: expected PAPER FOLDER MODEL BASELINE, "
                         "a label and two different models")
        if (os.path.realpath(folder), model, baseline) in seen:  # ``dir`` and ``./dir/`` are one folder
            parser.error(f"--claim: {quoted(model)} > {quoted(baseline)} in {quoted(folder)} is given twice")
        seen.add((os.path.realpath(folder), model, baseline))
        if folder not in loaded:
            loaded[folder] = load_results([folder])
            if not loaded[folder]:
                raise InputError(folder, None, f"holds no {FORMAT} JSON results")
        models = {r["model"] for r in loaded[folder]}
        for name in (model, baseline):
            if name not in models:
                raise InputError(folder, None, f"holds no result of the model {quoted(name)} (--claim "
                                 f"{quoted(paper, 40)}; it holds {quoted(sorted(models), 200)})")
    if args.markdown:
        check_output_path(args.markdown, [r["_path"] for results in loaded.values() for r in results], "--markdown")
        for folder in loaded:
            inside = os.path.commonpath([os.path.realpath(args.markdown), os.path.realpath(folder)])
            if inside == os.path.realpath(folder) and args.markdown.lower().endswith(".json"):
                raise InputError(args.markdown, None, f"--markdown would replace a .json file under {folder}, "
                                 "where results are read: name it .md")
    text = claims_table(args.claim, loaded, args.alpha, claims_command(args))
    print(text)
    if args.markdown:
        atomic_write_all([(args.markdown, text_writer([text]))])
    return 0
