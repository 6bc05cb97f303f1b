"""Target-side neural syntactic distance, the model side (paper 002 secs. 3.1-3.3; issue 14).

The decoder combines each input token with the embedding of its distance (eq. 7, eqs. 8-10),
may add the distance PE (eqs. 15-16), predicts the next token's distance (eq. 11), and at
generation feeds back its own most probable distance of the previous step, kept per hypothesis
in the incremental state and reordered with the beam. Distances are built by hand here, in the
layout of the data contract: ``tgt_syntax["distance"]`` aligned with ``prev_output_tokens`` (0 at
the leading ``</s>`` and at padding), ``target_syntax["distance"]`` aligned with ``target``.
"""

import math
import os
import shutil
import types
from typing import Dict, List, Optional, Sequence

import pytest
import torch
from torch import Tensor

from fairseq.sequence_generator import SequenceGenerator

from fairseq_syntax.criterions.label_smoothed_cross_entropy_with_nsd import (
    LabelSmoothedCrossEntropyWithNSDCriterion,
    nsd_losses,
)
from fairseq_syntax.models.syntax_transformer.components.nsd_prediction import NsdLossOptions, target_nsd_losses
from fairseq_syntax.models.syntax_transformer.components.target_nsd import target_distances
from fairseq_syntax.models import syntax_transformer as rt
from fairseq_syntax.models.syntax_transformer.config import ModelOptionError
from fairseq_syntax.modules.target_distance import (
    BOS_DISTANCE,
    TGT_NSD_INPUT_KEY,
    TGT_NSD_LOGITS_KEY,
    most_probable_distance,
)

from .conftest import TASK, WORDS, batch, parse, table1_features, table1_tokens

#: the target-side variants: (arch, extra arguments)
VARIANTS = [
    ("transformer_nsd_target", []),  # linear (eq. 10) + SPE (eqs. 15-16) + eq. 11
    ("transformer_nsd_target", ["--nsd-target-input", "concat", "--nsd-embed-dim", "4"]),  # eq. 8, widened decoder
    ("transformer_nsd_target", ["--nsd-target-input", "add", "--nsd-target-spe-lambda", "0"]),  # eq. 9 alone
    ("transformer_nsd_target", ["--nsd-target-input", "none"]),  # the SPE alone
    ("transformer_nsd_both", []),
    ("transformer_nsd_target", ["--nsd-target-predict-from", "state"]),  # eq. 11 on h_t alone (before the option)
]
IDS = [" ".join([a] + e) for a, e in VARIANTS]


def build(arch: str, extra: Sequence[str] = (), dtype=torch.float64):
    args = parse(arch, extra)
    return rt.SyntaxTransformerModel.build_model(args, TASK).to(dtype).eval()


def source(model, n: int = 2):
    """Table I's sentence and a copy of it, left-padded, with the source features the model asks for."""
    sentence = (table1_tokens(), table1_features(model.syntax_inputs() or {"distance"}))
    src, lengths, syntax = batch(model, [sentence] * n)
    return src, lengths, (syntax if model.syntax_inputs() else None)


def decoder_input(n: int, T: int, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    prev = torch.randint(WORDS.nspecial, len(WORDS), (n, T), generator=g)
    prev[:, 0] = WORDS.eos()
    return prev


def steps(model, encoder_out, prev: Tensor, inc: Dict, start: int, stop: int):
    """Incremental decoding of positions ``start .. stop - 1`` as SequenceGenerator runs it."""
    logits, distances = [], []
    for t in range(start, stop):
        out, extra = model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=inc)
        logits.append(out[:, -1])
        distances.append(extra[TGT_NSD_INPUT_KEY][0][:, -1])
    return torch.stack(logits, 1), torch.stack(distances, 1)


# ----------------------------------------------------------------- options and presets


