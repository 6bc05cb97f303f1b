"""Label-smoothed cross-entropy plus the auxiliary losses of the model's training-only outputs.

``L = L_NMT + Σ_losses Σ_parts w_part L_part``: fairseq's ``label_smoothed_cross_entropy`` plus,
for every registered :class:`~fairseq_syntax.models.syntax_transformer.components.auxiliary.AuxiliaryLoss`
whose output the model returned, its weighted parts (Ma et al. 2019, eq. 17: the distance losses
of :mod:`~fairseq_syntax.models.syntax_transformer.components.nsd_prediction`). The criterion knows
no loss by name: the losses' options (their weights) are composed into its config, their terms are
logged under their prefixes and reduced by the losses themselves. All terms are sums over tokens,
like fairseq's token-summed NMT loss, so the trainer's division by the sample size treats them alike.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from torch import Tensor

from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

from fairseq_syntax.models.syntax_transformer.components import AUXILIARY_LOSSES, LOSS_OPTION_CLASSES
from fairseq_syntax.models.syntax_transformer.components.auxiliary import extra_of
from fairseq_syntax_core.errors import UsageError

__all__ = ["LabelSmoothedCrossEntropyWithAuxiliaryConfig", "LabelSmoothedCrossEntropyWithAuxiliaryCriterion",
           "LossSettings", "loss_settings", "criterion_problem", "check_criterion"]


@dataclass
class LabelSmoothedCrossEntropyWithAuxiliaryConfig(*reversed(LOSS_OPTION_CLASSES),  # type: ignore[misc]
                                                   LabelSmoothedCrossEntropyCriterionConfig):
    """fairseq's label-smoothed cross-entropy options and every registered loss's options."""


@dataclass
class LossSettings(*reversed(LOSS_OPTION_CLASSES)):  # type: ignore[misc]
    """The registered losses' options alone, checked (what the losses read)."""


def loss_settings(cfg: Any = None) -> LossSettings:
    """The losses' options from ``cfg`` (a criterion config or namespace; absent: the default),
    each options class's ``check`` run on them (a bad value is a one-line UsageError naming the flag)."""
    values = {}
    for f in dataclasses.fields(LossSettings):
        value = getattr(cfg, f.name, None) if cfg is not None else None
        values[f.name] = f.default if value is None else value
    settings = LossSettings(**values)
    for options in LOSS_OPTION_CLASSES:
        check = getattr(options, "check", None)
        if check is not None:
            check(settings)
    return settings


