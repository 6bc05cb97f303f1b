"""Syntax as model inputs and outputs: paper 003 (features, SPE) and paper 002 (NSD).

Worked examples are computed by hand from the papers' definitions; see the docstrings of
``fairseq_syntax/modules/{syntax_embedding,syntactic_positional_encoding,syntactic_distance}.py``
for the readings of the equations.
"""

import math

import pytest
import torch

from fairseq.models.transformer import TransformerModel
from fairseq_syntax_core import trees
from fairseq_syntax.criterions.label_smoothed_cross_entropy_with_nsd import (
    LabelSmoothedCrossEntropyWithNSDCriterion,
    nsd_losses,
)
from fairseq_syntax.models import syntax_transformer as rt
from fairseq_syntax.modules.syntactic_distance import (
    distance_class,
    distance_embedding_index,
    expected_distance,
    nsd_positional_encoding,
    nsd_rank_hinge,
    nsd_squared_error,
)
from fairseq_syntax.modules.syntactic_positional_encoding import syntactic_positional_encoding

from .conftest import (
    LABELS,
    POS,
    TABLE1_DEPTH,
    TABLE1_HEADS,
    TABLE1_LABELS,
    TABLE1_POS,
    TABLE1_WORDS,
    TASK,
    WORDS,
    batch,
    build,
    other_sentence,
    parse,
    table1_features,
    table1_tokens,
)
from .helpers import nsd_sample  # noqa: F401

# ----------------------------------------------------------------- paper 003 Table I


def test_duan_table1_features():
    feats = table1_features({"heads", "depth", "labels", "pos", "distance"})
    assert feats["heads"].tolist() == TABLE1_HEADS + [2]  # parent position; </s> attaches to the root
    assert (feats["depth"] + 1).tolist() == TABLE1_DEPTH + [2]  # paper 003 depth, root = 1
    assert [LABELS[i] for i in feats["labels"][:-1]] == TABLE1_LABELS
    assert [POS[i] for i in feats["pos"][:-1]] == TABLE1_POS
    parents = trees.parents_from_heads(torch.tensor(TABLE1_HEADS))
    assert trees.duan_tree_depth(parents).tolist() == TABLE1_DEPTH


def test_duan_table1_features_as_embedding_inputs():
    """transformer_syntax_embed: [word ; E_pos ; E_label ; E_parent] for Table I's sentence (sec. III.B)."""
    model, _ = build("transformer_syntax_embed")
    enc = model.encoder
    assert model.syntax_inputs() == {"pos", "labels", "heads"}
    feats = table1_features(model.syntax_inputs())
    src, lengths, syntax = batch(model, [(table1_tokens(), feats)])
    _, embed = enc.forward_embedding(src, src_syntax=syntax)
    s = math.sqrt(4)
    tables = enc.input_components["features"].embed.tables
    expected = torch.cat([
        enc.embed_scale * enc.embed_tokens(src),
        s * tables["pos"].weight[torch.tensor([POS.index(x) for x in TABLE1_POS] + [POS.eos()])].unsqueeze(0),
        s * tables["label"].weight[torch.tensor([LABELS.index(x) for x in TABLE1_LABELS] + [LABELS.eos()])].unsqueeze(0),
        s * tables["head"].weight[torch.tensor(TABLE1_HEADS + [2])].unsqueeze(0),
    ], dim=-1)
    torch.testing.assert_close(embed, expected)
    assert embed.shape == (1, 9, 16 + 3 * 4)


