"""Relative positions and their tables (Shaw et al. 2018; Omote et al. 2019, eqs. 11-20): bucket indices
``clip(relative, k) + k`` and the ``w^K``/``w^V`` tables an attention looks them up in
(:mod:`.relative_attention`)."""

from typing import Optional

import torch
from torch import Tensor, nn

__all__ = ["RelativeEmbedding", "relative_bucket", "sequence_relative_positions"]


def relative_bucket(relative: Tensor, max_distance: int) -> Tensor:
    """Map relative distances to table rows: ``clip(x, k) + k`` (Omote et al. 2019, eq. 15).

    Args:
        relative: integer tensor of relative distances (any shape).
        max_distance: clipping distance ``k`` (or ``l``, eqs. 19-20).

    Returns:
        LongTensor of the same shape with values in ``[0, 2k]``.
    """
    return relative.clamp(-max_distance, max_distance).long() + max_distance


def sequence_relative_positions(
    tgt_len: int, src_len: int, device: Optional[torch.device] = None
) -> Tensor:
    """Relative sequence distances ``j - i`` (Omote et al. 2019, eqs. 13-14), shape ``(T, S)``.

    Queries are the *last* ``tgt_len`` positions of the ``src_len`` keys, i.e.
    query ``i`` is at position ``src_len - tgt_len + i`` and key ``j`` at
    position ``j``. This covers full self-attention (``T == S``) and
    incremental decoding (one query at step ``t`` = number of cached keys,
    keys ``0..t``).
    """
    key_pos = torch.arange(src_len, device=device)
    query_pos = key_pos[src_len - tgt_len :]
    return key_pos.unsqueeze(0) - query_pos.unsqueeze(1)


class RelativeEmbedding(nn.Module):
    """Learned relative position tables ``w^K`` and ``w^V`` (Omote et al. 2019, eqs. 13-14, 19-20).

    Each table has ``2 * max_distance + 1`` rows of size ``head_dim`` and is
    shared across heads (Shaw et al., 2018). Either table can be switched off
    for the ablation of Omote et al. 2019, Table 3 (``keys=False``: eq. 18 falls back to
    eq. 7; ``values=False``: eq. 17 falls back to eq. 5).

    Args:
        max_distance: clipping distance ``k`` (eq. 15) or ``l`` (eqs. 19-20).
        embed_dim: size of each row (the attention head dimension ``d_k``).
        keys: learn a key table ``w^K``.
        values: learn a value table ``w^V``.
    """

    def __init__(
        self, max_distance: int, embed_dim: int, keys: bool = True, values: bool = True
    ) -> None:
        super().__init__()
        if max_distance < 0:
            raise ValueError(f"max_distance must be >= 0, got {max_distance}")
        self.max_distance = int(max_distance)
        self.num_buckets = 2 * self.max_distance + 1
        self.embed_dim = int(embed_dim)
        self.key_table: Optional[nn.Parameter]
        self.value_table: Optional[nn.Parameter]
        if keys:
            self.key_table = nn.Parameter(torch.empty(self.num_buckets, self.embed_dim))
        else:
            self.register_parameter("key_table", None)
        if values:
            self.value_table = nn.Parameter(
                torch.empty(self.num_buckets, self.embed_dim)
            )
        else:
            self.register_parameter("value_table", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for table in (self.key_table, self.value_table):
            if table is not None:
                nn.init.xavier_uniform_(table)

    @property
    def active(self) -> bool:
        """Whether at least one of the key/value tables exists."""
        return self.key_table is not None or self.value_table is not None

    def bucket(self, relative: Tensor) -> Tensor:
        """``clip(relative, k) + k`` as a LongTensor (Omote et al. 2019, eq. 15)."""
        return relative_bucket(relative, self.max_distance)

    def extra_repr(self) -> str:
        return (
            f"max_distance={self.max_distance}, embed_dim={self.embed_dim}, "
            f"keys={self.key_table is not None}, values={self.value_table is not None}"
        )