def test_presets_and_inputs():
    target = build("transformer_nsd_target")
    assert target.target_syntax_inputs() == {"distance"} and target.syntax_inputs() == set()
    syntax = target.decoder.syntax_cfg
    assert (syntax.nsd_target_input, syntax.nsd_target_spe_lambda, syntax.nsd_target_predict) == ("linear", 40.0, True)
    both = build("transformer_nsd_both")
    assert both.target_syntax_inputs() == {"distance"} and both.syntax_inputs() == {"distance"}
    small = parse("transformer_nsd_target_iwslt_de_en", tiny=False)
    assert small.dropout == 0.3 and small.nsd_target_input == "linear"
    assert parse("transformer_nsd_both_iwslt_de_en", tiny=False).nsd_input == "linear"
    # off everywhere else: the decoder is fairseq's, with no NSD module
    for arch in ("syntax_transformer", "transformer_nsd", "transformer_dep_rel"):
        model = build(arch)
        assert model.target_syntax_inputs() == set()
        assert target_distances(model) is None and model.decoder.target_components == []
        assert not any("nsd" in k for k in model.decoder.state_dict())
    # prediction alone: the decoder reads nothing, asks for the target distances (its training target)
    predict_only = build("transformer_nsd_target", ["--nsd-target-input", "none", "--nsd-target-spe-lambda", "0"])
    assert predict_only.decoder.nsd_feedback is None and predict_only.target_syntax_inputs() == {"distance"}


def test_concat_widens_the_decoder():
    model = build("transformer_nsd_target", ["--nsd-target-input", "concat", "--nsd-embed-dim", "4"])
    dec = model.decoder
    assert dec.embed_dim == 20 and dec.layers[0].self_attn.embed_dim == 20  # 16 + 4
    assert dec.project_in_dim is None and dec.project_out_dim.weight.shape == (16, 20)  # back to the word width
    assert dec.embed_scale == math.sqrt(16)  # the words keep their scale
    assert dec.nsd_predictor.proj.in_features == 16 + 16  # eq. 11 on [h_t; E(y_t)]: the state and the word
    state_only = build("transformer_nsd_target", ["--nsd-target-input", "concat", "--nsd-embed-dim", "4",
                                                  "--nsd-target-predict-from", "state"])
    assert state_only.decoder.nsd_predictor.proj.in_features == 16


@pytest.mark.parametrize("arch, extra, match", [
    ("syntax_transformer", ["--nsd-target-input", "linear"],
     r"--nsd-target-input linear needs --nsd-target-predict: .*unknown at generation"),
    ("transformer_nsd_target", ["--no-nsd-target-predict"],
     r"--nsd-target-input linear with --nsd-target-spe-lambda 40 needs --nsd-target-predict"),
    ("syntax_transformer", ["--nsd-target-spe-lambda", "40"], r"--nsd-target-spe-lambda 40 needs --nsd-target-predict"),
    ("transformer_nsd_target", ["--nsd-target-spe-lambda", "1"], r"--nsd-target-spe-lambda 1\.0: expected 0 \(off\)"),
    ("transformer_nsd_target", ["--nsd-target-spe-lambda", "nan"], r"--nsd-target-spe-lambda nan: expected"),
    ("transformer_nsd_target", ["--nsd-target-spe-lambda", "-3"], r"--nsd-target-spe-lambda -3\.0: expected"),
    ("transformer_nsd_target", ["--nsd-target-input", "concat", "--nsd-embed-dim", "3", "--nsd-target-spe-lambda", "0"],
     r"decoder model dimension 19 .*not divisible by --decoder-attention-heads 2"),
    ("transformer_nsd_target", ["--nsd-target-input", "concat", "--nsd-embed-dim", "3", "--decoder-attention-heads", "1"],
     r"--nsd-target-spe-lambda 40: .*even decoder model dimension, got 19"),
])
def test_bad_target_options_are_refused_naming_the_flag(arch, extra, match):
    with pytest.raises(ModelOptionError, match=match) as error:
        parse(arch, extra)  # fairseq's parser runs the architecture: before any data is read
    assert "\n" not in str(error.value)


def test_argparse_choices():
    with pytest.raises(SystemExit):
        parse("transformer_nsd_target", ["--nsd-target-input", "sum"])


def test_target_model_needs_the_syntax_task():
    stand_in = types.SimpleNamespace(source_dictionary=WORDS, target_dictionary=WORDS)
    model = rt.SyntaxTransformerModel.build_model(parse("transformer_nsd_target"), stand_in)  # code may build it
    assert model.target_syntax_inputs() == {"distance"}
    from fairseq.tasks.translation import TranslationTask

    class Translation(TranslationTask):
        def __init__(self):  # noqa: D401 - a stand-in with fairseq's class
            self.src_dict = self.tgt_dict = WORDS

    with pytest.raises(ModelOptionError, match="target syntax .*only --task syntax_translation"):
        rt.SyntaxTransformerModel.build_model(parse("transformer_nsd_target"), Translation())


