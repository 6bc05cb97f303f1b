"""Syntactic-position models in ``syntax_transformer``: transformer_gps (paper 001), transformer_pascal, transformer_structural.

The components themselves are unit-tested in test_gps.py, test_pascal.py and test_structural.py; this file
checks their wiring: flags and presets, the side inputs each arch asks for, which layers get what, left-padding
invariance of the whole encoder, and a bf16 forward.
"""

import pytest
import torch

from fairseq_syntax.modules.parent_attention import ParentScaledWeights

from .conftest import LABELS, batch, build, other_sentence, parse, table1_features, table1_tokens

ARCHS = {
    "transformer_gps": ["--gps-label-dim", "8", "--gps-path-dim", "12"],
    "transformer_pascal": ["--pascal-heads", "1"],
    "transformer_structural": ["--structural-k", "3"],
}


def two_sentences(model):
    req = model.syntax_inputs()
    return (table1_tokens(), table1_features(req)), other_sentence(req)


@pytest.mark.parametrize(
    "arch, extra, inputs",
    [
        ("transformer_gps", [], {"parents", "labels", "depth"}),
        ("transformer_gps_iwslt_de_en", [], {"parents", "labels", "depth"}),
        ("transformer_pascal", ["--pascal-heads", "1"], {"parents", "labels"}),
        ("transformer_pascal_iwslt_de_en", ["--pascal-heads", "1"], {"parents", "labels"}),
        ("transformer_structural", [], {"parents", "depth"}),
        ("transformer_structural_iwslt_de_en", [], {"parents", "depth"}),
        ("transformer_structural", ["--structural-k", "0"], {"depth"}),
        ("transformer_structural", ["--structural-absolute", "false"], {"parents", "depth"}),
        ("transformer_structural", ["--structural-k", "0", "--structural-absolute", "false"], set()),
        ("transformer_gps", ["--gps-layers", "none"], set()),
        ("transformer_pascal", ["--pascal-layers", "none"], set()),
        ("syntax_transformer", ["--pascal-layers", "0", "--pascal-heads", "1"], {"parents", "labels"}),
    ],
)
def test_syntax_inputs_per_arch(arch, extra, inputs):
    model, _ = build(arch, extra)
    assert model.syntax_inputs() == inputs


def test_preset_defaults_and_flag_overrides():
    args = parse("transformer_gps", tiny=False)
    assert (args.gps_layers, args.gps_label_dim, args.gps_path_dim) == ("0", 64, 128)
    assert args.encoder_layers == 6 and args.encoder_attention_heads == 8
    small = parse("transformer_gps_iwslt_de_en", tiny=False)
    assert (small.gps_layers, small.gps_path_dim, small.encoder_attention_heads) == ("0", 64, 4)
    args = parse("transformer_pascal", tiny=False)
    assert (args.pascal_layers, args.pascal_heads, args.pascal_variance) == ("0", 5, 1.0)
    assert parse("transformer_pascal_iwslt_de_en", tiny=False).pascal_heads == 3
    args = parse("transformer_structural", tiny=False)
    assert (args.structural_k, args.structural_absolute) == (8, True)
    over = parse("transformer_gps", ["--gps-layers", "all", "--gps-path-dim", "16"], tiny=False)
    assert (over.gps_layers, over.gps_path_dim) == ("all", 16)
    over = parse("transformer_pascal", ["--pascal-heads", "2", "--pascal-variance", "4"], tiny=False)
    assert (over.pascal_heads, over.pascal_variance) == (2, 4.0)
    assert parse("transformer_structural", ["--structural-absolute", "false"], tiny=False).structural_absolute is False
    # the other presets keep everything off
    for arch in ("transformer_dep_rel", "transformer_nsd", "syntax_transformer"):
        model, _ = build(arch, ["--nsd-max-distance", "8"] if arch == "transformer_nsd" else [])
        enc = model.encoder
        assert not {"gps", "pascal", "structural"} & set(enc.attention_components)
        assert "structural_position" not in enc.input_components
        assert not any({"gps", "pascal", "structural"} & set(l.attention_terms) for l in enc.layers)


