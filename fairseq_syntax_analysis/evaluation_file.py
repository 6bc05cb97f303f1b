"""The ``fairseq-syntax-evaluate --statistics`` JSON that ``fairseq-syntax-report record`` reads: one system,
its per-sentence statistics and hypotheses, checked before a result is built from it."""

from typing import Dict

from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.jsonfile import read_json_file
from fairseq_syntax_core.oneline import quoted

from .result_format import METRIC_KEYS, statistics_rows

__all__ = ["read_evaluation", "same_reference"]


def same_reference(a: Dict, b: Dict) -> bool:
    """Whether two evaluations score one reference: the same text (the digest evaluate records), else, for
    evaluations without it, the same path as typed and the same number of sentences."""
    if isinstance(a.get("reference_sha256"), str) and isinstance(b.get("reference_sha256"), str):
        return a["reference_sha256"] == b["reference_sha256"]
    if isinstance(a.get("reference_sha256"), str) or isinstance(b.get("reference_sha256"), str):
        return False  # one evaluation older than the digest: not known to be one reference
    return (a.get("reference"), a.get("sentences")) == (b.get("reference"), b.get("sentences"))


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
    if not all(statistics_rows(stats[m], m) and len(stats[m]) == ev["sentences"] for m in METRIC_KEYS):
        raise InputError(path, None, "is not a fairseq-syntax-evaluate JSON: its per-sentence statistics are not "
                         f"one row of counts per sentence for {' and '.join(METRIC_KEYS)} (edited?)")
    hyps = ev.get("hypotheses", {}).get(name)
    if hyps is not None and not (isinstance(hyps, list) and len(hyps) == ev["sentences"]
                                 and all(isinstance(h, str) and "\n" not in h for h in hyps)):
        raise InputError(path, None, "is not a fairseq-syntax-evaluate JSON: its hypotheses are not one line per "
                         "sentence (edited?)")
    p = ev.get("perturbation", 0)
    if p != 0:  # evaluate records the p of the --data-bin decoded: a result is the test set's score as parsed
        raise InputError(path, None, f"evaluates translations of a data-bin whose parses were perturbed (perturbation "
                         f"{quoted(p, 40)}): a result scores the test set as parsed; noise goes to "
                         "fairseq-syntax-report noise")
    return ev


# --------------------------------------------------------------------------------- CLI
