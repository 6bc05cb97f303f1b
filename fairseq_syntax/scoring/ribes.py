"""RIBES (Isozaki et al. 2010), Eriguchi et al. (2016)'s main metric (section 4.4), as fairseq's ``--scoring ribes``.

Per sentence, with the hypothesis and reference as word lists (Isozaki et al., section 3; the
official ``RIBES.py`` 1.03)::

    worder  the reference position of each hypothesis word that can be aligned one to one: a word
            found once in both, else the shortest n-gram around it (left or right context) that
            occurs once in both
    NKT     (tau + 1) / 2,  tau = 2 * #increasing pairs / #pairs - 1  over worder (Kendall's tau)
    P       len(worder) / len(hypothesis)                        (unigram precision)
    BP      min(1, exp(1 - len(reference) / len(hypothesis)))    (brevity penalty)
    RIBES   NKT * P ** alpha * BP ** beta,   alpha = 0.25, beta = 0.10

and the corpus score is the mean over sentences (one reference each). The alignment, tau and the
sentence score are NLTK's (``nltk.translate.ribes_score``), from release 3.10.4 on: earlier
releases count only the increasing pairs inside runs of consecutive ranks (``[0, 2]`` got
tau = -1; https://github.com/nltk/nltk/pull/3900), and :func:`check_nltk` refuses them. Edge cases, as the official
script unless said otherwise:

- an empty hypothesis scores 0;
- fewer than two aligned words score 0 (no rank correlation), except a one-word reference whose
  word the hypothesis holds once: NKT = 1, P = 1 / len(hypothesis) (official; NLTK gives 0);
- an empty reference scores 0 (the official script stops with an error; a scorer called at
  the end of a long decode should not).

Two known differences from the official script remain, both in NLTK's alignment of words that
occur several times: it tries the right context before the left one for each window size, and
its left windows stop one word short of the sentence start.

Scores are reported x 100, as BLEU is (the official script prints the fraction). Words are the
whitespace-split strings ``fairseq-generate`` hands its scorer: pass ``--post-process`` (BPE
joined) and no ``--tokenizer`` to score tokenized text, or ``--ribes-tokenizer`` (sacreBLEU's
tokenizers, as ``--scoring sacrebleu``) for detokenized text; ``--ribes-lowercase`` matches the
official script's default (it lowercases unless ``-c``).
"""

import math
from dataclasses import dataclass, field
from typing import Sequence

from fairseq.dataclass import FairseqDataclass
from fairseq.scoring import BaseScorer, register_scorer
from fairseq.scoring.tokenizer import EvaluationTokenizer

from fairseq_syntax_core.errors import UsageError

#: Isozaki et al.'s (and WAT's) hyperparameters
ALPHA, BETA = 0.25, 0.10
#: the first NLTK release whose Kendall's tau counts every increasing pair
NLTK_MIN_VERSION = "3.10.4"

_checked = False


def check_nltk() -> None:
    """NLTK's RIBES is importable and counts Kendall's tau over all pairs (``UsageError`` if not)."""
    global _checked
    if _checked:
        return
    try:
        import nltk
        from nltk.translate import ribes_score
    except ImportError:
        raise UsageError(f"RIBES needs NLTK >= {NLTK_MIN_VERSION}: pip install 'nltk>={NLTK_MIN_VERSION}'") from None
    # Isozaki et al.'s (H1, R1): ranks [2, 1, 0, 3] have 3 increasing pairs of 6, tau = 0
    if ribes_score.kendall_tau([2, 1, 0, 3]) != 0.5:
        raise UsageError(
            f"NLTK {nltk.__version__} computes RIBES's Kendall's tau from runs of consecutive ranks only "
            f"(fixed in {NLTK_MIN_VERSION}, https://github.com/nltk/nltk/pull/3900): pip install 'nltk>={NLTK_MIN_VERSION}'"
        )
    _checked = True


def check_exponents(alpha: float, beta: float) -> None:
    """``--ribes-alpha``/``--ribes-beta`` are finite exponents >= 0 (``UsageError`` naming the flag).

    A negative exponent divides by a zero precision or brevity penalty (a traceback at the end of
    a decode) and NaN makes NLTK's sentence score -1 (a corpus RIBES of -100): both refused.
    """
    for flag, value in (("--ribes-alpha", alpha), ("--ribes-beta", beta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 <= value < math.inf):
            raise UsageError(f"{flag} {value}: expected a finite exponent >= 0 (Isozaki et al.: alpha {ALPHA}, "
                             f"beta {BETA})")


def sentence_ribes(reference: Sequence[str], hypothesis: Sequence[str], alpha: float = ALPHA,
                   beta: float = BETA) -> float:
    """RIBES of one hypothesis against one reference (word lists), a fraction in [0, 1]."""
    check_nltk()
    check_exponents(alpha, beta)
    from nltk.translate import ribes_score

    reference, hypothesis = list(reference), list(hypothesis)
    if not hypothesis or not reference:
        return 0.0
    if len(reference) == 1:
        # one alignment is no rank correlation; the official script scores NKT = 1 here
        if len(ribes_score.word_rank_alignment(reference, hypothesis)) == 1:
            precision = 1.0 / len(hypothesis)
            brevity = min(1.0, math.exp(1.0 - 1.0 / len(hypothesis)))
            return precision ** alpha * brevity ** beta
        return 0.0
    return float(ribes_score.sentence_ribes([reference], hypothesis, alpha, beta))


def corpus_ribes(references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]],
                 alpha: float = ALPHA, beta: float = BETA) -> float:
    """The mean sentence RIBES (a fraction; 0 for no sentences), one reference per hypothesis."""
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    if not hypotheses:
        return 0.0
    return sum(sentence_ribes(r, h, alpha, beta) for r, h in zip(references, hypotheses)) / len(hypotheses)


@dataclass
class RibesScorerConfig(FairseqDataclass):
    ribes_alpha: float = field(default=ALPHA, metadata={"help": "RIBES: exponent of the unigram precision"})
    ribes_beta: float = field(default=BETA, metadata={"help": "RIBES: exponent of the brevity penalty"})
    ribes_tokenizer: EvaluationTokenizer.ALL_TOKENIZER_TYPES = field(
        default="none", metadata={"help": "RIBES: sacreBLEU tokenizer applied before splitting on spaces"}
    )
    ribes_lowercase: bool = field(
        default=False, metadata={"help": "RIBES: lowercase (the official RIBES.py does, unless -c)"}
    )


@register_scorer("ribes", dataclass=RibesScorerConfig)
class RibesScorer(BaseScorer):
    """Corpus RIBES x 100 of the strings ``fairseq-generate`` adds (one reference per sentence)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        check_nltk()
        check_exponents(cfg.ribes_alpha, cfg.ribes_beta)
        self.tokenizer = EvaluationTokenizer(tokenizer_type=cfg.ribes_tokenizer, lowercase=cfg.ribes_lowercase)

    def add_string(self, ref: str, pred: str) -> None:
        self.ref.append(self.tokenizer.tokenize(ref).split())
        self.pred.append(self.tokenizer.tokenize(pred).split())

    def score(self) -> float:
        return 100.0 * corpus_ribes(self.ref, self.pred, self.cfg.ribes_alpha, self.cfg.ribes_beta)

    def result_string(self) -> str:
        return (f"RIBES = {self.score():.2f} (alpha={self.cfg.ribes_alpha:g}, beta={self.cfg.ribes_beta:g}, "
                f"{len(self.pred)} sentences)")
