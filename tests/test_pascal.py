"""Tests for parent-scaled self-attention (PASCAL, Bugliarello & Okazaki 2020, sec. 3)."""

import math
from typing import List, Tuple

import pytest
import torch
from torch import Tensor

from fairseq_syntax.modules.parent_attention import (
    ParentScaledWeights,
    gaussian_parent_weights,
    pascal_parent_positions,
)
from fairseq_syntax.modules.relative_attention import RelativeMultiheadAttention
from fairseq_syntax_core.trees import parents_from_heads, word_start

SUB = 9  # id of the <subword> label in these tests


def left_padded(rows: List[List[int]], labels: List[List[int]]) -> Tuple[Tensor, Tensor, Tensor]:
    """Collate stored heads like the dataset: parents index the LEFT-padded row."""
    T = max(len(r) for r in rows)
    B = len(rows)
    parents = torch.arange(T).repeat(B, 1)
    lab = torch.zeros(B, T, dtype=torch.long)
    pad = torch.ones(B, T, dtype=torch.bool)
    for b, (h, l) in enumerate(zip(rows, labels)):
        off = T - len(h)
        parents[b, off:] = parents_from_heads(torch.tensor(h)) + off
        lab[b, off:] = torch.tensor(l)
        pad[b, off:] = False
    return parents, lab, pad


def normal_pdf(x: float, mu: float, var: float) -> float:
    return math.exp(-((x - mu) ** 2) / (2 * var)) / math.sqrt(2 * math.pi * var)


# "My father bought a red car ." (paper 000 Figure 2): parents (0-based) 1 2 2 5 5 2 2
HEADS = [2, 3, 0, 6, 6, 3, 3]
PARENT_POS = [1, 2, 2, 5, 5, 2, 2]  # the root is its own parent


def test_pascal_weights_known_layout_by_hand():
    parents, labels, _ = left_padded([HEADS], [[1] * 7])
    w = gaussian_parent_weights(pascal_parent_positions(parents, labels, SUB), 7, variance=1.0)
    assert w.shape == (1, 7, 7)
    for t in range(7):
        for j in range(7):
            assert w[0, t, j].item() == pytest.approx(normal_pdf(j, PARENT_POS[t], 1.0), rel=1e-6)
    # the density itself (not renormalised over the sentence): peak 1/sqrt(2 pi) at the parent
    assert w[0, 0, 1].item() == pytest.approx(1 / math.sqrt(2 * math.pi), rel=1e-6)
    w4 = gaussian_parent_weights(pascal_parent_positions(parents, labels, SUB), 7, variance=4.0)
    assert w4[0, 3, 0].item() == pytest.approx(normal_pdf(0, 5, 4.0), rel=1e-6)


def test_pascal_weights_under_left_padding_equal_the_sentence_alone():
    """The e-bug/pascal bug (parent stream padded on the other side) cannot happen here."""
    long_heads = [2, 0, 2, 2, 6, 4, 4, 2, 2, 2, 2, 2]  # 12 tokens
    alone_p, alone_l, _ = left_padded([HEADS], [[1] * 7])
    p, l, pad = left_padded([HEADS, long_heads], [[1] * 7, [1] * 12])
    off = 12 - 7
    mod = ParentScaledWeights(num_heads=4, parent_heads=2, subword_label=SUB).eval()
    alone = mod(alone_p, alone_l)
    batched = mod(p, l)
    assert batched.shape == (2, 4, 12, 12)
    torch.testing.assert_close(batched[0, :, off:, off:], alone[0])
    # in padded coordinates each row peaks at its parent's padded position
    for t in range(7):
        assert int(batched[0, 0, off + t].argmax()) == off + PARENT_POS[t]
    # the test is sensitive: parents left unshifted (as if padded on the other side) differ
    wrong = p.clone()
    wrong[0, off:] = parents_from_heads(torch.tensor(HEADS))
    assert not torch.allclose(mod(wrong, l)[0, :, off:, off:], alone[0])


# Words: A story(sto@@ r@@ y) ends well(well@@ done); A->story, story->ends (root), well->ends.
# Pieces:      0:A  1:sto 2:r 3:y 4:ends 5:well 6:done
FIRST_HEADS = [2, 5, 2, 2, 0, 5, 6]      # projection "first" (1-based, 0 = root)
CHAIN_HEADS = [2, 5, 2, 3, 0, 5, 6]      # projection "chain"
PIECE_LABELS = [1, 2, SUB, SUB, 3, 4, SUB]


