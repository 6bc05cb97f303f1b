"""BlackOut (Ji et al. 2016), the sampled output layer of Eriguchi et al. 2016, sec. 3.4.

``--criterion blackout``: training replaces the full softmax over the target vocabulary by a
**weighted softmax** over the true target and ``K`` negative words drawn from the unigram
distribution of the target side of the training data raised to ``beta``; inference (and
validation) uses the model's ordinary full softmax, unchanged.

The objective: Ji et al. 2016, sec. 3 (Eriguchi et al. (2016)'s text lost the equations)
---------------------------------------------------------------------------

Read together with the authors' reference implementation (IntelLabs/rnnlm, ``rnnlmlib.cpp``,
``blackout_forwardPropagation`` and ``samplingFromCMF``) where the paper leaves a choice open.

Proposal distribution over the target vocabulary, ``c_w`` the count of word ``w`` on the target
side of the train split (see "Unigram counts")::

    Q(w) = c_w^beta / sum_v c_v^beta          (c_w > 0;  Q(w) = 0 for words never seen there)

Per batch, ``K`` negatives ``S_K`` are drawn from ``Q`` **with replacement** and **shared by every
target position of the batch, all time steps included** (one ``(N, K)`` product instead of
one per step; Ji et al.'s code draws ``K`` per time step and shares them by the sentences of
the mini-batch). With replacement as their code (i.i.d. draws from the cumulative
distribution) and Eriguchi et al. 2016, sec. 5.1 ("frequent words can be treated as the negative samples
multiple times at each training step"): a word drawn ``m_j`` times counts ``m_j`` times.
For a target position with decoder state ``h``, true word ``i`` and output scores
``s_w = theta_w . h + b_w`` (the rows of the model's own output layer)::

    u_w   = s_w - log Q(w)                                  (the weight q_w^{-1} of Ji et al.)
    Z     = exp(u_i) + sum_{j in S_K, j != i} m_j exp(u_j)
    p~(w) = exp(u_w) / Z                                      (the weighted softmax)
    J     = log p~(i) + sum_{j in S_K, j != i} m_j log(1 - p~(j))     (the discriminative objective)
    loss  = - sum over real (non-pad) target positions of J

**The true word is excluded from its own negatives** (``j != i``: copies of ``i`` drawn into
``S_K`` are dropped for that position only, so it has ``K - m_i`` negatives, exactly as the
reference code does); the targets of the *other* positions of the batch stay ordinary
negatives for this one. The reference code also always puts ``<unk>`` into the draw; we do not
(an implementation detail of theirs, not part of the method). Autograd's gradient of ``-J``
with respect to ``u_i`` is ``p~(i) (1 + (K - m_i) - sum_j m_j / (1 - p~(j))) - 1``, the
reference code's hand-written one. ``log(1 - p~)`` is computed as
``log1mexp`` with ``p~ <= 1 - 1e-6`` (their code adds ``1e-7`` inside the log).

Reported values
---------------

* training (``model.training``): ``loss`` is the BlackOut loss above; ``nll_loss`` is
  ``-sum log p~(i)``, the weighted-softmax estimate of the NLL (what Ji et al. report while
  training). It is **not** the model's true NLL and does not compare with other criterions.
* validation (``model.training`` False: fairseq-train's valid subsets, ``fairseq-validate``):
  the **full-softmax NLL** for both ``loss`` and ``nll_loss``, exactly ``cross_entropy``'s
  number, so valid loss/ppl (and ``checkpoint_best``) compare with models trained otherwise.
* ``sample_size`` as fairseq's criterions: target tokens, or sentences with ``--sentence-avg``.

Unigram counts
--------------

Counted once (on the first training step) and cached on the criterion: a ``numpy.bincount``
over the token buffer of the binarized **target side of the train split**,
``{train_subset}{,1,2,...}.{src}-{tgt}.{tgt}`` (or ``.{tgt}-{src}.{tgt}``) in every directory of
the task's ``data`` (all shards, as fairseq trains on them) -- not the dictionary's counts,
which mix both sides in a joined dictionary. ``<pad>`` and ``<bos>`` are never counted (they
are never targets: fairseq's targets end in ``<eos>`` and start without ``<bos>``); ``<eos>``
(once per sentence) and ``<unk>`` are real targets and are counted. Words that never occur on
the target side (e.g. source-only words of a joined dictionary) have ``Q = 0``: they are
never negatives, so BlackOut never trains their output rows down (full softmax would); with
tied embeddings their rows still learn on the input side. A target with ``Q = 0`` (only
possible when batches do not come from the counted split) is weighted as the rarest counted word.

Model adapters (how the criterion finds the output layer)
---------------------------------------------------------

fairseq models keep their output projection in different places, and not all their forwards
take ``features_only``. :func:`output_adapter` looks at the decoder's attributes:

* ``adaptive_softmax`` set: unsupported (already a fast softmax), a clear error.
* **transformer** family (fairseq's ``TransformerDecoder``/``TransformerDecoderBase``, so
  ``transformer``, ``transformer_rel`` and every ``syntax_transformer`` architecture): the
  decoder has ``output_projection`` (an ``nn.Linear``); rows ``output_projection.weight``,
  bias ``output_projection.bias`` (fairseq builds it without one). Tied
  (``--share-decoder-input-output-embed``, ``--share-all-embeddings``) when that weight *is*
  ``embed_tokens.weight``.
* **lstm** family (fairseq's ``LSTMDecoder``, so ``lstm`` and ``tree2seq``, which reuses it):
  the decoder has ``fc_out`` (rows ``fc_out.weight``, bias ``fc_out.bias``), or, tied
  (``share_input_output_embed``), no ``fc_out`` and rows ``embed_tokens.weight``, no bias. The
  features are those ``output_layer`` receives: after ``additional_fc`` and the output dropout.
* anything else: an error naming what the decoder lacks.

Both families project in ``decoder.output_layer(features)``. During a training forward the
criterion calls the model's own ``forward`` (so every model-specific input, e.g. the syntax
side inputs or tree2seq's phrase structures, goes through unchanged) with that method
replaced, on this decoder instance only, by one that returns the features; it is restored
afterwards, also on errors. The ``B x T x V`` logits are never built.

**Tied embeddings.** BlackOut's output-side gradient reaches only the rows of the sampled
negatives and of the batch's targets. With tied weights those rows are also the target
(and, with ``--share-all-embeddings``, source) input embeddings, so the embedding matrix gets
gradient on the rows of the decoder's (and encoder's) input tokens as well, as with any
criterion; only with untied weights does the output matrix get gradient on sampled and
target rows alone.
"""

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.data import data_utils, indexed_dataset
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from omegaconf import II
from torch import Tensor