def test_duan_table1_spe_values_in_the_encoder_input():
    """transformer_syntax_spe: x = embed + PE + SPE(parent, depth) (eq. 5), for the word "thing"."""
    model, _ = build("transformer_syntax_spe", ["--spe-features", "parent,depth"])
    enc = model.encoder
    feats = table1_features(model.syntax_inputs())
    src, _, syntax = batch(model, [(table1_tokens(), feats)])
    x, embed = enc.forward_embedding(src, src_syntax=syntax)
    spe = x - embed - enc.embed_positions(src)
    d = enc.model_dim  # 16 + 2 * 4 = 24, n = 2 features
    assert d == 24
    thing = TABLE1_WORDS.index("thing")  # parent position 2, depth 2
    hand = torch.zeros(d, dtype=torch.float64)
    for i in range(d // 4):
        hand[4 * i] = math.sin(2 / 2000 ** (4 * i / d))
        hand[4 * i + 1] = math.cos(2 / 2000 ** (4 * i / d))
        hand[4 * i + 2] = math.sin(2 / 400 ** (4 * i / d))
        hand[4 * i + 3] = math.cos(2 / 400 ** (4 * i / d))
    torch.testing.assert_close(spe[0, thing], hand, atol=1e-6, rtol=0)
    root = TABLE1_WORDS.index("is")  # parent position 0, depth 1
    assert spe[0, root, 0].item() == pytest.approx(0.0, abs=1e-7)  # sin(0)
    assert spe[0, root, 2].item() == pytest.approx(math.sin(1.0), abs=1e-6)


# ----------------------------------------------------------------- paper 003 eq. 5 by hand


def test_spe_eq5_by_hand_two_features():
    """d_model = 8, n = 2: parent position 5 (c = 2000) at b = 0, tree depth 3 (c = 400) at b = 2."""
    out = syntactic_positional_encoding(torch.tensor([[5, 3]]), [2000.0, 400.0], 8)[0]
    hand = [
        math.sin(5), math.cos(5), math.sin(3), math.cos(3),  # i = 0: 2ni/d = 0
        math.sin(5 / 2000 ** 0.5), math.cos(5 / 2000 ** 0.5),  # i = 1: 2ni/d = 4/8
        math.sin(3 / 400 ** 0.5), math.cos(3 / 400 ** 0.5),
    ]
    torch.testing.assert_close(out, torch.tensor(hand, dtype=torch.float32))


def test_spe_eq5_by_hand_one_feature():
    """Table V ablation (depth only): n = 1, d_model = 4, the ordinary interleaved layout with c = 400."""
    out = syntactic_positional_encoding(torch.tensor([[3]]), [400.0], 4)[0]
    hand = [math.sin(3), math.cos(3), math.sin(3 / 400 ** 0.5), math.cos(3 / 400 ** 0.5)]
    torch.testing.assert_close(out, torch.tensor(hand, dtype=torch.float32))


def test_spe_needs_model_dim_divisible_by_2n():
    with pytest.raises(ValueError, match="divisible by 2n = 4"):
        syntactic_positional_encoding(torch.tensor([[1, 1]]), [2000.0, 400.0], 6)
    with pytest.raises(ValueError, match="divisible"):
        build("transformer_syntax_spe", ["--syntax-feature-dim", "3", "--encoder-attention-heads", "2"])


# ----------------------------------------------------------------- paper 002 eq. 4, 5, 15-16


def test_dependency_distance_of_a_hand_built_tree():
    """d_D(i) = i - h(i), root index 0 (eq. 4), on Table I's tree; </s> attaches to the root (pos. 2)."""
    assert trees.dependency_distance(torch.tensor(TABLE1_HEADS)).tolist() == [-1, 2, -2, -1, 3, -1, 2, 6]
    assert table1_features({"distance"})["distance"].tolist() == [-1, 2, -2, -1, 3, -1, 2, 6, 7]
    # a second tree, head to the right of every word but the root: 3 <- 1, 3 <- 2, root 3, 3 -> 4
    assert trees.dependency_distance(torch.tensor([3, 3, 0, 3])).tolist() == [-2, -1, 3, 1]


def test_distance_left_padded_like_the_source():
    tokens, short = other_sentence({"distance"})
    src, _, syntax = batch(None, [(table1_tokens(), table1_features({"distance"})), (tokens, short)])
    assert syntax["distance"][1, -4:].tolist() == [-1, 2, 1, 2]  # [1-2, 2-0, 3-2, </s> 4-2]
    assert syntax["distance"][1, :-4].tolist() == [0] * 5  # padding


def test_distance_embedding_index_and_classes_eq5_eq11():
    d = torch.tensor([-5, -2, -1, 1, 2, 7, 0])
    pad = torch.tensor([False] * 6 + [True])
    assert distance_embedding_index(d, 2, pad).tolist() == [1, 1, 2, 4, 5, 5, 0]  # clip(d, ±2) + 3; pad row 0
    assert distance_class(d[:-1], 2).tolist() == [0, 0, 1, 3, 4, 4]  # clip(d, ±2) + 2


def test_nsd_positional_encoding_eqs15_16_by_hand():
    """d = -1, D = 2 (shift max - min = 4), lambda = 40, dim 4: periods 1 and 40^(2/4)."""
    out = nsd_positional_encoding(torch.tensor([-1]), 2, 40.0, 4)[0]
    angle = 2 * math.pi * 3 / 40 ** 0.5
    hand = [math.sin(2 * math.pi * 3), math.cos(2 * math.pi * 3), math.sin(angle), math.cos(angle)]
    torch.testing.assert_close(out, torch.tensor(hand, dtype=torch.float32), atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode,dim", [("concat", 16 + 6), ("add", 16), ("linear", 16)])
def test_nsd_input_combinations_eqs8_to_10(mode, dim):
    model, _ = build("transformer_nsd", ["--nsd-input", mode, "--nsd-embed-dim", "6"])
    enc = model.encoder
    assert enc.model_dim == dim
    feats = table1_features(model.syntax_inputs())
    src, _, syntax = batch(model, [(table1_tokens(), feats)])
    _, embed = enc.forward_embedding(src, src_syntax=syntax)
    word = enc.embed_scale * enc.embed_tokens(src)
    nsd = enc.input_components["nsd_input"].embed
    e = nsd.embed.weight[torch.tensor([[-1, 2, -2, -1, 3, -1, 2, 6, 7]]) + 8 + 1] * nsd.scale
    if mode == "concat":
        expected = torch.cat([word, e], -1)  # eq. 8
    elif mode == "add":
        expected = word + e  # eq. 9
    else:
        expected = nsd.combine(torch.cat([word, e], -1))  # eq. 10: W_f [x ; e] + b_f
    torch.testing.assert_close(embed, expected)


# ----------------------------------------------------------------- paper 002 eqs. 19-20


def test_pairwise_rank_loss_by_hand():
    """Eq. 19 on gold d = [-1, 2, 3, 3], predicted d̂ = [0.5, 0.0, 0.4, 5.0].

    Pairs (i < j): (0,1) 1 + 0.5 = 1.5; (0,2) 1 + 0.1 = 1.1; (0,3) [1 - 4.5]_+ = 0;
    (1,2) 1 - 0.4 = 0.6; (1,3) 0; (2,3) tie, left out. Sum 3.2.
    Squared error: 1.5^2 + 2^2 + 2.6^2 + 2^2 = 17.01.
    """
    gold = torch.tensor([[-1, 2, 3, 3]])
    pred = torch.tensor([[0.5, 0.0, 0.4, 5.0]], dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.bool)
    assert nsd_rank_hinge(pred, gold, mask, 8).item() == pytest.approx(3.2)
    assert nsd_squared_error(pred, gold, mask, 8).item() == pytest.approx(17.01)
    # gold beyond D is clipped: with D = 2, gold becomes [-1, 2, 2, 2]
    assert nsd_squared_error(pred, gold, mask, 2).item() == pytest.approx(2.25 + 4 + 1.6 ** 2 + 9)


def test_expected_distance_and_cross_entropy():
    logits = torch.log(torch.tensor([[[0.5, 0.0, 0.0, 0.0, 0.5], [0.1, 0.2, 0.4, 0.2, 0.1]]]).clamp_min(1e-30))
    assert expected_distance(logits)[0].tolist() == pytest.approx([0.0, 0.0], abs=1e-6)  # D = 2
    terms = nsd_losses(logits, torch.tensor([[2, 0]]), torch.zeros(1, 2, dtype=torch.bool))
    assert terms["ent"].item() == pytest.approx(-math.log(0.5) - math.log(0.4), rel=1e-5)  # eq. 20


def test_padding_contributes_nothing_to_nsd_losses():
    torch.manual_seed(0)
    C = 2 * 4 + 1
    long_logits, short_logits = torch.randn(1, 6, C), torch.randn(1, 3, C)
    long_gold, short_gold = torch.tensor([[1, -2, 3, 6, -1, 2]]), torch.tensor([[-1, 2, 1]])
    none = lambda n: torch.zeros(1, n, dtype=torch.bool)  # noqa: E731
    # left-padded batch: row 1 = 3 padding positions with garbage logits and gold, then the short sentence
    logits = torch.cat([long_logits, torch.cat([torch.randn(1, 3, C) * 50, short_logits], 1)]).requires_grad_()
    gold = torch.cat([long_gold, torch.cat([torch.tensor([[99, -99, 0]]), short_gold], 1)])
    pad = torch.tensor([[False] * 6, [True] * 3 + [False] * 3])
    batched = nsd_losses(logits, gold, pad)
    alone = [nsd_losses(long_logits, long_gold, none(6)), nsd_losses(short_logits, short_gold, none(3))]
    for name in ("mse", "rank", "ent"):
        assert batched[name].item() == pytest.approx(alone[0][name].item() + alone[1][name].item(), rel=1e-5), name
    assert batched["tokens"].item() == 9
    (batched["mse"] + batched["rank"] + batched["ent"]).backward()
    assert torch.all(logits.grad[1, :3] == 0)
    assert logits.grad[1, 3:].abs().sum() > 0


def test_criterion_adds_weighted_nsd_losses_and_ignores_padding():
    model, _ = build("transformer_nsd")
    criterion = LabelSmoothedCrossEntropyWithNSDCriterion(
        TASK, sentence_avg=False, label_smoothing=0.1, nsd_dist_weight=0.5, nsd_ent_weight=2.0
    )
    table1 = (table1_tokens(), table1_features(model.syntax_inputs()))
    short = other_sentence(model.syntax_inputs())
    sample = nsd_sample(model, [table1, short])
    loss, sample_size, log = criterion(model, sample)
    net_output = model(**sample["net_input"])
    nmt, _ = criterion.compute_loss(model, net_output, sample)
    terms = criterion.compute_nsd_losses(net_output, sample)
    expected = nmt + 0.5 * (terms["mse"] + terms["rank"]) + 2.0 * terms["ent"]
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert log["nsd_tokens"] == 8 + 3 and sample_size == 6  # </s> has no gold distance (issue 14)
    # the short sentence's NSD terms are the same alone as left-padded beside the long one
    separate = [criterion.compute_nsd_losses(model(**s["net_input"]), s)
                for s in (nsd_sample(model, [table1]), nsd_sample(model, [short]))]
    for name in ("mse", "rank", "ent"):
        assert terms[name].item() == pytest.approx(separate[0][name].item() + separate[1][name].item(), rel=1e-6)
    criterion.reduce_metrics([log])  # logs nsd_mse, nsd_rank, nsd_ent, nsd_acc


def test_criterion_needs_a_distance_predicting_model():
    model, _ = build("transformer_nsd", ["--nsd-predict", "false"])
    assert model.encoder.nsd_predictor is None
    criterion = LabelSmoothedCrossEntropyWithNSDCriterion(TASK, sentence_avg=False, label_smoothing=0.0)
    sample = nsd_sample(model, [(table1_tokens(), table1_features({"distance"}))])
    with pytest.raises(ValueError, match="nsd-predict"):
        criterion(model, sample)


# ----------------------------------------------------------------- architectures


@pytest.mark.parametrize("arch,extra,inputs", [
    ("syntax_transformer", [], set()),
    ("transformer_rel", [], set()),
    ("transformer_dep", [], {"depth"}),
    ("transformer_syntax_embed", [], {"pos", "labels", "heads"}),
    ("transformer_syntax_embed", ["--syntax-features", "label"], {"labels"}),
    ("transformer_syntax_spe", [], {"pos", "labels", "heads", "depth"}),
    ("transformer_syntax_spe", ["--syntax-features", "none", "--spe-features", "depth"], {"depth"}),
    ("transformer_nsd", [], {"distance"}),
    ("transformer_nsd", ["--nsd-input", "none", "--nsd-spe-lambda", "0"], {"distance"}),  # the loss target
    ("transformer_nsd", ["--nsd-input", "none", "--nsd-spe-lambda", "0", "--nsd-predict", "false"], set()),
    ("transformer_syntax_embed", ["--rel-dep-l", "2", "--syntax-features", "pos"], {"pos", "depth"}),
])
def test_syntax_inputs_per_arch(arch, extra, inputs):
    model, _ = build(arch, extra)
    assert model.syntax_inputs() == inputs
    assert not hasattr(TransformerModel, "syntax_inputs")  # fairseq's transformer asks for nothing


@pytest.mark.parametrize("arch,extra,extra_parameters", [
    ("syntax_transformer", [], set()),
    ("transformer_nsd", ["--nsd-input", "none", "--nsd-spe-lambda", "0", "--no-nsd-predict"], set()),
    ("transformer_nsd", [], {"encoder.input_components.", "encoder.output_components.nsd_predict."}),
    ("transformer_syntax_embed", ["--syntax-features", "parent"], {"encoder.input_components."}),
    ("transformer_dep_rel", ["--encoder-layers", "2"], {"encoder.layers.0.attention_terms.",
                                                       "encoder.layers.1.attention_terms.",
                                                       "decoder.layers.0.rel_seq_embed."}),
])
def test_parameters_beyond_fairseq_transformer_are_the_components(arch, extra, extra_parameters):
    """With every component off the model has exactly fairseq's parameters; otherwise only the components add any."""
    model, args = build(arch, extra)
    reference = TransformerModel.build_model(args, TASK)
    ours = {n for n, _ in model.named_parameters()}
    theirs = {n for n, _ in reference.named_parameters()}
    added = ours - theirs
    assert {next(p for p in extra_parameters if n.startswith(p)) for n in added if
            any(n.startswith(p) for p in extra_parameters)} == extra_parameters
    assert all(any(n.startswith(p) for p in extra_parameters) for n in added), sorted(added)
    if not extra_parameters:
        assert ours == theirs


@pytest.mark.parametrize("arch,extra,dims", [
    # (encoder word, encoder model, heads, FFN, decoder dim, decoder heads): paper 003 Table IV
    ("transformer_syntax_embed", [], (512, 608, 19, 2432, 608, 19)),
    ("transformer_syntax_embed_iwslt_de_en", [], (256, 352, 11, 1408, 352, 11)),
    ("transformer_syntax_spe", [], (512, 576, 9, 2304, 576, 9)),
    ("transformer_syntax_spe_iwslt_de_en", [], (256, 320, 5, 1280, 320, 5)),
    # Table III: "set the dimensions of input embeddings to 576 and the heads to 9"
    ("transformer_syntax_embed", ["--syntax-features", "pos,label"], (512, 576, 9, 2304, 576, 9)),
    ("transformer_syntax_embed", ["--syntax-features", "parent"], (512, 544, 17, 2176, 544, 17)),
    ("transformer_syntax_embed_iwslt_de_en", ["--share-all-embeddings"], (256, 352, 11, 1408, 256, 4)),
    ("transformer_syntax_spe", ["--syntax-features", "none"], (512, 512, 8, 2048, 512, 8)),
    ("transformer_nsd", [], (512, 512, 8, 2048, 512, 8)),
    ("transformer_nsd", ["--nsd-input", "concat", "--nsd-embed-dim", "64"], (512, 576, 8, 2048, 512, 8)),
    ("transformer_nsd_iwslt_de_en", [], (512, 512, 4, 1024, 512, 4)),
])
def test_feature_subset_flags_change_dims(arch, extra, dims):
    args = parse(arch, extra, tiny=False)
    got = (args.encoder_embed_dim, rt.encoder_model_dim(args), args.encoder_attention_heads,
           args.encoder_ffn_embed_dim, args.decoder_embed_dim, args.decoder_attention_heads)
    assert got == dims


@pytest.mark.parametrize("extra,model_dim,decoder_dim", [
    ([], 16 + 3 * 4, 16),
    (["--syntax-features", "pos,parent"], 16 + 2 * 4, 16),
    (["--decoder-embed-dim", "28"], 28, 28),  # the paper's sizing: one d_model on both sides
])
def test_built_shapes_follow_the_model_dim(extra, model_dim, decoder_dim):
    model, _ = build("transformer_syntax_embed", extra)
    enc, dec = model.encoder, model.decoder
    assert enc.embed_tokens.embedding_dim == 16
    assert enc.layers[0].self_attn.k_proj.weight.shape == (model_dim, model_dim)
    assert enc.layer_norm is None or enc.layer_norm.weight.shape == (model_dim,)
    assert enc.embed_positions(torch.ones(1, 3, dtype=torch.long)).shape[-1] == model_dim
    cross = dec.layers[0].encoder_attn
    assert cross.k_proj.weight.shape == (decoder_dim, model_dim)  # kdim/vdim = encoder model dim
    src, lengths, syntax = batch(model, [(table1_tokens(), table1_features(model.syntax_inputs()))])
    out, _ = model(src, lengths, torch.full((1, 2), WORDS.eos()), src_syntax=syntax)
    assert out.shape == (1, 2, len(WORDS))


def test_heads_must_divide_the_model_dim():
    with pytest.raises(ValueError, match="not divisible by --encoder-attention-heads 5"):
        build("transformer_syntax_embed", ["--encoder-attention-heads", "5"])


def test_bad_feature_names_are_refused():
    with pytest.raises(ValueError, match="unknown feature"):
        build("transformer_syntax_embed", ["--syntax-features", "pos,lemma"])


def test_missing_side_input_is_named():
    model, _ = build("transformer_syntax_embed")
    src, lengths, _ = batch(model, [(table1_tokens(), table1_features(set()))])
    with pytest.raises(ValueError, match="'pos'"):
        model.encoder(src, lengths, src_syntax={})


@pytest.mark.parametrize("arch", ["transformer_syntax_embed", "transformer_syntax_spe", "transformer_nsd"])
def test_left_padding_invariance(arch):
    """A short sentence gives the same encoder output (and NSD logits) alone or left-padded in a batch."""
    model, _ = build(arch)
    requested = model.syntax_inputs()
    long, short = (table1_tokens(), table1_features(requested)), other_sentence(requested)
    src, lengths, syntax = batch(model, [long, short])
    together = model.encoder(src, lengths, src_syntax=syntax)
    src, lengths, syntax = batch(model, [short])
    alone = model.encoder(src, lengths, src_syntax=syntax)
    torch.testing.assert_close(together["encoder_out"][0][-4:, 1], alone["encoder_out"][0][:, 0])
    if arch == "transformer_nsd":
        torch.testing.assert_close(together["src_nsd_logits"][0][1, -4:], alone["src_nsd_logits"][0][0])


def test_nsd_logits_survive_reorder_and_are_skipped_in_generation():
    model, _ = build("transformer_nsd")
    requested = model.syntax_inputs()
    src, lengths, syntax = batch(model, [(table1_tokens(), table1_features(requested)), other_sentence(requested)])
    out = model.encoder(src, lengths, src_syntax=syntax)
    reordered = model.encoder.reorder_encoder_out(out, torch.tensor([1, 0]))
    torch.testing.assert_close(reordered["src_nsd_logits"][0], out["src_nsd_logits"][0].flip(0))
    gen = model.encoder.forward_torchscript({"src_tokens": src, "src_lengths": lengths, "src_syntax": syntax})
    assert "src_nsd_logits" not in gen
