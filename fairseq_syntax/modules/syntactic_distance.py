"""Neural syntactic distance (NSD) on the source side, Ma et al., NAACL 2019.

The text of the paper in ``../shared/papers`` is garbled; below, each equation as read and
implemented here.

Distances (eqs. 1-4), ``--nsd-distance`` (:data:`NSD_DISTANCES`, one ``src_syntax`` key each,
derived per batch in :mod:`fairseq_syntax.data.syntax_features`)
    ``dependency``: ``d_D(w_i) = i - h(i)`` (eq. 4), 1-based ``i``, ``h(root) = 0``. Values are
    nonzero integers, negative when the head is to the right; a root gets its own position.
    ``--nsd-roots sentence`` (default): ``i`` of a root is its position within its own parser
    sentence (``distance``), the paper's ``i`` (it parsed one sentence at a time);
    ``--nsd-roots line``: its position in the line (``distance_line``, 0.1-0.2's ``distance``),
    so the root of a second sentence on a line gets a large value. ``--nsd-units word``: ``i`` and
    ``h(i)`` count words, as the paper's parses did, and every piece of a word gets its word's
    ``d_D`` (``distance_word``, ``distance_line_word``); ``piece`` (default): they count BPE pieces.
    ``constituency-height``: ``d_S`` (eq. 1, Shen et al.), the height of the LCA of ``w_i`` and
    ``w_{i+1}``, ``>= 1``, ``H`` at the last piece; ``constituency-depth``: ``d_G``, the number of
    their common ancestors, ``>= 0``; ``constituency-relative``: ``d_R`` (eq. 3), ``d_G``'s
    differences, of either sign (:func:`fairseq_syntax_core.phrase_trees.constituency_distances` on the
    ``phrase`` stream, per source piece). ``</s>`` and the pieces of a line without a tree get 0.
    Everything below takes the distance tensor as an argument and does not care which kind it is.

Which positions carry a gold distance
    The appended ``</s>`` attaches to the last root: its ``d_D`` is a large value that is no
    syntax; it has no constituency distance at all. The losses of eqs. 19-20 and the logged
    accuracy leave out ``</s>``, padding and lines without a tree (``mask`` arguments below;
    the criterion's ``--nsd-loss-eos`` puts ``</s>`` back, 0.2's behaviour). ``</s>`` still gets
    its value as an input (eqs. 5-10, 15-16), as before.

Range (``--nsd-max-distance D``)
    Tables and the classifier need a fixed range: distances are clipped to ``[-D, D]``
    (``max(d) = D``, ``min(d) = -D`` in eqs. 5, 15, 16). The default 64 leaves Multi30k-length
    sentences unclipped except for roots beyond position 64.

Input embedding (eq. 5)
    ``e^d_i = E_d[d_i + (max(d) - min(d) + 1)]`` only has to make the index non-negative; any
    constant shift gives the same model (the table is indexed, never interpolated). We use
    the smallest shift: row ``clip(d_i, -D, D) + D + 1`` in ``1 .. 2D + 1``, and row 0 is the
    padding row (``d_D`` is never 0, but padding positions hold 0).

Combination with the word embedding (eqs. 6, 8-10), ``--nsd-input``
    ``concat``: ``x ⊕ e`` (eq. 8), ``e`` of ``--nsd-embed-dim`` dimensions, so the encoder's model
    dimension grows by that much (the paper has ``x, e ∈ R^d``, which would double it);
    ``add``: ``x + e`` (eq. 9), ``e ∈ R^d``;
    ``linear``: ``W_f (x ⊕ e) + b_f`` with ``W_f ∈ R^{d x 2d}`` (eq. 10; paper's best), ``e ∈ R^d``.
    ``x`` is fairseq's scaled word embedding; ``E_d`` is initialised and scaled like fairseq's word
    embeddings (``N(0, dim^-1/2)``, times ``sqrt(dim)``).

Syntactic positional encoding (eqs. 15-16), ``--nsd-spe-lambda λ``
    ``PE(i)_{2k} = sin(2π (d_i + max(d) - min(d)) / λ^{2k/d})``, ``PE(i)_{2k+1}`` the cosine.
    Read so that "the periods of these two functions vary from 1 to λ_SPE" (in ``d_i``, the
    period of dimension pair ``k`` is ``λ^{2k/d}``) and so that ``d_i + max(d) - min(d)`` is
    non-negative, as the paper requires ("d_i may be negative, so we adjust it"). With integer
    distances the first pairs (periods 1 and close to it) are nearly constant, as the paper's
    definition implies. Added to the input together with the ordinary positional encoding
    (paper sec. 4: "we used not only the syntactic PE but the conventional PE"); best λ = 40.

Output (eq. 11), ``--nsd-predict``
    ``p(d̂_i | h_i) = softmax(W_d h_i + b_d)`` over the ``2D + 1`` values ``-D .. D`` (class
    ``c`` is the distance ``c - D``) on the final encoder states.

Distance-aware loss (eq. 19), after Shen et al. (2018)
    ``L_dist = Σ_i (d_i - d̂_i)^2 + Σ_{i, j>i} [1 - sign(d_i - d_j)(d̂_i - d̂_j)]_+``.
    ``d̂_i`` must be a real number for the squared error and the hinge, while eq. 11 gives a
    distribution: we use its expectation ``d̂_i = Σ_c p(c | h_i) (c - D)`` (differentiable, one
    classifier serves eqs. 19 and 20). Gold ``d_i`` is clipped to ``[-D, D]`` like the classes.
    Pairs ``i < j`` are taken within a padded row (padding excluded). Pairs with
    ``d_i = d_j`` are left out: ``sign(0) = 0`` makes their term the constant 1, which has no
    gradient, so leaving them out changes the reported value but not training.

Scale of the hinge (``--nsd-rank-norm``)
    Eq. 19 sums the hinge over the ``O(n^2)`` pairs of a sentence, while the NMT loss (and the
    squared error) is a sum over tokens: on a 30-piece sentence the hinge has 435 terms.
    ``token`` (default): each sentence's hinge is divided by its number of counted pairs and
    multiplied by its number of tokens (``n_s / |P_s| Σ_{P_s}``), the mean hinge per pair as a
    sum over tokens, so that all terms scale alike with the batch; ``none``: the plain sum of
    eq. 19 (0.2's behaviour).

Units of eq. 19 (``--nsd-dist-units``)
    ``raw``: ``d`` and ``d̂`` in distance units, as eq. 19 is printed. At initialisation the
    squared error is about 26 per target token (``d̂`` is the mean of the classes, near 0)
    and its gradient on the shared layers about 100 times the translation loss's, which swamps
    translation. ``range`` (default): ``d`` and ``d̂`` divided by ``D`` (the hinge's margin of
    one distance unit with them), so the squared error is ``Σ_i ((d_i - d̂_i) / D)^2`` and the
    hinge is the raw one divided by ``D``: per-token quantities within ``[0, 4]`` and
    ``[0, 2 + 1/D]``, summed over tokens like the translation term. The paper gives its loss
    weights as 1 with no unit; its toolkit (OpenNMT) most likely averaged each loss per token,
    which is our reading, not a fact the paper states.

Cross-entropy of the distances (eq. 20)
    ``L_ent = -Σ_i log p(d̂_i = d_i | h_i)``: the garbled ``-Σ p(d_i | h_i) log p(d̂_i | h_i)`` read
    as the cross-entropy between the one-hot gold distribution and eq. 11.

All losses are sums over the tokens of ``mask`` in the batch, like fairseq's NMT loss.
"""

