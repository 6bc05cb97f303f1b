"""Tests for the structural position representations of Wang et al. (2019b, EMNLP)."""

from typing import List, Tuple

import pytest
import torch
from torch import Tensor

from fairseq.modules.sinusoidal_positional_embedding import SinusoidalPositionalEmbedding
from fairseq_syntax.modules.relative_attention import RelativeEmbedding, RelativeMultiheadAttention
from fairseq_syntax.modules.structural_position import (
    StructuralPositionEmbedding,
    sinusoidal_encoding,
    structural_relative_buckets,
)
from fairseq_syntax_core.trees import parents_from_heads, structural_relative_position, tree_depth

# "My father bought a red car ." (paper 000 Figure 2): bought is the root (the
# main verb, Wang et al.'s origin); father, car, "." depend on bought; My on
# father; a and red on car. Depths (absolute structural positions): 2 1 0 2 2 1 1.
WORDS = ["My", "father", "bought", "a", "red", "car", "."]
HEADS = [2, 3, 0, 6, 6, 3, 3]

# rel(i, j) computed by hand, row = query i, column = key j:
#   on one root path: depth_i - depth_j; otherwise sign(i - j) * (depth_i + depth_j)
TABLE = [
    [0, 1, 2, -4, -4, -3, -3],   # My:     father, bought are its ancestors
    [-1, 0, 1, -3, -3, -2, -2],  # father: My is its child
    [-2, -1, 0, -2, -2, -1, -1], # bought: everything is below the root
    [4, 3, 2, 0, -4, 1, -3],     # a:      car, bought are its ancestors; red is a sibling
    [4, 3, 2, 4, 0, 1, -3],      # red
    [3, 2, 1, -1, -1, 0, -2],    # car:    a, red are its children
    [3, 2, 1, 3, 3, 2, 0],       # .
]

# Two parser sentences in one line: "A b . C d ." (b and d are the roots).
MULTI_HEADS = [2, 0, 2, 5, 0, 5]


def left_padded(rows: List[List[int]]) -> Tuple[Tensor, Tensor]:
    T = max(len(r) for r in rows)
    parents = torch.arange(T).repeat(len(rows), 1)
    pad = torch.ones(len(rows), T, dtype=torch.bool)
    for b, h in enumerate(rows):
        off = T - len(h)
        parents[b, off:] = parents_from_heads(torch.tensor(h)) + off
        pad[b, off:] = False
    return parents, pad


def test_wang_relative_structural_positions_by_hand():
    parents = parents_from_heads(torch.tensor([HEADS]))
    depth = tree_depth(parents)
    assert depth.tolist() == [[2, 1, 0, 2, 2, 1, 1]]
    rel = structural_relative_position(parents)
    assert rel.dtype == torch.long and rel.shape == (1, 7, 7)
    assert rel[0].tolist() == TABLE
    assert torch.equal(structural_relative_position(parents, depth), rel)
    # antisymmetric ("query minus key"), zero diagonal
    assert torch.equal(rel, -rel.transpose(-1, -2))
    # unbatched (T,) input works too
    assert structural_relative_position(parents[0]).tolist() == TABLE


def test_tree_path_reading_differs_only_below_the_root():
    """``off_path="tree-path"``: words off one root path are as far apart as their shortest tree path.

    Only "a" and "red" (siblings under "car") have a lowest common ancestor other than the root:
    their path a-car-red is 2 long, where the depth sum (the path through the root) is 4.
    """
    parents = parents_from_heads(torch.tensor([HEADS]))
    expected = [row[:] for row in TABLE]
    expected[3][4], expected[4][3] = -2, 2
    assert structural_relative_position(parents, off_path="tree-path")[0].tolist() == expected
    with pytest.raises(ValueError, match="off_path"):
        structural_relative_position(parents, off_path="shortest")


def test_multi_root_and_left_padding():
    parents = parents_from_heads(torch.tensor([MULTI_HEADS]))
    rel = structural_relative_position(parents)[0]
    # within sentence 1 (A b .): A-b on one path, A-. siblings
    assert rel[0, :3].tolist() == [0, 1, -2]
    # across sentences: never on one root path, signed sum of the depths in their own trees
    assert rel[1, 4].item() == 0   # two roots: -(0 + 0)
    assert rel[0, 4].item() == -1  # A (depth 1) before d (depth 0)
    assert rel[5, 0].item() == 2   # "." of sentence 2 after A
    # a short line left-padded beside a long one: its block equals the line alone
    p, _ = left_padded([MULTI_HEADS, HEADS + [3, 3, 3]])
    off = 10 - 6
    batched = structural_relative_position(p)
    torch.testing.assert_close(batched[0, off:, off:], rel)
    alone7 = structural_relative_position(parents_from_heads(torch.tensor([HEADS + [3, 3, 3]])))
    torch.testing.assert_close(batched[1], alone7[0])


