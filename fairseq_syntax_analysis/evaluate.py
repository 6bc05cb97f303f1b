"""``fairseq-syntax-evaluate``: scores, paired significance and scores by source length and tree depth.

    fairseq-syntax-evaluate --reference raw/test.de --baseline transformer=gen.transformer.txt \\
        --system dep_rel=gen.dep_rel.txt --system rel=gen.rel.txt \\
        --data-bin data-bin --split test --json eval.json --plot eval.png

For every system: sacreBLEU's BLEU and chrF2 with their signatures, and sacreBLEU's paired
bootstrap resampling against the baseline (p-value, the system's bootstrap mean and 95%
confidence interval; a zero observed difference is reported as p = 1, see
:mod:`fairseq_syntax_analysis.scoring`). With ``--data-bin`` (or ``--source``), BLEU per
source-length bucket and per source tree-depth bucket (:mod:`fairseq_syntax_analysis.buckets`),
printed as tables, written to ``--json`` and drawn to ``--plot`` as the BLEU difference to the
baseline per bucket (Xie et al. 2021, Figure 2). Translations are plain text (one per line) or
``fairseq-generate`` output (:mod:`fairseq_syntax_analysis.hypotheses`). With ``--ribes``, also
RIBES (Isozaki et al. 2010; Eriguchi et al. 2016, section 4.4) per system, x 100: NLTK's, alpha 0.25,
beta 0.10, on the words BLEU counts (sacreBLEU's 13a tokens), a corpus score without a paired
test (:mod:`fairseq_syntax.scoring.ribes`).
"""

import argparse
import json
import os
import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_syntax_core.errors import InputError, UsageError
from fairseq_syntax_core.oneline import quoted
from fairseq_syntax_core.argtypes import Once, refuse_repeats
from fairseq_syntax_core.fileio import atomic_write_all, check_distinct_outputs, check_output_path, \
    check_outside, lines_sha256, read_lines

from . import buckets as bk
from .commands import figure_writer, quiet_logging, run_command, text_writer
from .hypotheses import MAX_LINE_CHARS, decoding_of, is_generate_output, read_translations
from .rendering import legend, one_line, plot_text
from .scoring import DEFAULT_SAMPLES, DEFAULT_SEED, METRICS, corpus_score, make_metric, paired_bootstrap, \
    sentence_statistics, signature

PROG = "fairseq-syntax-evaluate"
#: an upper bound for --bootstrap-samples (memory grows with samples x sentences)
MAX_SAMPLES = 100_000
#: sacreBLEU's paired bootstrap holds about this many bytes per resample and sentence
BOOTSTRAP_BYTES = 80
#: the most memory the paired bootstrap may take (--bootstrap-samples x sentences is checked against it)
MAX_BOOTSTRAP_BYTES = 4 * 2**30
#: the score's name in tables and JSON (``--ribes``)
RIBES = "RIBES"

def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reference", "-r", required=True, action=Once, help="reference translations, one per line (detokenized)")
    p.add_argument("--baseline", "-b", required=True, action=Once, metavar="[NAME=]FILE", help="the baseline's translations")
    p.add_argument("--system", "-s", action="append", default=[], metavar="[NAME=]FILE",
                   help="a system's translations (repeatable)")
    p.add_argument("--target-lang", "-t", default=None,
                   help="language of the translations, for Moses detokenization of fairseq-generate output "
                        "(default: the data-bin's target language, else en)")
    p.add_argument("--no-detokenize", action="store_true",
                   help="take fairseq-generate output as it is (only BPE joints are removed)")
    p.add_argument("--ribes", action="store_true",
                   help="also RIBES x 100 per system (Isozaki et al. 2010, Eriguchi et al. (2016)'s metric; NLTK's, alpha 0.25, "
                        "beta 0.10) on the words BLEU counts (sacreBLEU's 13a tokens); a corpus score, no paired test")
    src = p.add_argument_group("source buckets")
    src.add_argument("--data-bin", default=None, action=Once, help="data-bin whose parse of --split gives lengths and depths")
    src.add_argument("--split", default="test", help="split of --data-bin the translations are of (default: test)")
    src.add_argument("--source-lang", default=None, help="source language of --data-bin (default: its syntax.json)")
    src.add_argument("--source", default=None, action=Once, help="source text instead of --data-bin: lengths only, no depths")
    src.add_argument("--length-buckets", default="auto", metavar="EDGES",
                     help="source-length bucket edges in words, e.g. 20,30,40,50 (Xie et al. 2021, Fig. 2); "
                          "auto: the quintiles of the test set (default)")
    src.add_argument("--depth-buckets", default="auto", metavar="EDGES", help="tree-depth bucket edges, or auto")
    sig = p.add_argument_group("significance")
    sig.add_argument("--bootstrap-samples", type=int, default=DEFAULT_SAMPLES, help="resamples (sacreBLEU: 1000)")
    sig.add_argument("--seed", type=int, default=DEFAULT_SEED, help="resampling seed (sacreBLEU: 12345)")
    sig.add_argument("--alpha", type=float, default=0.05, help="significance level of the table's verdict")
    out = p.add_argument_group("output")
    out.add_argument("--json", default=None, action=Once, help="write everything to this JSON file")
    out.add_argument("--statistics", action="store_true",
                     help="also keep every system's translations and per-sentence sufficient statistics in --json "
                          "(what fairseq-syntax-report needs to recompute paired tests without references)")
    out.add_argument("--plot", default=None, action=Once, help="write the per-bucket BLEU differences to this PNG")
    out.add_argument("--quiet", action="store_true", help="no progress bars")
    return refuse_repeats(p)


