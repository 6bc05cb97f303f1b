"""Predicting syntactic distances, and the losses on the prediction (Ma et al. 2019, eqs. 11, 19-20).

* :class:`DistancePrediction` (``--nsd-predict``): an output component, eq. 11 on the encoder's
  final states; its logits reach the criterion as ``extra["src_nsd_logits"]``. The decoder's own
  predictor (``--nsd-target-predict``) writes ``extra["tgt_nsd_logits"]`` (:mod:`..decoder`).
* :class:`SourceDistanceLoss` and :class:`TargetDistanceLoss`: auxiliary losses of either output,
  ``w_dist (w_mse L_mse + w_rank L_rank) + w_ent L_ent`` (eq. 17 with a weight per term; the
  paper's weights are all 1), weights shared by the two sides (:class:`NsdLossOptions`):

  * ``L_dist`` (eq. 19, joint weight ``--nsd-dist-weight``): ``L_mse = Σ_i (d_i - d̂_i)^2``
    (``--nsd-mse-weight``) plus the pairwise ranking hinge
    ``L_rank = Σ_{i, j>i} [1 - sign(d_i - d_j)(d̂_i - d̂_j)]_+`` of Shen et al. (2018)
    (``--nsd-rank-weight``), with ``d̂_i`` the expectation of the eq. 11 distribution; the hinge
    per token by default (``--nsd-rank-norm token``), or summed over all pairs (``none``, 0.2's scale);
  * ``L_ent`` (eq. 20, ``--nsd-ent-weight``): cross-entropy of eq. 11 against the gold distance.

Which tokens count: on the source, the pieces with a gold distance: not padding, not the appended
``</s>`` (``--nsd-loss-eos`` puts it back, 0.2's behaviour), not the pieces of a line without a
phrase structure when the distance is a constituency one (the batch's ``KEY_mask``). On the
target, the tokens that are neither padding nor the final ``</s>`` (likewise ``KEY_mask``).
All terms are sums over tokens, like fairseq's token-summed NMT loss.

Logged per counted token: ``nsd_mse``, ``nsd_rank``, ``nsd_ent`` (bits), ``nsd_acc`` (%), and
``tgt_nsd_*`` for the target. The readings of the garbled equations are those of
:mod:`fairseq_syntax.modules.syntactic_distance`.
"""

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Set

import torch
from torch import Tensor

from fairseq.dataclass import ChoiceEnum
from fairseq.logging import metrics
from fairseq.models.transformer import Linear

from fairseq_syntax_core.errors import UsageError
from fairseq_syntax_core.oneline import quoted
from fairseq_syntax.data.syntax_features import CONSTITUENCY_FEATURES, DEPENDENCY_FEATURES, PHRASE_FEATURES
from fairseq_syntax.modules.syntactic_distance import (
    NSD_DIST_UNITS,
    NSD_LOGITS_KEY,
    NSD_RANK_NORMS,
    distance_class,
    distance_unit_scales,
    expected_distance,
    nsd_cross_entropy,
    nsd_rank_hinge,
    nsd_squared_error,
)
from fairseq_syntax.modules.target_distance import TGT_NSD_LOGITS_KEY

from ..options import opt
from .auxiliary import SOURCE_PADDING_KEY, AuxiliaryLoss, OutputComponent, register_loss, register_output
from .base import BuildContext, EncoderBatch

__all__ = ["DISTANCE_KEYS", "NsdLossOptions", "DistancePrediction", "SourceDistanceLoss", "TargetDistanceLoss",
           "nsd_losses", "target_nsd_losses", "reduce_nsd_metrics"]

#: the ``src_syntax`` keys that hold a distance (Ma et al. 2019, eqs. 1-4)
DISTANCE_KEYS = DEPENDENCY_FEATURES + tuple(CONSTITUENCY_FEATURES)


