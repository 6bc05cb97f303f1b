"""Relative position representations for self-attention.

Implements the relative position representations of Shaw et al. (2018) and
the dependency-based relative depth representations of Omote et al. (2019)
("Dependency-Based Relative Positional Encoding for Transformer NMT"):

* eqs. 11-15: Shaw et al.; ``a^K_ij = w^K_{clip(j - i, k)}``,
  ``a^V_ij = w^V_{clip(j - i, k)}``;
* eqs. 16-20: relative dependency depth ``dist_ij = depth(n_j) - depth(n_i)``,
  ``b^K_ij = w^K_{clip(dist_ij, l)}``, ``b^V_ij = w^V_{clip(dist_ij, l)}``;
* eqs. 21-22: several relative representations are summed.

Everything is expressed as a list of ``(RelativeEmbedding, bucket indices)``
pairs given to :class:`RelativeMultiheadAttention`. The attention never
materialises a ``B x H x T x S x d`` tensor: the key term is computed as
``q @ W^K^T`` (``(B*H, T, 2k+1)``) followed by a gather over the bucket
indices, and the value term by accumulating the attention probabilities per
bucket (``(B*H, T, 2k+1)``) followed by ``@ W^V``.

Two further hooks on the attention logits serve the other syntax components
(``fairseq_syntax.modules.syntactic_position`` and ``parent_attention``):

* ``attn_bias``: an additive logit term, e.g. the decoupled syntactic term of
  Xie et al. 2021, eq. 5, ``(s_i W_s^Q)(s_j W_s^K)^T / sqrt(d_z)``;
* ``logit_scale``: a multiplicative factor on the logits, e.g. PASCAL's
  parent-scaled scores ``N = S * D_p`` (Bugliarello & Okazaki 2020, sec. 3),
  which scale the scores *before* the softmax (no renormalisation needed:
  the softmax normalises).

With all hooks absent the module defers to fairseq's attention unchanged.
"""

import contextlib
import os
from typing import Dict, Iterator, Optional, Tuple

import torch
from torch import Tensor

from fairseq import utils
from fairseq.modules.multihead_attention import MultiheadAttention

from fairseq_syntax_core.errors import UserError

from .relative_positions import RelativeEmbedding, relative_bucket, sequence_relative_positions
from .relative_terms import RelativeInputs, fused_attention, joint_buckets, joint_logits, joint_table, logit_term

__all__ = [
    "RelativeEmbedding",
    "RelativeMultiheadAttention",
    "RelativeInputs",
    "LogitRecord",
    "relative_bucket",
    "sequence_relative_positions",
]



# What :attr:`RelativeMultiheadAttention.recorded_logits` holds after a forward
# with ``record_logits = True``: ``"content"`` (B, H, T, S) = e_ij before the
# hooks, and ``"attn_bias"`` / ``"logit_scale"`` (4-D, broadcastable) when given.
LogitRecord = Dict[str, Tensor]


