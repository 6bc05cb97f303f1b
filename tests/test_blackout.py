"""``--criterion blackout`` (paper 004 sec. 3.4, Ji et al. 2016): objective, counts, sampling, adapters."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary, indexed_dataset
from fairseq.models import BaseFairseqModel
from fairseq.models.lstm import LSTMDecoder
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase
from torch import nn

import fairseq_syntax  # noqa: F401  (registers the criterion)
from fairseq_syntax.criterions.blackout import (
    BlackOutCriterion,
    BlackOutError,
    blackout_loss,
    output_adapter,
    proposal_log_probs,
    target_unigram_counts,
)

WORDS = "abcdefghij"  # a dictionary of 4 specials + 10 words


def dictionary() -> Dictionary:
    d = Dictionary()
    for w in WORDS:
        d.add_symbol(w)
    return d


def fake_task(d: Dictionary, data: str = "", **cfg) -> SimpleNamespace:
    base = dict(data=data, train_subset="train", source_lang="en", target_lang="de", dataset_impl="mmap")
    base.update(cfg)
    return SimpleNamespace(target_dictionary=d, source_dictionary=d, cfg=SimpleNamespace(**base))


class DecoderModel(BaseFairseqModel):
    """A fairseq model around a bare decoder (no encoder): enough for the criterion."""

    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, src_tokens, src_lengths, prev_output_tokens):
        return self.decoder(prev_output_tokens)


def lstm_model(d: Dictionary, tied: bool = False, out_dim: int = 6) -> DecoderModel:
    return DecoderModel(LSTMDecoder(d, embed_dim=6, hidden_size=8, out_embed_dim=out_dim, attention=False,
                                    encoder_output_units=0, dropout_in=0.0, dropout_out=0.0,
                                    share_input_output_embed=tied))


def transformer_model(d: Dictionary, tied: bool = False) -> DecoderModel:
    cfg = TransformerConfig()
    cfg.decoder.embed_dim, cfg.decoder.ffn_embed_dim, cfg.decoder.layers, cfg.decoder.attention_heads = 8, 16, 1, 2
    cfg.decoder.output_dim, cfg.decoder.input_dim = 8, 8
    cfg.dropout, cfg.share_decoder_input_output_embed = 0.0, tied
    embed = nn.Embedding(len(d), 8, padding_idx=d.pad())
    return DecoderModel(TransformerDecoderBase(cfg, d, embed, no_encoder_attn=True))


def batch(d: Dictionary):
    """Two target sentences, one padded (fairseq's right-padded target, eos-first decoder input)."""
    target = torch.tensor([[5, 6, 7, 8, d.eos()], [9, 5, d.eos(), d.pad(), d.pad()]])
    prev = torch.tensor([[d.eos(), 5, 6, 7, 8], [d.eos(), 9, 5, d.pad(), d.pad()]])
    return {"net_input": {"src_tokens": target, "src_lengths": torch.tensor([5, 3]), "prev_output_tokens": prev},
            "target": target, "ntokens": 8}


def criterion(d: Dictionary, samples: int = 4, beta: float = 0.4, sentence_avg: bool = False) -> BlackOutCriterion:
    crit = BlackOutCriterion(fake_task(d), sentence_avg, blackout_samples=samples, blackout_beta=beta)
    counts = np.zeros(len(d), dtype=np.int64)
    counts[d.eos()], counts[d.unk()] = 7, 1
    counts[4:] = np.arange(1, len(WORDS) + 1)
    crit.set_target_counts(counts)
    return crit


# --------------------------------------------------------------------------- the objective by hand
def test_loss_on_a_tiny_vocabulary_computed_by_hand():
    # V = 5, d = 2; Q given; K = 4 draws with word 3 twice; position 0's own word (1) is among them
    weight = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
    bias = torch.tensor([0.0, 0.0, 0.0, -1.0, 0.0])
    q = [0.1, 0.2, 0.3, 0.25, 0.15]
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    target = torch.tensor([1, 4])
    negatives = torch.tensor([3, 1, 2, 3])
    loss, nll = blackout_loss(hidden, target, weight, bias, negatives, torch.tensor(q).log())

    e = math.e
    # position 0: scores s = (0, 1, 0, 0, 2); weighted exp(s_w)/Q(w); negatives {2: once, 3: twice}, not 1
    t, n2, n3 = e / 0.2, 1 / 0.3, 1 / 0.25
    z = t + n2 + 2 * n3
    j0 = math.log(t / z) + math.log(1 - n2 / z) + 2 * math.log(1 - n3 / z)
    # position 1: scores s = (0, 0, 1, 0, 0); negatives {1, 2, 3, 3} all kept (its word 4 was not drawn)
    t, n1, n2, n3 = 1 / 0.15, 1 / 0.2, e / 0.3, 1 / 0.25
    z1 = t + n1 + n2 + 2 * n3
    j1 = math.log(t / z1) + math.log(1 - n1 / z1) + math.log(1 - n2 / z1) + 2 * math.log(1 - n3 / z1)
    assert loss.tolist() == pytest.approx([-j0, -j1], rel=1e-5)
    assert nll.tolist() == pytest.approx([-math.log(e / 0.2 / z), -math.log(1 / 0.15 / z1)], rel=1e-5)


def naive_blackout(hidden, target, weight, bias, negatives, log_q):
    """Ji et al.'s weighted softmax and objective position by position, every draw on its own (duplicates as separate terms)."""
    out = []
    for h, i in zip(hidden.double(), target.tolist()):
        u = (weight.double() @ h + bias.double()) - log_q.double()
        drawn = [j for j in negatives.tolist() if j != i]
        z = u[i].exp() + sum(u[j].exp() for j in drawn)
        out.append(-(u[i] - z.log()) - sum(torch.log1p(-u[j].exp() / z) for j in drawn))
    return torch.stack(out)


def test_loss_matches_a_position_by_position_reading():
    torch.manual_seed(0)
    V, d, N = 9, 5, 7
    weight, bias, hidden = torch.randn(V, d), torch.randn(V), torch.randn(N, d)
    log_q = torch.log_softmax(torch.randn(V), 0)
    target = torch.randint(0, V, (N,))
    negatives = torch.cat([target[:2], torch.randint(0, V, (6,)), target[:1]])  # own words drawn, twice
    loss, _ = blackout_loss(hidden, target, weight, bias, negatives, log_q)
    assert torch.allclose(loss.double(), naive_blackout(hidden, target, weight, bias, negatives, log_q), rtol=1e-5)


def test_gradient_of_the_true_word_is_the_reference_codes():
    # Ji et al.'s rnnlm: d(-J)/du_i = p_i (1 + (K - m_i) - sum_{j != i} m_j / (1 - p_j)) - 1
    torch.manual_seed(8)
    V, d = 6, 3
    weight, hidden = torch.randn(V, d), torch.randn(1, d, requires_grad=True)
    bias = torch.zeros(V, requires_grad=True)
    log_q = torch.log_softmax(torch.randn(V), 0)
    target, negatives = torch.tensor([2]), torch.tensor([2, 0, 4, 4, 5])
    loss, _ = blackout_loss(hidden, target, weight, bias, negatives, log_q)
    loss.sum().backward()
    u = (weight @ hidden.detach()[0]) - log_q
    drawn = {0: 1, 4: 2, 5: 1}  # 2 was drawn once: dropped for its own position
    z = u[2].exp() + sum(m * u[j].exp() for j, m in drawn.items())
    p = u.exp() / z
    expected = p[2] * (1 + 4 - sum(m / (1 - p[j]) for j, m in drawn.items())) - 1
    assert float(bias.grad[2]) == pytest.approx(float(expected), rel=1e-4)


def test_extreme_scores_give_finite_loss_and_gradient():
    weight = torch.tensor([[50.0], [-50.0], [0.0]], requires_grad=True)
    hidden = torch.tensor([[3.0], [-3.0]])
    loss, _ = blackout_loss(hidden, torch.tensor([1, 0]), weight, None, torch.tensor([0, 0, 2, 1]),
                            torch.tensor([0.5, 0.25, 0.25]).log())
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isfinite(weight.grad).all()


# --------------------------------------------------------------------------- gradients
def train_step(crit, model, d):
    drawn = {}
    original = crit.sample_negatives

    def record(device):
        drawn["ids"] = original(device)
        return drawn["ids"]

    crit.sample_negatives = record
    model.train()
    loss, sample_size, log = crit(model, batch(d))
    loss.backward()
    return loss, sample_size, log, set(drawn["ids"].tolist())


def rows_with_gradient(grad):
    return set(torch.nonzero(grad.abs().sum(-1) if grad.dim() > 1 else grad.abs()).flatten().tolist())


def test_untied_gradient_reaches_only_the_sampled_and_target_output_rows():
    d = dictionary()
    torch.manual_seed(1)
    model, crit = lstm_model(d), criterion(d, samples=3)
    _, _, _, drawn = train_step(crit, model, d)
    targets = set(batch(d)["target"][batch(d)["target"] != d.pad()].tolist())
    assert rows_with_gradient(model.decoder.fc_out.weight.grad) == drawn | targets
    assert rows_with_gradient(model.decoder.fc_out.bias.grad) == drawn | targets
    assert len(drawn | targets) < len(d)  # some output rows got nothing


def test_tied_gradient_also_reaches_the_input_rows():
    d = dictionary()
    torch.manual_seed(2)
    model, crit = lstm_model(d, tied=True), criterion(d, samples=3)
    _, _, _, drawn = train_step(crit, model, d)
    b = batch(d)
    outputs = set(b["target"][b["target"] != d.pad()].tolist()) | drawn
    inputs = set(b["net_input"]["prev_output_tokens"][b["net_input"]["prev_output_tokens"] != d.pad()].tolist())
    assert rows_with_gradient(model.decoder.embed_tokens.weight.grad) == outputs | inputs


# --------------------------------------------------------------------------- adapters
@pytest.mark.parametrize("build,family,tied", [
    (lambda d: lstm_model(d), "lstm", False),
    (lambda d: lstm_model(d, out_dim=8), "lstm", False),  # no additional_fc
    (lambda d: lstm_model(d, tied=True, out_dim=6), "lstm", True),
    (lambda d: transformer_model(d), "transformer", False),
    (lambda d: transformer_model(d, tied=True), "transformer", True),
])
def test_adapter_features_are_what_the_output_layer_projects(build, family, tied):
    d = dictionary()
    torch.manual_seed(3)
    model = build(d).eval()
    adapter = output_adapter(model)
    assert (adapter.family, adapter.tied) == (family, tied)
    net_input = batch(d)["net_input"]
    with torch.no_grad():
        logits = model(**net_input)[0]
        with adapter.features() as state:
            features = model(**net_input)[0]
        assert state["used"] and "output_layer" not in vars(model.decoder)  # restored
        projected = nn.functional.linear(features, adapter.weight, adapter.bias)
    assert torch.allclose(projected, logits, atol=1e-6)


def test_unsupported_models_are_named():
    d = dictionary()

    class FConvLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc3 = nn.Linear(4, len(d))

        def output_layer(self, x):
            return self.fc3(x)

    with pytest.raises(BlackOutError, match="output_projection.*fc_out"):
        output_adapter(DecoderModel(FConvLike()))
    adaptive = LSTMDecoder(d, embed_dim=6, hidden_size=8, out_embed_dim=8, attention=False, encoder_output_units=0,
                           adaptive_softmax_cutoff=[6])
    with pytest.raises(BlackOutError, match="adaptive softmax"):
        output_adapter(DecoderModel(adaptive))


def test_the_transformer_family_trains_through_the_criterion():
    d = dictionary()
    torch.manual_seed(4)
    model, crit = transformer_model(d), criterion(d, samples=3, sentence_avg=True)
    loss, sample_size, log, drawn = train_step(crit, model, d)
    assert sample_size == 2 and torch.isfinite(loss)
    assert log["nll_loss"] <= log["loss"]  # the negative terms only add
    targets = set(batch(d)["target"][batch(d)["target"] != d.pad()].tolist())
    assert rows_with_gradient(model.decoder.output_projection.weight.grad) == drawn | targets


# --------------------------------------------------------------------------- validation, options, logging
def test_validation_reports_the_full_softmax_nll_of_cross_entropy():
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    d = dictionary()
    model = lstm_model(d).eval()
    crit = BlackOutCriterion(fake_task(d, data="/nonexistent"), False, 4, 0.4)  # no counts needed to validate
    with torch.no_grad():
        loss, sample_size, log = crit(model, batch(d))
        reference, _, _ = CrossEntropyCriterion(fake_task(d), False)(model, batch(d))
    assert sample_size == 8 and float(loss) == pytest.approx(float(reference))
    assert float(log["nll_loss"]) == pytest.approx(float(reference))


def test_unreduced_loss_is_per_position_with_zero_padding():
    d = dictionary()
    torch.manual_seed(5)
    model, crit = lstm_model(d).train(), criterion(d)
    torch.manual_seed(6)
    summed, _, _ = crit(model, batch(d))
    torch.manual_seed(6)
    per_position, _, _ = crit(model, batch(d), reduce=False)
    assert per_position.shape == (10,) and per_position.view(2, 5)[1, 3:].eq(0).all()
    assert float(per_position.sum()) == pytest.approx(float(summed), rel=1e-5)


@pytest.mark.parametrize("samples,beta,flag", [
    (0, 0.4, "--blackout-samples"), (14, 0.4, "--blackout-samples"), (100, 0.4, "--blackout-samples"),
    (4, -0.1, "--blackout-beta"), (4, float("nan"), "--blackout-beta"), (4, float("inf"), "--blackout-beta"),
])
def test_bad_options_name_the_flag(samples, beta, flag):
    d = dictionary()
    with pytest.raises(BlackOutError, match=flag):
        BlackOutCriterion(fake_task(d), False, samples, beta)


def test_registered_with_fairseq_options():
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY, CRITERION_REGISTRY

    assert CRITERION_REGISTRY["blackout"] is BlackOutCriterion
    config = CRITERION_DATACLASS_REGISTRY["blackout"]
    assert {"blackout_samples", "blackout_beta", "sentence_avg"} <= set(config.__dataclass_fields__)
    assert (config.blackout_samples, config.blackout_beta) == (500, 0.4)


def test_reduce_metrics_in_bits():
    from fairseq.logging import metrics

    with metrics.aggregate() as agg:
        BlackOutCriterion.reduce_metrics([{"loss": 8 * math.log(2), "nll_loss": 4 * math.log(2), "ntokens": 4,
                                           "nsentences": 1, "sample_size": 4}])
    assert agg.get_smoothed_value("loss") == 2.0 and agg.get_smoothed_value("nll_loss") == 1.0
    assert agg.get_smoothed_value("ppl") == 2.0


# --------------------------------------------------------------------------- counts and sampling
def write_split(prefix, lines, vocab_size):
    builder = indexed_dataset.make_builder(prefix + ".bin", impl="mmap", vocab_size=vocab_size)
    for line in lines:
        builder.add_item(torch.tensor(line, dtype=torch.int32))
    builder.finalize(prefix + ".idx")


def test_counts_come_from_every_target_train_shard_only(tmp_path):
    d = dictionary()
    V, eos = len(d), d.eos()
    write_split(str(tmp_path / "train.en-de.de"), [[4, 5, 5, eos], [d.unk(), eos]], V)
    write_split(str(tmp_path / "train1.en-de.de"), [[5, 6, eos]], V)
    write_split(str(tmp_path / "train.en-de.en"), [[9, 9, 9, 9, eos]], V)  # source side: not counted
    write_split(str(tmp_path / "valid.en-de.de"), [[10, eos]], V)  # another split: not counted
    counts, read = target_unigram_counts(str(tmp_path), "train", "en", "de", V, "mmap",
                                         exclude=(d.pad(), d.bos()))
    expected = np.zeros(V, dtype=np.int64)
    expected[[4, 5, 6, eos, d.unk()]] = [1, 3, 1, 3, 1]
    assert counts.tolist() == expected.tolist() and len(read) == 2

    crit = BlackOutCriterion(fake_task(d, data=str(tmp_path)), False, 4, 0.5)
    q = crit._tables(torch.device("cpu"))[0]
    weights = np.where(expected > 0, expected ** 0.5, 0.0)
    assert q.tolist() == pytest.approx((weights / weights.sum()).tolist(), abs=1e-6)
    assert set(crit.sample_negatives(torch.device("cpu")).tolist()) <= {4, 5, 6, eos, d.unk()}


def test_reversed_language_order_and_missing_split(tmp_path):
    d = dictionary()
    write_split(str(tmp_path / "train.de-en.de"), [[7, d.eos()]], len(d))
    counts, _ = target_unigram_counts(str(tmp_path), "train", "en", "de", len(d), None)
    assert counts[7] == 1
    crit = BlackOutCriterion(fake_task(d, data=str(tmp_path), train_subset="big"), False, 4, 0.4)
    with pytest.raises(BlackOutError, match=r"big\.en-de\.de.*train split"):
        crit(lstm_model(d).train(), batch(d))


def test_proposal_is_unigram_to_the_beta_over_counted_words():
    counts = np.array([0, 0, 1, 4, 16])
    assert proposal_log_probs(counts, 0.5).exp().tolist() == pytest.approx([0, 0, 1 / 7, 2 / 7, 4 / 7])
    assert proposal_log_probs(counts, 0.0).exp().tolist() == pytest.approx([0, 0, 1 / 3, 1 / 3, 1 / 3])
    assert proposal_log_probs(counts, 1.0).exp().tolist() == pytest.approx([0, 0, 1 / 21, 4 / 21, 16 / 21])


def test_negatives_are_drawn_with_replacement_from_q():
    d = dictionary()
    crit = criterion(d, samples=13, beta=1.0)
    torch.manual_seed(7)
    draws = torch.cat([crit.sample_negatives(torch.device("cpu")) for _ in range(400)])
    q = crit._tables(torch.device("cpu"))[0]
    assert q[d.pad()] == 0 and q[d.bos()] == 0 and not ((draws == d.pad()) | (draws == d.bos())).any()
    frequency = torch.bincount(draws, minlength=len(d)).double() / draws.numel()
    assert torch.allclose(frequency, q.double(), atol=0.01)


def test_in_training_each_batch_of_an_update_draws_its_own_negatives_from_the_seed():
    """Through the task (begin_micro_batch): batch i of update u draws from (seed, u, i), whatever
    torch's RNG holds, so rank r of N draws what micro-batch r of one process with --update-freq N
    draws, and a resumed run draws what the uninterrupted one drew."""
    d = dictionary()
    first, again = criterion(d, samples=13), criterion(d, samples=13)
    first.seed = again.seed = 3
    cpu = torch.device("cpu")
    first.begin_micro_batch(5)
    torch.manual_seed(0)
    a0 = first.sample_negatives(cpu)
    first.begin_micro_batch(5)
    a1 = first.sample_negatives(cpu)
    first.begin_micro_batch(6)
    b0 = first.sample_negatives(cpu)
    again.begin_micro_batch(5)
    torch.manual_seed(123)  # torch's RNG plays no part
    assert torch.equal(again.sample_negatives(cpu), a0)
    assert not torch.equal(a0, a1) and not torch.equal(a0, b0)
    again.begin_micro_batch(5)
    assert torch.equal(again.sample_negatives(cpu), a1)
    other_seed = criterion(d, samples=13)
    other_seed.seed = 4
    other_seed.begin_micro_batch(5)
    assert not torch.equal(other_seed.sample_negatives(cpu), a0)