@dataclass
class NsdLossOptions:
    """The weights and readings of eqs. 19-20 (criterion options, shared by the source and the target)."""

    nsd_dist_weight: float = opt(1.0, "joint weight of the distance-aware loss of Ma et al. 2019, eq. 19 (squared "
                                 "error + pairwise hinge; each further weighted by --nsd-mse-weight, "
                                 "--nsd-rank-weight); paper: 1")
    nsd_mse_weight: float = opt(1.0, "weight of eq. 19's squared error sum_i (d_i - d^_i)^2 (times --nsd-dist-weight)")
    nsd_rank_weight: float = opt(1.0, "weight of eq. 19's pairwise ranking hinge (times --nsd-dist-weight)")
    nsd_ent_weight: float = opt(0.25, "weight of the cross-entropy of the predicted distances, Ma et al. 2019, eq. 20 "
                                "(paper: 1, on a per-token scale we read as its toolkit's); 0.25 keeps its gradient on "
                                "the shared layers below the translation's at initialisation")
    nsd_rank_norm: ChoiceEnum(NSD_RANK_NORMS) = opt(
        "token", "scale of eq. 19's hinge: token = each sentence's hinge / its pairs * its tokens (a sum over "
        "tokens like the other terms); none = the plain sum over all pairs (0.2)")
    nsd_dist_units: ChoiceEnum(NSD_DIST_UNITS) = opt(
        "range", "units of eq. 19's distances: range = d and the predicted d divided by the clipping range D "
        "(--nsd-max-distance), so the squared error and hinge are per-token quantities on the translation loss's "
        "scale; raw = distance units as eq. 19 is printed (a squared error of about 26 per token at "
        "initialisation, which swamps translation)")
    nsd_loss_eos: bool = opt(False, "count the appended </s> (whose d_D attaches it to the last root) in the NSD "
                             "losses and accuracy, as 0.2 did; by default it is left out")
    nsd_distance_key: str = opt("", "src_syntax key holding the gold distances; empty: the model's own (--nsd-distance)")

    def check(self) -> None:
        for name in ("nsd_dist_weight", "nsd_mse_weight", "nsd_rank_weight", "nsd_ent_weight"):
            value = getattr(self, name)
            if not 0 <= float(value) < math.inf:  # NaN fails too
                raise UsageError(f"--{name.replace('_', '-')} {value}: expected a finite weight >= 0 "
                                 "(Ma et al. 2019: 1)")
            setattr(self, name, float(value))
        if str(self.nsd_rank_norm) not in NSD_RANK_NORMS:
            raise UsageError(f"--nsd-rank-norm must be one of {list(NSD_RANK_NORMS)}, got {self.nsd_rank_norm!r}")
        if str(self.nsd_dist_units) not in NSD_DIST_UNITS:
            raise UsageError(f"--nsd-dist-units must be one of {list(NSD_DIST_UNITS)}, got {self.nsd_dist_units!r}")
        if self.nsd_distance_key and self.nsd_distance_key not in DISTANCE_KEYS:
            raise UsageError(f"--nsd-distance-key {quoted(self.nsd_distance_key)}: not a distance the task gives; "
                             f"expected one of {', '.join(DISTANCE_KEYS)} (or leave it out: the model's --nsd-distance)")
        self.nsd_rank_norm, self.nsd_dist_units = str(self.nsd_rank_norm), str(self.nsd_dist_units)
        self.nsd_loss_eos = bool(self.nsd_loss_eos)


@register_output
class DistancePrediction(OutputComponent):
    """Eq. 11 on the encoder's final states: ``softmax(W_d h_i + b_d)`` over distances ``-D .. D``."""

    name = "nsd_predict"
    output_key = NSD_LOGITS_KEY

    def __init__(self, dim: int, max_distance: int, key: str) -> None:
        super().__init__()
        self.max_distance = max_distance
        self.key = key  # the src_syntax key of the gold distances (--nsd-distance, --nsd-roots, --nsd-units)
        self.proj = Linear(dim, 2 * max_distance + 1)  # fairseq's initialisation

    @classmethod
    def build(cls, ctx: BuildContext) -> Optional["DistancePrediction"]:
        cfg = ctx.cfg
        return cls(ctx.model_dim, cfg.nsd_max_distance, cfg.nsd_key) if cfg.nsd_predict else None

    def inputs(self) -> Set[str]:
        # constituency: which lines have a tree (the loss mask)
        return {self.key} | ({self.key + "_mask"} if self.key + "_mask" in PHRASE_FEATURES else set())

    def forward(self, states: Tensor, batch: EncoderBatch) -> Tensor:
        return self.proj(states).transpose(0, 1)  # B x T x (2D+1)


