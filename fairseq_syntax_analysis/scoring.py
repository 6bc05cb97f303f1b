"""Corpus scores from per-sentence sufficient statistics, and sacreBLEU's paired bootstrap on them.

Everything here works on the statistics sacreBLEU extracts per sentence (BLEU: hypothesis and
reference length, n-gram matches and totals; chrF: character and word n-gram counts), so a
score, a bucket's score and a paired test can be recomputed later from a stored result without
the references (``fairseq-syntax-report``). The paired test is sacreBLEU's procedure (the Moses
``bootstrap-hypothesis-difference-significance.pl``: the same resampled indices from the seed, the
same test statistic, p-value and 95% interval), written here on the stored statistics, since
sacreBLEU's public ``PairedTest`` needs the texts and references; ``tests/test_evaluate.py``
checks that both give the same numbers.

sacreBLEU counts resampled differences strictly larger than the observed one and adds one to
both counts, so a system identical to its baseline gets ``p = 1 / (n + 1)``, which reads as
"significant". We report a zero observed difference as ``p = 1`` (:func:`paired_bootstrap`
says so in its result).
"""

import functools
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric

__all__ = [
    "METRICS",
    "make_metric",
    "sentence_statistics",
    "corpus_score",
    "statistics_width",
    "signature",
    "PairedResult",
    "paired_bootstrap",
    "DEFAULT_SAMPLES",
    "DEFAULT_SEED",
]

#: metric names as sacreBLEU reports them -> constructor
METRICS = {"BLEU": BLEU, "chrF2": CHRF}
#: sacreBLEU's defaults for the paired bootstrap
DEFAULT_SAMPLES = 1000
DEFAULT_SEED = 12345


def make_metric(name: str) -> Metric:
    """sacreBLEU's metric of that name with its default settings (``BLEU``, ``chrF2``)."""
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; choose from {sorted(METRICS)}")
    return METRICS[name]()


def sentence_statistics(metric: Metric, hypotheses: Sequence[str], references: Sequence[str]) -> List[List[float]]:
    """sacreBLEU's sufficient statistics, one row per sentence (one reference each)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    return [list(map(float, row)) for row in metric._extract_corpus_statistics(list(hypotheses), [list(references)])]


@functools.lru_cache(maxsize=None)
def statistics_width(name: str) -> int:
    """How many numbers sacreBLEU's sufficient statistics of metric ``name`` hold per sentence."""
    return len(sentence_statistics(make_metric(name), ["a"], ["a"])[0])


def corpus_score(metric: Metric, stats: Sequence[Sequence[float]]) -> float:
    """The corpus score of the sentences whose statistics are ``stats`` (0 for none)."""
    if len(stats) == 0:
        return 0.0
    return float(metric._compute_score_from_stats(np.asarray(stats, dtype="float64").sum(0)).score)


def signature(metric: Metric, samples: Optional[int] = None, seed: Optional[int] = None) -> str:
    """sacreBLEU's signature string, with the bootstrap's ``bs`` and ``seed`` when given."""
    sig = metric.get_signature()
    if samples is not None:
        sig.update("bs", samples)
        sig.update("seed", str(seed).lower())
    return sig.format()


class _Result:
    def __init__(self, score: float, p_value: float, mean: float, ci: float) -> None:
        self.score, self.p_value, self.mean, self.ci = score, p_value, mean, ci


def _interval(scores: np.ndarray) -> "tuple[float, float]":
    """The mean of the bootstrap scores and half the width of their central 95% (sacreBLEU's reading)."""
    ordered = np.sort(scores)
    lower = len(ordered) // 40
    return float(ordered.mean()), float(0.5 * (ordered[len(ordered) - lower - 1] - ordered[lower]))


@dataclass
class PairedResult:
    """A system against its baseline: scores, sacreBLEU's p-value, the system's bootstrap mean and 95% CI."""

    metric: str
    baseline: float
    system: float
    difference: float
    p_value: float
    mean: float
    ci: float
    samples: int
    seed: int
    note: str = ""

    def significant(self, alpha: float = 0.05) -> bool:
        return self.p_value < alpha

    def as_dict(self) -> Dict:
        return dict(self.__dict__)


def paired_bootstrap(
    metric_name: str,
    baseline_stats: Sequence[Sequence[float]],
    system_stats: Sequence[Sequence[float]],
    samples: int = DEFAULT_SAMPLES,
    seed: int = DEFAULT_SEED,
) -> PairedResult:
    """sacreBLEU's paired bootstrap resampling of a system against a baseline, from their statistics.

    Both lists hold one row per sentence of the same test set, in the same order. The resampled
    sentence indices, the p-value and the confidence interval are sacreBLEU's
    (its procedure, with ``seed``), so the result equals ``sacrebleu -paired-bs`` on the
    texts. A zero observed difference is reported as ``p = 1`` (see the module docstring).
    """
    if len(baseline_stats) != len(system_stats):
        raise ValueError(
            f"the baseline has {len(baseline_stats)} sentences and the system {len(system_stats)}: "
            "a paired test needs the same test set"
        )
    if len(baseline_stats) == 0:
        raise ValueError("a paired test needs at least one sentence")
    metric = make_metric(metric_name)
    bl = np.asarray(baseline_stats, dtype="float32")  # as sacreBLEU resamples them
    sy = np.asarray(system_stats, dtype="float32")
    bl_score = corpus_score(metric, baseline_stats)
    sys_score = corpus_score(metric, system_stats)
    rows = np.random.default_rng(seed).choice(len(bl), size=(samples, len(bl)), replace=True)
    score = metric._compute_score_from_stats
    scores_bl = np.array([score(bl[r].sum(0)).score for r in rows])
    scores_sys = np.array([score(sy[r].sum(0)).score for r in rows])
    mean, ci = _interval(scores_sys)
    # the test statistic: |system - baseline| per resample, centred on its mean, against the observed one
    differences = np.abs(scores_sys - scores_bl)
    centred = differences - differences.mean()
    p_value = (int(np.sum(centred > abs(bl_score - sys_score))) + 1) / (samples + 1)
    res = _Result(sys_score, p_value, mean, ci)
    difference = float(res.score - bl_score)
    p, note = float(res.p_value), ""
    if difference == 0.0:
        p, note = 1.0, f"observed difference 0: p = 1 (sacreBLEU reports {res.p_value:.4f} = 1/(n+1))"
    return PairedResult(metric_name, float(bl_score), float(res.score), difference, p, float(res.mean),
                        float(res.ci), samples, seed, note)