from .output_adapters import BlackOutError, OutputAdapter, output_adapter  # noqa: F401  (public here too)

logger = logging.getLogger(__name__)

__all__ = [
    "BlackOutCriterion", "BlackOutConfig", "BlackOutError", "OutputAdapter", "blackout_loss",
    "output_adapter", "proposal_log_probs", "target_unigram_counts",
]

#: the largest exponent of the unigram proposal: counts**beta stays within float32 for any corpus (counts < 1e9)
MAX_BETA = 4.0
#: ``log p~(j)`` is clamped here, i.e. ``p~(j) <= 1 - 1e-6``, inside ``log(1 - p~(j))`` (Ji et al. add 1e-7 in the log)
MAX_LOG_P_NEGATIVE = math.log1p(-1e-6)


@dataclass
class BlackOutConfig(FairseqDataclass):
    blackout_samples: int = field(
        default=500,
        metadata={"help": "K, negative words drawn per batch (with replacement, shared by all target positions); "
                          "Eriguchi et al. (2016): 500 / 2000 (small data), 2500 (large)"},
    )
    blackout_beta: float = field(
        default=0.4,
        metadata={"help": "beta: negatives come from the target-side unigram distribution raised to beta "
                          "(0: uniform over target words, 1: unigram); Eriguchi et al. (2016) and Ji et al.: 0.4"},
    )
    sentence_avg: bool = II("optimization.sentence_avg")
    seed: int = II("common.seed")