import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq.models.transformer.transformer_decoder import Linear

from fairseq_syntax.modules.syntax_embedding import feature_embedding

__all__ = [
    "NSD_DISTANCES",
    "NSD_ROOTS",
    "NSD_RANK_NORMS",
    "NSD_DIST_UNITS",
    "distance_unit_scales",
    "NSD_UNITS",
    "nsd_distance_key",
    "NSD_LOGITS_KEY",
    "NSD_MASK_KEY",
    "NSD_INPUT_MODES",
    "distance_embedding_index",
    "distance_class",
    "distance_class_values",
    "nsd_positional_encoding",
    "DistanceEmbedding",
    "DistancePredictor",
    "expected_distance",
    "nsd_squared_error",
    "nsd_rank_hinge",
    "nsd_cross_entropy",
]

#: ``--nsd-distance`` -> ``src_syntax`` key (``dependency`` with ``--nsd-roots sentence``; see :func:`nsd_distance_key`)
NSD_DISTANCES: Dict[str, str] = {
    "dependency": "distance",  # d_D, eq. 4
    "constituency-height": "distance_height",  # d_S, eq. 1
    "constituency-depth": "distance_depth",  # d_G, eq. 1
    "constituency-relative": "distance_relative",  # d_R, eq. 3
}
#: ``--nsd-roots``: a root's ``i`` in eq. 4, within its own sentence or within the line
NSD_ROOTS: Tuple[str, ...] = ("sentence", "line")
#: ``--nsd-units``: d_D counted in BPE pieces or in words (pieces of a word share its distance)
NSD_UNITS: Tuple[str, ...] = ("piece", "word")
#: ``--nsd-rank-norm``: the hinge of eq. 19 per token (default) or summed over pairs
NSD_RANK_NORMS: Tuple[str, ...] = ("token", "none")
#: ``--nsd-dist-units``: eq. 19 on distances in units of the clipped range D (default) or raw
NSD_DIST_UNITS: Tuple[str, ...] = ("range", "raw")
#: where the encoder output dict and the model's ``extra`` output carry the eq. 11 logits
#: ``[B x T x (2D+1)]`` and the source padding mask ``[B x T]`` (target side: ``tgt_*`` later)
NSD_LOGITS_KEY = "src_nsd_logits"
NSD_MASK_KEY = "src_nsd_padding_mask"
#: ``--nsd-input`` choices: f_emb of eqs. 8-10
NSD_INPUT_MODES: Tuple[str, ...] = ("none", "concat", "add", "linear")


