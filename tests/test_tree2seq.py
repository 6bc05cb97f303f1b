"""Paper 004's tree2seq: the batched binary Tree-LSTM, the tree-based encoder, the model through fairseq's registry."""

import argparse
import types

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary, data_utils

import fairseq_syntax  # noqa: F401  (registers the model)
from fairseq_syntax.data.syntax_features import collate_nodes
from fairseq_syntax.models.tree2seq.encoder import Tree2SeqEncoder
from fairseq_syntax.models.tree2seq.model import Tree2SeqModel
from fairseq_syntax.modules.tree_lstm import BinaryTreeLSTM
from fairseq_syntax_core import phrase_trees
from fairseq_syntax_core.errors import UsageError
from fairseq_syntax_core.phrase import from_dependency


def random_tree(n: int, rng) -> np.ndarray:
    """Merges of a random binary tree over n leaves (random dependency trees give mixed shapes)."""
    return from_dependency([0] + [int(rng.integers(1, i + 1)) for i in range(1, n)])


def recursive(cell, leaf_h, leaf_c, merges, n):
    """Reference: every node computed by recursion from the root, one node at a time."""
    def unit(node):
        if node < n:
            return leaf_h[node], leaf_c[node]
        left, right = merges[node - n]
        (hl, cl), (hr, cr) = unit(int(left)), unit(int(right))
        return cell(hl, cl, hr, cr)

    return [unit(n + k) for k in range(len(merges))]


def test_phrase_heights_of_hand_built_trees():
    # ((a b) (c (d e))) and ((a b) (c d)) and a line without a tree
    phrase = torch.tensor([[[0, 1], [3, 4], [2, 6], [5, 7]], [[0, 1], [2, 3], [4, 5], [0, 0]], [[0, 0]] * 4])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [0, 0, 0, 0]]).bool()
    assert phrase_trees.phrase_heights(phrase, mask, torch.tensor([5, 4, 3])).tolist() == [[1, 1, 2, 3], [1, 1, 2, 0], [0] * 4]


def test_level_by_level_tree_lstm_equals_the_recursive_computation():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    d = 6
    tree_lstm = BinaryTreeLSTM(d)
    sizes = [1, 7, 3, 12, 5, 2]
    merges = [random_tree(n, rng) for n in sizes]
    L = max(sizes) + 1  # leaves plus </s>, right-padded
    leaf_h, leaf_c = torch.randn(len(sizes), L, d), torch.randn(len(sizes), L, d)
    phrase, mask = collate_nodes([torch.as_tensor(m) for m in merges], 0)
    node_h, node_c = tree_lstm(leaf_h, leaf_c, phrase, mask, torch.tensor(sizes))
    for row, (n, m) in enumerate(zip(sizes, merges)):
        expected = recursive(tree_lstm.cell, leaf_h[row], leaf_c[row], m, n)
        for k, (h, c) in enumerate(expected):
            assert torch.allclose(node_h[row, k], h, atol=1e-6) and torch.allclose(node_c[row, k], c, atol=1e-6)
        assert node_h[row, len(m):].abs().sum() == 0  # padding merges stay zero


def test_forget_gate_biases_start_at_one():
    model = build_model()
    cell = model.encoder.tree.cell
    d = cell.dim
    assert torch.all(cell.linear.bias[d : 3 * d] == 1.0) and torch.all(cell.linear.bias[:d] == 0)
    lstm = model.encoder.lstm
    forget = (lstm.bias_ih_l0 + lstm.bias_hh_l0)[d : 2 * d]
    assert torch.allclose(forget, torch.ones(d))
    decoder_cell = model.decoder.layers[0]
    assert torch.allclose((decoder_cell.bias_ih + decoder_cell.bias_hh)[d : 2 * d], torch.ones(d))


# ------------------------------------------------------------------ the encoder and the model
def dictionary(size=20) -> Dictionary:
    d = Dictionary()
    for i in range(size):
        d.add_symbol(f"w{i}")
    return d


DICT = dictionary()


def build_model(arch="tree2seq", **overrides):
    from fairseq.models import ARCH_MODEL_REGISTRY

    sizes = dict(encoder_embed_dim=8, encoder_hidden_size=8, decoder_embed_dim=8, decoder_hidden_size=8,
                 decoder_out_embed_dim=8, dropout=0.0)
    args = argparse.Namespace(arch=arch, **{**sizes, **overrides})
    task = types.SimpleNamespace(source_dictionary=DICT, target_dictionary=DICT,
                                 cfg=types.SimpleNamespace(left_pad_source=True))
    from fairseq.models import ARCH_CONFIG_REGISTRY

    ARCH_CONFIG_REGISTRY[arch](args)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, task)