def named_file(spec: str) -> Tuple[str, str]:
    """``NAME=FILE`` or ``FILE`` (named after the file)."""
    name, sep, path = spec.partition("=")
    if sep and name and not os.path.exists(spec):
        return name, path
    return os.path.splitext(os.path.basename(spec))[0], spec


def _progress(items, desc: str, quiet: bool):
    if quiet:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, file=sys.stderr, leave=False)


def evaluate(
    references: List[str],
    systems: List[Tuple[str, str, List[str]]],
    profile: Optional[bk.SourceProfile],
    length_edges: str = "auto",
    depth_edges: str = "auto",
    samples: int = DEFAULT_SAMPLES,
    seed: int = DEFAULT_SEED,
    alpha: float = 0.05,
    quiet: bool = True,
    ribes: bool = False,
) -> Dict:
    """Everything the command reports, as one JSON-ready dict (``systems[0]`` is the baseline)."""
    n = len(references)
    for name, path, hyps in systems:
        if len(hyps) != n:
            raise InputError(path, None, f"has {len(hyps)} translations, the reference has {n} lines "
                             "(a different test set, or an interrupted run)")
    if profile is not None and len(profile.lengths) != n:
        raise InputError(profile.origin, None, f"has {len(profile.lengths)} sentences, the reference has {n} lines")
    metrics = {name: make_metric(name) for name in METRICS}
    stats: Dict[str, Dict[str, List[List[float]]]] = {}
    for name, _path, hyps in _progress(systems, "statistics", quiet):
        stats[name] = {m: sentence_statistics(metric, hyps, references) for m, metric in metrics.items()}
    baseline = systems[0][0]
    report: Dict = {
        "sentences": n, "baseline": baseline, "alpha": alpha,
        "signatures": {m: signature(metric) for m, metric in metrics.items()},
        "paired_signatures": {m: signature(metric, samples, seed) for m, metric in metrics.items()},
        "systems": [],
    }
    if ribes:
        report["signatures"][RIBES] = ribes_signature()
    for name, path, hyps in _progress(systems, "paired bootstrap", quiet):
        entry: Dict = {"name": name, "file": path,
                       "scores": {m: corpus_score(metrics[m], stats[name][m]) for m in metrics}}
        if ribes:
            entry["scores"][RIBES] = ribes_score(hyps, references)
        if name != baseline:
            entry["paired"] = {m: paired_bootstrap(m, stats[baseline][m], stats[name][m], samples, seed).as_dict()
                               for m in metrics}
            for m in metrics:
                entry["paired"][m]["significant"] = entry["paired"][m]["p_value"] < alpha
        report["systems"].append(entry)
    if profile is not None:
        report["source"] = profile.origin
        groups = {"length": (profile.lengths, length_edges, "source length (words)")}
        if profile.depths is not None:
            groups["depth"] = (profile.depths, depth_edges, "source tree depth (arcs)")
        report["buckets"] = {}
        for key, (values, spec, title) in groups.items():
            try:
                edges = bk.parse_edges(spec, values)
            except ValueError as err:
                raise UsageError(f"--{key}-buckets: {err}") from None
            which = bk.bucket_of(values, edges)
            names = bk.bucket_names(edges)
            scores = {}
            for name, _p, _h in systems:
                rows = np.asarray(stats[name]["BLEU"])
                # an empty bucket has no score (null in the JSON, "n/a" in the table, a gap in the plot)
                scores[name] = [corpus_score(metrics["BLEU"], rows[which == b]) if (which == b).any() else None
                                for b in range(len(names))]
            report["buckets"][key] = {
                "title": title, "edges": edges, "names": names,
                "sentences": [int((which == b).sum()) for b in range(len(names))], "BLEU": scores,
            }
    report["_statistics"] = stats
    return report