# ----------------------------------------------------------------- forward: gold, feedback, beam


@pytest.mark.parametrize("arch, extra", VARIANTS, ids=IDS)
def test_incremental_equals_full_forward_with_the_fed_back_distances(arch, extra):
    torch.manual_seed(1)
    model = build(arch, extra)
    src, lengths, syntax = source(model, 3)
    T = 7
    prev = decoder_input(3, T, seed=2)
    enc = model.encoder(src, lengths, src_syntax=syntax)

    inc: Dict = {}
    step_logits, fed = steps(model, enc, prev, inc, 0, T)
    assert fed[:, 0].eq(BOS_DISTANCE).all()
    full, extra_out = model(src, lengths, prev, src_syntax=syntax, tgt_syntax={"distance": fed})
    torch.testing.assert_close(step_logits, full, rtol=1e-6, atol=1e-6)
    # what was fed at t is the argmax of eq. 11 at t - 1 in that same pass
    predicted = most_probable_distance(extra_out[TGT_NSD_LOGITS_KEY][0])
    assert torch.equal(fed[:, 1:], predicted[:, :-1])
    assert torch.equal(model.decoder.feedback_distances(prev, enc), fed)

    # beam reordering after 3 steps (with a duplicate and a dropped row)
    new_order = torch.tensor([2, 0, 0, 1])
    inc = {}
    steps(model, enc, prev, inc, 0, 3)
    model.decoder.reorder_incremental_state_scripting(inc, new_order)
    enc_r = model.encoder.reorder_encoder_out(enc, new_order)
    cont, fed_r = steps(model, enc_r, prev[new_order], inc, 3, T)
    full_r, _ = model(src[new_order], lengths[new_order], prev[new_order],
                      src_syntax=None if syntax is None else {k: v[new_order] for k, v in syntax.items()},
                      tgt_syntax={"distance": fed[new_order]})
    torch.testing.assert_close(cont, full_r[:, 3:], rtol=1e-6, atol=1e-6)
    assert torch.equal(fed_r, fed[new_order][:, 3:])


@pytest.mark.parametrize("predict_from", ["state+token", "state"])
def test_fed_back_distance_is_that_of_the_token_emitted(predict_from):
    """state+token: the distance fed at step t belongs to the token chosen at t - 1 (another token, another
    distance, as in training); state: it was fixed before that token was chosen (checkpoints before the option)."""
    torch.manual_seed(5)
    model = build("transformer_nsd_target", ["--nsd-target-predict-from", predict_from])
    torch.nn.init.normal_(model.decoder.nsd_predictor.proj.weight, std=1.0)  # a predictor that tells tokens apart
    src, lengths, _ = source(model, 1)
    enc = model.encoder(src, lengths, src_syntax=None)
    prev = decoder_input(1, 4, seed=6).repeat(len(WORDS) - 4, 1)
    prev[:, 2] = torch.arange(4, len(WORDS))  # every word of the dictionary as the token emitted at step 1
    fed = model.decoder.feedback_distances(prev, model.encoder.reorder_encoder_out(enc, torch.zeros(len(prev)).long()))
    assert torch.equal(fed[:, :2], fed[:1, :2].expand(len(prev), 2))  # before that token: the same
    assert (fed[:, 2].unique().numel() > 1) == (predict_from == "state+token")


@pytest.mark.parametrize("arch, extra", VARIANTS[:3] + VARIANTS[5:], ids=IDS[:3] + IDS[5:])
def test_gold_distances_are_read_causally(arch, extra):
    """Changing the input distance at position 3 changes the outputs from position 3 on, none before."""
    torch.manual_seed(3)
    model = build(arch, extra)
    src, lengths, syntax = source(model, 2)
    prev = decoder_input(2, 6, seed=4)
    gold = torch.tensor([[0, 1, -2, 3, 1, -1], [0, 2, 2, -1, 4, 1]])
    out, extra_out = model(src, lengths, prev, src_syntax=syntax, tgt_syntax={"distance": gold})
    assert torch.equal(extra_out[TGT_NSD_INPUT_KEY][0], gold)
    changed = gold.clone()
    changed[:, 3] = 5
    out2, _ = model(src, lengths, prev, src_syntax=syntax, tgt_syntax={"distance": changed})
    torch.testing.assert_close(out[:, :3], out2[:, :3])
    assert (out[:, 3:] - out2[:, 3:]).abs().amax() > 1e-6