def nsd_distance_key(distance: str, roots: str = "sentence", units: str = "piece") -> str:
    """The ``src_syntax`` key of ``--nsd-distance distance`` (``--nsd-roots``, ``--nsd-units`` for ``dependency``)."""
    if distance not in NSD_DISTANCES:
        raise ValueError(f"--nsd-distance must be one of {list(NSD_DISTANCES)}, got {distance!r}")
    if roots not in NSD_ROOTS:
        raise ValueError(f"--nsd-roots must be one of {list(NSD_ROOTS)}, got {roots!r}")
    if units not in NSD_UNITS:
        raise ValueError(f"--nsd-units must be one of {list(NSD_UNITS)}, got {units!r}")
    if distance != "dependency":
        if units != "piece":
            raise ValueError(f"--nsd-units {units} works with --nsd-distance dependency; the constituency "
                             "distances are over the phrase structure's leaves, the pieces")
        return NSD_DISTANCES[distance]
    key = "distance_line" if roots == "line" else "distance"
    return key + "_word" if units == "word" else key


def distance_embedding_index(distance: Tensor, max_distance: int, padding_mask: Optional[Tensor]) -> Tensor:
    """Eq. 5 index: ``clip(d, -D, D) + D + 1`` in ``1 .. 2D+1``; padding -> row 0."""
    index = distance.long().clamp(-max_distance, max_distance) + max_distance + 1
    if padding_mask is not None:
        index = index.masked_fill(padding_mask, 0)
    return index


def distance_class(distance: Tensor, max_distance: int) -> Tensor:
    """Eq. 11 class of a gold distance: ``clip(d, -D, D) + D`` in ``0 .. 2D``."""
    return distance.long().clamp(-max_distance, max_distance) + max_distance


def distance_class_values(num_classes: int, device: Optional[torch.device] = None) -> Tensor:
    """The distance of each class of eq. 11: ``c - D`` for ``c = 0 .. 2D`` (float32)."""
    if num_classes % 2 != 1:
        raise ValueError(f"an NSD classifier has 2D + 1 classes, got {num_classes}")
    max_distance = (num_classes - 1) // 2
    return torch.arange(num_classes, device=device, dtype=torch.float32) - max_distance