@pytest.mark.parametrize("heads", [FIRST_HEADS, CHAIN_HEADS], ids=["first", "chain"])
def test_subword_parents_as_the_paper_specifies(heads):
    parents, labels, _ = left_padded([heads, [0] * 1 + [1] * 9], [PIECE_LABELS, [1] * 10])
    off = 3
    ws = word_start(parents, labels, SUB)
    assert (ws[0, off:] - off).tolist() == [0, 1, 1, 1, 4, 5, 5]
    # paper: every piece gets its word's parent, at the middle of the parent word's pieces
    mean = pascal_parent_positions(parents, labels, SUB, "mean")[0, off:] - off
    assert mean.tolist() == [2.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    first = pascal_parent_positions(parents, labels, SUB, "first")[0, off:] - off
    assert first.tolist() == [1.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    tree = pascal_parent_positions(parents, labels, SUB, "tree")[0, off:] - off
    assert tree.tolist() == (parents_from_heads(torch.tensor(heads)).float()).tolist()
    # without a <subword> id every piece is its own word
    assert torch.equal(pascal_parent_positions(parents, labels, None, "mean"), parents.float())


def test_head_selection_and_parent_ignoring():
    parents, labels, _ = left_padded([HEADS], [[1] * 7])
    d = gaussian_parent_weights(pascal_parent_positions(parents, labels, SUB), 7)
    mod = ParentScaledWeights(num_heads=8, parent_heads=5, subword_label=SUB).eval()
    w = mod(parents, labels)
    for h in range(8):
        if h < 5:
            torch.testing.assert_close(w[0, h], d[0])
        else:
            assert (w[0, h] == 1).all()
    w = ParentScaledWeights(num_heads=4, parent_heads=[1, 3]).eval()(parents, labels, dtype=torch.bfloat16)
    assert w.dtype == torch.bfloat16
    assert (w[0, 0] == 1).all() and (w[0, 2] == 1).all() and not (w[0, 1] == 1).all()
    # parent ignoring: in training some rows are left unscaled (all ones), never in eval
    torch.manual_seed(0)
    mod = ParentScaledWeights(num_heads=8, parent_heads=8, parent_ignoring=0.5)
    mod.train()
    w = mod(parents.repeat(16, 1), labels.repeat(16, 1))
    ones = (w == 1).all(-1)
    assert 0.3 < ones.float().mean().item() < 0.7
    mod.eval()
    assert not (mod(parents, labels) == 1).all(-1).any()
    with pytest.raises(ValueError):
        ParentScaledWeights(num_heads=4, parent_heads=5)
    with pytest.raises(ValueError):
        ParentScaledWeights(num_heads=4, variance=0.0)


def test_logit_scale_identity_equals_plain_and_matches_reference():
    """N = S * D_p, then the softmax (PASCAL sec. 3); ones leave the attention unchanged."""
    torch.manual_seed(1)
    T, B, E, H = 7, 2, 8, 2
    mha = RelativeMultiheadAttention(E, H, dropout=0.0, self_attention=True).double()
    x = torch.randn(T, B, E, dtype=torch.float64)
    p, l, pad = left_padded([[2, 0, 2, 5, 3], HEADS], [[1] * 5, [1] * 7])
    plain, w_plain = mha(x, x, x, key_padding_mask=pad, need_weights=True)
    ones, w_ones = mha(x, x, x, key_padding_mask=pad, logit_scale=torch.ones(B, H, T, T, dtype=x.dtype),
                       need_weights=True)
    torch.testing.assert_close(ones, plain)
    torch.testing.assert_close(w_ones.to(w_plain), w_plain)
    scale = ParentScaledWeights(num_heads=H, parent_heads=1).eval()(p, l)
    out, w = mha(x, x, x, key_padding_mask=pad, logit_scale=scale, need_head_weights=True)
    d = E // H
    q = mha.q_proj(x).view(T, B, H, d).permute(1, 2, 0, 3)
    k = mha.k_proj(x).view(T, B, H, d).permute(1, 2, 0, 3)
    v = mha.v_proj(x).view(T, B, H, d).permute(1, 2, 0, 3)
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    n = s * scale.to(s)
    alpha = n.masked_fill(pad[:, None, None, :], float("-inf")).softmax(-1)
    ref = mha.out_proj((alpha @ v).permute(2, 0, 1, 3).reshape(T, B, E))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.transpose(0, 1).to(alpha), alpha, rtol=1e-5, atol=1e-6)
    # head 1 is not parent-scaled: its weights are the plain softmax(S)
    plain_alpha = s.masked_fill(pad[:, None, None, :], float("-inf")).softmax(-1)
    torch.testing.assert_close(alpha[:, 1], plain_alpha[:, 1])
    assert not torch.allclose(alpha[:, 0], plain_alpha[:, 0])
    # scoped form
    with mha.relative_scope(None, logit_scale=scale):
        scoped, _ = mha(x, x, x, key_padding_mask=pad, need_weights=False)
    torch.testing.assert_close(scoped, out)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_pascal_low_precision_finite(dtype):
    torch.manual_seed(2)
    T, B, E, H = 12, 2, 16, 4
    p, l, pad = left_padded([FIRST_HEADS, [2, 0, 2, 2, 6, 4, 4, 2, 2, 2, 2, 2]], [PIECE_LABELS, [1] * 12])
    mha = RelativeMultiheadAttention(E, H, dropout=0.1, self_attention=True).to(dtype)
    x = (torch.randn(T, B, E) * 10).to(dtype).requires_grad_(True)
    scale = ParentScaledWeights(H, parent_heads=3, subword_label=SUB, parent_ignoring=0.2).train()(p, l, dtype)
    try:
        out, w = mha(x, x, x, key_padding_mask=pad, logit_scale=scale)
    except RuntimeError as e:  # pragma: no cover
        pytest.skip(f"{dtype} not supported on CPU: {e}")
    assert out.dtype == dtype and torch.isfinite(out).all() and torch.isfinite(w).all()
    out.float().sum().backward()
    assert torch.isfinite(x.grad).all()