def test_layer_placement():
    three = ["--encoder-layers", "3"]
    model, _ = build("transformer_gps", three)
    assert ["gps" in l.attention_terms for l in model.encoder.layers] == [True, False, False]
    model, _ = build("transformer_gps", three + ["--gps-layers", "all"])
    assert ["gps" in l.attention_terms for l in model.encoder.layers] == [True, True, True]
    model, _ = build("transformer_gps", three + ["--gps-layers", "2,1"])
    assert ["gps" in l.attention_terms for l in model.encoder.layers] == [False, True, True]
    assert model.encoder.component_layers("gps") == (1, 2)
    model, _ = build("transformer_pascal", three + ["--pascal-heads", "1", "--pascal-layers", "1"])
    assert ["pascal" in l.attention_terms for l in model.encoder.layers] == [False, True, False]
    model, _ = build("transformer_structural", three)
    assert all(l.attention_terms["structural"].max_distance == 8 for l in model.encoder.layers)
    assert "structural_position" in model.encoder.input_components


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="out of range"):
        build("transformer_gps", ["--gps-layers", "3"])
    with pytest.raises(ValueError, match="--pascal-heads 3"):
        build("transformer_pascal", ["--pascal-heads", "3"])  # TINY has 2 heads
    with pytest.raises(ValueError, match="layer indices"):
        build("transformer_gps", ["--gps-layers", "first"])


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_left_padding_invariance(arch):
    """A short sentence gives the same encoder output alone or left-padded beside a longer one."""
    model, _ = build(arch, ARCHS[arch] + ["--encoder-layers", "2"])
    long, short = two_sentences(model)
    src, lengths, syntax = batch(model, [long, short])
    together = model.encoder(src, lengths, src_syntax=syntax)
    src1, lengths1, syntax1 = batch(model, [short])
    alone = model.encoder(src1, lengths1, src_syntax=syntax1)
    n = len(short[0])
    torch.testing.assert_close(together["encoder_out"][0][-n:, 1], alone["encoder_out"][0][:, 0])
    src2, lengths2, syntax2 = batch(model, [long])
    torch.testing.assert_close(
        together["encoder_out"][0][:, 0], model.encoder(src2, lengths2, src_syntax=syntax2)["encoder_out"][0][:, 0]
    )


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_the_tree_changes_the_output(arch):
    """The configured component is really on: another tree (same tokens) gives another encoding."""
    model, _ = build(arch, ARCHS[arch])
    long, _ = two_sentences(model)
    src, lengths, syntax = batch(model, [long])
    out = model.encoder(src, lengths, src_syntax=syntax)["encoder_out"][0]
    flat = {k: v.clone() for k, v in syntax.items()}
    T = src.size(1)
    # a flat tree: every token attaches to the last token (the root)
    flat["parents"] = torch.full_like(syntax["parents"], T - 1)
    if "depth" in flat:
        flat["depth"] = torch.ones_like(syntax["depth"])
        flat["depth"][:, -1] = 0
    if "labels" in flat:
        flat["labels"] = torch.full_like(syntax["labels"], LABELS.index("obj"))
    other = model.encoder(src, lengths, src_syntax=flat)["encoder_out"][0]
    assert (out - other).abs().max() > 1e-6


def test_gps_term_reaches_the_attention_of_its_layers_only():
    model, _ = build("transformer_gps", ARCHS["transformer_gps"] + ["--encoder-layers", "2"])
    long, short = two_sentences(model)
    src, lengths, syntax = batch(model, [long, short])
    for layer in model.encoder.layers:
        layer.self_attn.record_logits = True
    model.encoder(src, lengths, src_syntax=syntax)
    first, second = (l.self_attn.recorded_logits for l in model.encoder.layers)
    assert first["attn_bias"].shape == (2, 2, src.size(1), src.size(1))
    assert first["attn_bias"].abs().sum() > 0 and "logit_scale" not in first
    assert "attn_bias" not in second


def test_pascal_scale_in_the_parent_heads_only():
    model, _ = build("transformer_pascal", ["--pascal-heads", "1", "--pascal-variance", "2.0"])
    long, short = two_sentences(model)
    src, lengths, syntax = batch(model, [long, short])
    attn = model.encoder.layers[0].self_attn
    attn.record_logits = True
    model.encoder(src, lengths, src_syntax=syntax)
    scale = attn.recorded_logits["logit_scale"]
    expected = ParentScaledWeights(
        2, 1, variance=2.0, subword_label=LABELS.index("<subword>"), eos_label=LABELS.eos(), eos_self=True
    )(syntax["parents"], syntax["labels"])
    torch.testing.assert_close(scale, expected.to(scale.dtype))
    assert torch.all(scale[:, 1] == 1)  # the second head is a normal head
    # each token's largest weight is at its parent (roots: themselves), peak 1/sqrt(2 pi sigma^2);
    # </s> is its own parent, as in PASCAL's code
    peak = scale[:, 0].argmax(-1)
    real = src.ne(1)
    eos = syntax["labels"].eq(LABELS.eos())
    parent = torch.where(eos, torch.arange(src.size(1)).expand_as(src), syntax["parents"])
    assert eos.sum() == 2 and torch.equal(peak[real], parent[real])
    assert scale[:, 0].max().item() == pytest.approx((2 * torch.pi * 2.0) ** -0.5, rel=1e-6)


def test_pascal_eos_parent_last_root_is_the_trees_parent():
    """``--pascal-eos-parent last-root`` (0.1's behaviour): ``</s>`` looks at the line's last root."""
    model, _ = build("transformer_pascal", ["--pascal-heads", "1", "--pascal-eos-parent", "last-root"])
    long, short = two_sentences(model)
    src, lengths, syntax = batch(model, [long, short])
    attn = model.encoder.layers[0].self_attn
    attn.record_logits = True
    model.encoder(src, lengths, src_syntax=syntax)
    peak = attn.recorded_logits["logit_scale"][:, 0].argmax(-1)
    eos = syntax["labels"].eq(LABELS.eos())
    assert torch.equal(peak[eos], syntax["parents"][eos])
    assert not torch.equal(peak[eos], torch.arange(src.size(1)).expand_as(src)[eos])


def test_subword_label_is_recorded_from_the_task():
    _, args = build("transformer_pascal", ["--pascal-heads", "1"])
    assert args.syntax_subword_label == LABELS.index("<subword>")


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_bf16_forward_is_finite(arch):
    model, _ = build(arch, ARCHS[arch])
    model = model.to(torch.bfloat16)
    long, short = two_sentences(model)
    src, lengths, syntax = batch(model, [long, short])
    out = model.encoder(src, lengths, src_syntax=syntax)["encoder_out"][0]
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()
    prev = src[:, :3]
    logits, _ = model(src, lengths, prev, src_syntax=syntax)
    assert torch.isfinite(logits.float()).all()