def nsd_positional_encoding(distance: Tensor, max_distance: int, lam: float, dim: int) -> Tensor:
    """Ma et al. 2019, eqs. 15-16 (read as in the module doc), ``(..., dim)`` float32.

    ``PE_{2k} = sin(2π (d + 2D) / λ^{2k/dim})``, ``PE_{2k+1} = cos(...)``, with ``d`` clipped to
    ``[-D, D]`` (``max(d) - min(d) = 2D``).
    """
    if dim % 2 != 0:
        raise ValueError(f"NSD positional encoding (Ma et al. 2019, eqs. 15-16) needs an even dimension, got {dim}")
    if lam <= 1:
        raise ValueError(f"--nsd-spe-lambda must be > 1, got {lam}")
    shifted = (distance.long().clamp(-max_distance, max_distance) + 2 * max_distance).to(torch.float32)
    two_k = torch.arange(0, dim, 2, device=distance.device, dtype=torch.float32)  # 2k
    period = torch.exp(math.log(lam) * two_k / dim)  # λ^{2k/d}: from 1 to ~λ
    angle = 2.0 * math.pi * shifted.unsqueeze(-1) / period
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).flatten(-2)


class DistanceEmbedding(nn.Module):
    """Distance embeddings combined with the word embedding, Ma et al. 2019, eqs. 5-10.

    Args:
        mode: ``concat`` (eq. 8), ``add`` (eq. 9) or ``linear`` (eq. 10).
        word_dim: ``d``, the word embedding dimension.
        concat_dim: dimension of ``e`` for ``concat`` (``--nsd-embed-dim``); ``add`` and
            ``linear`` use ``d``.
        max_distance: ``D`` (``--nsd-max-distance``).
        scale: multiply ``e`` by ``sqrt(dim(e))`` like fairseq's word embeddings.
    """

    def __init__(self, mode: str, word_dim: int, concat_dim: int, max_distance: int, scale: bool = True) -> None:
        super().__init__()
        if mode not in NSD_INPUT_MODES[1:]:
            raise ValueError(f"--nsd-input must be one of {NSD_INPUT_MODES}, got {mode!r}")
        if max_distance <= 0:
            raise ValueError(f"--nsd-max-distance must be positive, got {max_distance}")
        self.mode = mode
        self.max_distance = max_distance
        self.word_dim = word_dim
        embed_dim = concat_dim if mode == "concat" else word_dim
        if embed_dim <= 0:
            raise ValueError(f"--nsd-embed-dim must be positive for --nsd-input concat, got {embed_dim}")
        self.embed = feature_embedding(2 * max_distance + 2, embed_dim, padding_idx=0)  # E_d, row 0 = pad
        self.scale = math.sqrt(embed_dim) if scale else 1.0
        # W_f ∈ R^{d x 2d}, b_f ∈ R^d (eq. 10); fairseq's Linear initialisation
        self.combine: Optional[nn.Linear] = None
        if mode == "linear":
            self.combine = Linear(2 * word_dim, word_dim)

    @property
    def output_dim(self) -> int:
        """Width of :meth:`forward`'s output: ``d + dim(e)`` for concat, else ``d``."""
        return self.word_dim + self.embed.embedding_dim if self.mode == "concat" else self.word_dim

    def forward(self, word: Tensor, distance: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
        """``f_emb(x, e)`` (eqs. 6, 8-10) for word embeddings ``word (B, T, d)``."""
        e = self.embed(distance_embedding_index(distance, self.max_distance, padding_mask)) * self.scale
        e = e.to(word.dtype)
        if self.mode == "add":
            return word + e
        joined = torch.cat([word, e], dim=-1)
        if self.combine is not None:
            return self.combine(joined)
        return joined


class DistancePredictor(nn.Module):
    """Eq. 11: ``p(d̂_i | h_i) = softmax(W_d h_i + b_d)`` over distances ``-D .. D``."""

    def __init__(self, dim: int, max_distance: int) -> None:
        super().__init__()
        self.max_distance = max_distance
        self.proj = Linear(dim, 2 * max_distance + 1)  # fairseq's initialisation

    def forward(self, states: Tensor) -> Tensor:
        """Logits ``(..., 2D + 1)`` for encoder states ``(..., dim)``."""
        return self.proj(states)


# --------------------------------------------------------------------------- losses


def distance_unit_scales(units: str, max_distance: int) -> Tuple[float, float]:
    """Factors turning eq. 19's raw squared error and hinge into ``units`` (``--nsd-dist-units``)."""
    if units not in NSD_DIST_UNITS:
        raise ValueError(f"--nsd-dist-units must be one of {list(NSD_DIST_UNITS)}, got {units!r}")
    if units == "raw":
        return 1.0, 1.0
    return 1.0 / max_distance ** 2, 1.0 / max_distance


def expected_distance(logits: Tensor) -> Tensor:
    """``d̂_i = Σ_c softmax(logits)_c (c - D)`` (float32), the real-valued prediction used by eq. 19."""
    probs = F.softmax(logits.float(), dim=-1)
    return probs @ distance_class_values(logits.size(-1), logits.device)


def nsd_squared_error(predicted: Tensor, gold: Tensor, mask: Tensor, max_distance: int) -> Tensor:
    """First term of eq. 19: ``Σ_i (d_i - d̂_i)^2`` over ``mask`` (real tokens), gold clipped to ``±D``."""
    target = gold.long().clamp(-max_distance, max_distance).to(predicted.dtype)
    return ((target - predicted) ** 2).masked_fill(~mask, 0.0).sum()


def nsd_rank_hinge(predicted: Tensor, gold: Tensor, mask: Tensor, max_distance: int, norm: str = "none") -> Tensor:
    """Second term of eq. 19: ``Σ_{i, j>i} [1 - sign(d_i - d_j)(d̂_i - d̂_j)]_+`` per row, summed over rows.

    ``predicted``, ``gold``, ``mask``: ``(B, T)``. Only pairs of two tokens of ``mask`` in the
    same row with different gold distances count (see the module doc on ties). Gold is clipped
    to ``±D``. ``norm="token"``: each row's sum times ``n_row / pairs_row`` (``--nsd-rank-norm``).
    """
    if norm not in NSD_RANK_NORMS:
        raise ValueError(f"--nsd-rank-norm must be one of {list(NSD_RANK_NORMS)}, got {norm!r}")
    target = gold.long().clamp(-max_distance, max_distance)
    sign = torch.sign(target.unsqueeze(-1) - target.unsqueeze(-2)).to(predicted.dtype)  # (B, T, T): [i, j]
    diff = predicted.unsqueeze(-1) - predicted.unsqueeze(-2)
    T = predicted.size(-1)
    upper = torch.ones(T, T, dtype=torch.bool, device=predicted.device).triu(diagonal=1)  # j > i
    pairs = mask.unsqueeze(-1) & mask.unsqueeze(-2) & upper & (sign != 0)
    hinge = F.relu(1.0 - sign * diff).masked_fill(~pairs, 0.0)
    if norm == "none":
        return hinge.sum()
    per_row = hinge.sum(dim=(-2, -1))  # (B,)
    n_pairs = pairs.sum(dim=(-2, -1)).to(predicted.dtype)
    n_tokens = mask.sum(dim=-1).to(predicted.dtype)
    return (per_row * n_tokens / n_pairs.clamp(min=1)).sum()


def nsd_cross_entropy(logits: Tensor, gold: Tensor, mask: Tensor) -> Tensor:
    """Eq. 20: ``-Σ_i log p(d̂_i = d_i | h_i)`` over ``mask``, gold clipped to the classes."""
    max_distance = (logits.size(-1) - 1) // 2
    lprobs = F.log_softmax(logits.float(), dim=-1)
    target = distance_class(gold, max_distance)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return nll.masked_fill(~mask, 0.0).sum()