def test_structural_buckets_and_relative_attention():
    parents = parents_from_heads(torch.tensor([HEADS, [2, 0, 2, 2, 2, 4, 4]]))
    b = structural_relative_buckets(parents, None, max_distance=2)
    assert b.shape == (2, 7, 7) and b.min() >= 0 and b.max() <= 4
    expected = (torch.tensor(TABLE).clamp(-2, 2) + 2).tolist()
    assert b[0].tolist() == expected
    # used Shaw-style next to the sequential relative positions
    torch.manual_seed(0)
    T, B, E, H = 7, 2, 8, 2
    mha = RelativeMultiheadAttention(E, H, dropout=0.0, self_attention=True)
    seq = RelativeEmbedding(3, E // H)
    stru = RelativeEmbedding(2, E // H)
    x = torch.randn(T, B, E)
    out, _ = mha(x, x, x, relative=[(seq, None), (stru, b)])
    assert out.shape == (T, B, E) and torch.isfinite(out).all()
    # zero structural tables: same as sequential only
    for prm in stru.parameters():
        torch.nn.init.zeros_(prm)
    out0, _ = mha(x, x, x, relative=[(seq, None), (stru, b)])
    ref, _ = mha(x, x, x, relative=[(seq, None)])
    torch.testing.assert_close(out0, ref)


def test_sinusoids_match_fairseq_table():
    for dim in (8, 9, 16):
        table = SinusoidalPositionalEmbedding.get_embedding(20, dim)  # row n = position n
        got = sinusoidal_encoding(torch.arange(20), dim)
        torch.testing.assert_close(got, table, rtol=1e-5, atol=1e-5)


def test_absolute_structural_position_combination():
    torch.manual_seed(1)
    B, T, C = 2, 9, 8
    p, pad = left_padded([HEADS, [2, 0, 2, 2, 6, 4, 4, 2, 2]])
    depth = tree_depth(p)
    seq_pe = torch.randn(B, T, C)
    summed = StructuralPositionEmbedding(C, combine="sum")(seq_pe, depth, pad)
    torch.testing.assert_close(summed[1], seq_pe[1] + sinusoidal_encoding(depth[1], C))
    assert (summed[0, :2] == 0).all()
    mod = StructuralPositionEmbedding(C)  # nonlinear (default)
    out = mod(seq_pe, depth, pad)
    assert out.shape == (B, T, C) and (out[0, :2] == 0).all()
    ref = torch.tanh(mod.seq_proj(seq_pe) + mod.stru_proj(sinusoidal_encoding(depth, C)))
    torch.testing.assert_close(out[1], ref[1])
    # depth changes the result: a token at depth 0 vs 2 with the same sequential position
    d2 = depth.clone()
    d2[1, 0] += 2
    assert not torch.allclose(mod(seq_pe, d2, pad)[1, 0], out[1, 0])
    # gradients reach the fusion
    out.sum().backward()
    assert mod.seq_proj.weight.grad is not None and mod.stru_proj.weight.grad is not None
    # learned table, clamped at max_depth
    learned = StructuralPositionEmbedding(C, combine="sum", learned=True, max_depth=3)
    deep = torch.tensor([[0, 3, 7]])
    got = learned(torch.zeros(1, 3, C), deep)
    torch.testing.assert_close(got[0, 2], learned.depth_embed.weight[3])
    with pytest.raises(ValueError):
        StructuralPositionEmbedding(C, combine="concat")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_structural_low_precision_finite(dtype):
    torch.manual_seed(2)
    T, B, E, H = 9, 2, 16, 4
    p, pad = left_padded([HEADS, [2, 0, 2, 2, 6, 4, 4, 2, 2]])
    depth = tree_depth(p)
    pe = StructuralPositionEmbedding(E).to(dtype)(torch.randn(B, T, E).to(dtype), depth, pad)
    assert pe.dtype == dtype and torch.isfinite(pe).all()
    mha = RelativeMultiheadAttention(E, H, dropout=0.1, self_attention=True).to(dtype)
    stru = RelativeEmbedding(4, E // H).to(dtype)
    x = (torch.randn(T, B, E) * 10).to(dtype).requires_grad_(True)
    try:
        out, w = mha(x, x, x, key_padding_mask=pad,
                     relative=[(stru, structural_relative_buckets(p, depth, 4))])
    except RuntimeError as e:  # pragma: no cover
        pytest.skip(f"{dtype} not supported on CPU: {e}")
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    out.float().sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(stru.key_table.grad).all()