def ribes_signature() -> str:
    import nltk

    from fairseq_syntax.scoring.ribes import ALPHA, BETA

    return f"nltk:{nltk.__version__}|alpha:{ALPHA}|beta:{BETA}|tok:13a|x100|no paired test"


def ribes_score(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus RIBES x 100 on sacreBLEU's 13a tokens (the words BLEU counts)."""
    from fairseq_syntax.scoring.ribes import corpus_ribes

    tokenize = make_metric("BLEU").tokenizer
    return 100.0 * corpus_ribes([tokenize(r).split() for r in references], [tokenize(h).split() for h in hypotheses])


def format_tables(report: Dict) -> str:
    """The report as plain-text tables."""
    lines = []
    metric_names = list(METRICS)
    extra = [RIBES] if report["systems"] and RIBES in report["systems"][0]["scores"] else []
    head = ["system"] + metric_names + extra + [f"{m} diff (p, 95% CI)" for m in metric_names]
    rows = []
    for s in report["systems"]:
        row = [s["name"]] + [f"{s['scores'][m]:.2f}" for m in metric_names + extra]
        if "paired" not in s:
            row += ["(baseline)"] * len(metric_names)
        else:
            for m in metric_names:
                r = s["paired"][m]
                star = "*" if r["significant"] else " "
                row.append(f"{r['difference']:+.2f}{star} (p={r['p_value']:.4f}, {r['mean']:.2f} +- {r['ci']:.2f})")
        rows.append(row)
    lines += _table(head, rows)
    lines.append(f"* p < {report['alpha']} (paired bootstrap, sacreBLEU); a zero difference is reported as p = 1")
    for m, sig in report["paired_signatures"].items():
        lines.append(f"{m}: {sig}")
    if extra:
        lines.append(f"{RIBES}: {report['signatures'][RIBES]}")
    for key, b in report.get("buckets", {}).items():
        lines.append("")
        lines.append(f"BLEU by {b['title']} ({one_line(report['source'])})")
        head = ["bucket", "sentences"] + [s["name"] for s in report["systems"]]
        rows = []
        for i, name in enumerate(b["names"]):
            base = b["BLEU"][report["baseline"]][i]
            row = [name, str(b["sentences"][i])]
            for s in report["systems"]:
                v = b["BLEU"][s["name"]][i]
                if b["sentences"][i] == 0:
                    row.append("n/a")
                else:
                    row.append(f"{v:.2f}" if s["name"] == report["baseline"] else f"{v:.2f} ({v - base:+.2f})")
            rows.append(row)
        lines += _table(head, rows)
    return "\n".join(lines)


def _table(head: List[str], rows: List[List[str]]) -> List[str]:
    head, rows = [one_line(c) for c in head], [[one_line(c) for c in r] for r in rows]  # names on one line
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*head), fmt.format(*["-" * w for w in widths])] + [fmt.format(*r) for r in rows]


def plot_buckets(report: Dict, path: str) -> None:
    """The BLEU difference to the baseline per bucket (Xie et al. 2021, Fig. 2), written to ``path`` (PNG)."""
    atomic_write_all([(path, figure_writer(bucket_figure(report)))])