def test_full_forward_without_distances_is_refused_clearly():
    model = build("transformer_nsd_target")
    src, lengths, syntax = source(model, 2)
    prev = decoder_input(2, 4, seed=5)
    with pytest.raises(ValueError, match=r"got no tgt_syntax\['distance'\].*feedback_distances"):
        model(src, lengths, prev, src_syntax=syntax)
    with pytest.raises(ValueError, match="aligned with the decoder input"):
        model(src, lengths, prev, src_syntax=syntax, tgt_syntax={"distance": torch.zeros(2, 3, dtype=torch.long)})
    # a decoder that only predicts reads nothing: the full forward works, the logits are there
    only = build("transformer_nsd_target", ["--nsd-target-input", "none", "--nsd-target-spe-lambda", "0"])
    _, extra_out = only(src, lengths, prev, src_syntax=None)
    assert extra_out[TGT_NSD_LOGITS_KEY][0].shape == (2, 4, 17) and TGT_NSD_INPUT_KEY not in extra_out


def generate(model, sample, beam: int = 3):
    gen = SequenceGenerator([model], WORDS, beam_size=beam, max_len_b=8, min_len=3)
    return gen.generate([model], sample)


@pytest.mark.parametrize("arch, extra", [VARIANTS[i] for i in (0, 1, 4, 5)], ids=[IDS[i] for i in (0, 1, 4, 5)])
def test_sequence_generator_scores_equal_rescoring_with_the_fed_back_distances(arch, extra):
    """fairseq's own beam search, unforked: each hypothesis' scores are those of a full forward
    given the distances the decoder fed back along that hypothesis (reordered with the beam)."""
    torch.manual_seed(6)
    model = build(arch, extra, dtype=torch.float32)
    with torch.no_grad():  # make the predicted distances vary, so that wrong feedback shows
        model.decoder.nsd_predictor.proj.weight.normal_(0, 1.0)
    src, lengths, syntax = source(model, 2)
    net_input = {"src_tokens": src, "src_lengths": lengths, "src_syntax": syntax}
    hypos = generate(model, {"net_input": net_input})
    # tgt_syntax in net_input (a data-bin with parsed targets) changes nothing: generation feeds back
    gold = {"distance": torch.full((2, 5), 3, dtype=torch.long)}
    again = generate(model, {"net_input": dict(net_input, tgt_syntax=gold, prev_output_tokens=src[:, :5])})
    varied = False
    for b, hyps in enumerate(hypos):
        assert len(hyps) == 3
        for h, h2 in zip(hyps, again[b]):
            assert torch.equal(h["tokens"], h2["tokens"])
            tokens = h["tokens"].unsqueeze(0)
            prev = torch.cat([tokens.new_full((1, 1), WORDS.eos()), tokens[:, :-1]], dim=1)
            one = (src[b:b + 1], lengths[b:b + 1])
            one_syntax = None if syntax is None else {k: v[b:b + 1] for k, v in syntax.items()}
            enc = model.encoder(*one, src_syntax=one_syntax)
            fed = model.decoder.feedback_distances(prev, enc)
            varied |= bool(fed[:, 1:].ne(fed[:, 1:2]).any())
            out = model(*one, prev, src_syntax=one_syntax, tgt_syntax={"distance": fed})
            lp = model.get_normalized_probs(out, log_probs=True)[0].gather(-1, tokens[0].unsqueeze(-1)).squeeze(-1)
            torch.testing.assert_close(lp, h["positional_scores"], rtol=1e-4, atol=1e-4)
            wrong = model(*one, prev, src_syntax=one_syntax, tgt_syntax={"distance": torch.zeros_like(fed)})
            lp_wrong = model.get_normalized_probs(wrong, log_probs=True)[0]
            lp_wrong = lp_wrong.gather(-1, tokens[0].unsqueeze(-1)).squeeze(-1)
            assert (lp_wrong - h["positional_scores"]).abs().amax() > 1e-3  # the check can fail
    assert varied


def test_sequence_generator_with_prediction_only():
    model = build("transformer_nsd_target", ["--nsd-target-input", "none", "--nsd-target-spe-lambda", "0"],
                  dtype=torch.float32)
    src, lengths, _ = source(model, 2)
    hypos = generate(model, {"net_input": {"src_tokens": src, "src_lengths": lengths}})
    assert all(len(h) == 3 for h in hypos)


# ----------------------------------------------------------------- losses (eqs. 19-20 on the target)

