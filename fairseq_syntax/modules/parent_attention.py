"""Parent-scaled self-attention (PASCAL) of Bugliarello & Okazaki (2020), section 3.

"Enhancing Machine Translation with Dependency-Aware Self-Attention" (ACL 2020),
sec. 3 (Parent-Scaled Self-Attention). In each parent-scaled head of the chosen
encoder layer, the scaled dot-product scores ``S = Q K^T / sqrt(d)`` of token
``t`` are multiplied element-wise by a weight distribution centred on the
position ``p_t`` of its dependency parent, ``N = S * D_p``, and the softmax is
applied to ``N`` (so the weights need no renormalisation; the softmax
normalises). The distribution is the normal *density* evaluated at every
key position ``j``::

    D_p[t, j] = N(j; p_t, sigma^2) = exp(-(j - p_t)^2 / (2 sigma^2)) / sqrt(2 pi sigma^2)

(paper default ``sigma^2 = 1``; 5 of 8 heads of the first layer), i.e. not
renormalised over the ``j`` of the sentence. A root's parent is itself. During
training each token's scaling can be dropped with probability
``parent_ignoring`` ("parent ignoring", their dropout-like regulariser; row
weights become 1); default 0.

Split words. PASCAL gives every sub-word piece the parent of its *word*, and
when the parent word is itself split, centres the Gaussian on the middle of the
parent word's pieces (the mean of their positions, possibly fractional). Our
piece trees (projection ``first``, Duan et al. 2019) instead attach every later piece
of a word to the word's first piece with the reserved ``<subword>`` label (rule
``chain``: to the previous piece). :func:`pascal_parent_positions` undoes that
with :func:`fairseq_syntax_core.trees.word_start` (both rules), so with
``subword_parent="mean"`` (default, the paper's rule) every piece of a word
looks at the middle of its parent word, exactly as PASCAL; ``"first"`` centres
on the parent word's first piece instead; ``"tree"`` uses our piece tree as
stored (later pieces then look at their own word's first piece). ``</s>`` is a
one-piece word; in the data-bin's tree its parent is the line's last root (see
``fairseq_syntax/data/syntax_features.py``); PASCAL's code makes it its own parent
(``eos_self=True``, the default of ``--pascal-eos-parent``).

Padding. ``parents`` (``src_syntax["parents"]``) indexes the padded row, and
the key positions ``j`` are positions of the padded row too, so both sides of
``j - p_t`` shift together under left padding: a sentence's weights do not
depend on how much padding precedes it (the bug of the public ``e-bug/pascal``
code, which padded the parent stream on the other side than the source, cannot
happen; ``tests/test_pascal.py`` checks it).

How the encoder uses it (keys of ``src_syntax``: ``parents``, ``labels``)::

    scale = self.pascal(src_syntax["parents"], src_syntax["labels"])   # (B, H, T, T)
    with layer.self_attn.relative_scope(relative, logit_scale=scale):
        x = TransformerEncoderLayerBase.forward(layer, x, pad)

with ``self.pascal = ParentScaledWeights(num_heads, parent_heads=5,
subword_label=task.label_dict.index("<subword>"))``.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch
from torch import Tensor, nn

from fairseq_syntax_core import trees

__all__ = [
    "SUBWORD_PARENT_RULES",
    "pascal_parent_positions",
    "gaussian_parent_weights",
    "ParentScaledWeights",
]

SUBWORD_PARENT_RULES = ("mean", "first", "tree")


def pascal_parent_positions(
    parents: Tensor,
    labels: Optional[Tensor] = None,
    subword_label: Optional[int] = None,
    rule: str = "mean",
) -> Tensor:
    """Parent position ``p_t`` of every piece, as PASCAL defines it (sec. 3), ``FloatTensor (B, T)``.

    Args:
        parents: ``(B, T)`` 0-based head index in the padded row, roots and
            padding pointing to themselves.
        labels: ``(B, T)`` label ids; needed for ``rule`` ``mean``/``first``
            to recover words from the ``<subword>`` arcs.
        subword_label: id of ``<subword>``; None = every piece is a word (then
            all three rules give ``parents``).
        rule: ``mean`` (paper: middle of the parent word's pieces), ``first``
            (the parent word's first piece) or ``tree`` (``parents`` as stored).

    Positions are in the padded row. A root word's parent is itself (its own
    middle piece for ``mean``).
    """
    if rule not in SUBWORD_PARENT_RULES:
        raise ValueError(f"unknown subword parent rule {rule!r}; choose from {SUBWORD_PARENT_RULES}")
    parents = parents.long()
    if rule == "tree" or subword_label is None:
        return parents.to(torch.float32)
    if labels is None:
        raise ValueError(f"subword parent rule {rule!r} needs the label ids (src_syntax['labels'])")
    start = trees.word_start(parents, labels, subword_label)  # first piece of own word
    # first piece of the parent word (first pieces attach to first pieces already;
    # mapping through word_start keeps this right for any projection)
    parent_word = start.gather(-1, parents.gather(-1, start))
    if rule == "first":
        return parent_word.to(torch.float32)
    T = parents.size(-1)
    pos = torch.arange(T, device=parents.device, dtype=torch.float32).expand(parents.shape)
    sums = torch.zeros(parents.shape, dtype=torch.float32, device=parents.device)
    sums = sums.scatter_add(-1, start, pos)
    counts = torch.zeros_like(sums).scatter_add(-1, start, torch.ones_like(pos))
    middle = sums / counts.clamp_min(1.0)  # indexed by a word's first piece
    return middle.gather(-1, parent_word)


def gaussian_parent_weights(parent_pos: Tensor, src_len: int, variance: float = 1.0) -> Tensor:
    """``D_p[b, t, j] = N(j; p_t, variance)``, the normal density at key positions ``j`` (PASCAL sec. 3).

    ``parent_pos (B, T)`` (float, padded-row positions) -> ``FloatTensor (B, T, src_len)``.
    Not renormalised over ``j``: the paper scales the scores by the density itself.
    """
    if variance <= 0:
        raise ValueError(f"variance must be > 0, got {variance}")
    j = torch.arange(src_len, device=parent_pos.device, dtype=torch.float32)
    diff = j.view(1, 1, -1) - parent_pos.float().unsqueeze(-1)
    return torch.exp(diff.pow(2) / (-2.0 * variance)) / math.sqrt(2.0 * math.pi * variance)


class ParentScaledWeights(nn.Module):
    """The ``logit_scale`` of a PASCAL layer: ``D_p`` in the parent heads, 1 elsewhere (sec. 3).

    No parameters. ``parent_heads`` is a number ``n`` (the first ``n`` heads;
    paper: 5 of 8) or explicit head indices. ``variance`` is ``sigma^2`` of the
    Gaussian (paper default 1). ``subword_parent`` and ``subword_label`` as in
    :func:`pascal_parent_positions`. ``parent_ignoring`` is the probability,
    in training only, of leaving a token's row unscaled (per sample, head and
    token).
    """

    def __init__(
        self,
        num_heads: int,
        parent_heads: Union[int, Sequence[int]] = 5,
        variance: float = 1.0,
        subword_parent: str = "mean",
        subword_label: Optional[int] = None,
        parent_ignoring: float = 0.0,
        eos_label: Optional[int] = None,
        eos_self: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(parent_heads, int):
            if not 0 <= parent_heads <= num_heads:
                raise ValueError(f"parent_heads={parent_heads} not in [0, {num_heads}]")
            heads = list(range(parent_heads))
        else:
            heads = sorted(set(int(h) for h in parent_heads))
            if any(h < 0 or h >= num_heads for h in heads):
                raise ValueError(f"parent head indices {heads} out of range for {num_heads} heads")
        if variance <= 0:
            raise ValueError(f"variance must be > 0, got {variance}")
        if subword_parent not in SUBWORD_PARENT_RULES:
            raise ValueError(
                f"unknown subword parent rule {subword_parent!r}; choose from {SUBWORD_PARENT_RULES}"
            )
        if not 0.0 <= parent_ignoring < 1.0:
            raise ValueError(f"parent_ignoring must be in [0, 1), got {parent_ignoring}")
        self.num_heads = int(num_heads)
        self.parent_heads = heads
        self.variance = float(variance)
        self.subword_parent = subword_parent
        self.subword_label = subword_label
        self.parent_ignoring = float(parent_ignoring)
        if eos_self and eos_label is None:
            raise ValueError("eos_self needs eos_label, the label id of </s>")
        self.eos_label = eos_label
        self.eos_self = bool(eos_self)
        mask = torch.zeros(num_heads, dtype=torch.bool)
        mask[heads] = True
        self.register_buffer("head_mask", mask, persistent=False)

    def forward(
        self,
        parents: Tensor,
        labels: Optional[Tensor] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> Tensor:
        """``(B, H, T, T)`` multiplicative logit factors for the layer's attention.

        Args:
            parents: ``src_syntax["parents"]`` ``(B, T)``.
            labels: ``src_syntax["labels"]`` ``(B, T)`` (for the ``mean``/``first`` rules).
            dtype: output dtype (default float32; the attention casts anyway).
        """
        B, T = parents.shape
        p = pascal_parent_positions(parents, labels, self.subword_label, self.subword_parent)
        if self.eos_self:
            if labels is None:
                raise ValueError("PASCAL with </s> as its own parent needs the labels to find </s>")
            own = torch.arange(T, device=p.device, dtype=p.dtype).expand_as(p)
            p = torch.where(labels.eq(self.eos_label), own, p)
        d = gaussian_parent_weights(p, T, self.variance).unsqueeze(1)  # (B, 1, T, T)
        mask = self.head_mask.to(parents.device).view(1, self.num_heads, 1, 1)
        if self.training and self.parent_ignoring > 0.0:
            keep = torch.rand(B, self.num_heads, T, 1, device=parents.device) >= self.parent_ignoring
            mask = mask & keep
        scale = torch.where(mask, d, torch.ones((), dtype=d.dtype, device=d.device))
        return scale if dtype is None else scale.to(dtype)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, parent_heads={self.parent_heads}, variance={self.variance}, "
            f"subword_parent={self.subword_parent!r}, subword_label={self.subword_label}, "
            f"parent_ignoring={self.parent_ignoring}, eos_self={self.eos_self}"
        )