def batch(sentences, merges, left_pad=True):
    """Source ids (pieces + </s>) padded like fairseq, and the phrase entries of src_syntax."""
    rows = [torch.tensor([DICT.index(w) for w in s] + [DICT.eos()]) for s in sentences]
    tokens = data_utils.collate_tokens(rows, DICT.pad(), left_pad=left_pad)
    phrase, mask = collate_nodes([torch.as_tensor(m) for m in merges], 0)
    return tokens, torch.tensor([len(r) for r in rows]), {"phrase": phrase, "phrase_mask": mask}


SHORT = ["w3", "w4", "w5"]
LONG = [f"w{i}" for i in range(4, 15)]


@pytest.mark.parametrize("sequential", [True, False])
def test_a_left_padded_short_sentence_encodes_alone_as_beside_a_long_one(sequential):
    torch.manual_seed(1)
    model = build_model(no_sequential_encoder=not sequential)
    model.eval()
    rng = np.random.default_rng(3)
    short_tree, long_tree = random_tree(3, rng), random_tree(11, rng)
    alone = model.encoder(*batch([SHORT], [short_tree]))
    both = model.encoder(*batch([LONG, SHORT], [long_tree, short_tree]))
    memory, hidden, cell, padding = alone
    memory2, hidden2, cell2, padding2 = both
    assert torch.allclose(hidden[0, 0], hidden2[0, 1], atol=1e-6) and torch.allclose(cell[0, 0], cell2[0, 1], atol=1e-6)
    real, real2 = memory[~padding[:, 0], 0], memory2[~padding2[:, 1], 1]
    assert real.shape == real2.shape == (4 + 2, 8)  # 3 pieces + </s>, 2 phrase nodes
    assert torch.allclose(real, real2, atol=1e-6)


@pytest.mark.parametrize("left_pad", [True, False])
def test_the_collater_s_level_sizes_give_the_encoder_s_own_result(left_pad):
    """Heights and merges per height counted on the host (as the collater does) encode exactly as the
    encoder's own count, which syncs; they are per merge of this batch."""
    from fairseq_syntax.data.syntax_features import add_host_schedules

    torch.manual_seed(4)
    model = build_model()
    model.encoder.left_pad = left_pad
    model.eval()
    rng = np.random.default_rng(1)
    tokens, lengths, syntax = batch([LONG, SHORT, LONG[:6]], [random_tree(11, rng), np.zeros((0, 2)),
                                                              random_tree(6, rng)], left_pad=left_pad)
    alone = model.encoder(tokens, lengths, dict(syntax))
    scheduled = dict(syntax)
    add_host_schedules(scheduled, tokens.eq(DICT.pad()))
    assert isinstance(scheduled["phrase_level_sizes"], tuple) and sum(scheduled["phrase_level_sizes"]) == syntax["phrase"].size(0) * syntax["phrase"].size(1)
    assert torch.equal(scheduled["phrase_heights"], phrase_trees.phrase_heights(syntax["phrase"], syntax["phrase_mask"], lengths - 1))
    for part, expected in zip(model.encoder(tokens, lengths, scheduled), alone):
        assert torch.equal(part, expected)
    with pytest.raises(ValueError, match="do not fit this batch"):
        model.encoder(tokens, lengths, {**scheduled, "phrase_level_sizes": scheduled["phrase_level_sizes"][:-1]})


def test_the_sequential_cells_are_the_lstm_s_own():
    torch.manual_seed(2)
    encoder = build_model().encoder
    x = torch.randn(2, 5, 8)
    lengths = torch.tensor([5, 3])
    h, c = encoder._sequential_units(x)  # right-padded rows: the steps after a row's end are never read
    for row, n in enumerate(lengths.tolist()):
        _, (h_n, c_n) = encoder.lstm(x[row, :n].unsqueeze(1))
        assert torch.allclose(h[row, n - 1], h_n[0, 0], atol=1e-6) and torch.allclose(c[row, n - 1], c_n[0, 0], atol=1e-6)


def test_a_sentence_without_a_tree_has_a_zero_root_and_attends_to_its_leaves_only():
    torch.manual_seed(3)
    model = build_model()
    model.eval()
    tokens, lengths, syntax = batch([LONG, SHORT], [random_tree(11, np.random.default_rng(0)), np.zeros((0, 2))])
    memory, hidden, cell, padding = model.encoder(tokens, lengths, syntax)
    T = tokens.size(1)
    assert padding[T:, 1].all() and not padding[T:, 0].any()  # no phrase slot to attend to
    encoder = model.encoder
    h, c = encoder._sequential_units(encoder.embed_tokens(torch.tensor([[DICT.index(w) for w in SHORT] + [DICT.eos()]])))
    zero = torch.zeros(8)
    expected_h, expected_c = encoder.init_unit(h[0, 3], c[0, 3], zero, zero)
    assert torch.allclose(hidden[0, 1], expected_h, atol=1e-6) and torch.allclose(cell[0, 1], expected_c, atol=1e-6)
    # the decoder never attends to the missing phrase nodes
    out, attention = model.decoder(torch.full((2, 3), DICT.eos()), encoder_out=(memory, hidden, cell, padding))
    assert attention.shape == (2, 3, T + syntax["phrase"].size(1))  # (batch, target, leaves + phrase nodes)
    assert attention[1, :, T:].abs().sum() == 0 and attention[0, :, T:].sum() > 0


