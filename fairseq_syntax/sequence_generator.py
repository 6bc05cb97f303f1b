"""Eriguchi et al. (2016)'s beam search (Eriguchi et al. 2016, section 4.3): a length prior on finished hypotheses.

``fairseq-generate`` / ``fairseq-interactive`` ``--task syntax_translation --length-prior``
decode with :class:`LengthPriorSequenceGenerator` (:class:`LengthPriorSequenceGeneratorWithAlignment`
under ``--print-alignment``), which :meth:`SyntaxTranslationTask.build_generator` picks. Each
finished hypothesis ``y`` of a source ``x`` is scored::

    score(x, y) = S(y) + W * log p(len(y) | len(x))

- ``log p(len(y) | len(x))``: the data-bin's table (:mod:`fairseq_syntax.data.length_prior`),
  estimated on the train split, lengths in BPE pieces without ``</s>`` (source: its tokens that
  are neither padding nor ``</s>``; hypothesis finished at step ``k``: ``k``), add-one smoothed,
  never ``-inf``; the same table whatever split is decoded.
- ``W``: ``--length-prior-weight`` (default 1, the paper's).
- ``S(y)``: fairseq's own hypothesis score. With ``--unnormalized`` (the paper's search: no
  length normalisation) it is ``log p(y | x)`` (``</s>`` included), and the score is exactly the
  paper's. Without it, fairseq divides by ``(len(y) + 1) ** lenpen`` (``--lenpen``, default 1),
  and the prior is added to that normalised score, once, after the division (it is a
  sentence-level term, not a per-token one); ``--lenpen`` has no effect under ``--unnormalized``.
  A warning says so when ``--length-prior`` comes without ``--unnormalized``.

The prior is added **when a hypothesis is finalized** (``finalize_hypos``), so it decides the
ranking among finished hypotheses (the n-best list and the 1-best); which hypotheses reach
``</s>`` inside the beam is fairseq's search, unchanged. ``positional_scores`` stay the model's
token log-probabilities; each hypothesis also carries ``length_prior`` (``log p``, before ``W``).

**Lengths are capped** at ``L`` pieces, the table's largest target length
(``max(100, longest train target)``: the paper "allow[s] the decoder to generate up to 100
words"), on top of fairseq's own limits: a hypothesis has at most
``min(L, max_len_a * src_len + max_len_b, max positions - 1)`` pieces.

Combinations: beam search with ``--nbest``, ``--prefix-size``, ``--constraints``,
``--print-alignment`` and ensembles work as in fairseq (``--lm-path`` is refused at start-up: the
checkpoint loader reads translation models only); ``--sampling``,
``--diverse-beam-groups``, ``--diversity-rate`` and ``--match-source-len`` are refused (they
are not the paper's beam search; with the last the length is fixed and the prior a constant),
as is a generator class of another task. ``--score-reference`` scores the references with
fairseq's ``SequenceScorer``, without the prior.
"""

import contextlib
import logging
import math
from typing import Dict, Iterator, List, Optional

import torch
from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment
from torch import Tensor

from fairseq_syntax_core.errors import UsageError

from .data.length_prior import LengthPrior

logger = logging.getLogger(__name__)


