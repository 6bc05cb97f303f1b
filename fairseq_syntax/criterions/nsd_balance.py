"""How strongly each term of Ma et al. (2019)'s eq. 17 pulls on the layers it shares with translation.

The distance terms (eqs. 19-20) are trained through the same encoder or decoder layers as the
translation. A term whose gradient on those layers is much larger than the translation's
decides what the layers learn, whatever its weight was meant to express: with eq. 19's squared
error in raw distance units that was about 100 times the translation's on the decoder, and
the translation collapsed. :func:`term_gradient_norms` measures the gradient norm of each
weighted term on given parameters, for choosing weights and for the test that the defaults keep
every distance term at most as strong as the translation at initialisation
(``benchmarks/nsd_gradients.py`` runs it on a data-bin).
"""

import math
from typing import Dict, Iterable, List

import torch
from torch import nn

__all__ = ["shared_layers", "term_gradient_norms", "balance"]


def shared_layers(model: nn.Module, side: str) -> List[nn.Parameter]:
    """The parameters of the encoder (``side="source"``) or decoder (``"target"``) layers."""
    part = model.encoder if side == "source" else model.decoder
    return [p for p in part.layers.parameters() if p.requires_grad]


def term_gradient_norms(model: nn.Module, criterion, sample: Dict, parameters: Iterable[nn.Parameter]) -> Dict[str, float]:
    """The L2 norm of each weighted term's gradient on ``parameters`` (criterion's ``weighted_terms`` keys)."""
    params = list(parameters)
    net_output = model(**sample["net_input"])
    parts, _, _ = criterion.weighted_terms(model, net_output, sample)
    norms: Dict[str, float] = {}
    for name, term in parts.items():
        grads = torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
        norms[name] = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads if g is not None))
    return norms


def balance(model: nn.Module, criterion, samples: Iterable[Dict]) -> Dict[str, Dict[str, float]]:
    """Mean gradient norm of each weighted term on each side's layers, over ``samples``.

    ``{"source": {"translation": .., "mse": .., "rank": .., "ent": ..}, "target": {"translation": ..,
    "tgt_mse": .., ...}}``, a side only when the model predicts its distances. The model should be
    in eval mode (no dropout) for a reproducible measure.
    """
    sides = [side for side, part in (("source", "encoder"), ("target", "decoder"))
             if getattr(getattr(model, part, None), "nsd_predictor", None) is not None]
    totals: Dict[str, Dict[str, float]] = {side: {} for side in sides}
    count = 0
    for sample in samples:
        count += 1
        for side in sides:
            norms = term_gradient_norms(model, criterion, sample, shared_layers(model, side))
            for name, value in norms.items():
                if name == "translation" or name.startswith("tgt_") == (side == "target"):
                    totals[side][name] = totals[side].get(name, 0.0) + value
    return {side: {name: value / max(count, 1) for name, value in terms.items()} for side, terms in totals.items()}
