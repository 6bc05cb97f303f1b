"""Search and dropout settings that fairseq takes and then misreads or fails on deep inside, refused in one line
when the task builds a generator (:func:`check_search`; the hub also checks a checkpoint's stored generation
settings with it) or a model (:func:`check_probabilities`)."""

import math
from typing import Any, Mapping, Optional

from fairseq_syntax_core.errors import UsageError


#: fairseq's generation options of iterative refinement (non-autoregressive models), at their defaults
ITERATIVE_REFINEMENT = {"print_step": False, "retain_iter_history": False, "iter_decode_with_beam": 1,
                        "iter_decode_max_iter": 10, "iter_decode_force_max_iter": False, "iter_decode_eos_penalty": 0.0,
                        "iter_decode_with_external_reranker": False}


def _refused(setting: str, message: str) -> UsageError:
    """The refusal of one search setting, which it names (``setting``: its key, as in fairseq's configuration)."""
    error = UsageError(message)
    error.setting = setting  # type: ignore[attr-defined]
    return error


def check_search(args: Any, vocabulary: Optional[int] = None, length_prior_weight: Any = 1.0) -> None:
    """Search settings fairseq accepts and then fails on deep in the generator (or reads as "off" without a word),
    refused in one line. ``vocabulary``: the size of the target dictionary, which top-k sampling draws from;
    ``length_prior_weight``: the task's, refused when not finite whether or not ``--length-prior`` reads it."""
    if isinstance(length_prior_weight, (int, float)) and not (math.isfinite(length_prior_weight)
                                                              and length_prior_weight >= 0):
        raise _refused("length_prior_weight", f"--length-prior-weight {length_prior_weight}: expected a finite number >= 0")
    for name, default in ITERATIVE_REFINEMENT.items():  # read by fairseq's non-autoregressive generator only
        value = getattr(args, name, default)
        if value is not None and value != default:
            raise _refused(name, f"--{name.replace('_', '-')}: an option of fairseq's iterative refinement (models "
                                 "that rewrite whole translations); these models decode left to right: leave it out")
    beam, nbest = getattr(args, "beam", 1), getattr(args, "nbest", 1)
    if isinstance(beam, int) and beam < 1:
        raise _refused("beam", f"--beam {beam}: expected at least 1 hypothesis per step")
    if isinstance(beam, int) and vocabulary is not None and beam > vocabulary - 1:  # fairseq cuts it silently
        raise _refused("beam", f"--beam {beam}: expected at most {vocabulary - 1} hypotheses per step (the target "
                               f"dictionary's size, {vocabulary}, less one: fairseq would search with that many)")
    if isinstance(nbest, int) and isinstance(beam, int) and not 1 <= nbest <= beam:
        raise _refused("nbest", f"--nbest {nbest}: expected 1 to --beam {beam} hypotheses per sentence")
    lenpen = getattr(args, "lenpen", 1)
    if getattr(args, "unnormalized", False) and isinstance(lenpen, (int, float)) and lenpen != 1:
        raise _refused("lenpen", f"--lenpen {lenpen}: fairseq ignores it under --unnormalized (scores are not "
                                 "normalized by length): leave one of them out")
    for name in ("lenpen", "unkpen", "diversity_rate", "diverse_beam_strength", "lm_weight"):
        value = getattr(args, name, 0)  # NaN: fairseq's "> -1" or "!= 0" tests read it as off, or score with it
        if isinstance(value, (int, float)) and not math.isfinite(value):
            raise _refused(name, f"--{name.replace('_', '-')} {value}: expected a finite number")
    for name, expected in (("no_repeat_ngram_size", "a size >= 0 (0, fairseq's default: off)"),
                           ("prefix_size", "a size >= 0 (0, fairseq's default: no prefix of the reference)"),
                           ("min_len", "a length >= 0 (1, fairseq's default)")):
        value = getattr(args, name, 0)  # fairseq reads a negative one as 0 without a word
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise _refused(name, f"--{name.replace('_', '-')} {value}: expected {expected}")
    for name, least in (("diverse_beam_groups", 1), ("diversity_rate", 0)):  # -1: off; fairseq tests > 0 / > -1
        value = getattr(args, name, -1)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value != -1 and not value >= least:
            raise _refused(name, f"--{name.replace('_', '-')} {value}: expected -1 (off, fairseq's default) or a "
                                 f"{'number of groups' if least else 'penalty'} >= {least}")
    temperature = getattr(args, "temperature", 1.0)
    if isinstance(temperature, (int, float)) and not 0 < temperature < math.inf:
        raise _refused("temperature", f"--temperature {temperature}: expected a finite number > 0 (1: the model's distribution)")
    for name in ("max_len_a", "max_len_b"):
        value = getattr(args, name, 0)
        if isinstance(value, (int, float)) and not (math.isfinite(value) and value >= 0):  # NaN fails too
            raise _refused(name, f"--{name.replace('_', '-')} {value}: expected a finite length >= 0 "
                             "(the longest translation is max-len-a * source length + max-len-b)")
    # fairseq samples from the top p (top k) only when the value is > 0: NaN, 0 and other negatives than its
    # default -1 would sample from the whole distribution without a word; p > 1 is no probability mass
    topp = getattr(args, "sampling_topp", -1.0)
    if isinstance(topp, (int, float)) and not isinstance(topp, bool) and topp != -1 and not 0 < topp <= 1:
        raise _refused("sampling_topp", f"--sampling-topp {topp:g}: expected a probability mass in (0, 1], or -1 (fairseq's default: "
                         "no nucleus sampling)")
    topk = getattr(args, "sampling_topk", -1)
    if isinstance(topk, int) and not isinstance(topk, bool) and topk != -1 and \
            not (1 <= topk and (vocabulary is None or topk <= vocabulary)):
        most = f" to {vocabulary}, the target dictionary's size" if vocabulary is not None else " or more"
        raise _refused("sampling_topk", f"--sampling-topk {topk}: expected a number of candidates from 1{most}, or -1 "
                         "(fairseq's default: no top-k sampling)")
    if isinstance(topk, int) and topk > 0 and isinstance(topp, (int, float)) and topp > 0:
        raise _refused("sampling_topk", f"--sampling-topk {topk} with --sampling-topp {topp:g}: fairseq samples from the top p "
                         "and ignores top-k; give one of them")


def check_probabilities(settings: Mapping[str, Any]) -> None:
    """Dropout and layer-drop rates of any model of the task: fairseq takes a negative one silently and
    fails on one above 1 in the first forward (leaving a crash.pt)."""
    for key, value in settings.items():
        if (key.endswith("dropout") or key.endswith("layerdrop")) and isinstance(value, (int, float)) \
                and not isinstance(value, bool) and not 0.0 <= value < 1.0:  # NaN fails too
            raise UsageError(f"--{key.replace('_', '-')} {value}: expected a probability in [0, 1)")