EOS, PAD = WORDS.eos(), WORDS.pad()


def test_target_losses_of_a_hand_made_example():
    """D = 1: classes -1, 0, 1. Two real tokens, then </s> and padding (left out).

    token 1: p = (1/4, 1/2, 1/4), d̂ = 0, gold 1:   (1 - 0)^2 = 1,          -log 1/4, argmax 0 (wrong)
    token 2: p = (1/2, 1/4, 1/4), d̂ = -1/4, gold -1: (-1 + 1/4)^2 = 0.5625, -log 1/2, argmax -1 (right)
    pair (1, 2): sign(1 - (-1)) = 1, [1 - (0 - (-1/4))]_+ = 0.75
    """
    logits = torch.log(torch.tensor([[[0.25, 0.5, 0.25], [0.5, 0.25, 0.25], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]]]))
    target = torch.tensor([[7, 8, EOS, PAD]])
    gold = torch.tensor([[1, -1, 0, 0]])
    raw = NsdLossOptions(nsd_rank_norm="none", nsd_dist_units="raw")
    terms = target_nsd_losses(logits, {"target": target, "target_syntax": {"distance": gold}}, raw, pad=PAD, eos=EOS)
    torch.testing.assert_close(terms["mse"], torch.tensor(1.5625))
    torch.testing.assert_close(terms["rank"], torch.tensor(0.75))
    torch.testing.assert_close(terms["ent"], torch.tensor(math.log(4) + math.log(2)))
    assert terms["correct"].item() == 1 and terms["tokens"].item() == 2
    # logits but no gold: a clear error
    with pytest.raises(ValueError, match=r"no sample\['target_syntax'\]\['distance'\]"):
        target_nsd_losses(logits, {"target": target}, raw, pad=PAD, eos=EOS)


def training_sample(model, seed: int = 7):
    """Two sentences, targets of 4 and 3 tokens + </s>, right-padded; distances in the data contract's layout."""
    src, lengths, syntax = source(model, 2)
    target = torch.tensor([[5, 6, 7, 8, EOS], [9, 10, 11, EOS, PAD]])
    prev = torch.tensor([[EOS, 5, 6, 7, 8], [EOS, 9, 10, 11, PAD]])
    gold = torch.tensor([[2, 1, -1, -3, 0], [1, -1, 2, 0, 0]])  # of each target token, 0 at </s> and padding
    gold_in = torch.tensor([[0, 2, 1, -1, -3], [0, 1, -1, 2, 0]])  # of each decoder input, 0 at BOS and padding
    net_input = {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev,
                 "tgt_syntax": {"distance": gold_in}}
    if syntax is not None:
        net_input["src_syntax"] = syntax
    return {"net_input": net_input, "target": target, "target_syntax": {"distance": gold},
            "ntokens": int(target.ne(PAD).sum()), "id": torch.arange(2)}


def criterion():
    task = types.SimpleNamespace(target_dictionary=WORDS, source_dictionary=WORDS)
    return LabelSmoothedCrossEntropyWithNSDCriterion(task, False, 0.1, nsd_dist_weight=0.5, nsd_ent_weight=2.0)


@pytest.mark.parametrize("arch", ["transformer_nsd_target", "transformer_nsd_both"])
def test_criterion_adds_the_target_terms(arch):
    torch.manual_seed(8)
    model = build(arch)
    sample = training_sample(model)
    crit = criterion()
    loss, _, log = crit(model, sample)
    net_output = model(**sample["net_input"])
    nmt, _ = crit.compute_loss(model, net_output, sample)
    mask = sample["target"].ne(PAD) & sample["target"].ne(EOS)
    tgt = nsd_losses(net_output[1][TGT_NSD_LOGITS_KEY][0], sample["target_syntax"]["distance"], ~mask,
                     rank_norm=crit.settings.nsd_rank_norm, units="range")  # the source terms' hinge normalisation and units
    expected = nmt + 0.5 * (tgt["mse"] + tgt["rank"]) + 2.0 * tgt["ent"]
    if arch == "transformer_nsd_both":
        src = crit.compute_nsd_losses(net_output, sample, model)
        expected = expected + 0.5 * (src["mse"] + src["rank"]) + 2.0 * src["ent"]
        src_tokens = sample["net_input"]["src_tokens"]
        assert log["nsd_tokens"] == int((src_tokens.ne(PAD) & src_tokens.ne(EOS)).sum())  # </s> left out
    else:
        assert "nsd_tokens" not in log  # no source terms
    torch.testing.assert_close(loss, expected)
    assert log["tgt_nsd_tokens"] == 7
    for name in ("mse", "rank", "ent"):
        torch.testing.assert_close(log[f"tgt_nsd_{name}"], tgt[name])

    from fairseq.logging import metrics
    with metrics.aggregate() as agg:
        crit.reduce_metrics([log])
    values = agg.get_smoothed_values()
    assert set(values) >= {"tgt_nsd_mse", "tgt_nsd_rank", "tgt_nsd_ent", "tgt_nsd_acc"}
    assert values["tgt_nsd_mse"] == pytest.approx(tgt["mse"].item() / 7, abs=1e-3)
    assert values["tgt_nsd_ent"] == pytest.approx(tgt["ent"].item() / 7 / math.log(2), abs=1e-3)
    assert ("nsd_mse" in values) == (arch == "transformer_nsd_both")


