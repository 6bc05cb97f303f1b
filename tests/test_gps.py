"""Tests for the global syntactic position of paper 001 (Xie et al. 2021), secs. 3.2-3.3, eq. 7."""

import math
import random
from typing import List, Tuple

import pytest
import torch
from torch import Tensor
from torch.nn.utils.rnn import pack_padded_sequence

from fairseq_syntax.modules.relative_attention import RelativeMultiheadAttention
from fairseq_syntax.modules.syntactic_position import (
    SyntacticPathEncoder,
    SyntacticPositionLogits,
    average_weight_of_syntax_logits,
    same_sentence_mask,
    syntax_logit_weights,
)
from fairseq_syntax_core.trees import parents_from_heads, root_paths, tree_depth

# Paper 001 Figure 1 style: "Tom and John go to school together"
VOCAB = {"<pad>": 0, "root": 1, "conj": 2, "cc": 3, "obl": 4, "case": 5, "advmod": 6, "</s>": 7}
WORDS = ["Tom", "and", "John", "go", "to", "school", "together"]
HEADS = [4, 3, 1, 0, 6, 4, 4]
LABELS = ["conj", "cc", "cc", "root", "case", "obl", "advmod"]


def random_heads(n: int, n_roots: int, rng: random.Random) -> List[int]:
    """A random forest on n tokens (1-based heads, 0 = root), possibly non-projective."""
    order = list(range(n))
    rng.shuffle(order)
    heads = [0] * n
    for k, tok in enumerate(order):
        if k < n_roots:
            continue
        heads[tok] = order[rng.randrange(k)] + 1
    return heads


def left_padded(rows: List[List[int]], labels: List[List[int]], pad_label: int) -> Tuple[Tensor, Tensor, Tensor]:
    """Collate stored heads like the dataset: parents index the LEFT-padded row."""
    T = max(len(r) for r in rows)
    B = len(rows)
    parents = torch.arange(T).repeat(B, 1)
    lab = torch.full((B, T), pad_label, dtype=torch.long)
    pad = torch.ones(B, T, dtype=torch.bool)
    for b, (h, l) in enumerate(zip(rows, labels)):
        off = T - len(h)
        p = parents_from_heads(torch.tensor(h)) + off
        parents[b, off:] = p
        lab[b, off:] = torch.tensor(l)
        pad[b, off:] = False
    return parents, lab, pad


# --------------------------------------------------------------------------- #
# sec. 3.2: label paths and the top-down LSTM
# --------------------------------------------------------------------------- #


def test_xie_figure1_path_labels():
    """John = [root, conj, cc], school = [root, obl] (paper 001 sec. 3.2)."""
    parents, labels, pad = left_padded([HEADS], [[VOCAB[x] for x in LABELS]], VOCAB["<pad>"])
    paths, lengths = root_paths(parents, labels, pad=VOCAB["<pad>"])
    inv = {v: k for k, v in VOCAB.items()}

    def path(w: str) -> List[str]:
        i = WORDS.index(w)
        return [inv[x] for x in paths[0, i, : lengths[0, i]].tolist()]

    assert path("John") == ["root", "conj", "cc"]
    assert path("school") == ["root", "obl"]
    assert path("together") == ["root", "advmod"]
    assert path("go") == ["root"]
    assert path("and") == ["root", "conj", "cc", "cc"]


def test_path_labels_left_padded_multi_root_with_eos():
    """Two sentences + </s> (attached to the last root), left-padded beside a longer line."""
    # "A b . C d ." with roots b and d; </s> attaches to d (position 5)
    heads = [2, 0, 2, 5, 0, 5, 5]
    labs = ["nsubj", "root", "punct", "nsubj", "root", "punct", "</s>"]
    vocab = {"<pad>": 0, "root": 1, "nsubj": 2, "punct": 3, "</s>": 4}
    long = random_heads(10, 1, random.Random(0))
    parents, labels, pad = left_padded(
        [heads, long], [[vocab[x] for x in labs], [2] * 10], vocab["<pad>"]
    )
    paths, lengths = root_paths(parents, labels, pad=0)
    inv = {v: k for k, v in vocab.items()}
    off = 3
    got = [[inv[x] for x in paths[0, off + i, : lengths[0, off + i]].tolist()] for i in range(7)]
    assert got == [
        ["root", "nsubj"], ["root"], ["root", "punct"],
        ["root", "nsubj"], ["root"], ["root", "punct"], ["root", "</s>"],
    ]


