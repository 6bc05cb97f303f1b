"""Validation of target-side NSD as generation runs it: the translation loss with fed-back distances.

A decoder that reads target distances (Ma et al. 2019, sec. 3.1, ``--nsd-target-input`` or
``--nsd-target-spe-lambda``) trains on the gold distance of each previous token (teacher
forcing), but generation feeds back its own predictions (sec. 3.3). The validation loss that
fairseq logs is computed the training way, so it overstates the model; it also adds the
distance terms, so selecting ``checkpoint_best.pt`` on ``loss`` rewards distance prediction.

:func:`fed_back_logging` scores each validation batch a second time the way generation runs:
the decoder's input distances are those :meth:`~fairseq_syntax.models.syntax_transformer.decoder.SyntaxTransformerDecoder.feedback_distances`
computes, one incremental step per position (as ``SequenceGenerator`` would, with the
reference as the chosen tokens), and the translation's negative log-likelihood of the reference
is summed over its tokens. :func:`reduce_fed_back_metrics` logs, per target token:

``nll_loss_fed``
    that negative log-likelihood, in bits like fairseq's ``nll_loss`` (select checkpoints with
    ``--best-checkpoint-metric nll_loss_fed``);
``nll_loss_gap``
    ``nll_loss_fed - nll_loss``: how much the gold distances flatter the model;
``tgt_nsd_fed_acc``
    the share (%) of fed-back input distances equal to the gold ones (real target tokens).
"""

import math
from typing import Any, Dict, List, Optional

import torch

from fairseq.logging import metrics

from fairseq_syntax.models.syntax_transformer.components.target_nsd import target_distances

__all__ = ["fed_back_logging", "reduce_fed_back_metrics", "selection_advice", "selection_error"]


def selection_advice(metric: str, model) -> Optional[str]:
    """Why selecting ``checkpoint_best.pt`` on ``metric`` misleads for this NSD model, or None.

    ``loss`` adds the distance terms (eqs. 19-20) to the translation's, so a checkpoint that
    predicts distances better wins over one that translates better; for a decoder that reads
    target distances, ``nll_loss`` scores with the gold distances, which generation never has.
    """
    predicts = any(getattr(getattr(model, part, None), "nsd_predictor", None) is not None
                   for part in ("encoder", "decoder"))
    if not predicts:
        return None
    best = "nll_loss_fed" if _reads_target_distances(model) else "nll_loss"
    if metric == "loss":
        return (f"--best-checkpoint-metric loss selects checkpoint_best.pt on translation plus the syntactic "
                f"distance losses (Ma et al. 2019, eqs. 19-20): select on translation with --best-checkpoint-metric {best}")
    if metric == "nll_loss" and best == "nll_loss_fed":
        return ("--best-checkpoint-metric nll_loss scores the translation with the gold target distances, which "
                "generation does not have: --best-checkpoint-metric nll_loss_fed scores it as generation runs")
    return None


def selection_error(metric: str, model) -> Optional[str]:
    """Why ``--best-checkpoint-metric metric`` cannot work for this model (it is never logged), or None."""
    if metric in ("nll_loss_fed", "nll_loss_gap", "tgt_nsd_fed_acc") and not _reads_target_distances(model):
        return (f"--best-checkpoint-metric {metric}: only a decoder that reads target syntactic distances logs it "
                "(Ma et al. (2019)'s target side, --nsd-target-input or --nsd-target-spe-lambda); this model never "
                "would, and fairseq would stop at the first validation: use nll_loss or loss")
    return None


def _reads_target_distances(model) -> bool:
    component = target_distances(model)
    return component is not None and component.feedback is not None


@torch.no_grad()
def fed_back_logging(model, criterion, sample: Dict[str, Any]) -> Dict[str, Any]:
    """Sums for :func:`reduce_fed_back_metrics` of one validation batch; empty for other models.

    Needs the batch's gold input distances (``net_input["tgt_syntax"]``) only to measure how
    often the fed-back ones agree; the fed-back loss itself uses none of them.
    """
    if not _reads_target_distances(model) or not sample or "net_input" not in sample \
            or not callable(getattr(criterion, "compute_loss", None)):
        return {}
    decoder, key = model.decoder, target_distances(model).key
    net_input = sample["net_input"]
    gold = (net_input.get("tgt_syntax") or {}).get(key)
    if gold is None:
        return {}
    encoder_out = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"],
                                src_syntax=net_input.get("src_syntax"))
    prev = net_input["prev_output_tokens"]
    fed = decoder.feedback_distances(prev, encoder_out)
    decoder_out = decoder(prev, encoder_out=encoder_out, src_lengths=net_input["src_lengths"],
                          tgt_syntax={**net_input["tgt_syntax"], key: fed})
    _, nll = criterion.compute_loss(model, decoder_out, sample, reduce=True)
    # the input distance of a real target token: every position but the leading </s> and padding
    real = prev.ne(decoder.padding_idx) & prev.ne(decoder.dictionary.eos())
    return {
        "nll_loss_fed": nll.data,
        "tgt_nsd_fed_agree": int((fed.eq(gold.to(fed.device)) & real).sum()),
        "tgt_nsd_fed_tokens": int(real.sum()),
    }


def reduce_fed_back_metrics(logging_outputs: List[Dict[str, Any]]) -> None:
    """``nll_loss_fed`` (bits per target token), ``nll_loss_gap`` and ``tgt_nsd_fed_acc`` (%), when logged."""
    if not any("nll_loss_fed" in log for log in logging_outputs):
        return
    ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
    fed = sum(float(log.get("nll_loss_fed", 0)) for log in logging_outputs)
    if ntokens > 0:
        metrics.log_scalar("nll_loss_fed", fed / ntokens / math.log(2), ntokens, round=3)
        if any("nll_loss" in log for log in logging_outputs):
            metrics.log_derived("nll_loss_gap", _gap)
    tokens = sum(log.get("tgt_nsd_fed_tokens", 0) for log in logging_outputs)
    if tokens > 0:
        agree = sum(log.get("tgt_nsd_fed_agree", 0) for log in logging_outputs)
        metrics.log_scalar("tgt_nsd_fed_acc", 100.0 * agree / tokens, tokens, round=2)


def _gap(meters) -> float:
    return round(float(meters["nll_loss_fed"].avg) - float(meters["nll_loss"].avg), 3)