def test_gradients_reach_the_target_predictor_and_embedding():
    torch.manual_seed(9)
    model = build("transformer_nsd_target", ["--nsd-target-sampling", "0"]).train()  # teacher forcing: gold inputs
    loss, _, _ = criterion()(model, training_sample(model))
    loss.backward()
    dec = model.decoder
    for name, param in [("predictor W_d", dec.nsd_predictor.proj.weight),
                        ("E^t_d", dec.nsd_input.embed.embed.weight),
                        ("W_f", dec.nsd_input.embed.combine.weight)]:
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    # E^t_d rows: gold values used get gradient, the padding row none
    grad = dec.nsd_input.embed.embed.weight.grad
    assert grad[0].abs().sum() == 0
    D = 8
    for d in (0, 2, 1, -1, -3):  # the BOS value 0 and the gold input distances
        assert grad[d + D + 1].abs().sum() > 0


def test_old_model_args_build_without_target_nsd():
    """Args saved before the target options existed (no nsd_target_* attribute) build the same decoder."""
    args = parse("transformer_nsd")
    for name in ("nsd_target_input", "nsd_target_spe_lambda", "nsd_target_predict"):
        delattr(args, name)
    model = rt.SyntaxTransformerModel.build_model(args, TASK)
    assert model.target_syntax_inputs() == set() and target_distances(model) is None


# ----------------------------------------------------------------- end to end (installed commands)


@pytest.mark.slow
@pytest.mark.parametrize("arch,distance", [("transformer_nsd_both", "dependency"),
                                           ("transformer_nsd_target", "constituency-relative")])