def lstm_over_paths(enc: SyntacticPathEncoder, parents: Tensor, labels: Tensor, pad: Tensor) -> Tensor:
    """Reference: nn.LSTM (same weights) run over each token's full root-to-word path."""
    paths, lengths = root_paths(parents, labels, pad=0)
    B, T, D = paths.shape
    lstm = torch.nn.LSTM(enc.label_embed_dim, enc.path_dim, batch_first=True).to(enc.cell.weight_ih.dtype)
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(enc.cell.weight_ih)
        lstm.weight_hh_l0.copy_(enc.cell.weight_hh)
        lstm.bias_ih_l0.copy_(enc.cell.bias_ih)
        lstm.bias_hh_l0.copy_(enc.cell.bias_hh)
    x = enc.label_embed(paths.reshape(B * T, D))
    packed = pack_padded_sequence(x, lengths.reshape(-1), batch_first=True, enforce_sorted=False)
    _, (h_n, _) = lstm(packed)
    out = h_n[-1].reshape(B, T, -1)
    return out.masked_fill(pad.unsqueeze(-1), 0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_top_down_lstm_equals_lstm_over_each_path(seed: int):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    lengths = [rng.randint(1, 14) for _ in range(5)] + [16]
    rows = [random_heads(n, rng.choice([1, 1, 2, 3]) if n >= 3 else 1, rng) for n in lengths]
    labs = [[rng.randrange(1, 9) for _ in range(n)] for n in lengths]
    parents, labels, pad = left_padded(rows, labs, pad_label=0)
    enc = SyntacticPathEncoder(num_labels=9, label_embed_dim=6, path_dim=5, padding_idx=0).double()
    depth = tree_depth(parents)
    got = enc(parents, labels, depth, pad)
    ref = lstm_over_paths(enc, parents, labels, pad)
    assert got.shape == (6, 16, 5)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    # same when depth is derived inside, and gradients agree with the reference
    got2 = enc(parents, labels, None, pad)
    torch.testing.assert_close(got2, got)
    params = list(enc.parameters())
    g_got = torch.autograd.grad(got.pow(2).sum(), params, allow_unused=True)
    ref = lstm_over_paths(enc, parents, labels, pad)  # embeddings shared; LSTM weights are copies
    g_ref = torch.autograd.grad(ref.pow(2).sum(), [enc.label_embed.weight])
    torch.testing.assert_close(g_got[0], g_ref[0], rtol=1e-5, atol=1e-5)
    assert all(g is not None and torch.isfinite(g).all() for g in g_got)


def test_path_encoder_is_padding_invariant_and_zero_at_padding():
    torch.manual_seed(3)
    enc = SyntacticPathEncoder(num_labels=len(VOCAB), label_embed_dim=4, path_dim=3, padding_idx=0)
    lab = [VOCAB[x] for x in LABELS]
    alone_p, alone_l, alone_pad = left_padded([HEADS], [lab], 0)
    long = random_heads(12, 1, random.Random(1))
    p, l, pad = left_padded([HEADS, long], [lab, [2] * 12], 0)
    s_alone = enc(alone_p, alone_l, None, alone_pad)
    s = enc(p, l, None, pad)
    torch.testing.assert_close(s[0, 5:], s_alone[0], rtol=1e-6, atol=1e-6)
    assert s[0, :5].abs().sum() == 0
    # different paths, different encodings (John = [root, conj, cc], school = [root, obl])
    assert not torch.allclose(s_alone[0, 2], s_alone[0, 5])


# --------------------------------------------------------------------------- #
# sec. 3.3: eq. 5 second term, cross-sentence masking, attention hook
# --------------------------------------------------------------------------- #


def test_eq5_term_matches_formula_and_masks_across_sentences():
    torch.manual_seed(4)
    heads = [2, 0, 2, 5, 0, 5, 5]  # two sentences + </s>
    long = random_heads(9, 1, random.Random(2))
    parents, _, pad = left_padded([heads, long], [[1] * 7, [1] * 9], 0)
    B, T, ds, E, H = 2, 9, 5, 8, 2
    s = torch.randn(B, T, ds, dtype=torch.float64)
    mod = SyntacticPositionLogits(ds, E, H).double()
    same = same_sentence_mask(parents)
    term = mod(s, same)
    assert term.shape == (B, H, T, T)
    dz = E // H
    q = (s @ mod.q_proj.weight.t()).view(B, T, H, dz)
    k = (s @ mod.k_proj.weight.t()).view(B, T, H, dz)
    full = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(dz)
    # sentence ids of row 0 (offset 2): tokens 2-4 sentence 1, tokens 5-8 sentence 2
    sent = torch.tensor([-1, -2, 1, 1, 1, 2, 2, 2, 2])
    for i in range(2, 9):
        for j in range(2, 9):
            if sent[i] == sent[j]:
                torch.testing.assert_close(term[0, :, i, j], full[0, :, i, j])
            else:
                assert (term[0, :, i, j] == 0).all(), (i, j)
    # one sentence: nothing masked among real tokens
    torch.testing.assert_close(term[1], full[1])
    # no mask given: the plain formula
    torch.testing.assert_close(mod(s), full)


def test_attn_bias_zero_equals_plain_and_matches_reference():
    torch.manual_seed(5)
    T, B, E, H = 6, 2, 8, 2
    mha = RelativeMultiheadAttention(E, H, dropout=0.0, self_attention=True).double()
    x = torch.randn(T, B, E, dtype=torch.float64)
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[0, :2] = True
    plain, w_plain = mha(x, x, x, key_padding_mask=kpm, need_weights=True)
    zero, w_zero = mha(x, x, x, key_padding_mask=kpm, attn_bias=torch.zeros(B, 1, T, T, dtype=x.dtype),
                       need_weights=True)
    torch.testing.assert_close(zero, plain)
    torch.testing.assert_close(w_zero.to(w_plain), w_plain)
    # a real bias: softmax(e + bias) by hand
    bias = torch.randn(B, H, T, T, dtype=torch.float64)
    out, w = mha(x, x, x, key_padding_mask=kpm, attn_bias=bias, need_head_weights=True)
    d = E // H
    q = mha.q_proj(x).view(T, B, H, d).permute(1, 2, 0, 3)
    k = mha.k_proj(x).view(T, B, H, d).permute(1, 2, 0, 3)
    v = mha.v_proj(x).view(T, B, H, d).permute(1, 2, 0, 3)
    e = q @ k.transpose(-1, -2) / math.sqrt(d) + bias
    e = e.masked_fill(kpm[:, None, None, :], float("-inf"))
    alpha = e.softmax(-1)
    ref = mha.out_proj((alpha @ v).permute(2, 0, 1, 3).reshape(T, B, E))
    # fairseq's softmax runs in float32, hence float32 tolerances
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.transpose(0, 1).to(alpha), alpha, rtol=1e-5, atol=1e-6)
    # the scoped form (as fairseq's unchanged layer calls the attention) gives the same
    with mha.relative_scope(None, attn_bias=bias):
        scoped, _ = mha(x, x, x, key_padding_mask=kpm, need_weights=False)
    torch.testing.assert_close(scoped, out)
    assert mha._scoped_attn_bias is None  # restored
    # gradient reaches the bias (so W_s^Q, W_s^K learn)
    bias.requires_grad_(True)
    out, _ = mha(x, x, x, key_padding_mask=kpm, attn_bias=bias)
    (g,) = torch.autograd.grad(out.sum(), [bias])
    assert torch.isfinite(g).all() and g.abs().sum() > 0
    with pytest.raises(ValueError):
        mha(x, x, x, attn_bias=torch.zeros(B, 3, T, T, dtype=x.dtype))


