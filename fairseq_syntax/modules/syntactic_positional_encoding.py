"""Syntactic positional encodings (SPE) of Duan et al., section III.C, eq. 5.

Eq. 5, for ``n`` features ``f`` (each with its own constant ``c_f``) and a token whose value of
feature ``f`` is ``pos``::

    SPE(pos, 2ni + b_f,     c_f) = sin(pos / c_f^(2ni / d_model))
    SPE(pos, 2ni + b_f + 1, c_f) = cos(pos / c_f^(2ni / d_model))

Reading implemented here (the paper says only "dimensions of different features are
staggered by b"): the offset of the ``f``-th feature (0-based, in the order
``head, depth``) is ``b_f = 2f``, so the ``n`` features take turns in blocks of ``2n``
dimensions: with two features, dimensions ``0,1 | 4,5 | ...`` are the head position's
sin/cos and ``2,3 | 6,7 | ...`` the depth's. ``i`` runs over ``0 .. d_model / (2n) - 1``,
so every feature spans the whole frequency range ``1 .. c_f^(-(1 - 2n/d_model))`` and the
features never overlap (``b_f = f`` would overlap); ``d_model`` must be divisible by ``2n``.
The features' encodings are summed into one ``d_model`` vector, which the encoder adds to the
input together with fairseq's ordinary positional encoding ("As the original PE is
independent from SPE, it will be retained in our model").

Values (Duan et al. 2019, Table I): head ("parent") position = ``src_syntax["heads"]`` (1-based, 0 = root),
constant ``c = 2000``; tree depth with the root counted as 1 = ``src_syntax["depth"] + 1``
(:func:`fairseq_syntax_core.trees.duan_tree_depth`), constant ``c = 400``. ``n`` is the number
of selected features (``--spe-features``; Table V removes one at a time). SPE has no
parameters (the paper contrasts it with trainable embeddings, sec. V).
"""

from typing import Dict, Optional, Sequence, Set, Tuple

import torch
from torch import Tensor, nn

from fairseq_syntax.modules.syntax_embedding import side_input, parse_feature_list
from fairseq_syntax_core.vocabulary import DEPTH, HEADS

__all__ = ["SPE_FEATURES", "SPE_DEFAULT_CONSTANTS", "syntactic_positional_encoding", "SyntacticPositionalEncoding"]

#: SPE feature -> key of ``src_syntax`` (Duan et al. 2019, Table I)
SPE_FEATURES: Dict[str, str] = {"head": HEADS, "depth": DEPTH}
#: c_f of eq. 5 (Duan et al. 2019, sec. III.C)
SPE_DEFAULT_CONSTANTS: Dict[str, float] = {"head": 2000.0, "depth": 400.0}


def syntactic_positional_encoding(values: Tensor, constants: Sequence[float], dim: int) -> Tensor:
    """Eq. 5 of Duan et al. (2019) for ``n`` staggered features.

    Args:
        values: ``(..., n)``: the value ``pos`` of each feature for each token.
        constants: the ``n`` constants ``c_f``.
        dim: ``d_model``, divisible by ``2n``.

    Returns:
        ``(..., dim)`` float32: dimension ``2ni + 2f`` holds ``sin(pos_f / c_f^(2ni/dim))`` and
        ``2ni + 2f + 1`` the cosine (``b_f = 2f``, see the module doc).
    """
    n = values.size(-1)
    if n != len(constants) or n == 0:
        raise ValueError(f"{n} feature values for {len(constants)} constants")
    if dim % (2 * n) != 0:
        raise ValueError(
            f"syntactic positional encoding (Duan et al. 2019, eq. 5): the model dimension {dim} must be "
            f"divisible by 2n = {2 * n} for {n} SPE feature(s)"
        )
    steps = dim // (2 * n)
    two_n_i = 2.0 * n * torch.arange(steps, device=values.device, dtype=torch.float32)  # 2ni
    c = torch.tensor([float(x) for x in constants], device=values.device, dtype=torch.float32)
    inv_freq = torch.exp(-torch.log(c).unsqueeze(-1) * two_n_i / dim)  # (n, steps): c_f^(-2ni/d)
    angle = values.to(torch.float32).unsqueeze(-1) * inv_freq  # (..., n, steps)
    angle = angle.transpose(-1, -2)  # (..., steps, n): index i, then feature f
    out = torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1)  # (..., steps, n, 2)
    return out.flatten(-3)  # dimension i * 2n + 2f + {0: sin, 1: cos}


class SyntacticPositionalEncoding(nn.Module):
    """Duan et al. 2019, eq. 5 over the source tree: head position (c=2000) and tree depth (c=400).

    Args:
        features: subset of ``("head", "depth")`` (``--spe-features``), used in that order.
        dim: ``d_model`` of the encoder (the width of the concatenated input embedding).
        constants: ``c_f`` per feature (``--spe-head-constant``, ``--spe-depth-constant``).
    """

    def __init__(self, features: Sequence[str], dim: int, constants: Optional[Dict[str, float]] = None) -> None:
        super().__init__()
        self.features: Tuple[str, ...] = parse_feature_list(list(features), tuple(SPE_FEATURES), "--spe-features")
        if not self.features:
            raise ValueError("SyntacticPositionalEncoding needs at least one feature")
        merged = dict(SPE_DEFAULT_CONSTANTS, **(constants or {}))
        self.constants: Tuple[float, ...] = tuple(float(merged[f]) for f in self.features)
        self.dim = dim
        if dim % (2 * len(self.features)) != 0:
            raise ValueError(
                f"--spe-features {','.join(self.features)}: the encoder model dimension {dim} must be "
                f"divisible by {2 * len(self.features)} (Duan et al. 2019, eq. 5 staggers {len(self.features)} "
                "sin/cos pairs)"
            )

    def syntax_inputs(self) -> Set[str]:
        """Keys of ``src_syntax`` read by :meth:`forward`."""
        return {SPE_FEATURES[f] for f in self.features}

    def feature_values(self, src_syntax: Optional[Dict[str, Tensor]], src_tokens: Tensor) -> Tensor:
        """``(B, T, n)`` values ``pos`` of eq. 5: head position; depth with the root as 1."""
        values = []
        for f in self.features:  # over features (at most 2), not tokens
            v = side_input(src_syntax, SPE_FEATURES[f], src_tokens, f"--spe-features {f}")
            values.append(v + 1 if f == "depth" else v)  # Duan et al. 2019, Table I depth: root = 1
        return torch.stack(values, dim=-1)

    def forward(self, src_syntax: Optional[Dict[str, Tensor]], src_tokens: Tensor) -> Tensor:
        """``(B, T, dim)`` float32 SPE, the sum of the staggered features (eq. 5)."""
        return syntactic_positional_encoding(self.feature_values(src_syntax, src_tokens), self.constants, self.dim)