# --------------------------------------------------------------------------- the objective
def log1mexp(x: Tensor) -> Tensor:
    """``log(1 - exp(x))`` for ``x < 0``, accurate at both ends (Maechler 2012).

    Both branches are finite for every ``x <= MAX_LOG_P_NEGATIVE``, so ``torch.where`` passes no
    NaN gradient from the branch it drops.
    """
    return torch.where(x > -math.log(2.0), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def blackout_loss(
    hidden: Tensor, target: Tensor, weight: Tensor, bias: Optional[Tensor], negatives: Tensor, log_q: Tensor,
) -> Tuple[Tensor, Tensor]:
    """BlackOut's loss per target position (module docstring; Ji et al. 2016 sec. 3).

    Args:
        hidden: ``(N, d)`` features of the N real target positions (what the output layer projects).
        target: ``(N,)`` true word ids.
        weight: ``(V, d)`` output rows ``theta``; bias: ``(V,)`` or None.
        negatives: ``(K,)`` word ids drawn from ``Q`` with replacement, shared by all positions.
        log_q: ``(V,)`` finite ``log Q(w)`` for every word that can be a target or a negative.

    Returns:
        ``(loss, nll)``, each ``(N,)`` float32: ``-J`` and ``-log p~(target)``.

    Only the rows ``negatives`` and ``target`` of ``weight``/``bias`` enter the computation, so
    only they get gradient from it. Scores are computed in the features' precision and
    normalized in float32 (like ``utils.log_softmax``).
    """
    ids, draws = torch.unique(negatives, return_counts=True)  # distinct negatives, multiplicities m_j
    target_rows = weight.index_select(0, target)
    target_score = (hidden * target_rows).sum(-1)
    negative_score = F.linear(hidden, weight.index_select(0, ids), None if bias is None else bias.index_select(0, ids))
    if bias is not None:
        target_score = target_score + bias.index_select(0, target)
    u_target = target_score.float() - log_q.index_select(0, target)  # (N,)
    u_negative = negative_score.float() - log_q.index_select(0, ids).unsqueeze(0)  # (N, U)
    keep = target.unsqueeze(1) != ids.unsqueeze(0)  # j != i: a position's own word is not its negative
    log_draws = draws.to(u_negative.dtype).log().unsqueeze(0)
    log_z = torch.logsumexp(
        torch.cat([u_target.unsqueeze(1), (u_negative + log_draws).masked_fill(~keep, float("-inf"))], dim=1), dim=1
    )
    log_p_target = u_target - log_z
    log_p_negative = (u_negative - log_z.unsqueeze(1)).clamp(max=MAX_LOG_P_NEGATIVE)
    log_p_negative = torch.where(keep, log_p_negative, torch.full_like(log_p_negative, -1.0))  # dropped: finite
    negative_term = (log1mexp(log_p_negative) * draws.to(u_negative.dtype).unsqueeze(0) * keep).sum(1)
    return -(log_p_target + negative_term), -log_p_target


# --------------------------------------------------------------------------- unigram counts
def target_unigram_counts(
    data: str, split: str, src: str, tgt: str, vocab_size: int, dataset_impl: Optional[str] = None,
    exclude: Sequence[int] = (), dictionary=None,
) -> Tuple[np.ndarray, List[str]]:
    """Token counts of the binarized target side of ``split`` over every shard of ``data``.

    ``data`` is fairseq's ``data`` (directories joined by ``:``); in each, ``split``,
    ``split1``, ``split2``, ... as fairseq's ``load_langpair_dataset`` finds them, either
    language order. Returns ``(counts[vocab_size] int64 with exclude set to 0, the prefixes read)``.
    ``dictionary`` is needed only for ``--dataset-impl raw`` (text, encoded on loading).
    """
    counts = np.zeros(vocab_size, dtype=np.int64)
    read: List[str] = []
    for path in utils.split_paths(data):
        for k in range(1_000_000):
            split_k = split + (str(k) if k > 0 else "")
            prefix = None
            for a, b in ((src, tgt), (tgt, src)):
                candidate = os.path.join(path, f"{split_k}.{a}-{b}.{tgt}")
                impl = dataset_impl or indexed_dataset.infer_dataset_impl(candidate)
                if impl is not None and indexed_dataset.dataset_exists(candidate, impl=impl):
                    prefix = candidate
                    break
            if prefix is None:
                break
            dataset = data_utils.load_indexed_dataset(prefix, dictionary, dataset_impl)
            tokens = _all_tokens(dataset)
            if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
                raise BlackOutError(
                    f"{prefix}.bin: token id {int(tokens.max())} outside the target dictionary ({vocab_size} "
                    "words): the split does not belong to this data-bin's dictionary"
                )
            counts += np.bincount(tokens, minlength=vocab_size)
            read.append(prefix)
    if not read:
        where = " or ".join(os.path.join(p, f"{split}.{src}-{tgt}.{tgt}") for p in utils.split_paths(data))
        raise BlackOutError(
            f"{where}: no binarized train split found; --criterion blackout draws its negatives from the target "
            "side of the train split (--train-subset), so the data-bin needs one"
        )
    counts[list(exclude)] = 0
    return counts, read


def _all_tokens(dataset) -> np.ndarray:
    """Every token of an indexed dataset as one int64 array: the mmap buffer itself where it is one."""
    if isinstance(dataset, indexed_dataset.MMapIndexedDataset):
        total = int(np.asarray(dataset.sizes, dtype=np.int64).sum())
        return np.frombuffer(dataset._bin_buffer, dtype=dataset._index.dtype, count=total).astype(np.int64)
    if len(dataset) == 0:  # other implementations: one read per sentence (no loop over tokens)
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.asarray(dataset[i], dtype=np.int64) for i in range(len(dataset))])


