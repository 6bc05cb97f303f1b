"""``label_smoothed_cross_entropy_with_nsd``: the name of Ma et al. (2019)'s recipes since 0.2.

The same criterion as ``label_smoothed_cross_entropy_with_auxiliary`` (fairseq's label-smoothed
cross-entropy plus every auxiliary loss the model's outputs call for: here eqs. 19-20 on the
predicted distances, :mod:`fairseq_syntax.models.syntax_transformer.components.nsd_prediction`),
under the name checkpoints and recipes give. Its constructor also takes the NSD weights by
keyword, as in 0.2.
"""

from typing import Any, Dict, Optional

from torch import Tensor

from fairseq.criterions import register_criterion

from fairseq_syntax.criterions.label_smoothed_cross_entropy_with_auxiliary import (
    LabelSmoothedCrossEntropyWithAuxiliaryConfig,
    LabelSmoothedCrossEntropyWithAuxiliaryCriterion,
)
from fairseq_syntax.models.syntax_transformer.components.nsd_prediction import (  # noqa: F401 (its API)
    DISTANCE_KEYS,
    NsdLossOptions,
    SourceDistanceLoss,
    model_key,
    nsd_losses,
)

__all__ = ["LabelSmoothedCrossEntropyWithNSDCriterion", "LabelSmoothedCrossEntropyWithNSDConfig", "nsd_losses"]

LabelSmoothedCrossEntropyWithNSDConfig = LabelSmoothedCrossEntropyWithAuxiliaryConfig


@register_criterion("label_smoothed_cross_entropy_with_nsd", dataclass=LabelSmoothedCrossEntropyWithAuxiliaryConfig)
class LabelSmoothedCrossEntropyWithNSDCriterion(LabelSmoothedCrossEntropyWithAuxiliaryCriterion):
    """fairseq's label-smoothed cross-entropy + Ma et al. 2019, eqs. 19-20 (and any other registered loss)."""

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
        cfg: Any = None,
    ) -> None:
        if cfg is None:  # built by keyword (0.2's API), not by fairseq from its config
            cfg = NsdLossOptions(nsd_dist_weight=nsd_dist_weight, nsd_mse_weight=nsd_mse_weight,
                                 nsd_rank_weight=nsd_rank_weight, nsd_ent_weight=nsd_ent_weight,
                                 nsd_rank_norm=nsd_rank_norm, nsd_dist_units=nsd_dist_units,
                                 nsd_loss_eos=nsd_loss_eos, nsd_distance_key=nsd_distance_key)
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy, cfg)

    def compute_nsd_losses(self, net_output: Any, sample: Dict[str, Any], model: Optional[Any] = None) -> Dict[str, Tensor]:
        """Eqs. 19-20 on the source, from the model's ``extra`` output and the batch's gold distances."""
        return SourceDistanceLoss().terms(model, net_output, sample, self.task, self.settings)
