"""Global syntactic position of Xie et al. 2021, sections 3.2-3.3 and eq. 7.

Three pieces, each called once per encoder forward (batched, no Python loop
over tokens or sentences):

* :class:`SyntacticPathEncoder` -- sec. 3.2, ``s_i = LSTM(p_i)``: the LSTM over
  the root-to-word dependency-label path ``p_i = [label_0, ..., label_n]``,
  computed top-down over the tree level by level (a token's LSTM state
  continues its head's state with its own label), which is exactly the LSTM
  run over each full path (:func:`fairseq_syntax_core.trees.root_paths`), in
  ``max depth + 1`` steps instead of one LSTM run per token.
* :class:`SyntacticPositionLogits` -- sec. 3.3, the second term of eq. 5,
  ``(s_i W_s^Q)(s_j W_s^K)^T / sqrt(d_z)`` per head, masked (0) between tokens of
  different sentences; it is the ``attn_bias`` of
  :class:`~fairseq_syntax.modules.relative_attention.RelativeMultiheadAttention`.
* :func:`syntax_logit_weights` / :func:`average_weight_of_syntax_logits` --
  sec. 4.3, the Average Weight of Syntax Logits (eq. 7), from the content
  logits ``e_ij`` and the syntax logits ``e^s_ij`` a forward recorded.

How an encoder uses them (keys of ``net_input["src_syntax"]``: ``parents``,
``labels``, ``depth``)::

    # once per forward
    pad = src_tokens.eq(padding_idx)                                # (B, T)
    s = self.path_encoder(src_syntax["parents"], src_syntax["labels"],
                          src_syntax["depth"], pad)                # (B, T, d_s)
    same = same_sentence_mask(src_syntax["parents"])               # (B, 1, T, T)
    # in each syntax layer l
    bias = self.gps_logits[l](s, same)                             # (B, H, T, T)
    with layer.self_attn.relative_scope(relative, attn_bias=bias):
        x = TransformerEncoderLayerBase.forward(layer, x, pad)

AWSL for a checkpoint: set ``layer.self_attn.record_logits = True`` on the
syntax layers, run the encoder, and pass ``self_attn.recorded_logits["content"]``
and ``["attn_bias"]`` with the padding mask to :func:`syntax_logit_weights`
(per sample and head; sum and count over a split), or to
:func:`average_weight_of_syntax_logits` for one batch.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq.models.transformer.transformer_decoder import Linear

from fairseq_syntax_core import trees

__all__ = [
    "SyntacticPathEncoder",
    "SyntacticPositionLogits",
    "same_sentence_mask",
    "SyntaxLogitWeights",
    "syntax_logit_weights",
    "average_weight_of_syntax_logits",
]


def same_sentence_mask(parents: Tensor) -> Tensor:
    """``BoolTensor (B, 1, T, T)``: tokens ``i`` and ``j`` are in the same (parser) sentence.

    Xie et al. 2021, sec. 3.3: "avoid undesired syntactic correlation for two words
    from different sentences by simply mask[ing] the second term in equation
    (5)". Sentences are the trees of a line: same :func:`trees.root_index`.
    ``parents`` indexes the padded row (any padding side); self-pointing
    padding is its own one-token sentence (its keys are masked by the
    attention's key padding mask anyway). Compute once per forward and share
    it across the syntax layers.
    """
    root = trees.root_index(parents)
    return (root.unsqueeze(-1) == root.unsqueeze(-2)).unsqueeze(1)


def checked_level_sizes(sizes: Optional[Sequence[int]], total: int) -> Optional[Tuple[int, ...]]:
    """``sizes`` when they are host ints that add up to ``total`` tokens, else None (count again)."""
    if sizes is None or isinstance(sizes, Tensor) or not isinstance(sizes, (tuple, list)) or not sizes:
        return None
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in sizes) or sum(sizes) != total:
        return None
    return tuple(sizes)


class SyntacticPathEncoder(nn.Module):
    """``s_i = LSTM(p_i)`` over root-to-word label paths, top-down (Xie et al. 2021, sec. 3.2).

    ``p_i = [label(root), ..., label(head(i)), label(i)]`` (e.g. John =
    [root, conj, cc]); labels are embedded (``label_embed_dim``) and read by a
    one-layer LSTM of hidden size ``path_dim`` (``d_s``); ``s_i`` is the hidden
    state after the last label of the path (the token's own).

    Computed top-down, one tree level per step for the whole batch: the input
    projection ``W_ih x + b`` is computed once per label (:meth:`label_gates`), not per token; at
    level ``L`` every token of depth ``L`` takes the ``(h, c)`` of its head
    (computed at level ``L - 1``; roots start from zeros) and applies one
    LSTM cell step with its own label. Since a token's path is its head's path
    plus its own label, this equals running the LSTM over each full path
    (``tests/test_gps.py`` checks it against ``nn.LSTM`` on
    :func:`trees.root_paths`). Work: one cell step per real token, in
    ``max depth + 1`` batched steps (padding is skipped and gets zeros).
    The parameters are those of an ``nn.LSTMCell`` (``self.cell``).
    """

    def __init__(
        self,
        num_labels: int,
        label_embed_dim: int,
        path_dim: int,
        padding_idx: Optional[int] = None,
    ) -> None:
        super().__init__()
        self.num_labels = int(num_labels)
        self.label_embed_dim = int(label_embed_dim)
        self.path_dim = int(path_dim)
        self.padding_idx = padding_idx
        self.label_embed = nn.Embedding(num_labels, label_embed_dim, padding_idx=padding_idx)
        nn.init.normal_(self.label_embed.weight, mean=0.0, std=label_embed_dim ** -0.5)
        if padding_idx is not None:
            with torch.no_grad():
                self.label_embed.weight[padding_idx].zero_()
        self.cell = nn.LSTMCell(label_embed_dim, path_dim)

    def forward(
        self,
        parents: Tensor,
        labels: Tensor,
        depth: Optional[Tensor] = None,
        padding_mask: Optional[Tensor] = None,
        level_sizes: Optional[Sequence[int]] = None,
    ) -> Tensor:
        """Path encodings ``s`` (B, T, path_dim); zeros at padding.

        Args:
            parents: ``(B, T)`` 0-based head index in the padded row, roots and
                padding pointing to themselves (``src_syntax["parents"]``).
            labels: ``(B, T)`` dependency-label ids (``src_syntax["labels"]``).
            depth: ``(B, T)`` tree depth, root 0 (``src_syntax["depth"]``);
                derived from ``parents`` when None.
            padding_mask: ``(B, T)`` True at padding (``src_tokens.eq(pad)``).
            level_sizes: :func:`fairseq_syntax_core.trees.level_sizes_of` ``(depth, padding_mask)`` as host ints, made by the
                collater (``src_syntax["depth_level_sizes"]``); counted here (a host sync) when None
                or when they do not add up to ``B * T``.
        """
        if parents.shape != labels.shape or parents.dim() != 2:
            raise ValueError(
                f"parents {tuple(parents.shape)} and labels {tuple(labels.shape)} must both be (B, T)"
            )
        B, T = parents.shape
        N = B * T
        device = parents.device
        if depth is None:
            depth = trees.tree_depth(parents)
        depth = depth.long()
        # global (flattened) head index of every token
        offset = (torch.arange(B, device=device) * T).unsqueeze(1)
        head = (parents.long() + offset).reshape(N)
        level = depth.reshape(N)
        if padding_mask is not None:
            level = level.masked_fill(padding_mask.reshape(N), -1)  # skipped
        # input projection of every label, once: a token's W_ih x + b is its label's row
        gate_table = self.label_gates()  # (num_labels, 4 d)
        dtype = gate_table.dtype
        w_hh = self.cell.weight_hh.to(dtype)

        # tokens sorted by level; each level is a contiguous slice of `order`
        order = torch.argsort(level, stable=True)
        label_sorted = labels.reshape(N).long().index_select(0, order)
        # tokens per slot (slot 0: skipped padding, slot L + 1: depth L): the collater's host ints,
        # else counted here (the one host sync)
        counts = checked_level_sizes(level_sizes, N)
        if counts is None:
            counts = trees.level_sizes_of(depth, padding_mask)
        max_level = len(counts) - 2
        # rank of every token inside its level (to find a head's state in the previous level), on the device
        starts = [0]
        for c in counts:
            starts.append(starts[-1] + c)
        # tokens per slot counted on the device (a depth is below T: T + 1 slots hold any batch)
        width = max(T + 1, len(counts))
        per_slot = torch.zeros(width, dtype=torch.long, device=device).scatter_add_(
            0, level + 1, torch.ones_like(level))
        if level_sizes is not None:  # given sizes must be the counted ones: checked on the device, no host sync
            given = torch.tensor(list(counts) + [0] * (width - len(counts)), device=device)
            torch._assert_async(
                (per_slot == given).all(),
                "src_syntax['depth_level_sizes'] are not the tokens per depth level of this batch (padding "
                "first): leave them out, or pass fairseq_syntax_core.trees.level_sizes_of(depth, padding_mask)",
            )
        slot_start = torch.cumsum(per_slot, 0) - per_slot
        pos = torch.arange(N, device=device)
        rank = torch.empty(N, dtype=torch.long, device=device)
        rank[order] = pos - slot_start[level[order] + 1]

        d = self.path_dim
        h_levels = []
        c_prev = h_prev = None
        for L in range(max_level + 1):
            lo, hi = starts[L + 1], starts[L + 2]  # tokens of depth L (slot L + 1)
            gates = gate_table.index_select(0, label_sorted[lo:hi])
            if L > 0:
                where = rank.index_select(0, head.index_select(0, order[lo:hi]))
                gates = gates + F.linear(h_prev.index_select(0, where), w_hh)
            # LSTMCell gate order i, f, g, o: one sigmoid over all four, g taken from a tanh
            sig = torch.sigmoid(gates)
            c_new = sig[:, :d] * torch.tanh(gates[:, 2 * d : 3 * d])
            if L > 0:
                c_new = c_new + sig[:, d : 2 * d] * c_prev.index_select(0, where)
            h_new = sig[:, 3 * d :] * torch.tanh(c_new)
            h_levels.append(h_new)
            h_prev, c_prev = h_new, c_new
        n_pad = counts[0]
        pieces = [gate_table.new_zeros(n_pad, d)] + h_levels
        h_sorted = torch.cat(pieces, dim=0)  # in `order`
        inverse = torch.empty_like(order)
        inverse[order] = pos
        return h_sorted.index_select(0, inverse).reshape(B, T, d)

    def label_gates(self) -> Tensor:
        """``W_ih e(label) + b_ih + b_hh`` for every label ``(num_labels, 4 * path_dim)``: the LSTM's input term."""
        emb = self.label_embed.weight
        gates = F.linear(emb, self.cell.weight_ih.to(emb.dtype))
        if self.cell.bias_ih is not None:
            gates = gates + (self.cell.bias_ih + self.cell.bias_hh).to(emb.dtype)
        return gates

    def extra_repr(self) -> str:
        return (
            f"num_labels={self.num_labels}, label_embed_dim={self.label_embed_dim}, "
            f"path_dim={self.path_dim}"
        )


class SyntacticPositionLogits(nn.Module):
    """Second term of Xie et al. 2021, eq. 5 for one layer: ``(s_i W_s^Q)(s_j W_s^K)^T / sqrt(d_z)``.

    ``W_s^Q, W_s^K`` project ``s`` (``path_dim``) to ``num_heads * d_z`` with
    ``d_z = embed_dim / num_heads`` (the attention's head size, as in eq. 5);
    no bias (eq. 5 has none). Returns the per-head term ``(B, H, T, T)``, set to
    0 (no contribution) between tokens of different sentences (sec. 3.3).
    Pass it as ``attn_bias`` to the layer's
    :class:`~fairseq_syntax.modules.relative_attention.RelativeMultiheadAttention`,
    which adds it to the content logits ``e_ij`` (first term of eq. 5) before
    the key padding mask and the softmax; padding keys are masked there.

    With :attr:`record` set, the last term is kept (detached) in
    :attr:`last_term` for AWSL (eq. 7); the attention's ``record_logits``
    records it too.
    """

    def __init__(self, path_dim: int, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.path_dim = int(path_dim)
        self.embed_dim = int(embed_dim)
        self.num_heads = int(num_heads)
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = Linear(path_dim, embed_dim, bias=False)  # fairseq's initialisation
        self.k_proj = Linear(path_dim, embed_dim, bias=False)
        self.record = False
        self.last_term: Optional[Tensor] = None

    def forward(self, s: Tensor, same_sentence: Optional[Tensor] = None) -> Tensor:
        """``s (B, T, path_dim)`` -> syntax logits ``(B, H, T, T)``.

        Args:
            s: path encodings from :class:`SyntacticPathEncoder`.
            same_sentence: ``BoolTensor`` broadcastable to ``(B, H, T, T)``
                (:func:`same_sentence_mask`), False where the term is masked;
                None for no masking.
        """
        B, T, _ = s.shape
        H, dz = self.num_heads, self.head_dim
        q = (self.q_proj(s) * self.scaling).view(B, T, H, dz).transpose(1, 2)
        k = self.k_proj(s).view(B, T, H, dz).transpose(1, 2)
        term = torch.matmul(q, k.transpose(-1, -2))  # (B, H, T, T)
        if same_sentence is not None:
            term = term.masked_fill(~same_sentence, 0.0)
        if self.record:
            self.last_term = term.detach()
        return term

    def extra_repr(self) -> str:
        return f"path_dim={self.path_dim}, embed_dim={self.embed_dim}, num_heads={self.num_heads}"


class SyntaxLogitWeights(NamedTuple):
    """Per sample and head ``(B, H)`` shares of the logits (Xie et al. 2021, eq. 7).

    ``content`` is eq. 7 as printed, ``w = 1/N^2 sum_ij |e_ij| / (|e_ij| + |e^s_ij|)``;
    ``syntax`` is ``1/N^2 sum_ij |e^s_ij| / (|e_ij| + |e^s_ij|) = 1 - content``,
    the weight of the syntax logits (the red line of Figure 3; ``content`` is
    the blue line, "the weight of the model's standard attention module").
    ``count`` is ``N^2`` per sample, the number of real pairs averaged.
    """

    syntax: Tensor
    content: Tensor
    count: Tensor


def syntax_logit_weights(
    content: Tensor, syntax: Tensor, padding_mask: Optional[Tensor] = None
) -> SyntaxLogitWeights:
    """Eq. 7 of Xie et al. (2021) per sample and head, over the real (non-pad) token pairs.

    Args:
        content: ``e_ij`` ``(B, H, T, S)``, the normal attention logits (first
            term of eq. 5; ``recorded_logits["content"]`` of the attention).
        syntax: ``e^s_ij`` broadcastable to ``content`` (the second term,
            ``recorded_logits["attn_bias"]`` or ``SyntacticPositionLogits.last_term``).
        padding_mask: ``(B, T)`` True at padding (self-attention, ``T == S``).

    ``N`` counts the line's real tokens (all its sentences, and ``</s>``); pairs
    across sentences have ``e^s = 0`` and count as pure content. A pair with
    ``e = e^s = 0`` counts as content (the syntax term contributes nothing).
    """
    content = content.float()
    syntax = syntax.float().expand_as(content)
    a, b = content.abs(), syntax.abs()
    denom = a + b
    syn_share = torch.where(denom > 0, b / denom.clamp_min(torch.finfo(denom.dtype).tiny), 0.0)
    B, H, T, S = content.shape
    if padding_mask is not None:
        real = ~padding_mask.bool()
        pair = (real[:, :T].unsqueeze(-1) & real[:, :S].unsqueeze(-2)).unsqueeze(1)  # (B,1,T,S)
        syn_share = syn_share * pair
        count = pair.sum(dim=(-1, -2)).float()  # (B, 1)
    else:
        count = torch.full((B, 1), float(T * S), device=content.device)
    syn = syn_share.sum(dim=(-1, -2)) / count.clamp_min(1.0)  # (B, H)
    return SyntaxLogitWeights(syntax=syn, content=1.0 - syn, count=count.squeeze(1))


def average_weight_of_syntax_logits(
    content: Tensor, syntax: Tensor, padding_mask: Optional[Tensor] = None
) -> Tensor:
    """``AWSL_l`` of Xie et al. 2021, sec. 4.3 for one layer and one batch: the syntax share, averaged over samples and heads.

    Returns a scalar tensor (eq. 7's ``w`` is the content share, ``1 - AWSL``;
    see :class:`SyntaxLogitWeights`). Over a whole split, sum
    ``syntax_logit_weights(...).syntax.mean(1)`` and divide by the number of
    samples instead.
    """
    return syntax_logit_weights(content, syntax, padding_mask).syntax.mean()

