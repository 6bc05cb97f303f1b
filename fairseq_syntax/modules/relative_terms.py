"""The terms :class:`~.relative_attention.RelativeMultiheadAttention` adds to attention, and the
fused path that gives the additive ones to ``scaled_dot_product_attention``.

Several relative tables (Omote et al. 2019, eqs. 21-22) are summed through one joint bucket index: one
gather for the keys, one scatter for the values. Additive logit terms (relative keys, Xie et al. (2021)
eq. 5's syntax term, masks) are one float mask of the fused kernel (:func:`fused_attention`).
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from fairseq.modules.multihead_attention import MultiheadAttention

from .relative_positions import RelativeEmbedding

# A list of (table, bucket indices) pairs. Bucket indices are (B, T, S) or
# (T, S) LongTensors with values in [0, table.num_buckets); ``None`` means
# "sequence distance j - i" computed inside the attention from the query and
# (possibly cached) key positions, see ``sequence_relative_positions``.
RelativeInputs = List[Tuple[RelativeEmbedding, Optional[Tensor]]]

__all__ = ["RelativeInputs", "joint_buckets", "joint_logits", "joint_table", "logit_term", "fused_attention"]


def joint_buckets(
    entries: List[Tuple[Tensor, Tensor]], bsz: int, num_heads: int, tgt_len: int, src_len: int
) -> Tuple[Tensor, int]:
    """One index into the joint buckets of several tables: ``((b1 * R2) + b2) * R3 + ...``.

    ``entries`` are ``(table (R_k, d), buckets (B or 1, T, S))``. Returns the index expanded to
    ``(B, H, T, S)`` (a view) and the number of joint rows ``R1 * R2 * ...``: summing the
    tables' terms (eqs. 21-22) then costs one gather (keys) and one scatter (values).
    """
    index = entries[0][1]
    rows = entries[0][0].size(0)
    for table, buckets in entries[1:]:
        index = index * table.size(0) + buckets
        rows *= table.size(0)
    return index.unsqueeze(1).expand(bsz, num_heads, tgt_len, src_len), rows


def joint_logits(parts: List[Tensor]) -> Tensor:
    """Per-table key logits ``(..., R_k)`` summed into the joint buckets of :func:`joint_buckets`."""
    out = parts[0]
    for part in parts[1:]:
        out = (out.unsqueeze(-1) + part.unsqueeze(-2)).flatten(-2)
    return out


def joint_table(tables: List[Tensor]) -> Tensor:
    """Value tables ``(R_k, d)`` summed into the joint rows ``w1[r1] + w2[r2] + ...`` of :func:`joint_buckets`."""
    out = tables[0]
    for table in tables[1:]:
        out = (out.unsqueeze(1) + table.unsqueeze(0)).reshape(-1, out.size(-1))
    return out


def logit_term(
    term: Tensor, name: str, bsz: int, num_heads: int, tgt_len: int, src_len: int
) -> Tensor:
    """``attn_bias`` / ``logit_scale`` as a 4-D view broadcastable to ``(B, H, T, S)``."""
    if term.dim() == 2:
        term = term.unsqueeze(0).unsqueeze(0)
    elif term.dim() == 3:
        term = term.unsqueeze(1)
    ok = term.dim() == 4
    if ok:
        for got, want in zip(term.shape, (bsz, num_heads, tgt_len, src_len)):
            if got not in (1, want):
                ok = False
    if not ok:
        raise ValueError(
            f"{name} of shape {tuple(term.shape)} is not broadcastable to "
            f"(batch={bsz}, heads={num_heads}, tgt_len={tgt_len}, src_len={src_len})"
        )
    return term


def fused_attention(
    module: MultiheadAttention,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    relative: RelativeInputs,
    bucket_list: List[Tensor],
    attn_bias: Optional[Tensor],
    attn_mask: Optional[Tensor],
    key_padding_mask: Optional[Tensor],
    bsz: int,
    tgt_len: int,
    src_len: int,
) -> Tensor:
    """``softmax(q k^T + B) v`` through ``scaled_dot_product_attention``, ``B`` the additive terms.

    ``B`` = relative key logits (eqs. 12, 18, 22) + ``attn_bias`` + ``attn_mask``, the padded keys
    at ``-inf``: the same logits as the explicit path, given to the fused kernel as a float mask
    (``q`` is already scaled, so the kernel's own scale is 1). Returns ``(T, B, C)`` before ``out_proj``.
    """
    num_heads, head_dim = module.num_heads, module.head_dim
    q4 = q.view(bsz, num_heads, tgt_len, head_dim)
    k4 = k.view(bsz, num_heads, src_len, head_dim)
    v4 = v.view(bsz, num_heads, src_len, head_dim)
    bias: Optional[Tensor] = None
    keyed = [(table.key_table, buckets) for (table, _), buckets in zip(relative, bucket_list) if table.key_table is not None]
    if keyed:
        index, rows = joint_buckets(keyed, bsz, num_heads, tgt_len, src_len)
        rel_logits = joint_logits([torch.matmul(q, t.to(q.dtype).t()) for t, _ in keyed])
        bias = rel_logits.view(bsz, num_heads, tgt_len, rows).gather(3, index)
    if attn_bias is not None:
        term = logit_term(attn_bias, "attn_bias", bsz, num_heads, tgt_len, src_len).to(q.dtype)
        bias = term if bias is None else bias + term
    if attn_mask is not None:
        term = attn_mask.to(q.dtype).view(1, 1, tgt_len, src_len)
        bias = term if bias is None else bias + term
    if key_padding_mask is not None:
        pad = key_padding_mask.view(bsz, 1, 1, src_len).to(torch.bool)
        neg_inf = torch.full((), float("-inf"), dtype=q.dtype, device=q.device)
        bias = torch.where(pad, neg_inf, torch.zeros((), dtype=q.dtype, device=q.device) if bias is None else bias)
    if bias is not None:
        bias = bias.to(q.dtype)
    valued = [(table.value_table, buckets) for (table, _), buckets in zip(relative, bucket_list)
              if table.value_table is not None]
    if valued:
        # the probabilities as S extra value columns (an identity, padded to a multiple of 8 for the
        # kernels' alignment): one fused call returns [alpha v | alpha], dropout applied to both alike
        width = -(-src_len // 8) * 8
        eye = torch.eye(src_len, width, dtype=v4.dtype, device=v4.device)
        v4 = torch.cat([v4, eye.expand(bsz, num_heads, src_len, width)], dim=-1)
    dropout = module.dropout_module
    p = dropout.p if (module.training or dropout.apply_during_inference) else 0.0
    attn = torch.nn.functional.scaled_dot_product_attention(
        q4, k4, v4, attn_mask=bias, dropout_p=p, scale=1.0
    )  # (B, H, T, d) or (B, H, T, d + width)
    if valued:
        probs = attn[..., head_dim:head_dim + src_len]
        attn = attn[..., :head_dim]
        # relative values (eqs. 11, 17, 21) as in the explicit path: probabilities per joint bucket @ W^V
        index, rows = joint_buckets(valued, bsz, num_heads, tgt_len, src_len)
        acc_dtype = torch.float32 if probs.dtype in (torch.float16, torch.bfloat16) else probs.dtype
        bucket_probs = probs.new_zeros(bsz, num_heads, tgt_len, rows, dtype=acc_dtype).scatter_add_(
            3, index, probs.to(acc_dtype)
        )
        table = joint_table([t.to(v.dtype) for t, _ in valued])
        attn = attn + torch.matmul(bucket_probs.to(v.dtype), table)
    return attn.permute(2, 0, 1, 3).reshape(tgt_len, bsz, num_heads * head_dim)