@pytest.mark.parametrize("arch, extra", [("tree2seq", {}), ("tree2seq_large", {}),
                                         ("tree2seq", {"no_sequential_encoder": True})])
def test_model_builds_through_the_registry_and_trains(arch, extra):
    model = build_model(arch, **extra)
    assert model.syntax_inputs() == {"phrase"}
    if arch == "tree2seq_large":
        assert model.encoder.hidden_size == 8  # the test's sizes override the architecture's 512
    rng = np.random.default_rng(4)
    tokens, lengths, syntax = batch([LONG, SHORT], [random_tree(11, rng), random_tree(3, rng)])
    prev = torch.full((2, 4), DICT.eos())
    logits, _ = model(tokens, lengths, prev, src_syntax=syntax)
    assert logits.shape == (2, 4, len(DICT))
    logits.sum().backward()
    assert model.encoder.tree.cell.linear.weight.grad.abs().sum() > 0  # the phrase nodes reach the output


def test_the_large_architecture_is_512_wide():
    args = argparse.Namespace(arch="tree2seq_large")
    from fairseq.models import ARCH_CONFIG_REGISTRY

    ARCH_CONFIG_REGISTRY["tree2seq_large"](args)
    assert (args.encoder_embed_dim, args.encoder_hidden_size, args.decoder_hidden_size) == (512, 512, 512)


def test_beam_search_reorders_every_part_of_the_encoder_output():
    model = build_model()
    rng = np.random.default_rng(5)
    out = model.encoder(*batch([LONG, SHORT], [random_tree(11, rng), random_tree(3, rng)]))
    order = torch.tensor([1, 1, 0])
    reordered = model.encoder.reorder_encoder_out(out, order)
    for before, after in zip(out, reordered):
        assert torch.equal(after, before.index_select(1, order))


@pytest.mark.parametrize("override, message", [
    ({"decoder_hidden_size": 16}, "--decoder-hidden-size 16 must equal --encoder-hidden-size 8"),
    ({"dropout": 1.5}, "--dropout 1.5: expected a probability"),
    ({"forget_bias": float("nan")}, "--forget-bias nan"),
    ({"encoder_hidden_size": 0, "decoder_hidden_size": 0}, "--encoder-hidden-size 0: expected a positive size"),
])
def test_bad_options_name_the_flag(override, message):
    with pytest.raises(UsageError, match=message):
        build_model(**override)


def test_missing_phrase_structure_is_a_clear_error():
    model = build_model()
    tokens, lengths, _ = batch([SHORT], [random_tree(3, np.random.default_rng(0))])
    with pytest.raises(UsageError, match="tree2seq needs the source phrase structure"):
        model.encoder(tokens, lengths, None)


def test_the_model_class_is_ours_for_the_task():
    from fairseq_syntax.tasks.syntax_translation import _is_syntax_model

    assert _is_syntax_model(argparse.Namespace(arch="tree2seq")) and not _is_syntax_model(argparse.Namespace(arch="lstm"))
    assert Tree2SeqModel.syntax_inputs is not None
    assert Tree2SeqEncoder is not None


def test_dot_attention_equals_fairseq_s_attention_layer_without_its_projection():
    from fairseq.models.lstm import AttentionLayer

    from fairseq_syntax.models.tree2seq.model import DotAttention

    torch.manual_seed(6)
    ours = DotAttention(8)
    reference = AttentionLayer(8, 8, 8)
    reference.input_proj = torch.nn.Identity()
    reference.output_proj = ours.output_proj
    query, memory = torch.randn(3, 8), torch.randn(5, 3, 8)
    padding = torch.tensor([[False] * 3] * 4 + [[True, False, True]])
    x, weights = ours(query, memory, padding)
    x_ref, weights_ref = reference(query, memory, padding)
    assert torch.allclose(x, x_ref, atol=1e-6) and torch.allclose(weights, weights_ref, atol=1e-6)



@pytest.mark.parametrize("steps", [1, 2, 5, 8, 13])
def test_the_cell_scan_equals_the_sequential_recurrence(steps):
    from fairseq_syntax.models.tree2seq.encoder import linear_recurrence

    torch.manual_seed(steps)
    decay, inputs = torch.rand(3, steps, 4), torch.randn(3, steps, 4)
    c, expected = torch.zeros(3, 4), []
    for t in range(steps):  # c_t = f_t c_{t-1} + i_t u_t, one step at a time
        c = decay[:, t] * c + inputs[:, t]
        expected.append(c)
    assert torch.allclose(linear_recurrence(decay, inputs), torch.stack(expected, dim=1), atol=1e-6)
