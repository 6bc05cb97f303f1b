"""The target-side terms of ``label_smoothed_cross_entropy_with_nsd``: Ma et al. 2019, eqs. 19-20 on the decoder.

With ``--nsd-target-predict`` the decoder's eq. 11 logits ``extra["tgt_nsd_logits"]`` (position
``t`` predicts the distance of ``target[:, t]``) are scored against
``sample["target_syntax"]["distance"]`` (aligned with ``sample["target"]``) by the source's
loss functions (``nsd_losses`` of the criterion: the squared error and the pairwise hinge of
eq. 19, the cross-entropy of eq. 20, with the same readings, clipping and sums). The real
target tokens are those that are neither padding nor the final ``</s>`` (which has no
distance: 0 in the data); with a constituency distance, the pieces of a target line without a
tree are left out too (``KEY_mask``). Weights and the hinge's normalisation are the criterion's
(``--nsd-dist/mse/rank/ent-weight``, ``--nsd-rank-norm``), shared with the source terms.

Logged per real target token: ``tgt_nsd_mse``, ``tgt_nsd_rank``, ``tgt_nsd_ent`` (bits) and
``tgt_nsd_acc`` (%), beside the source's ``nsd_*``.
"""

import math
from typing import Any, Callable, Dict, List, Optional

import torch
from torch import Tensor

from fairseq.logging import metrics

from fairseq_syntax.modules.target_distance import TGT_NSD_LOGITS_KEY

__all__ = ["target_nsd_losses", "no_source_terms", "reduce_target_nsd_metrics"]

#: what a loss-term function takes and returns:
#: ``(logits, gold, ignored, counted) -> {mse, rank, ent, correct, tokens}``
LossTerms = Callable[[Tensor, Tensor, Tensor, Optional[Tensor]], Dict[str, Tensor]]


def target_nsd_losses(net_output: Any, sample: Dict[str, Any], losses: LossTerms,
                      distance_key: str = "distance", pad: Optional[int] = None,
                      eos: Optional[int] = None) -> Optional[Dict[str, Tensor]]:
    """Eqs. 19-20 on the target, or None when the model predicts no target distances.

    Args:
        net_output: the model's ``(decoder_out, extra)``.
        sample: the batch; its ``target_syntax[distance_key]`` holds the gold distances.
        losses: the source's term function (the criterion's ``nsd_losses``), applied unchanged.
        pad, eos: the target dictionary's ids; tokens equal to either are left out.
    """
    extra = net_output[1] if isinstance(net_output, (tuple, list)) and len(net_output) > 1 else {}
    logits = extra.get(TGT_NSD_LOGITS_KEY) if isinstance(extra, dict) else None
    if not logits:
        return None
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
    return losses(logits[0], gold, ignored, counted.bool() if counted is not None else None)


def no_source_terms(net_output: Any) -> Optional[Dict[str, Tensor]]:
    """Source terms of 0 tokens (all zero) for a model whose decoder alone predicts distances, else None."""
    extra = net_output[1] if isinstance(net_output, (tuple, list)) and len(net_output) > 1 else {}
    logits = extra.get(TGT_NSD_LOGITS_KEY) if isinstance(extra, dict) else None
    if not logits:
        return None
    zero = logits[0].new_zeros((), dtype=torch.float32)
    count = torch.zeros((), dtype=torch.long, device=zero.device)
    return {"mse": zero, "rank": zero, "ent": zero, "correct": count, "tokens": count}


def reduce_nsd_metrics(logging_outputs: List[Dict[str, Any]], prefix: str) -> None:
    """``PREFIXmse``, ``PREFIXrank``, ``PREFIXent`` (bits) per counted token, ``PREFIXacc`` (%);
    ``prefix`` is ``nsd_`` (source side) or ``tgt_nsd_`` (target side)."""
    tokens = sum(log.get(f"{prefix}tokens", 0) for log in logging_outputs)
    if tokens > 0:
        for name in ("mse", "rank", "ent"):
            total = sum(log.get(f"{prefix}{name}", 0) for log in logging_outputs)
            base = math.log(2) if name == "ent" else 1.0  # the cross-entropy in bits, like fairseq
            metrics.log_scalar(f"{prefix}{name}", total / tokens / base, tokens, round=3)
        correct = sum(log.get(f"{prefix}correct", 0) for log in logging_outputs)
        metrics.log_scalar(f"{prefix}acc", 100.0 * correct / tokens, tokens, round=2)


def reduce_target_nsd_metrics(logging_outputs: List[Dict[str, Any]]) -> None:
    """``tgt_nsd_mse``, ``tgt_nsd_rank``, ``tgt_nsd_ent`` (bits) per real target token, ``tgt_nsd_acc`` (%)."""
    reduce_nsd_metrics(logging_outputs, "tgt_nsd_")