class RelativeMultiheadAttention(MultiheadAttention):
    """fairseq :class:`MultiheadAttention` with relative position representations.

    For self-attention, ``forward`` additionally accepts ``relative``, a list
    of ``(RelativeEmbedding, buckets)`` pairs, and computes (Omote et al. 2019
    eqs. 11-12, 17-18, 21-22)::

        e_ij = q_i (k_j + sum_r a^(r)K_ij)^T / sqrt(d)
        z_i  = sum_j alpha_ij (v_j + sum_r a^(r)V_ij)

    with ``a^(r)K_ij = table_r.key_table[buckets_r[b, i, j]]`` (idem values).
    As in fairseq, ``q`` is scaled by ``head_dim ** -0.5`` before the
    products, so the same scale applies to the relative term.

    Two optional logit hooks (forward arguments, or set for a block of calls
    with :meth:`relative_scope`), applied in this order to the scaled logits,
    before ``attn_mask``, the key padding mask and the softmax::

        e_ij  = q_i (k_j + sum_r a^(r)K_ij)^T / sqrt(d)     (content + relative keys)
        e'_ij = (e_ij + attn_bias[b, h, i, j]) * logit_scale[b, h, i, j]

    * ``attn_bias``: additive term, broadcastable to ``(B, H, T, S)``
      (``(B, 1, T, S)``, ``(B, T, S)`` and ``(T, S)`` are accepted); Xie et al. (2021)
      eq. 5 (:class:`~fairseq_syntax.modules.syntactic_position.SyntacticPositionLogits`).
    * ``logit_scale``: multiplicative factor, same shapes; PASCAL's
      ``N = S * D_p`` (:class:`~fairseq_syntax.modules.parent_attention.ParentScaledWeights`),
      heads that are not parent-scaled carry 1.

    Both are cast to the logits' dtype (fp16/bf16 safe as long as the terms
    are finite there). Setting :attr:`record_logits` makes each call store
    detached copies of ``e_ij`` (``"content"``, ``(B, H, T, S)``) and of the
    hooks in :attr:`recorded_logits`, for analyses such as the Average Weight
    of Syntax Logits (Xie et al. 2021, eq. 7,
    :func:`~fairseq_syntax.modules.syntactic_position.average_weight_of_syntax_logits`).

    When ``relative`` is None or empty and neither hook is given nor
    recording asked for (also via :meth:`relative_scope`), this is exactly
    fairseq's ``MultiheadAttention.forward``.
    """

    #: relative values through the fused kernel (True/False); None: ``FAIRSEQ_SYNTAX_FUSED_VALUES``, default off
    fuse_relative_values: Optional[bool] = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._scoped_relative: Optional[RelativeInputs] = None
        self._scoped_attn_bias: Optional[Tensor] = None
        self._scoped_logit_scale: Optional[Tensor] = None
        #: when True, :meth:`forward` stores its logits in :attr:`recorded_logits`
        self.record_logits: bool = False
        self.recorded_logits: Optional[LogitRecord] = None

    @contextlib.contextmanager
    def relative_scope(
        self,
        relative: Optional[RelativeInputs],
        attn_bias: Optional[Tensor] = None,
        logit_scale: Optional[Tensor] = None,
    ) -> Iterator[None]:
        """Use ``relative``, ``attn_bias`` and ``logit_scale`` for calls of :meth:`forward` that do not pass them.

        This lets fairseq's transformer layers, whose ``forward`` call the
        self-attention without these arguments, be reused unchanged: the
        syntax-aware layers wrap ``super().forward`` in this scope. The scope
        sets all three for its duration (``None`` = not used) and restores
        the previous values on exit.
        """
        previous = (self._scoped_relative, self._scoped_attn_bias, self._scoped_logit_scale)
        self._scoped_relative = relative
        self._scoped_attn_bias = attn_bias
        self._scoped_logit_scale = logit_scale
        try:
            yield
        finally:
            (
                self._scoped_relative,
                self._scoped_attn_bias,
                self._scoped_logit_scale,
            ) = previous

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
        relative: Optional[RelativeInputs] = None,
        attn_bias: Optional[Tensor] = None,
        logit_scale: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """Input shape: Time x Batch x Channel (see fairseq ``MultiheadAttention``).

        Args:
            relative: list of ``(RelativeEmbedding, buckets)``; ``buckets`` is
                a LongTensor ``(B, T, S)`` or ``(T, S)`` (broadcast over the
                batch) of row indices into the tables (eq. 15), or ``None``
                for Shaw's sequence distance ``j - i`` computed from the query
                and (cached) key positions. During incremental decoding,
                explicit buckets must cover the current queries only and all
                keys including the cached ones.
            attn_bias: additive logit term broadcastable to ``(B, H, T, S)``
                (see the class docstring), e.g. Xie et al. 2021, eq. 5's syntax term.
            logit_scale: multiplicative logit factor broadcastable to
                ``(B, H, T, S)``, e.g. PASCAL's parent weights.
        """
        if relative is None:
            relative = self._scoped_relative
        if attn_bias is None:
            attn_bias = self._scoped_attn_bias
        if logit_scale is None:
            logit_scale = self._scoped_logit_scale
        active: RelativeInputs = (
            [(table, b) for table, b in relative if table.active]
            if relative is not None
            else []
        )
        if (
            len(active) == 0
            and attn_bias is None
            and logit_scale is None
            and not self.record_logits
        ):
            return super().forward(
                query,
                key,
                value,
                key_padding_mask=key_padding_mask,
                incremental_state=incremental_state,
                need_weights=need_weights,
                static_kv=static_kv,
                attn_mask=attn_mask,
                before_softmax=before_softmax,
                need_head_weights=need_head_weights,
            )
        return self._relative_forward(
            query,
            active,
            key_padding_mask=key_padding_mask,
            incremental_state=incremental_state,
            need_weights=need_weights,
            static_kv=static_kv,
            attn_mask=attn_mask,
            before_softmax=before_softmax,
            need_head_weights=need_head_weights,
            attn_bias=attn_bias,
            logit_scale=logit_scale,
        )

    _logit_term = staticmethod(logit_term)

    def _checked_buckets(
        self,
        table: RelativeEmbedding,
        buckets: Optional[Tensor],
        bsz: int,
        tgt_len: int,
        src_len: int,
        device: torch.device,
    ) -> Tensor:
        """Bucket indices as a ``(B or 1, T, S)`` LongTensor (Shaw's ``j - i`` computed when None)."""
        if buckets is None:
            buckets = table.bucket(sequence_relative_positions(tgt_len, src_len, device))
        if buckets.dim() == 2:
            buckets = buckets.unsqueeze(0)
        if (
            buckets.dim() != 3
            or buckets.size(1) != tgt_len
            or buckets.size(2) != src_len
            or buckets.size(0) not in (1, bsz)
        ):
            raise ValueError(
                f"relative bucket indices of shape {tuple(buckets.shape)} do not "
                f"match (batch={bsz}, tgt_len={tgt_len}, src_len={src_len})"
            )
        return buckets.long()

    def _can_fuse(
        self,
        relative: RelativeInputs,
        need_weights: bool,
        before_softmax: bool,
        logit_scale: Optional[Tensor],
        device: torch.device = torch.device("cpu"),
    ) -> bool:
        """Whether every term is additive on the logits, so that fused attention can take them as its bias.

        A multiplicative scale needs the logits; weights asked for, ``before_softmax``, recorded
        logits, ONNX tracing and sparse attention subclasses keep the explicit path. Relative values
        need the probabilities themselves (eq. 17): the fused kernel returns them as extra value
        columns (see :meth:`_fused_attention`) where :meth:`_fuse_values` says so.
        """
        return (
            not need_weights
            and not before_softmax
            and logit_scale is None
            and not self.record_logits
            and not self.onnx_trace
            and type(self).apply_sparse_mask is MultiheadAttention.apply_sparse_mask
            and (self._fuse_values(device) or all(table.value_table is None for table, _ in relative))
        )

    def _fuse_values(self, device: torch.device) -> bool:
        """Relative values through the fused kernel: :attr:`fuse_relative_values`, else the environment's
        ``FAIRSEQ_SYNTAX_FUSED_VALUES=1`` (benchmarks); off by default.

        Measured on an H100 in fp16 (benchmarks/results/gpu_check_h100_run2.json): the fused kernel
        with a bias gradient and extra value columns trains ``transformer_dep_rel`` at 0.58x of
        ``transformer`` against 0.75x for the explicit softmax, so the explicit path stays the default.
        """
        if self.fuse_relative_values is not None:
            return bool(self.fuse_relative_values)
        setting = os.environ.get("FAIRSEQ_SYNTAX_FUSED_VALUES", "")
        if setting not in ("", "0", "1"):
            raise UserError(f"FAIRSEQ_SYNTAX_FUSED_VALUES={setting!r}: expected 1 (relative values through the "
                            "fused kernel) or 0 (the explicit softmax, the default)")
        return setting == "1"

    def _fused_attention(self, q: Tensor, k: Tensor, v: Tensor, *args) -> Tensor:
        """:func:`~.relative_terms.fused_attention` with this module's heads and dropout."""
        return fused_attention(self, q, k, v, *args)

    def _relative_forward(
        self,
        query: Tensor,
        relative: RelativeInputs,
        key_padding_mask: Optional[Tensor],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]],
        need_weights: bool,
        static_kv: bool,
        attn_mask: Optional[Tensor],
        before_softmax: bool,
        need_head_weights: bool,
        attn_bias: Optional[Tensor] = None,
        logit_scale: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """Self-attention with relative representations (eqs. 11-12, 17-18, 21-22).

        Mirrors the generic path of fairseq's ``MultiheadAttention.forward``
        for self-attention (projections, incremental key/value cache, masks,
        float softmax, dropout) and adds the relative key logits, then
        ``attn_bias`` and ``logit_scale``, before the masks, and the relative
        value term after the attention product.
        """
        if not self.self_attention:
            raise ValueError("relative position representations need self_attention=True")
        if static_kv:
            raise ValueError("relative position representations do not support static_kv")
        if self.bias_k is not None or self.add_zero_attn:
            raise ValueError(
                "relative position representations do not support add_bias_kv/add_zero_attn"
            )
        if self.use_xformers:
            raise ValueError(
                "relative position representations do not support xformers attention"
            )
        if before_softmax and any(t.value_table is not None for t, _ in relative):
            raise ValueError(
                "before_softmax cannot return the relative value term (eq. 17)"
            )
        if need_head_weights:
            need_weights = True

        tgt_len, bsz, embed_dim = query.size()
        if not self.skip_embed_dim_check:
            assert embed_dim == self.embed_dim, f"query dim {embed_dim} != {self.embed_dim}"
        num_heads, head_dim = self.num_heads, self.head_dim

        saved_state: Optional[Dict[str, Optional[Tensor]]] = None
        if incremental_state is not None:
            saved_state = self._get_input_buffer(incremental_state)

        # fairseq scales q before q k^T; the relative key term shares the scale
        q = self.q_proj(query) * self.scaling
        k = self.k_proj(query)
        v = self.v_proj(query)
        q = q.contiguous().view(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * num_heads, head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * num_heads, head_dim).transpose(0, 1)

        if saved_state is not None:
            # saved states are stored with shape (bsz, num_heads, seq_len, head_dim)
            if "prev_key" in saved_state:
                prev_key = saved_state["prev_key"]
                assert prev_key is not None
                k = torch.cat([prev_key.view(bsz * num_heads, -1, head_dim), k], dim=1)
            if "prev_value" in saved_state:
                prev_value = saved_state["prev_value"]
                assert prev_value is not None
                v = torch.cat(
                    [prev_value.view(bsz * num_heads, -1, head_dim), v], dim=1
                )
            prev_key_padding_mask: Optional[Tensor] = None
            if "prev_key_padding_mask" in saved_state:
                prev_key_padding_mask = saved_state["prev_key_padding_mask"]
            key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
                key_padding_mask=key_padding_mask,
                prev_key_padding_mask=prev_key_padding_mask,
                batch_size=bsz,
                src_len=k.size(1),
                static_kv=False,
            )
            saved_state["prev_key"] = k.view(bsz, num_heads, -1, head_dim)
            saved_state["prev_value"] = v.view(bsz, num_heads, -1, head_dim)
            saved_state["prev_key_padding_mask"] = key_padding_mask
            assert incremental_state is not None
            incremental_state = self._set_input_buffer(incremental_state, saved_state)
        src_len = k.size(1)

        if key_padding_mask is not None and key_padding_mask.dim() == 0:
            key_padding_mask = None
        if key_padding_mask is not None:
            assert key_padding_mask.size(0) == bsz
            assert key_padding_mask.size(1) == src_len

        bucket_list = [
            self._checked_buckets(table, buckets, bsz, tgt_len, src_len, q.device)
            for table, buckets in relative
        ]

        if self._can_fuse(relative, need_weights, before_softmax, logit_scale, q.device):
            attn = self._fused_attention(
                q, k, v, relative, bucket_list, attn_bias, attn_mask, key_padding_mask, bsz, tgt_len, src_len
            )
            return self.out_proj(attn), None

        attn_weights = torch.bmm(q, k.transpose(1, 2))
        attn_weights = self.apply_sparse_mask(attn_weights, tgt_len, src_len, bsz)
        assert list(attn_weights.size()) == [bsz * num_heads, tgt_len, src_len]

        # relative key logits (eqs. 12, 18, 22): (q W^K_r^T)[..., bucket_ij], all tables in one gather
        logits4 = attn_weights.view(bsz, num_heads, tgt_len, src_len)
        keyed = [(table.key_table, buckets) for (table, _), buckets in zip(relative, bucket_list) if table.key_table is not None]
        if keyed:
            index, rows = joint_buckets(keyed, bsz, num_heads, tgt_len, src_len)
            rel_logits = joint_logits([torch.matmul(q, t.to(q.dtype).t()) for t, _ in keyed])  # (BH, T, R1*R2*...)
            rel_logits = rel_logits.view(bsz, num_heads, tgt_len, rows)
            # in place: the bmm result is not needed by autograd
            logits4.add_(rel_logits.gather(3, index))

        record: Optional[LogitRecord] = None
        if self.record_logits:
            record = {"content": logits4.detach().clone()}
        if attn_bias is not None:
            bias4 = self._logit_term(
                attn_bias, "attn_bias", bsz, num_heads, tgt_len, src_len
            ).to(logits4.dtype)
            # in place (broadcast into the bmm result); autograd still reaches attn_bias
            logits4 = logits4.add_(bias4)
            if record is not None:
                record["attn_bias"] = bias4.detach()
        if logit_scale is not None:
            scale4 = self._logit_term(
                logit_scale, "logit_scale", bsz, num_heads, tgt_len, src_len
            ).to(logits4.dtype)
            logits4 = logits4 * scale4
            if record is not None:
                record["logit_scale"] = scale4.detach()
        if record is not None:
            self.recorded_logits = record
        attn_weights = logits4.reshape(bsz * num_heads, tgt_len, src_len)

        if attn_mask is not None:
            attn_mask = attn_mask.unsqueeze(0)
            if self.onnx_trace:
                attn_mask = attn_mask.repeat(attn_weights.size(0), 1, 1)
            attn_weights = attn_weights + attn_mask

        if key_padding_mask is not None:
            # don't attend to padding symbols
            attn_weights = attn_weights.view(bsz, num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(
                key_padding_mask.view(bsz, 1, 1, src_len).to(torch.bool), float("-inf")
            )
            attn_weights = attn_weights.view(bsz * num_heads, tgt_len, src_len)

        if before_softmax:
            return attn_weights, v

        attn_weights_float = utils.softmax(attn_weights, dim=-1, onnx_trace=self.onnx_trace)
        attn_weights = attn_weights_float.type_as(attn_weights)
        attn_probs = self.dropout_module(attn_weights)

        attn = torch.bmm(attn_probs, v)
        assert list(attn.size()) == [bsz * num_heads, tgt_len, head_dim]

        # relative values (eqs. 11, 17, 21): sum_j alpha_ij w^V[bucket_ij]
        #   = (probabilities accumulated per bucket) @ W^V, all tables in one scatter:
        #   joint bucket (r1, r2, ...) with row w1[r1] + w2[r2] + ...
        valued = [(table.value_table, buckets) for (table, _), buckets in zip(relative, bucket_list)
                  if table.value_table is not None]
        if valued:
            index, rows = joint_buckets(valued, bsz, num_heads, tgt_len, src_len)
            # accumulate in (at least) float32 for fp16/bf16 inputs
            acc_dtype = torch.float32 if attn_probs.dtype in (torch.float16, torch.bfloat16) else attn_probs.dtype
            probs4 = attn_probs.view(bsz, num_heads, tgt_len, src_len).to(acc_dtype)
            bucket_probs = probs4.new_zeros(bsz, num_heads, tgt_len, rows).scatter_add_(3, index, probs4)
            table = joint_table([t.to(v.dtype) for t, _ in valued])  # (R1*R2*..., d)
            rel_values = torch.matmul(bucket_probs.to(v.dtype), table)  # (B, H, T, d)
            attn = attn + rel_values.view(bsz * num_heads, tgt_len, head_dim)

        if self.onnx_trace and attn.size(1) == 1:
            attn = attn.contiguous().view(tgt_len, bsz, self.embed_dim)
        else:
            attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, self.embed_dim)
        attn = self.out_proj(attn)

        out_weights: Optional[Tensor] = None
        if need_weights:
            out_weights = attn_weights_float.view(
                bsz, num_heads, tgt_len, src_len
            ).transpose(1, 0)
            if not need_head_weights:
                # average attention weights over heads
                out_weights = out_weights.mean(dim=0)
        return attn, out_weights

