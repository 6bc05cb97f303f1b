"""Fused attention (``scaled_dot_product_attention``) takes every additive term as its bias.

Relative *keys* (paper 000 eqs. 12, 18, 22), an additive logit term (paper 001 eq. 5, GPS), the
causal mask and padded keys are all added to the logits before the softmax, so the fused kernel can
take their sum as a float mask. These tests compare the fused path with the explicit one (asked for
by ``need_weights=True``) on the same module and inputs: outputs and gradients agree.
"""

import pytest
import torch

from fairseq_syntax.modules.relative_attention import RelativeEmbedding, RelativeMultiheadAttention

B, T, C, H = 3, 6, 16, 4


def attention_and_inputs(values: bool, right_padding: bool = False):
    torch.manual_seed(0)
    attn = RelativeMultiheadAttention(C, H, dropout=0.0, self_attention=True).eval()
    table = RelativeEmbedding(2, C // H, keys=True, values=values)
    x = torch.randn(T, B, C, requires_grad=True)
    pad = torch.zeros(B, T, dtype=torch.bool)
    if right_padding:  # as fairseq pads the target (a causal row never sees only padding)
        pad[0, -2:] = True
    else:  # left padding, as fairseq pads the source
        pad[0, :2] = True
    buckets = torch.randint(0, table.num_buckets, (B, T, T))
    bias = torch.randn(B, 1, T, T, requires_grad=True)
    return attn, table, x, pad, buckets, bias


def run(attn, table, x, pad, buckets, bias, need_weights, attn_mask=None):
    out, _ = attn(x, x, x, key_padding_mask=pad, need_weights=need_weights, attn_mask=attn_mask,
                  relative=[(table, buckets)], attn_bias=bias)
    return out


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "causal"])
def test_relative_keys_and_an_additive_term_give_the_explicit_logits(causal):
    attn, table, x, pad, buckets, bias = attention_and_inputs(values=False, right_padding=causal)
    mask = torch.triu(torch.full((T, T), float("-inf")), 1) if causal else None
    assert attn._can_fuse([(table, buckets)], need_weights=False, before_softmax=False, logit_scale=None)
    fused = run(attn, table, x, pad, buckets, bias, need_weights=False, attn_mask=mask)
    grads_fused = torch.autograd.grad(fused.square().sum(), [x, bias, table.key_table])
    explicit = run(attn, table, x, pad, buckets, bias, need_weights=True, attn_mask=mask)
    grads_explicit = torch.autograd.grad(explicit.square().sum(), [x, bias, table.key_table])
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads_fused, grads_explicit):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_relative_values_need_the_probabilities_and_keep_the_explicit_path():
    attn, table, x, pad, buckets, bias = attention_and_inputs(values=True)
    assert not attn._can_fuse([(table, buckets)], need_weights=False, before_softmax=False, logit_scale=None,
                           device=torch.device("cpu"))


def test_a_multiplicative_scale_or_recorded_logits_keep_the_explicit_path():
    attn, table, x, pad, buckets, bias = attention_and_inputs(values=False)
    assert not attn._can_fuse([(table, buckets)], False, False, logit_scale=torch.ones(1))
    attn.record_logits = True
    assert not attn._can_fuse([(table, buckets)], False, False, None)


def test_the_fused_path_calls_scaled_dot_product_attention():
    attn, table, x, pad, buckets, bias = attention_and_inputs(values=False)
    with torch.profiler.profile() as prof:
        run(attn, table, x, pad, buckets, bias, need_weights=False)
    assert any("scaled_dot_product_attention" in e.key for e in prof.key_averages())


def test_incremental_decoding_with_relative_keys_matches_the_full_pass():
    """Shaw's sequence distance computed from the cached keys: step by step equals the causal full pass."""
    torch.manual_seed(1)
    attn = RelativeMultiheadAttention(C, H, dropout=0.0, self_attention=True).eval()
    table = RelativeEmbedding(2, C // H, keys=True, values=False)
    x = torch.randn(T, B, C)
    mask = torch.triu(torch.full((T, T), float("-inf")), 1)
    with torch.no_grad():
        full, _ = attn(x, x, x, attn_mask=mask, need_weights=False, relative=[(table, None)])
        state = {}
        steps = [attn(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state, need_weights=False,
                      relative=[(table, None)])[0] for t in range(T)]
    torch.testing.assert_close(torch.cat(steps), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "causal"])
def test_relative_values_through_the_fused_kernel_equal_the_explicit_path(causal, monkeypatch):
    """On CUDA the probabilities come back from the fused kernel as extra value columns (eq. 17)."""
    monkeypatch.setattr(RelativeMultiheadAttention, "fuse_relative_values", True)
    attn, table, x, pad, buckets, bias = attention_and_inputs(values=True, right_padding=causal)
    mask = torch.triu(torch.full((T, T), float("-inf")), 1) if causal else None
    assert attn._can_fuse([(table, buckets)], need_weights=False, before_softmax=False, logit_scale=None)
    params = [x, bias, table.key_table, table.value_table]
    fused = run(attn, table, x, pad, buckets, bias, need_weights=False, attn_mask=mask)
    grads_fused = torch.autograd.grad(fused.square().sum(), params)
    explicit = run(attn, table, x, pad, buckets, bias, need_weights=True, attn_mask=mask)
    grads_explicit = torch.autograd.grad(explicit.square().sum(), params)
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads_fused, grads_explicit):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_relative_values_fused_with_dropout_share_one_mask(monkeypatch):
    """Dropout in the kernel drops the same probabilities for v and for the relative values: with
    dropout 1 - 1e-9 nearly everything is dropped, and both terms vanish together."""
    monkeypatch.setattr(RelativeMultiheadAttention, "fuse_relative_values", True)
    torch.manual_seed(0)
    attn = RelativeMultiheadAttention(C, H, dropout=0.999999, self_attention=True).train()
    table = RelativeEmbedding(2, C // H, keys=True, values=True)
    x = torch.randn(T, B, C)
    buckets = torch.randint(0, table.num_buckets, (B, T, T))
    out, _ = attn(x, x, x, need_weights=False, relative=[(table, buckets)])
    torch.testing.assert_close(out, attn.out_proj.bias.expand_as(out), rtol=0, atol=1e-6)