class LengthPriorMixin:
    """Adds ``W * log p(len(y) | len(x))`` to every hypothesis that :meth:`finalize_hypos` finishes."""

    def __init__(self, models, tgt_dict, length_prior: Optional[LengthPrior] = None,
                 length_prior_weight: float = 1.0, **kwargs) -> None:
        if not isinstance(length_prior, LengthPrior):
            raise ValueError("a LengthPrior is required (length_prior=...)")
        if not (math.isfinite(length_prior_weight) and length_prior_weight >= 0):
            raise UsageError(f"--length-prior-weight must be a finite number >= 0, got {length_prior_weight}")
        super().__init__(models, tgt_dict, **kwargs)
        self.length_prior = length_prior
        self.length_prior_weight = float(length_prior_weight)
        self._log_probs = length_prior.log_prob_table()
        # at most L pieces (fairseq: at most self.max_len - 1, before --max-len-a/b)
        self.max_len = min(self.max_len, length_prior.max_target_length + 1)
        self._source_lengths: Optional[List[int]] = None

    # -------------------------------------------------- source lengths of the batch
    def source_lengths(self, sample: Dict) -> List[int]:
        """Each source's length in pieces without ``</s>`` (the table's unit), in batch order."""
        src_tokens = sample["net_input"]["src_tokens"]
        return (src_tokens.ne(self.eos) & src_tokens.ne(self.pad)).long().sum(dim=1).tolist()

    @contextlib.contextmanager
    def _sources(self, sample: Dict) -> Iterator[None]:
        if self._source_lengths is not None:  # generate() -> _generate(): already known
            yield
            return
        self._source_lengths = self.source_lengths(sample)
        try:
            yield
        finally:
            self._source_lengths = None

    # fairseq's SequenceGeneratorWithAlignment.generate calls SequenceGenerator._generate directly
    # (past this class's _generate): both entry points record the batch's source lengths
    @torch.no_grad()
    def generate(self, models, sample: Dict[str, Dict[str, Tensor]], **kwargs):
        with self._sources(sample):
            return super().generate(models, sample, **kwargs)

    def _generate(self, sample: Dict[str, Dict[str, Tensor]], *args, **kwargs):
        with self._sources(sample):
            return super()._generate(sample, *args, **kwargs)

    # ------------------------------------------------------------------ scoring
    def length_log_prob(self, source_length: int, target_length: int) -> float:
        """``log p(target_length | source_length)`` from the table (finite for any lengths)."""
        table = self._log_probs
        s = min(max(int(source_length), 0), table.shape[0] - 1)
        t = min(max(int(target_length), 0), table.shape[1] - 1)
        return float(table[s, t])

    def finalize_hypos(self, step: int, bbsz_idx, eos_scores, tokens, scores, finalized: List[List[Dict[str, Tensor]]],
                       finished: List[bool], beam_size: int, attn: Optional[Tensor], src_lengths, max_len: int):
        if self._source_lengths is None:
            raise RuntimeError("finalize_hypos outside generate(): the source lengths of the batch are unknown")
        before = [len(hypos) for hypos in finalized]
        newly_finished = super().finalize_hypos(step, bbsz_idx, eos_scores, tokens, scores, finalized, finished,
                                                beam_size, attn, src_lengths, max_len)
        # the hypotheses finished at this step: `step` pieces, then </s>
        for sent, hypos in enumerate(finalized):
            for hypo in hypos[before[sent]:]:
                log_p = self.length_log_prob(self._source_lengths[sent], step)
                hypo["length_prior"] = hypo["score"].new_tensor(log_p)
                hypo["score"] = hypo["score"] + self.length_prior_weight * log_p
        return newly_finished


class LengthPriorSequenceGenerator(LengthPriorMixin, SequenceGenerator):
    """fairseq's beam search; finished hypotheses score ``S(y) + W * log p(len(y) | len(x))``."""


class LengthPriorSequenceGeneratorWithAlignment(LengthPriorMixin, SequenceGeneratorWithAlignment):
    """:class:`LengthPriorSequenceGenerator` under ``--print-alignment``."""


def generator_class_and_kwargs(prior: LengthPrior, weight: float, args, seq_gen_cls=None,
                               extra_gen_cls_kwargs: Optional[Dict] = None):
    """The generator class and its extra keyword arguments for ``FairseqTask.build_generator``.

    ``args`` is the generation config; search strategies other than beam search are refused.
    """
    def number(name: str, default: float) -> float:
        value = getattr(args, name, default)
        return default if value is None else value

    refused = [  # fairseq's own tests of these options (FairseqTask.build_generator)
        ("--sampling", bool(getattr(args, "sampling", False))),
        ("--diverse-beam-groups", number("diverse_beam_groups", -1) > 0),
        ("--diversity-rate", number("diversity_rate", -1) > -1),
        ("--match-source-len", bool(getattr(args, "match_source_len", False))),
    ]
    for flag, given in refused:
        if given:
            raise UsageError(f"--length-prior is Eriguchi et al. (2016)'s beam search with a length prior; it cannot be "
                             f"combined with {flag}")
    alignment = getattr(args, "print_alignment", None)
    wanted = LengthPriorSequenceGeneratorWithAlignment if alignment else LengthPriorSequenceGenerator
    if seq_gen_cls is not None and not issubclass(seq_gen_cls, LengthPriorMixin):
        raise UsageError(f"--length-prior: the caller asks for the generator {seq_gen_cls.__name__}, "
                         "which cannot add the length prior")
    kwargs = dict(extra_gen_cls_kwargs or {})
    kwargs.update(length_prior=prior, length_prior_weight=weight)
    if alignment:
        kwargs.setdefault("print_alignment", alignment)
    if not getattr(args, "unnormalized", False):
        logger.warning(
            "--length-prior without --unnormalized: the prior is added to fairseq's length-normalised score "
            f"(log p(y|x) / (len + 1) ** {getattr(args, 'lenpen', 1)}); the paper's search (section 4.3) has no "
            "normalisation: add --unnormalized to reproduce it"
        )
    logger.info(f"length prior: weight {weight}, hypotheses capped at {prior.max_target_length} pieces")
    return seq_gen_cls or wanted, kwargs