def test_target_nsd_trains_and_decodes_on_a_parsed_french_target(tmp_path, en_fr_bin, arch, distance):
    """Issue 14's CI run: fairseq-train on a data-bin whose French target was parsed (--target-parser),
    then fairseq-generate and fairseq-interactive feeding back the predicted distances, from outside
    the checkout with the installed commands only."""
    from .conftest import CLI_TINY, call, spacy_model, tool

    shutil.copytree(en_fr_bin, tmp_path / "data-bin")
    train = call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                  "--arch", arch, *CLI_TINY, "--share-all-embeddings", "--nsd-distance", distance,
                  "--criterion", "label_smoothed_cross_entropy_with_nsd", "--label-smoothing", "0.1",
                  "--optimizer", "adam", "--lr", "0.002", "--max-tokens", "1500", "--max-update", "12",
                  "--save-dir", "ckpt", "--no-epoch-checkpoints", "--no-progress-bar", "--log-interval", "1",
                  "--seed", "1"], cwd=tmp_path)
    assert "tgt_nsd_mse" in train.stdout + train.stderr  # the target terms are trained and logged
    assert "--best-checkpoint-metric nll_loss_fed" in train.stdout + train.stderr  # selection on the sum: advised against
    assert "nll_loss_fed" in train.stdout and "nll_loss_gap" in train.stdout  # validation as generation runs
    generated = call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                      "syntax_translation", "--path", "ckpt/checkpoint_last.pt", "--gen-subset", "test",
                      "--beam", "3", "--batch-size", "16", "--remove-bpe", "--max-len-b", "20"], cwd=tmp_path)
    assert len([l for l in generated.stdout.splitlines() if l.startswith("H-")]) == 30
    spacy_model()  # fairseq-interactive parses the raw English text
    text = "A man rides a red bike.\nTwo dogs play in the snow. A child watches them.\n"
    translated = call([tool("fairseq-interactive"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                       "syntax_translation", "--path", "ckpt/checkpoint_last.pt", "--source-lang", "en",
                       "--target-lang", "fr", "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes",
                       "data-bin/bpe.codes", "--beam", "2", "--max-len-b", "20"], cwd=tmp_path, stdin=text)
    assert len([l for l in translated.stdout.splitlines() if l.startswith("H-")]) == 2
    # the same lines give the same translation and score through both commands (preprocessed parse and
    # side-files in fairseq-generate, raw text parsed on the fly in fairseq-interactive)
    from .conftest import SAMPLE

    with open(os.path.join(SAMPLE, "test.en"), encoding="utf-8") as handle:
        raw = [next(handle) for _ in range(30)]
    detok = ["--source-lang", "en", "--target-lang", "fr", "--tokenizer", "moses", "--bpe", "subword_nmt",
             "--bpe-codes", "data-bin/bpe.codes", "--beam", "3", "--max-len-b", "20", "--batch-size", "1"]
    generated = call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                      "syntax_translation", "--path", "ckpt/checkpoint_last.pt", "--gen-subset", "test", *detok],
                     cwd=tmp_path)
    translated = call([tool("fairseq-interactive"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                       "syntax_translation", "--path", "ckpt/checkpoint_last.pt", *detok], cwd=tmp_path,
                     stdin="".join(raw))

    def scored(stdout):
        return {int(l.split("\t")[0][2:]): (l.split("\t")[2], round(float(l.split("\t")[1]), 3))
                for l in stdout.splitlines() if l.startswith("H-")}

    assert len(scored(generated.stdout)) == 30 and scored(generated.stdout) == scored(translated.stdout)


# ----------------------------------------------------------------- validation as generation runs


@pytest.mark.parametrize("arch, predict_from", [("transformer_nsd_target", "state+token"),
                                                ("transformer_nsd_target", "state"),
                                                ("transformer_nsd_both", "state+token")])
def test_fed_back_validation_loss_is_the_rescoring_of_the_references(arch, predict_from):
    """nll_loss_fed is the reference's negative log-likelihood when the decoder runs step by step as
    SequenceGenerator runs it (its own distances fed back), not with the gold ones; the gap is logged."""
    from fairseq.logging import metrics

    from fairseq_syntax.criterions.fed_back_validation import fed_back_logging, reduce_fed_back_metrics

    torch.manual_seed(9)
    model = build(arch, ["--nsd-target-predict-from", predict_from])
    torch.nn.init.normal_(model.decoder.nsd_predictor.proj.weight, std=1.0)  # distances that differ from gold
    sample = training_sample(model)
    crit = criterion()
    _, _, gold_log = crit(model, sample)
    log = fed_back_logging(model, crit, sample)

    net_input = sample["net_input"]
    enc = model.encoder(net_input["src_tokens"], net_input["src_lengths"], src_syntax=net_input.get("src_syntax"))
    prev, target = net_input["prev_output_tokens"], sample["target"]
    step_logits, fed = steps(model, enc, prev, {}, 0, prev.size(1))
    lprobs = torch.log_softmax(step_logits.float(), dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    rescored = -lprobs.masked_fill(target.eq(PAD), 0).sum()
    assert abs(float(log["nll_loss_fed"]) - float(rescored)) < 1e-4
    assert abs(float(log["nll_loss_fed"]) - float(gold_log["nll_loss"])) > 1e-3  # the gold distances differ
    real = prev.ne(PAD) & prev.ne(EOS)
    assert log["tgt_nsd_fed_tokens"] == int(real.sum()) == 7
    assert log["tgt_nsd_fed_agree"] == int((fed.eq(net_input["tgt_syntax"]["distance"]) & real).sum())

    with metrics.aggregate() as agg:
        crit.reduce_metrics([{**gold_log, **log}])
        reduce_fed_back_metrics([{**gold_log, **log}])
    values = agg.get_smoothed_values()
    ntokens = sample["ntokens"]
    assert values["nll_loss_fed"] == pytest.approx(float(rescored) / ntokens / math.log(2), abs=1e-3)
    assert values["nll_loss_gap"] == pytest.approx(values["nll_loss_fed"] - values["nll_loss"], abs=2e-3)


def test_fed_back_validation_is_nothing_for_models_without_target_input():
    from fairseq_syntax.criterions.fed_back_validation import fed_back_logging

    for arch, extra in [("transformer_nsd", []),
                        ("transformer_nsd_target", ["--nsd-target-input", "none", "--nsd-target-spe-lambda", "0"])]:
        model = build(arch, extra)
        assert fed_back_logging(model, criterion(), training_sample(model)) == {}


@pytest.mark.parametrize("sampling", [0.0, 1.0])
def test_training_reads_its_own_predicted_distances_with_sampling(sampling):
    """--nsd-target-sampling 1: in training, position t + 1 reads the distance eq. 11 predicts at t (a first
    pass on the gold distances, no gradient), as generation feeds it back; 0: the gold ones; eval: always gold."""
    torch.manual_seed(10)
    model = build("transformer_nsd_target", ["--nsd-target-sampling", str(sampling)])
    torch.nn.init.normal_(model.decoder.nsd_predictor.proj.weight, std=1.0)
    sample = training_sample(model)
    net_input = sample["net_input"]
    gold_in = net_input["tgt_syntax"]["distance"]
    _, gold_out = model(**net_input)  # eval mode: gold
    assert torch.equal(gold_out[TGT_NSD_INPUT_KEY][0], gold_in)
    predicted = most_probable_distance(gold_out[TGT_NSD_LOGITS_KEY][0])
    model.train()
    _, extra_out = model(**net_input)
    used = extra_out[TGT_NSD_INPUT_KEY][0]
    prev = net_input["prev_output_tokens"]
    if sampling == 0:
        assert torch.equal(used, gold_in)
        return
    assert torch.all(used[:, 0] == BOS_DISTANCE) and torch.all(used[prev.eq(PAD)] == 0)
    real = prev.ne(PAD) & prev.ne(EOS)
    assert torch.equal(used[:, 1:][real[:, 1:]], predicted[:, :-1][real[:, 1:]])
    assert not torch.equal(used, gold_in)
    # the gradient flows through the second pass only: the loss still trains every parameter it reaches
    loss, _, _ = criterion()(model, sample)
    loss.backward()
    assert model.decoder.nsd_predictor.proj.weight.grad.abs().sum() > 0


def test_sampling_share_is_checked():
    with pytest.raises((ModelOptionError, SystemExit)):
        parse("transformer_nsd_target", ["--nsd-target-sampling", "1.5"])


def test_checkpoint_selection_on_the_distance_terms_is_advised_against():
    from fairseq_syntax.criterions.fed_back_validation import selection_advice

    target, source = build("transformer_nsd_target"), build("transformer_nsd")
    assert "nll_loss_fed" in selection_advice("loss", target) and "nll_loss_fed" in selection_advice("nll_loss", target)
    assert selection_advice("nll_loss_fed", target) is None
    assert "--best-checkpoint-metric nll_loss" in selection_advice("loss", source)
    assert selection_advice("nll_loss", source) is None and selection_advice("bleu", source) is None
    assert selection_advice("loss", build("transformer_nsd_target", ["--no-nsd-target-predict", "--nsd-target-input",
                                                                     "none", "--nsd-target-spe-lambda", "0"])) is None


def test_checkpoints_before_the_options_keep_their_behaviour():
    """Args of a built model that predate --nsd-target-predict-from/--nsd-target-sampling keep eq. 11 on h_t
    alone and teacher forcing; a new command line gets state+token and the model's own distances."""
    from fairseq_syntax.models.syntax_transformer.config import upgrade_args

    old = parse("transformer_nsd_target")
    for name in ("nsd_target_predict_from", "nsd_target_sampling", "syntax_format_version"):
        delattr(old, name)  # nor the model format, stored since
    old.syntax_num_labels = 5  # a built model's args (a checkpoint)
    upgrade_args(old)
    assert (old.nsd_target_predict_from, old.nsd_target_sampling) == ("state", 0.0)
    new = parse("transformer_nsd_target")
    assert (new.nsd_target_predict_from, new.nsd_target_sampling) == ("state+token", 1.0)


def test_selecting_on_a_metric_the_model_never_logs_is_refused():
    from fairseq_syntax.criterions.fed_back_validation import selection_error

    assert "only a decoder that reads target" in selection_error("nll_loss_fed", build("transformer_nsd"))
    assert selection_error("nll_loss_fed", build("transformer_nsd_target")) is None
    assert selection_error("loss", build("transformer_nsd")) is None