def proposal_log_probs(counts, beta: float) -> Tensor:
    """``log Q(w)``, ``Q(w) = c_w^beta / sum_v c_v^beta`` over counted words; ``-inf`` where ``c_w = 0``.

    ``beta = 0`` is uniform over the words with ``c_w > 0`` (not over the whole dictionary).
    """
    counts = torch.as_tensor(np.asarray(counts), dtype=torch.float64)
    seen = counts > 0
    if not bool(seen.any()):
        raise BlackOutError("the target side of the train split has no tokens to draw negatives from")
    log_q = torch.full_like(counts, float("-inf"))
    scores = beta * counts[seen].log()
    log_q[seen] = scores - torch.logsumexp(scores, 0)
    return log_q


# --------------------------------------------------------------------------- the criterion
@register_criterion("blackout", dataclass=BlackOutConfig)
class BlackOutCriterion(FairseqCriterion):
    """BlackOut in training, the full softmax's NLL in validation (module docstring)."""

    def __init__(self, task, sentence_avg: bool, blackout_samples: int = 500, blackout_beta: float = 0.4,
                 seed: int = 1) -> None:
        super().__init__(task)
        self.seed = int(seed)
        self._update: Optional[int] = None  # the update whose micro-batches are being counted
        self._micro = 0
        self._generators: Dict[torch.device, torch.Generator] = {}
        self.sentence_avg = sentence_avg
        self.vocab_size = len(task.target_dictionary)
        check_options(blackout_samples, blackout_beta, self.vocab_size)
        self.samples = int(blackout_samples)
        self.beta = float(blackout_beta)
        self._log_q: Optional[Tensor] = None  # float64 on the CPU: -inf where Q = 0
        self._device_tables: Dict[torch.device, Tuple[Tensor, Tensor]] = {}

    # ---- proposal distribution
    def set_target_counts(self, counts) -> None:
        """Use these target-side counts instead of reading the train split (benchmarks, tests)."""
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (self.vocab_size,):
            raise BlackOutError(f"target counts for {counts.shape} words; the target dictionary has {self.vocab_size}")
        counts = counts.copy()
        counts[self._never_targets()] = 0
        self._log_q = proposal_log_probs(counts, self.beta)
        self._device_tables.clear()

    def _never_targets(self) -> List[int]:
        dictionary = self.task.target_dictionary
        return [dictionary.pad(), dictionary.bos()]

    def _load_counts(self) -> None:
        cfg = getattr(self.task, "cfg", None) or getattr(self.task, "args", None)
        data = getattr(cfg, "data", None)
        if not data:
            raise BlackOutError("--criterion blackout: the task has no data path to count the target train split in")
        split = getattr(cfg, "train_subset", None) or "train"
        src, tgt = getattr(cfg, "source_lang", None), getattr(cfg, "target_lang", None)
        if not src or not tgt:
            raise BlackOutError("--criterion blackout: set --source-lang and --target-lang: the target side of the "
                                "train split is counted by its language")
        counts, read = target_unigram_counts(data, split, src, tgt, self.vocab_size,
                                             getattr(cfg, "dataset_impl", None), exclude=self._never_targets(),
                                             dictionary=self.task.target_dictionary)
        self.set_target_counts(counts)
        logger.info(f"blackout: K={self.samples} negatives per batch from Q ~ unigram^{self.beta} over "
                    f"{int((counts > 0).sum())} target words ({int(counts.sum())} tokens of {', '.join(read)})")

    def _tables(self, device: torch.device) -> Tuple[Tensor, Tensor]:
        """``(Q, log Q with -inf floored at the rarest counted word)`` on ``device``, float32."""
        if self._log_q is None:
            self._load_counts()
        tables = self._device_tables.get(device)
        if tables is None:
            log_q = self._log_q
            floor = log_q[torch.isfinite(log_q)].min()
            floored = torch.where(torch.isfinite(log_q), log_q, floor)
            tables = (log_q.exp().float().to(device), floored.float().to(device))
            self._device_tables[device] = tables
        return tables

    def begin_micro_batch(self, update_num: int) -> None:
        """Count the micro-batches of an update (the task calls this before each training forward)."""
        if update_num != self._update:
            self._update, self._micro = update_num, 0
        else:
            self._micro += 1

    def batch_index(self) -> int:
        """This micro-batch's place among all the update's batches: ``micro * world_size + rank``.

        fairseq gives rank ``r`` of ``W`` the batches ``r, r + W, ...`` and groups ``--update-freq``
        of them, so the index equals the micro-batch index of one process running
        ``--update-freq W * U``: the same batch draws the same negatives either way.
        """
        from fairseq.distributed import utils as distributed_utils

        if not torch.distributed.is_available() or not torch.distributed.is_initialized():
            return self._micro
        world = distributed_utils.get_data_parallel_world_size()
        return self._micro * world + distributed_utils.get_data_parallel_rank()

    def sample_negatives(self, device: torch.device) -> Tensor:
        """``K`` word ids drawn from ``Q`` with replacement.

        In training through the task, each batch draws from its own generator seeded by
        (``--seed``, update, :meth:`batch_index`): ranks draw different negatives, the draws equal
        those of one process with ``--update-freq`` over the same batches, and a resumed run draws
        what the uninterrupted one drew. Elsewhere, torch's RNG (which fairseq seeds per update).
        """
        q, _ = self._tables(device)
        if self._update is None:
            return torch.multinomial(q, self.samples, replacement=True)
        generator = self._generators.get(device)
        if generator is None:
            generator = self._generators[device] = torch.Generator(device=device)
        # Python's hash of a tuple of ints is the same in every process (no PYTHONHASHSEED salt)
        generator.manual_seed(hash((self.seed, self._update, self.batch_index())) & 0x7FFF_FFFF_FFFF_FFFF)
        return torch.multinomial(q, self.samples, replacement=True, generator=generator)

    # ---- fairseq interface
    def forward(self, model, sample, reduce=True):
        if not model.training:
            return self._full_softmax(model, sample, reduce)
        adapter = output_adapter(model)
        with adapter.features() as state:
            net_output = model(**sample["net_input"])
        hidden = net_output[0]
        if not state["used"] or hidden.size(-1) != adapter.weight.size(1):
            raise BlackOutError(
                f"--criterion blackout: the forward of {type(adapter.decoder).__name__} did not go through its "
                "`output_layer`, so the criterion got no features to project"
            )
        target = model.get_targets(sample, net_output)
        flat_target = target.reshape(-1)
        real = flat_target.ne(self.padding_idx)
        _, log_q = self._tables(hidden.device)
        negatives = self.sample_negatives(hidden.device)
        loss, nll = blackout_loss(hidden.reshape(-1, hidden.size(-1))[real], flat_target[real], adapter.weight,
                                  adapter.bias, negatives, log_q)
        if reduce:
            loss, nll = loss.sum(), nll.sum()
        else:  # per position, zero at padding, like F.nll_loss(reduction="none")
            loss = loss.new_zeros(flat_target.shape).masked_scatter(real, loss)
            nll = nll.new_zeros(flat_target.shape).masked_scatter(real, nll)
        return loss, self._sample_size(sample), self._logging_output(loss, nll, sample)

    def _full_softmax(self, model, sample, reduce):
        """Validation: the model's full softmax, the same number as ``cross_entropy``."""
        net_output = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = model.get_targets(sample, net_output).view(-1)
        loss = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), target, ignore_index=self.padding_idx,
                          reduction="sum" if reduce else "none")
        return loss, self._sample_size(sample), self._logging_output(loss, loss, sample)

    def _sample_size(self, sample):
        return sample["target"].size(0) if self.sentence_avg else sample["ntokens"]

    def _logging_output(self, loss, nll, sample):
        return {
            "loss": loss.data,
            "nll_loss": nll.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": self._sample_size(sample),
        }

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        """As ``label_smoothed_cross_entropy``: loss per sample-size unit and nll per token, in bits."""
        loss_sum = sum(log.get("loss", 0) for log in logging_outputs)
        nll_loss_sum = sum(log.get("nll_loss", 0) for log in logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        metrics.log_scalar("loss", loss_sum / sample_size / math.log(2), sample_size, round=3)
        metrics.log_scalar("nll_loss", nll_loss_sum / ntokens / math.log(2), ntokens, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True


def check_options(samples, beta, vocab_size: int) -> None:
    """Bad option values: a :class:`BlackOutError` naming the flag."""
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise BlackOutError(f"--blackout-samples {samples}: expected a positive number of negatives K")
    if samples >= vocab_size:
        raise BlackOutError(f"--blackout-samples {samples}: K must be smaller than the target vocabulary "
                            f"({vocab_size} words); with that many, use the full softmax (--criterion cross_entropy)")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not (0.0 <= beta <= MAX_BETA):
        raise BlackOutError(f"--blackout-beta {beta}: expected a number from 0 to {MAX_BETA:g} (0: uniform, 1: "
                            "unigram; paper: 0.4; beyond it the rarest words get no probability in float32)")