def test_gps_pipeline_left_padding_invariance():
    """Encoder-style use: s once, the term per layer, as attn_bias; a sentence alone == left-padded."""
    torch.manual_seed(6)
    E, H = 8, 2
    enc = SyntacticPathEncoder(len(VOCAB), 4, 6, padding_idx=0).double()
    logits = SyntacticPositionLogits(6, E, H).double()
    mha = RelativeMultiheadAttention(E, H, dropout=0.0, self_attention=True).double()
    lab = [VOCAB[x] for x in LABELS]
    long = random_heads(11, 2, random.Random(3))

    # the 7 tokens get the same states alone and left-padded beside a longer line
    p, l, pad = left_padded([HEADS, long], [lab, [2] * 11], 0)
    T = p.size(1)
    x_alone = torch.randn(7, 1, E, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = torch.randn(T, 2, E, dtype=torch.float64)
    x[T - 7 :, 0] = x_alone[:, 0]
    s = enc(p, l, None, pad)
    out, _ = mha(x, x, x, key_padding_mask=pad, attn_bias=logits(s, same_sentence_mask(p)))
    s1 = enc(*left_padded([HEADS], [lab], 0)[:2], None, None)
    p1 = left_padded([HEADS], [lab], 0)[0]
    out1, _ = mha(x_alone, x_alone, x_alone, attn_bias=logits(s1, same_sentence_mask(p1)))
    torch.testing.assert_close(out[T - 7 :, 0], out1[:, 0])


# --------------------------------------------------------------------------- #
# eq. 7: AWSL
# --------------------------------------------------------------------------- #


def test_awsl_eq7_by_hand():
    # one sample, one head, 2 real tokens + 1 left pad
    content = torch.tensor([[[[9.0, 9.0, 9.0], [9.0, 1.0, -3.0], [9.0, 2.0, 0.0]]]])
    syntax = torch.tensor([[[[9.0, 9.0, 9.0], [9.0, 1.0, 1.0], [9.0, -2.0, 0.0]]]])
    pad = torch.tensor([[True, False, False]])
    w = syntax_logit_weights(content, syntax, pad)
    # real pairs: (1,1): 1/(1+1) = .5; (1,2): 3/(3+1) = .75; (2,1): 2/4 = .5; (2,2): 0/0 -> content 1
    expected_content = (0.5 + 0.75 + 0.5 + 1.0) / 4
    assert w.content.shape == (1, 1) and w.syntax.shape == (1, 1)
    assert w.content.item() == pytest.approx(expected_content)
    assert w.syntax.item() == pytest.approx(1 - expected_content)
    assert w.count.tolist() == [4.0]
    assert average_weight_of_syntax_logits(content, syntax, pad).item() == pytest.approx(1 - expected_content)


def test_awsl_from_recorded_forward():
    torch.manual_seed(7)
    T, B, E, H = 5, 2, 8, 2
    mha = RelativeMultiheadAttention(E, H, dropout=0.0, self_attention=True)
    x = torch.randn(T, B, E)
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[1, :2] = True
    mod = SyntacticPositionLogits(3, E, H)
    mod.record = True
    bias = mod(torch.randn(B, T, 3))
    mha.record_logits = True
    out, _ = mha(x, x, x, key_padding_mask=kpm, attn_bias=bias)
    rec = mha.recorded_logits
    assert rec is not None and rec["content"].shape == (B, H, T, T)
    torch.testing.assert_close(rec["attn_bias"], bias.detach())
    torch.testing.assert_close(mod.last_term, bias.detach())
    # the recorded content logits are the plain logits e_ij
    d = E // H
    q = mha.q_proj(x).view(T, B, H, d).permute(1, 2, 0, 3)
    k = mha.k_proj(x).view(T, B, H, d).permute(1, 2, 0, 3)
    torch.testing.assert_close(rec["content"], (q @ k.transpose(-1, -2) / math.sqrt(d)).detach(),
                               rtol=1e-5, atol=1e-5)
    w = syntax_logit_weights(rec["content"], rec["attn_bias"], kpm)
    assert w.syntax.shape == (B, H)
    assert ((w.syntax > 0) & (w.syntax < 1)).all()
    torch.testing.assert_close(w.syntax + w.content, torch.ones(B, H))
    # recording does not change the output
    mha.record_logits = False
    out2, _ = mha(x, x, x, key_padding_mask=kpm, attn_bias=bias)
    torch.testing.assert_close(out, out2)


# --------------------------------------------------------------------------- #
# low precision
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gps_low_precision_finite(dtype):
    torch.manual_seed(8)
    rng = random.Random(8)
    lengths = [3, 12, 7]
    rows = [random_heads(n, 1 + (n > 6), rng) for n in lengths]
    parents, labels, pad = left_padded(rows, [[rng.randrange(1, 9) for _ in range(n)] for n in lengths], 0)
    T, B, E, H = 12, 3, 16, 4
    enc = SyntacticPathEncoder(9, 8, 8, padding_idx=0).to(dtype)
    logits = SyntacticPositionLogits(8, E, H).to(dtype)
    mha = RelativeMultiheadAttention(E, H, dropout=0.1, self_attention=True).to(dtype)
    x = (torch.randn(T, B, E) * 10).to(dtype).requires_grad_(True)
    try:
        s = enc(parents, labels, None, pad)
        bias = logits(s, same_sentence_mask(parents))
        out, w = mha(x, x, x, key_padding_mask=pad, attn_bias=bias)
    except RuntimeError as e:  # pragma: no cover - kernels missing on this CPU build
        pytest.skip(f"{dtype} not supported on CPU: {e}")
    assert s.dtype == dtype and bias.dtype == dtype and out.dtype == dtype
    assert torch.isfinite(s).all() and torch.isfinite(bias).all()
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    out.float().sum().backward()
    assert torch.isfinite(x.grad).all()
    for p in list(enc.parameters()) + list(logits.parameters()):
        assert p.grad is not None and torch.isfinite(p.grad).all()


def test_the_collaters_level_sizes_give_the_same_path_encodings_without_asking_the_device():
    """Paper 001's path LSTM runs one step per tree level; the sizes of the levels come from the
    collater as host ints (``src_syntax["depth_level_sizes"]``), with the same result as counting
    them on the device; sizes that do not add up to the batch are counted again."""
    from fairseq_syntax.modules.syntactic_position import SyntacticPathEncoder
    from fairseq_syntax_core.trees import level_sizes_of, tree_depth

    torch.manual_seed(0)
    parents = torch.tensor([[0, 0, 1, 1, 3, 5], [1, 1, 1, 2, 4, 5]])  # row 2: last position is padding
    padding = torch.tensor([[False] * 6, [False] * 5 + [True]])
    labels = torch.randint(1, 6, parents.shape)
    depth = tree_depth(parents)
    encoder = SyntacticPathEncoder(6, 4, 8, padding_idx=0)
    counted = encoder(parents, labels, depth, padding)
    sizes = level_sizes_of(depth, padding)
    assert sizes == (1, 4, 3, 3, 1) and sum(sizes) == parents.numel()  # padding, depths 0-3
    torch.testing.assert_close(encoder(parents, labels, depth, padding, level_sizes=sizes), counted)
    for wrong in ((1, 4, 3, 3), torch.tensor(sizes), (1, 4, 3, 3, 1.0), ()):
        torch.testing.assert_close(encoder(parents, labels, depth, padding, level_sizes=wrong), counted)