def nsd_losses(logits: Tensor, gold: Tensor, padding_mask: Tensor, counted: Optional[Tensor] = None,
               rank_norm: str = "none", units: str = "raw") -> Dict[str, Tensor]:
    """The NSD loss terms of Ma et al. (2019) for one batch.

    Args:
        logits: ``(B, T, 2D+1)`` eq. 11 logits.
        gold: ``(B, T)`` gold distances (any integers; clipped to ``±D``).
        padding_mask: ``(B, T)`` True at what never counts (padding).
        counted: ``(B, T)`` True where a token has a gold distance (default: every real token).
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


def reduce_nsd_metrics(logging_outputs: List[Dict[str, Any]], prefix: str) -> None:
    """``PREFIXmse``, ``PREFIXrank``, ``PREFIXent`` (bits) per counted token, ``PREFIXacc`` (%)."""
    tokens = sum(log.get(f"{prefix}tokens", 0) for log in logging_outputs)
    if tokens > 0:
        for name in ("mse", "rank", "ent"):
            total = sum(log.get(f"{prefix}{name}", 0) for log in logging_outputs)
            base = math.log(2) if name == "ent" else 1.0  # the cross-entropy in bits, like fairseq
            metrics.log_scalar(f"{prefix}{name}", total / tokens / base, tokens, round=3)
        correct = sum(log.get(f"{prefix}correct", 0) for log in logging_outputs)
        metrics.log_scalar(f"{prefix}acc", 100.0 * correct / tokens, tokens, round=2)


def target_nsd_losses(logits: Tensor, sample: Dict[str, Any], settings: Any, distance_key: str = "distance",
                      pad: Optional[int] = None, eos: Optional[int] = None) -> Dict[str, Tensor]:
    """Eqs. 19-20 on the target: position ``t`` of ``logits`` predicts the distance of ``target[:, t]``.

    ``sample["target_syntax"][distance_key]`` holds the gold distances; tokens equal to ``pad`` or
    ``eos`` (the target dictionary's) are left out, and with a constituency distance the pieces of a
    line without a tree (``KEY_mask``).
    """
    gold = (sample.get("target_syntax") or {}).get(distance_key)
    if gold is None:
        raise ValueError(
            f"the model predicts target syntactic distances but the batch has no sample['target_syntax']"
            f"[{distance_key!r}]: use --task syntax_translation on a data-bin with parsed targets (the task "
            "collates them when the model's target_syntax_inputs() lists them)"
        )
    target = sample["target"]
    ignored = target.eq(pad) if pad is not None else torch.zeros_like(target, dtype=torch.bool)
    if eos is not None:
        ignored = ignored | target.eq(eos)
    counted = (sample.get("target_syntax") or {}).get(distance_key + "_mask")  # constituency: lines with a tree
    return nsd_losses(logits, gold, ignored, counted.bool() if counted is not None else None,
                      settings.nsd_rank_norm, settings.nsd_dist_units)


class _DistanceLoss(AuxiliaryLoss):
    options = NsdLossOptions

    def weighted(self, terms: Mapping[str, Tensor], settings: Any) -> Dict[str, Tensor]:
        dist = settings.nsd_dist_weight
        return {"mse": dist * settings.nsd_mse_weight * terms["mse"],  # eq. 19
                "rank": dist * settings.nsd_rank_weight * terms["rank"],
                "ent": settings.nsd_ent_weight * terms["ent"]}  # eq. 20

    def reduce_metrics(self, logging_outputs: List[Dict[str, Any]]) -> None:
        reduce_nsd_metrics(logging_outputs, self.prefix)


@register_loss
class SourceDistanceLoss(_DistanceLoss):
    """Eqs. 19-20 on the encoder's predicted distances against the batch's ``src_syntax[KEY]``."""

    output_key = NSD_LOGITS_KEY
    prefix = "nsd_"

    def source_inputs(self, settings: Any) -> Set[str]:
        key = settings.nsd_distance_key  # --nsd-distance-key: gold distances other than the model's own
        return {key} | ({key + "_mask"} if key + "_mask" in PHRASE_FEATURES else set()) if key else set()

    def terms(self, model: Any, net_output: Any, sample: Dict[str, Any], task: Any,
              settings: Any) -> Dict[str, Tensor]:
        extra = net_output[1]
        syntax = sample["net_input"].get("src_syntax") or {}
        key = settings.nsd_distance_key or model_key(model, syntax)
        gold = syntax.get(key)
        if gold is None:
            raise ValueError(
                f"the batch has no gold distances net_input['src_syntax'][{key!r}] "
                "(use the syntax_translation task with a model whose syntax_inputs() lists it)"
            )
        padding = extra[SOURCE_PADDING_KEY][0]
        counted = torch.ones_like(padding)
        if not settings.nsd_loss_eos:
            counted = sample["net_input"]["src_tokens"].ne(task.source_dictionary.eos()).to(padding.device)
        if key + "_mask" in syntax:  # constituency: lines without a tree have no gold distance
            counted = counted & syntax[key + "_mask"].to(padding.device)
        return nsd_losses(extra[self.output_key][0], gold, padding, counted, settings.nsd_rank_norm,
                          settings.nsd_dist_units)


@register_loss
class TargetDistanceLoss(_DistanceLoss):
    """Eqs. 19-20 on the decoder's predicted distances against ``sample["target_syntax"][KEY]``."""

    output_key = TGT_NSD_LOGITS_KEY
    prefix = "tgt_nsd_"
    part_prefix = "tgt_"

    def terms(self, model: Any, net_output: Any, sample: Dict[str, Any], task: Any,
              settings: Any) -> Dict[str, Tensor]:
        from .target_nsd import target_distances  # registered after this module

        component = target_distances(model)
        key = component.key if component is not None else "distance"
        return target_nsd_losses(net_output[1][self.output_key][0], sample, settings, key,
                                 task.target_dictionary.pad(), task.target_dictionary.eos())


def model_key(model: Any, syntax: Mapping[str, Tensor]) -> str:
    """The ``src_syntax`` key of the model's distances (``--nsd-distance``, ``--nsd-roots``).

    Without a model: the one distance key the batch holds (``distance`` if none or several).
    """
    key = getattr(getattr(model, "encoder", None), "nsd_key", None)
    if key is not None:
        return key
    present = [k for k in syntax if k in DISTANCE_KEYS]
    return present[0] if len(present) == 1 else "distance"