def bucket_figure(report: Dict):
    """The figure of the BLEU difference to the baseline per source-length and per tree-depth bucket (Xie et al. 2021, Fig. 2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = report.get("buckets", {})
    fig, axes = plt.subplots(1, max(1, len(groups)), figsize=(5 * max(1, len(groups)), 3.6), squeeze=False)
    base = report["baseline"]
    for ax, (key, b) in zip(axes[0], groups.items()):
        xs = np.arange(len(b["names"]))
        lines = []
        for s in report["systems"][1:]:
            diff = [v - w if c else float("nan")  # an empty bucket: a gap
                    for v, w, c in zip(b["BLEU"][s["name"]], b["BLEU"][base], b["sentences"])]
            lines += ax.plot(xs, diff, "o-")
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{n}\n({c})" for n, c in zip(b["names"], b["sentences"])], fontsize=8)
        ax.set_xlabel(f"{b['title']} (sentences)")
        ax.set_ylabel(f"BLEU - BLEU({plot_text(base)})")
        legend(ax, lines, [s["name"] for s in report["systems"][1:]], loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    return run_command(PROG, _main, argv)


def _main(argv: Optional[Sequence[str]] = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    quiet_logging()
    if not 1 <= args.bootstrap_samples <= MAX_SAMPLES:
        parser.error(f"--bootstrap-samples must be in 1..{MAX_SAMPLES} (sacreBLEU's default: 1000)")
    if args.seed < 0:
        parser.error("--seed must be a non-negative integer")
    if not 0.0 < args.alpha < 1.0:
        parser.error("--alpha must be a significance level in (0, 1), e.g. 0.05")
    if args.data_bin and args.source:
        parser.error("give --data-bin or --source, not both")
    if args.statistics and not args.json:
        parser.error("--statistics keeps the statistics in --json: give --json too")
    if args.source and args.depth_buckets != "auto":
        parser.error("--depth-buckets needs the parse of --data-bin; --source gives lengths only")
    for flag, spec in (("--length-buckets", args.length_buckets), ("--depth-buckets", args.depth_buckets)):
        if spec != "auto":
            try:
                bk.parse_edges(spec, np.zeros(0))
            except ValueError as err:
                parser.error(f"{flag}: {err}")
    if args.ribes:
        from fairseq_syntax.scoring.ribes import check_nltk

        check_nltk()  # an NLTK too old for RIBES: said before any work
    if args.source_lang and not args.target_lang:
        parser.error("--source-lang needs --target-lang (or give neither: the data-bin's syntax.json names them)")
    specs = [named_file(args.baseline)] + [named_file(s) for s in args.system]
    names = [n for n, _ in specs]
    if len(set(names)) != len(names):
        parser.error(f"system names must differ, got {names}: name them NAME=FILE")
    inputs = [args.reference] + [p for _, p in specs] + ([args.source] if args.source else [])
    for flag, out in (("--json", args.json), ("--plot", args.plot)):
        if out is not None:
            check_output_path(out, inputs, flag)
            if args.data_bin:
                check_outside(out, args.data_bin, flag, "the data-bin")
    check_distinct_outputs([("--json", args.json), ("--plot", args.plot)])
    if args.plot and not (args.data_bin or args.source):
        parser.error("--plot draws the per-bucket scores: give --data-bin (or --source)")
    if args.plot and not args.system:
        parser.error("--plot draws each --system against the baseline: give at least one --system")
    references = read_lines(args.reference, "reference file", MAX_LINE_CHARS)
    if not references:
        raise InputError(args.reference, None, "the reference file is empty: expected one reference per line")
    if is_generate_output(references):  # its H- lines would be scored as reference text
        first = next(k for k, line in enumerate(references, start=1) if line.startswith("H-"))
        raise InputError(args.reference, first, "looks like fairseq-generate output (H-<id> lines): expected the raw "
                         "reference translations, one per line (the text fairseq-syntax-preprocess read)")
    need = BOOTSTRAP_BYTES * args.bootstrap_samples * len(references)
    if args.system and need > MAX_BOOTSTRAP_BYTES:  # the paired bootstrap runs only against a system
        most = max(1, MAX_BOOTSTRAP_BYTES // (BOOTSTRAP_BYTES * len(references)))
        parser.error(f"--bootstrap-samples {args.bootstrap_samples} on {len(references)} sentences would take about "
                     f"{need / 2**30:.1f} GiB: at most {most} here (sacreBLEU's default: 1000)")
    profile = None
    target_lang = args.target_lang
    if args.data_bin:
        profile = bk.profile_from_data_bin(args.data_bin, args.split, args.source_lang,
                                           None if args.source_lang is None else args.target_lang)
        if target_lang is None:  # the data-bin's, its names checked (the task read it just now)
            from fairseq_syntax.data.data_bin_checks import read_metadata
            from fairseq_syntax_core.databin import METADATA_FILE

            target_lang = read_metadata(os.path.join(args.data_bin, METADATA_FILE)).get("target_lang")
    elif args.source:
        profile = bk.profile_from_text(read_lines(args.source, "source file"), args.source)
    sources = profile.texts if profile is not None else None  # a generate log's S- lines must be these
    origin = profile.origin if profile is not None else ""
    systems = [(n, p, read_translations(p, target_lang, not args.no_detokenize, references, sources, origin))
               for n, p in specs]
    decoded = {n: decoding_of(p) for n, p in specs}  # what each log says it decoded (this plugin's logs)
    for n, p in specs:
        check_decoded_seed(decoded[n], p, n)
    if args.data_bin:
        for n, p in specs:
            check_decoded_data_bin(decoded[n], p, args.data_bin, profile.perturbation, args.split)
    report = evaluate(references, systems, profile, args.length_buckets, args.depth_buckets,
                      args.bootstrap_samples, args.seed, args.alpha, quiet=args.quiet, ribes=args.ribes)
    for entry in report["systems"]:
        if decoded.get(entry["name"]) is not None:
            entry["decoded"] = decoded[entry["name"]]
    report["reference"] = args.reference
    report["reference_sha256"] = lines_sha256(references)  # the lines scored, however the file was typed or saved
    if profile is not None and profile.perturbation is not None:  # report noise checks its points' p against it
        report["perturbation"] = profile.perturbation
    stats = report.pop("_statistics")
    print(format_tables(report))
    outputs = []
    if args.json:
        if args.statistics:
            report["statistics"] = stats
            report["hypotheses"] = {name: hyps for name, _p, hyps in systems}
        outputs.append((args.json, text_writer([json.dumps(report, indent=1) + "\n"])))
    if args.plot:
        outputs.append((args.plot, figure_writer(bucket_figure(report))))
    atomic_write_all(outputs)  # together: an interrupt leaves both old files or both new ones
    for path in (args.json, args.plot):
        if path:
            print(f"wrote {one_line(path)}", file=sys.stderr)
    return 0


def check_decoded_seed(record: Optional[Dict], log: str, name: str) -> None:
    """A system named ``MODEL.seedN`` must be the translations of a seed-N run when the log records its run's seed
    (its ``fairseq-syntax-decoded`` line): the name is what ``report noise`` and readers take the seed from."""
    match = re.fullmatch(r".*\.seed(\d+)", name)
    seeds = {c.get("seed") for c in (record or {}).get("checkpoints", [])}
    if match is not None and len(seeds) > 1:
        raise InputError(log, None, f"was decoded by an ensemble of checkpoints of {len(seeds)} seeds (its "
                         f"fairseq-syntax-decoded line), but the system is named {quoted(name, 60)}, one seed's")
    if match is None or len(seeds) != 1 or not isinstance(next(iter(seeds)), int):
        return
    (seed,) = seeds
    if int(match.group(1)) != seed:
        raise InputError(log, None, f"was decoded by a checkpoint of a seed-{quoted(seed, 20)} run (its fairseq-syntax-decoded "
                         f"line), but the system is named {quoted(name, 60)}: name it after the seed it is")


def check_decoded_data_bin(record: Optional[Dict], log: str, data_bin: str, perturbation, split: str) -> None:
    """The split and the parse perturbation (each round's p and seed) a log was decoded on (its
    ``fairseq-syntax-decoded`` line) must be those of ``--split`` in ``--data-bin``: perturbing changes only the
    parses, so the S- lines would match either way."""
    from fairseq_syntax.data.data_bin_checks import read_metadata
    from fairseq_syntax_core.databin import METADATA_FILE, perturbation_rounds

    if record is None:
        return
    search = record.get("search") if isinstance(record.get("search"), dict) else {}
    subset = search.get("gen_subset") if isinstance(search.get("gen_subset"), str) else None
    if subset is not None and subset != split:
        raise InputError(log, None, f"was decoded on the split {quoted(subset, 40)} (its fairseq-syntax-decoded line), "
                         f"not the --split {one_line(split)} evaluated: give the split it decoded")
    decoded = bk.recorded_perturbation({"perturbation": record.get("perturbation")}, log, subset)
    given = read_metadata(os.path.join(data_bin, METADATA_FILE)).get("perturbation")
    if decoded != perturbation or perturbation_rounds(record.get("perturbation"), subset) != \
            perturbation_rounds(given, split):
        def shown(rounds):
            return " then ".join(f"p = {quoted(p, 20)} seed {quoted(s, 20)}" for p, s in rounds) or "none"
        raise InputError(log, None, f"was decoded on the data-bin {quoted(record.get('data_bin'), 80)}, its parses "
                         f"perturbed with p = {decoded} ({shown(perturbation_rounds(record.get('perturbation'), subset))}"
                         f"; its fairseq-syntax-decoded line); --data-bin {one_line(data_bin)} is perturbed with p = "
                         f"{perturbation} ({shown(perturbation_rounds(given, split))}): give the data-bin it decoded")


if __name__ == "__main__":
    sys.exit(cli_main())