@register_criterion("label_smoothed_cross_entropy_with_auxiliary", dataclass=LabelSmoothedCrossEntropyWithAuxiliaryConfig)
class LabelSmoothedCrossEntropyWithAuxiliaryCriterion(LabelSmoothedCrossEntropyCriterion):
    """fairseq's label-smoothed cross-entropy + every auxiliary loss the model's outputs call for."""

    def __init__(self, task, sentence_avg: bool, label_smoothing: float, ignore_prefix_size: int = 0,
                 report_accuracy: bool = False, cfg: Any = None) -> None:
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if not 0.0 <= float(label_smoothing) < 1.0:  # NaN fails too
            raise UsageError(f"--label-smoothing {label_smoothing}: expected a share in [0, 1) (fairseq's recipes: 0.1)")
        self.settings = loss_settings(cfg)

    def forward(self, model, sample: Dict[str, Any], reduce: bool = True) -> Tuple[Tensor, int, Dict[str, Any]]:
        """Loss, sample size and logging outputs (see fairseq's criterion), auxiliary terms added."""
        net_output = model(**sample["net_input"])
        parts, nll_loss, unweighted = self.weighted_terms(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        loss = sum(parts.values())
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
            for name, value in terms.items():  # float sums as tensors, integer counts as numbers
                logging_output[prefix + name] = value.data if value.is_floating_point() else utils.item(value.data)
        return loss, sample_size, logging_output

    def weighted_terms(self, model, net_output, sample: Dict[str, Any],
                       reduce: bool = True) -> Tuple[Dict[str, Tensor], Tensor, Dict[str, Dict[str, Tensor]]]:
        """Each part of the loss with its weight (their sum is the loss), the translation's NLL, and
        each applying loss's unweighted terms by its logging prefix.

        Keys: ``translation`` (fairseq's label-smoothed cross-entropy), then each loss's parts with its
        ``part_prefix`` (NSD: ``mse``, ``rank``, ``ent`` of the source, ``tgt_mse``, ... of the target).
        """
        translation, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        parts = {"translation": translation}
        unweighted: Dict[str, Dict[str, Tensor]] = {}
        extra = extra_of(net_output)
        for loss in self.applying(extra):
            terms = loss.terms(model, net_output, sample, self.task, self.settings)
            unweighted[loss.prefix] = terms
            for name, value in loss.weighted(terms, self.settings).items():
                parts[loss.part_prefix + name] = value
        return parts, nll_loss, unweighted

    def source_inputs(self) -> Set[str]:
        """The ``src_syntax`` keys the losses read beyond what the model lists (the task collates them)."""
        return set().union(*(loss.source_inputs(self.settings) for loss in AUXILIARY_LOSSES))

    def applying(self, extra: Dict[str, Any]) -> List[Any]:
        """The registered losses whose output the model returned (at least one)."""
        losses = [loss for loss in AUXILIARY_LOSSES if loss.applies(extra)]
        if not losses:
            outputs = ", ".join(sorted({loss.output_key for loss in AUXILIARY_LOSSES}))
            raise ValueError(
                f"{self.__class__.__name__} needs a model with a training output one of its losses scores "
                f"({outputs}): e.g. --arch transformer_nsd or transformer_nsd_target, --nsd-predict or "
                "--nsd-target-predict"
            )
        return losses

    @classmethod
    def reduce_metrics(cls, logging_outputs: List[Dict[str, Any]]) -> None:
        """fairseq's metrics plus each registered loss's (``nsd_mse``, ``nsd_acc``, ... per counted token)."""
        super().reduce_metrics(logging_outputs)
        for loss in AUXILIARY_LOSSES:
            loss.reduce_metrics(logging_outputs)


def criterion_problem(criterion: Any, name: str, outputs: Optional[Set[str]], models: Iterable[str]) -> Optional[str]:
    """Why ``criterion`` cannot train the models built (whose training-only outputs are ``outputs``; None: none
    built yet) on the syntax task, or None: a criterion of auxiliary losses that scores none of their outputs, a
    criterion that scores none of the outputs they predict, or a target prefix to ignore (our targets have none)."""
    prefix = getattr(criterion, "ignore_prefix_size", 0) or 0
    if prefix > 0:
        return (f"--ignore-prefix-size {prefix}: the targets of --task syntax_translation have no prefix (a language "
                f"tag) to leave out of the loss; their first {prefix} words would not be trained. Leave it out")
    if outputs is None:
        return None
    scored = sorted({loss.output_key for loss in AUXILIARY_LOSSES})
    arch = ", ".join(sorted(set(models)))
    if not isinstance(criterion, LabelSmoothedCrossEntropyWithAuxiliaryCriterion):
        predicted = sorted(outputs & set(scored))
        if predicted:
            return (f"--criterion {name}: --arch {arch} predicts {', '.join(predicted)} for a loss this criterion does "
                    "not add: train it with --criterion label_smoothed_cross_entropy_with_nsd (its weights at 0 for "
                    "the translation loss alone), or leave the prediction off (--no-nsd-predict, --no-nsd-target-predict)")
        return None
    if outputs & set(scored):
        return None
    return (f"--criterion {name}: --arch {arch} returns none of the outputs its losses score ({', '.join(scored)}): "
            "use an architecture that predicts them (e.g. transformer_nsd, transformer_nsd_target; or --nsd-predict, "
            "--nsd-target-predict), or --criterion label_smoothed_cross_entropy")


def check_criterion(criterion: Any, name: str, outputs: Optional[Set[str]], models: Iterable[str]) -> None:
    """:func:`criterion_problem` as a one-line UsageError."""
    problem = criterion_problem(criterion, name, outputs, models)
    if problem is not None:
        raise UsageError(problem)
