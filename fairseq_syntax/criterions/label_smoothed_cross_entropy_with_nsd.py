"""Label-smoothed cross-entropy plus the source-side NSD losses of Ma et al. 2019.

``L = L_NMT + w_dist (w_mse L_mse + w_rank L_rank) + w_ent L_ent`` (Ma et al. 2019, eq. 17 with a
weight per term; the paper's weights are all 1, the defaults here):

* ``L_NMT``: fairseq's ``label_smoothed_cross_entropy`` (eq. 18 with label smoothing);
* ``L_dist`` (eq. 19, joint weight ``--nsd-dist-weight``): ``L_mse = Σ_i (d_i - d̂_i)^2``
  (``--nsd-mse-weight``) plus the pairwise ranking hinge
  ``L_rank = Σ_{i, j>i} [1 - sign(d_i - d_j)(d̂_i - d̂_j)]_+`` of Shen et al. (2018)
  (``--nsd-rank-weight``), with ``d̂_i`` the expectation of the eq. 11 distribution; the hinge
  per token by default (``--nsd-rank-norm token``: each sentence's hinge divided by its number
  of pairs, times its number of tokens), or summed over all pairs (``none``, 0.2's scale);
* ``L_ent`` (eq. 20, ``--nsd-ent-weight``): cross-entropy of eq. 11 against the gold distance.

Which tokens count: the source pieces with a gold distance. The appended ``</s>`` is left out
(its ``d_D`` is a large value that is no syntax; ``--nsd-loss-eos`` puts it back, 0.2's
behaviour), so is padding, and so is every piece of a line without a phrase structure when
the distance is a constituency one (``--phrase-fallback``; the batch's ``KEY_mask``).

Table 1 of the paper, output rows: ``--nsd-dist-weight 0 --nsd-ent-weight 0`` (L_NMT only),
``--nsd-dist-weight 0`` (+ L_ent), ``--nsd-ent-weight 0`` (+ L_dist), defaults (all three).

The readings of the garbled equations are those of
:mod:`fairseq_syntax.modules.syntactic_distance`. All terms are sums over tokens, like
fairseq's token-summed NMT loss, so the trainer's division by the sample size treats them
alike. The model must predict distances (``--nsd-predict``, on in ``transformer_nsd``): its
forward returns the eq. 11 logits in ``extra["src_nsd_logits"]`` from the same encoder pass as
the translation; the gold distances are the batch's ``net_input["src_syntax"][KEY]``, ``KEY``
the model's own (``model.encoder.nsd_key``: ``--nsd-distance``, ``--nsd-roots``), which the
model lists in ``syntax_inputs()`` so that the task provides it.

Logged per counted source token: ``nsd_mse``, ``nsd_rank`` (the two parts of eq. 19 before
their weights, ``nsd_rank`` normalised as ``--nsd-rank-norm``), ``nsd_ent`` (eq. 20, in bits
like fairseq's losses), and ``nsd_acc`` (argmax accuracy of eq. 11, %).
Target-side NSD (the decoder predicting distances, :mod:`.target_nsd`): the same terms on the
target (same weights and hinge normalisation; ``</s>`` and padding never count there), logged
as ``tgt_nsd_*``; either side alone or both.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.dataclass import ChoiceEnum

from fairseq_syntax.criterions.target_nsd import (
    no_source_terms,
    reduce_nsd_metrics,
    reduce_target_nsd_metrics,
    target_nsd_losses,
)
from fairseq_syntax_core.errors import UsageError
from fairseq_syntax_core.oneline import quoted
from fairseq_syntax.data.syntax_features import CONSTITUENCY_FEATURES, DEPENDENCY_FEATURES

from fairseq_syntax.modules.syntactic_distance import (
    NSD_LOGITS_KEY,
    NSD_MASK_KEY,
    NSD_DIST_UNITS,
    NSD_RANK_NORMS,
    distance_class,
    distance_unit_scales,
    expected_distance,
    nsd_cross_entropy,
    nsd_rank_hinge,
    nsd_squared_error,
)


#: the ``src_syntax`` keys that hold a distance (Ma et al. 2019, eqs. 1-4)
DISTANCE_KEYS = DEPENDENCY_FEATURES + tuple(CONSTITUENCY_FEATURES)


@dataclass
class LabelSmoothedCrossEntropyWithNSDConfig(LabelSmoothedCrossEntropyCriterionConfig):
    nsd_dist_weight: float = field(
        default=1.0,
        metadata={"help": "joint weight of the distance-aware loss of Ma et al. 2019, eq. 19 (squared error + pairwise "
                          "hinge; each further weighted by --nsd-mse-weight, --nsd-rank-weight); paper: 1"},
    )
    nsd_mse_weight: float = field(
        default=1.0, metadata={"help": "weight of eq. 19's squared error sum_i (d_i - d^_i)^2 (times --nsd-dist-weight)"},
    )
    nsd_rank_weight: float = field(
        default=1.0, metadata={"help": "weight of eq. 19's pairwise ranking hinge (times --nsd-dist-weight)"},
    )
    nsd_ent_weight: float = field(
        default=0.25,
        metadata={"help": "weight of the cross-entropy of the predicted distances, Ma et al. 2019, eq. 20 (paper: 1, on a per-token scale we read as its toolkit's); 0.25 keeps its gradient on the shared layers below the translation's at initialisation"},
    )
    nsd_rank_norm: ChoiceEnum(NSD_RANK_NORMS) = field(
        default="token",
        metadata={"help": "scale of eq. 19's hinge: token = each sentence's hinge / its pairs * its tokens (a sum "
                          "over tokens like the other terms); none = the plain sum over all pairs (0.2)"},
    )
    nsd_dist_units: ChoiceEnum(NSD_DIST_UNITS) = field(
        default="range",
        metadata={"help": "units of eq. 19's distances: range = d and the predicted d divided by the clipping range "
                          "D (--nsd-max-distance), so the squared error and hinge are per-token quantities on the "
                          "translation loss's scale; raw = distance units as eq. 19 is printed (a squared error of "
                          "about 26 per token at initialisation, which swamps translation)"},
    )
    nsd_loss_eos: bool = field(
        default=False,
        metadata={"help": "count the appended </s> (whose d_D attaches it to the last root) in the NSD losses and "
                          "accuracy, as 0.2 did; by default it is left out"},
    )
    nsd_distance_key: str = field(
        default="",
        metadata={"help": "src_syntax key holding the gold distances; empty: the model's own (--nsd-distance)"},
    )


def nsd_losses(logits: Tensor, gold: Tensor, padding_mask: Tensor, counted: Optional[Tensor] = None,
               rank_norm: str = "none", units: str = "raw") -> Dict[str, Tensor]:
    """The source NSD loss terms of Ma et al. (2019) for one batch.

    Args:
        logits: ``(B, T, 2D+1)`` eq. 11 logits.
        gold: ``(B, T)`` gold distances (any integers; clipped to ``±D``).
        padding_mask: ``(B, T)`` True at padding.
        counted: ``(B, T)`` True where a token has a gold distance (default: every real token);
            the criterion leaves out ``</s>`` and lines without a tree here.
        rank_norm: ``--nsd-rank-norm`` (``token`` or ``none``).
        units: ``--nsd-dist-units``: eq. 19 on raw distances, or on distances divided by ``D`` (``range``).

    Returns:
        sums over counted tokens: ``mse`` and ``rank`` (eq. 19, in ``units``), ``ent`` (eq. 20), ``correct``
        (argmax hits) and ``tokens`` (counted tokens).
    """
    mask = ~padding_mask
    if counted is not None:
        mask = mask & counted.to(mask.device)
    max_distance = (logits.size(-1) - 1) // 2
    gold = gold.to(logits.device)
    predicted = expected_distance(logits)  # d̂_i
    hits = logits.argmax(-1).eq(distance_class(gold, max_distance)) & mask
    mse_scale, rank_scale = distance_unit_scales(units, max_distance)
    return {
        "mse": nsd_squared_error(predicted, gold, mask, max_distance) * mse_scale,
        "rank": nsd_rank_hinge(predicted, gold, mask, max_distance, norm=rank_norm) * rank_scale,
        "ent": nsd_cross_entropy(logits, gold, mask),
        "correct": hits.sum(),
        "tokens": mask.sum(),
    }


@register_criterion("label_smoothed_cross_entropy_with_nsd", dataclass=LabelSmoothedCrossEntropyWithNSDConfig)
class LabelSmoothedCrossEntropyWithNSDCriterion(LabelSmoothedCrossEntropyCriterion):
    """fairseq's label-smoothed cross-entropy + Ma et al. 2019, eqs. 19-20 on the source distances."""

    def __init__(
        self,
        task,
        sentence_avg: bool,
        label_smoothing: float,
        ignore_prefix_size: int = 0,
        report_accuracy: bool = False,
        nsd_dist_weight: float = 1.0,
        nsd_ent_weight: float = 0.25,
        nsd_distance_key: str = "",
        nsd_mse_weight: float = 1.0,
        nsd_rank_weight: float = 1.0,
        nsd_rank_norm: str = "token",
        nsd_loss_eos: bool = False,
        nsd_dist_units: str = "range",
    ) -> None:
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        weights = {"nsd_dist_weight": nsd_dist_weight, "nsd_mse_weight": nsd_mse_weight,
                   "nsd_rank_weight": nsd_rank_weight, "nsd_ent_weight": nsd_ent_weight}
        for name, value in weights.items():
            if not 0 <= float(value) < math.inf:  # NaN fails too
                raise UsageError(f"--{name.replace('_', '-')} {value}: expected a finite weight >= 0 (Ma et al. 2019: 1)")
            setattr(self, name, float(value))
        if str(nsd_rank_norm) not in NSD_RANK_NORMS:
            raise UsageError(f"--nsd-rank-norm must be one of {list(NSD_RANK_NORMS)}, got {nsd_rank_norm!r}")
        self.nsd_rank_norm = str(nsd_rank_norm)
        if str(nsd_dist_units) not in NSD_DIST_UNITS:
            raise UsageError(f"--nsd-dist-units must be one of {list(NSD_DIST_UNITS)}, got {nsd_dist_units!r}")
        self.nsd_dist_units = str(nsd_dist_units)
        self.nsd_loss_eos = bool(nsd_loss_eos)
        known = DEPENDENCY_FEATURES + tuple(CONSTITUENCY_FEATURES)
        if nsd_distance_key and nsd_distance_key not in known:
            raise UsageError(f"--nsd-distance-key {quoted(nsd_distance_key)}: not a distance the task gives; "
                             f"expected one of {', '.join(known)} (or leave it out: the model's --nsd-distance)")
        self.nsd_distance_key = nsd_distance_key or None
        if not 0.0 <= float(label_smoothing) < 1.0:  # NaN fails too
            raise UsageError(f"--label-smoothing {label_smoothing}: expected a share in [0, 1) (fairseq's recipes: 0.1)")

    def forward(self, model, sample: Dict[str, Any], reduce: bool = True) -> Tuple[Tensor, int, Dict[str, Any]]:
        """Loss, sample size and logging outputs (see fairseq's criterion), NSD terms added."""
        net_output = model(**sample["net_input"])
        parts, nll_loss, unweighted = self.weighted_terms(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        loss = sum(parts.values())  # eq. 17
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
        for prefix, terms in unweighted.items():
            for name in ("mse", "rank", "ent"):
                logging_output[f"{prefix}{name}"] = terms[name].data
            logging_output[f"{prefix}correct"] = utils.item(terms["correct"].data)
            logging_output[f"{prefix}tokens"] = utils.item(terms["tokens"].data)
        return loss, sample_size, logging_output

    def weighted_terms(self, model, net_output, sample: Dict[str, Any],
                       reduce: bool = True) -> Tuple[Dict[str, Tensor], Tensor, Dict[str, Dict[str, Tensor]]]:
        """Each term of eq. 17 with its weight (their sum is the loss), the translation's NLL, and the
        unweighted distance terms by logging prefix (``nsd_``: source, ``tgt_nsd_``: target).

        Keys: ``translation`` (fairseq's label-smoothed cross-entropy), ``mse``, ``rank`` (eq. 19,
        times ``--nsd-dist-weight`` and their own weights) and ``ent`` (eq. 20, times
        ``--nsd-ent-weight``) of the source, and ``tgt_mse``, ``tgt_rank``, ``tgt_ent`` of the target
        when the decoder predicts distances.
        """
        translation, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        parts = {"translation": translation}
        unweighted = {"nsd_": self.compute_nsd_losses(net_output, sample, model)}
        # target side (Ma et al. 2019, secs. 3.1-3.3; None when the decoder predicts no distances)
        tgt_key = getattr(getattr(model, "decoder", None), "nsd_key", None) or "distance"
        target = target_nsd_losses(net_output, sample, self.target_terms, tgt_key, self.padding_idx,
                                   self.task.target_dictionary.eos())
        if target is not None:
            unweighted["tgt_nsd_"] = target
        for prefix, terms in unweighted.items():
            side = "" if prefix == "nsd_" else "tgt_"
            parts[side + "mse"] = self.nsd_dist_weight * self.nsd_mse_weight * terms["mse"]  # eq. 19
            parts[side + "rank"] = self.nsd_dist_weight * self.nsd_rank_weight * terms["rank"]
            parts[side + "ent"] = self.nsd_ent_weight * terms["ent"]  # eq. 20
        return parts, nll_loss, unweighted

    def target_terms(self, logits: Tensor, gold: Tensor, ignored: Tensor,
                     counted: Optional[Tensor] = None) -> Dict[str, Tensor]:
        """The target's eqs. 19-20: :func:`nsd_losses` with this criterion's hinge normalisation."""
        return nsd_losses(logits, gold, ignored, counted, self.nsd_rank_norm, self.nsd_dist_units)

    def compute_nsd_losses(self, net_output, sample: Dict[str, Any], model=None) -> Dict[str, Tensor]:
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
        key = self.nsd_distance_key or self.model_key(model, syntax)
        gold = syntax.get(key)
        if gold is None:
            raise ValueError(
                f"the batch has no gold distances net_input['src_syntax'][{key!r}] "
                "(use the syntax_translation task with a model whose syntax_inputs() lists it)"
            )
        padding = extra[NSD_MASK_KEY][0]
        counted = torch.ones_like(padding)
        if not self.nsd_loss_eos:
            counted = sample["net_input"]["src_tokens"].ne(self.task.source_dictionary.eos()).to(padding.device)
        if key + "_mask" in syntax:  # constituency: lines without a tree have no gold distance
            counted = counted & syntax[key + "_mask"].to(padding.device)
        return nsd_losses(logits[0], gold, padding, counted, self.nsd_rank_norm, self.nsd_dist_units)

    @staticmethod
    def model_key(model, syntax: Dict[str, Tensor]) -> str:
        """The ``src_syntax`` key of the model's distances (``--nsd-distance``, ``--nsd-roots``).

        Without a model: the one distance key the batch holds (``distance`` if none or several).
        """
        key = getattr(getattr(model, "encoder", None), "nsd_key", None)
        if key is not None:
            return key
        present = [k for k in syntax if k in DISTANCE_KEYS]
        return present[0] if len(present) == 1 else "distance"

    @classmethod
    def reduce_metrics(cls, logging_outputs: List[Dict[str, Any]]) -> None:
        """fairseq's metrics plus ``nsd_mse``, ``nsd_rank``, ``nsd_ent`` (per source token) and ``nsd_acc``."""
        super().reduce_metrics(logging_outputs)
        reduce_nsd_metrics(logging_outputs, "nsd_")  # source side
        reduce_target_nsd_metrics(logging_outputs)  # tgt_nsd_* (target side)
