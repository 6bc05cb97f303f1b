"""RIBES (paper 004, section 4.4): values computed by hand from Isozaki et al. (2010), edge cases, the fairseq scorer.

By hand: worder = the reference positions of the aligned hypothesis words, NKT = #increasing
pairs / #pairs (= (tau + 1) / 2), P = len(worder) / len(hyp), BP = min(1, exp(1 - |ref| / |hyp|)),
RIBES = NKT * P ** 0.25 * BP ** 0.10.
"""

import math

import pytest
from fairseq import options
from fairseq.scoring import build_scorer

import fairseq_syntax  # noqa: F401  (registers --scoring ribes)
from fairseq_syntax.scoring.ribes import ALPHA, BETA, RibesScorer, check_nltk, corpus_ribes, sentence_ribes

# Isozaki et al.'s (H0, R0)
R0 = "he was interested in world history because he read the book".split()
H0 = "he read the book because he was interested in world history".split()


def test_hyperparameters_are_isozakis():
    assert (ALPHA, BETA) == (0.25, 0.10)


def test_isozaki_h0_r0():
    # worder [7, 8, 9, 10, 6, 0, 1, 2, 3, 4, 5] (the two "he" by their contexts "he read", "he was"):
    # increasing pairs C(4,2) + C(6,2) = 6 + 15 = 21 of C(11,2) = 55; every word aligned, same length
    assert sentence_ribes(R0, H0) == pytest.approx(21 / 55)


def test_isozaki_h1_r1_counts_increasing_pairs_that_are_not_neighbours():
    # worder [2, 1, 0, 3]: increasing (2,3), (1,3), (0,3): 3 of 6 -> NKT 0.5 (the paper's example)
    assert sentence_ribes("John hit Bob yesterday".split(), "Bob hit John yesterday".split()) == pytest.approx(0.5)


def test_one_swap_is_five_sixths():
    # worder [0, 2, 1, 3]: 5 of 6 pairs increasing, although no two ranks are consecutive in order
    # (NLTK before 3.10.4 counted only runs of consecutive ranks and gave 0)
    assert sentence_ribes("a b c d".split(), "a c b d".split()) == pytest.approx(5 / 6)


def test_brevity_penalty():
    # "the" twice in the reference: aligned by its right context "the cat" -> worder [0, 1, 3, 5],
    # monotone (NKT 1), P = 4/4, BP = exp(1 - 6/4) = exp(-0.5)
    value = sentence_ribes("the cat sat on the mat".split(), "the cat on mat".split())
    assert value == pytest.approx(math.exp(-0.5) ** 0.10)


def test_unigram_precision():
    # worder [2, 1, 0, 3] (NKT 0.5), "evening" unaligned: P = 4/5; hypothesis longer: BP = 1
    value = sentence_ribes("John hit Bob yesterday".split(), "Bob hit John yesterday evening".split())
    assert value == pytest.approx(0.5 * 0.8 ** 0.25)


def test_alpha_and_beta_are_used():
    ref, hyp = "the cat sat on the mat".split(), "the cat on mat x".split()
    # worder [0, 1, 3, 5]: NKT 1, P = 4/5, BP = exp(1 - 6/5)
    assert sentence_ribes(ref, hyp, alpha=0.5, beta=1.0) == pytest.approx(0.8 ** 0.5 * math.exp(-0.2))


@pytest.mark.parametrize("ref, hyp, expected", [
    ("a b c", "", 0.0),                 # empty hypothesis
    ("", "a b", 0.0),                   # empty reference (the official script stops; a scorer must not)
    ("", "", 0.0),
    ("a b c", "x y", 0.0),              # nothing aligned
    ("a b c", "a x", 0.0),              # one aligned word: no rank correlation
    ("a", "a", 1.0),                    # one-word reference matched: NKT 1 (official RIBES.py), P = 1
    ("a", "a b", 0.5 ** 0.25),          # ... P = 1/2, BP = 1
    ("a", "a a", 0.0),                  # the word twice: not aligned one to one
    ("a", "b", 0.0),
])
def test_edge_cases_do_not_crash(ref, hyp, expected):
    assert sentence_ribes(ref.split(), hyp.split()) == pytest.approx(expected)


def test_corpus_score_is_the_mean_of_sentence_scores():
    refs = [R0, "a b c d".split(), "a b".split()]
    hyps = [H0, "a c b d".split(), []]
    assert corpus_ribes(refs, hyps) == pytest.approx((21 / 55 + 5 / 6 + 0.0) / 3)
    assert corpus_ribes([], []) == 0.0
    with pytest.raises(ValueError):
        corpus_ribes([R0], [])


def test_installed_nltk_counts_all_pairs():
    check_nltk()  # raises on NLTK < 3.10.4


def test_fairseq_scorer_prints_ribes_times_100():
    scorer = build_scorer("ribes", None)
    assert isinstance(scorer, RibesScorer)
    scorer.add_string(" ".join(R0), " ".join(H0))
    scorer.add_string("a b c d", "a c b d")
    scorer.add_string("a b", "")  # an empty translation
    expected = 100 * (21 / 55 + 5 / 6) / 3
    assert scorer.score() == pytest.approx(expected)
    assert scorer.result_string() == f"RIBES = {expected:.2f} (alpha=0.25, beta=0.1, 3 sentences)"


def test_scoring_options_from_the_command_line():
    parser = options.get_generation_parser(default_task="translation")
    args = options.parse_args_and_arch(parser, ["/nonexistent-data", "--scoring", "ribes", "--ribes-lowercase",
                                                "--ribes-tokenizer", "13a", "--ribes-beta", "0.2"])
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    cfg = convert_namespace_to_omegaconf(args)
    scorer = build_scorer(cfg.scoring, None)
    assert isinstance(scorer, RibesScorer) and scorer.cfg.ribes_beta == 0.2
    scorer.add_string("The cat sat.", "the cat sat .")  # 13a splits the full stop, then lowercased
    assert scorer.ref == [["the", "cat", "sat", "."]]
    assert scorer.score() == pytest.approx(100.0)


@pytest.mark.parametrize("flag,value", [("--ribes-alpha", "-1"), ("--ribes-beta", "nan"), ("--ribes-alpha", "inf"),
                                        ("--ribes-beta", "-0.1")])
def test_bad_exponents_are_refused_naming_the_flag(flag, value):
    # before: --ribes-alpha -1 was a ZeroDivisionError traceback after the whole decode,
    # --ribes-beta nan printed "RIBES = -100.00"
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_syntax_core.errors import UsageError

    parser = options.get_generation_parser(default_task="translation")
    args = options.parse_args_and_arch(parser, ["/nonexistent-data", "--scoring", "ribes", flag, value])
    with pytest.raises(UsageError, match=flag):
        build_scorer(convert_namespace_to_omegaconf(args).scoring, None)
    with pytest.raises(UsageError, match="--ribes-"):
        sentence_ribes(["a", "b"], ["a", "b"], alpha=float(value) if flag == "--ribes-alpha" else ALPHA,
                       beta=float(value) if flag == "--ribes-beta" else BETA)
