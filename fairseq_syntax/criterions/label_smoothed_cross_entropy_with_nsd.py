"""Label-smoothed cross-entropy plus the source-side NSD losses of paper 002 (Ma et al. 2019).

``L = L_NMT + w_dist * L_dist + w_ent * L_ent`` (paper 002 eq. 17 with a weight per term; the
paper's weights are 1):

* ``L_NMT``: fairseq's ``label_smoothed_cross_entropy`` (eq. 18 with label smoothing);
* ``L_dist`` (eq. 19, ``--nsd-dist-weight``): ``Σ_i (d_i - d̂_i)^2`` plus the pairwise ranking
  hinge ``Σ_{i, j>i} [1 - sign(d_i - d_j)(d̂_i - d̂_j)]_+`` of Shen et al. (2018), with ``d̂_i`` the
  expectation of the eq. 11 distribution;
* ``L_ent`` (eq. 20, ``--nsd-ent-weight``): cross-entropy of eq. 11 against the gold distance.

The readings of the garbled equations are those of
:mod:`fairseq_syntax.modules.syntactic_distance`. All terms are sums over the real source
tokens of the batch (padding contributes nothing), like fairseq's token-summed NMT loss, so
the trainer's division by the sample size treats them alike. The model must predict
distances (``--nsd-predict``, on in ``transformer_nsd``): its forward returns the eq. 11 logits
in ``extra["src_nsd_logits"]`` from the same encoder pass as the translation; the gold
distances are the model's own input ``net_input["src_syntax"]["distance"]`` (the model lists
``"distance"`` in ``syntax_inputs()``, so the task provides it).

Logged per real source token: ``nsd_mse``, ``nsd_rank`` (the two parts of eq. 19), ``nsd_ent``
(eq. 20, in bits like fairseq's losses), and ``nsd_acc`` (argmax accuracy of eq. 11, %).
Target-side NSD (the decoder predicting distances, :mod:`.target_nsd`): the same terms on the
target, logged as ``tgt_nsd_*``; either side alone or both.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

from torch import Tensor

from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.logging import metrics

from fairseq_syntax.criterions.target_nsd import (
    add_target_nsd,
    no_source_terms,
    reduce_target_nsd_metrics,
    target_nsd_losses,
)
from fairseq_syntax.modules.syntactic_distance import (
    NSD_DISTANCES,
    NSD_LOGITS_KEY,
    NSD_MASK_KEY,
    distance_class,
    expected_distance,
    nsd_cross_entropy,
    nsd_rank_hinge,
    nsd_squared_error,
)


@dataclass
class LabelSmoothedCrossEntropyWithNSDConfig(LabelSmoothedCrossEntropyCriterionConfig):
    nsd_dist_weight: float = field(
        default=1.0,
        metadata={"help": "weight of the distance-aware loss of paper 002 eq. 19 (squared error + pairwise hinge)"},
    )
    nsd_ent_weight: float = field(
        default=1.0,
        metadata={"help": "weight of the cross-entropy of the predicted distances, paper 002 eq. 20"},
    )
    nsd_distance_key: str = field(
        default=NSD_DISTANCES["dependency"],
        metadata={"help": "src_syntax key holding the gold distances (d_D of paper 002 eq. 4)"},
    )


def nsd_losses(logits: Tensor, gold: Tensor, padding_mask: Tensor) -> Dict[str, Tensor]:
    """The source NSD loss terms of paper 002 for one batch.

    Args:
        logits: ``(B, T, 2D+1)`` eq. 11 logits.
        gold: ``(B, T)`` gold distances (any integers; clipped to ``±D``).
        padding_mask: ``(B, T)`` True at padding.

    Returns:
        sums over real tokens: ``mse`` and ``rank`` (eq. 19), ``ent`` (eq. 20), ``correct``
        (argmax hits) and ``tokens`` (real tokens).
    """
    mask = ~padding_mask
    max_distance = (logits.size(-1) - 1) // 2
    gold = gold.to(logits.device)
    predicted = expected_distance(logits)  # d̂_i
    hits = logits.argmax(-1).eq(distance_class(gold, max_distance)) & mask
    return {
        "mse": nsd_squared_error(predicted, gold, mask, max_distance),
        "rank": nsd_rank_hinge(predicted, gold, mask, max_distance),
        "ent": nsd_cross_entropy(logits, gold, mask),
        "correct": hits.sum(),
        "tokens": mask.sum(),
    }


@register_criterion("label_smoothed_cross_entropy_with_nsd", dataclass=LabelSmoothedCrossEntropyWithNSDConfig)
class LabelSmoothedCrossEntropyWithNSDCriterion(LabelSmoothedCrossEntropyCriterion):
    """fairseq's label-smoothed cross-entropy + paper 002 eqs. 19-20 on the source distances."""

    def __init__(
        self,
        task,
        sentence_avg: bool,
        label_smoothing: float,
        ignore_prefix_size: int = 0,
        report_accuracy: bool = False,
        nsd_dist_weight: float = 1.0,
        nsd_ent_weight: float = 1.0,
        nsd_distance_key: str = NSD_DISTANCES["dependency"],
    ) -> None:
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        self.nsd_dist_weight = nsd_dist_weight
        self.nsd_ent_weight = nsd_ent_weight
        self.nsd_distance_key = nsd_distance_key

    def forward(self, model, sample: Dict[str, Any], reduce: bool = True) -> Tuple[Tensor, int, Dict[str, Any]]:
        """Loss, sample size and logging outputs (see fairseq's criterion), NSD terms added."""
        net_output = model(**sample["net_input"])
        loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, net_output, sample)
            logging_output["n_correct"] = utils.item(n_correct.data)
            logging_output["total"] = utils.item(total.data)

        terms = self.compute_nsd_losses(net_output, sample)
        loss = loss + self.nsd_dist_weight * (terms["mse"] + terms["rank"]) + self.nsd_ent_weight * terms["ent"]
        logging_output["loss"] = loss.data
        for name in ("mse", "rank", "ent"):
            logging_output[f"nsd_{name}"] = terms[name].data
        logging_output["nsd_correct"] = utils.item(terms["correct"].data)
        logging_output["nsd_tokens"] = utils.item(terms["tokens"].data)
        # target side (paper 002 secs. 3.1-3.3; None when the decoder predicts no distances)
        tgt_terms = target_nsd_losses(net_output, sample, nsd_losses, self.nsd_distance_key, self.padding_idx,
                                      self.task.target_dictionary.eos())
        if tgt_terms is not None:
            loss = add_target_nsd(loss, tgt_terms, self.nsd_dist_weight, self.nsd_ent_weight, logging_output)
        return loss, sample_size, logging_output

    def compute_nsd_losses(self, net_output, sample: Dict[str, Any]) -> Dict[str, Tensor]:
        """Eqs. 19-20 from the model's ``extra`` output and the gold distances of the batch."""
        extra = net_output[1] if isinstance(net_output, (tuple, list)) and len(net_output) > 1 else {}
        logits = extra.get(NSD_LOGITS_KEY) if isinstance(extra, dict) else None
        if not logits:
            if no_source_terms(net_output) is not None:  # a model with target-side NSD only: terms of 0 tokens
                return no_source_terms(net_output)
            raise ValueError(
                "label_smoothed_cross_entropy_with_nsd needs a model that predicts source or target syntactic "
                "distances: use --arch transformer_nsd or transformer_nsd_target, --nsd-predict or "
                "--nsd-target-predict"
            )
        syntax = sample["net_input"].get("src_syntax") or {}
        gold = syntax.get(self.nsd_distance_key)
        if gold is None:
            raise ValueError(
                f"the batch has no gold distances net_input['src_syntax'][{self.nsd_distance_key!r}] "
                "(use the syntax_translation task with a model whose syntax_inputs() lists it)"
            )
        return nsd_losses(logits[0], gold, extra[NSD_MASK_KEY][0])

    @classmethod
    def reduce_metrics(cls, logging_outputs: List[Dict[str, Any]]) -> None:
        """fairseq's metrics plus ``nsd_mse``, ``nsd_rank``, ``nsd_ent`` (per source token) and ``nsd_acc``."""
        super().reduce_metrics(logging_outputs)
        tokens = sum(log.get("nsd_tokens", 0) for log in logging_outputs)
        if tokens > 0:
            for name in ("mse", "rank", "ent"):
                total = sum(log.get(f"nsd_{name}", 0) for log in logging_outputs)
                base = math.log(2) if name == "ent" else 1.0  # the cross-entropy in bits, like fairseq
                metrics.log_scalar(f"nsd_{name}", total / tokens / base, tokens, round=3)
            correct = sum(log.get("nsd_correct", 0) for log in logging_outputs)
            metrics.log_scalar("nsd_acc", 100.0 * correct / tokens, tokens, round=2)
        reduce_target_nsd_metrics(logging_outputs)  # tgt_nsd_* (target side)
