"""Source-side NSD of paper 002 (issue 14): which tokens count, the weights, the per-token hinge,
roots of several sentences, and the constituency distances d_S, d_G, d_R (eqs. 1-3) as features.

Worked examples by hand; see ``fairseq_syntax/modules/syntactic_distance.py`` and the criterion's
module doc for the readings.
"""

import math

import pytest
import torch

from fairseq_syntax_core import phrase_trees
from fairseq_syntax_core.errors import UsageError
from fairseq_syntax.criterions.label_smoothed_cross_entropy_with_nsd import (
    LabelSmoothedCrossEntropyWithNSDCriterion,
    nsd_losses,
)
from fairseq_syntax.data.syntax_features import batch_features, collate_nodes, collate_trees
from fairseq_syntax.models.syntax_transformer.config import ModelOptionError, fill_unset
from fairseq_syntax.modules.syntactic_distance import (
    NSD_LOGITS_KEY,
    NSD_MASK_KEY,
    nsd_distance_key,
    nsd_rank_hinge,
    nsd_squared_error,
)

from .conftest import TASK, WORDS, build, other_sentence, parse, table1_features, table1_tokens

D = 8  # TINY's --nsd-max-distance


def peaked_logits(predicted):
    """Logits whose eq. 11 distribution is (numerically) one-hot at each predicted distance."""
    logits = torch.zeros(1, len(predicted), 2 * D + 1)
    for i, d in enumerate(predicted):
        logits[0, i, d + D] = 100.0
    return logits


# ----------------------------------------------------------------- the hinge per token


def test_rank_hinge_per_token_by_hand():
    """gold [-1, 2, 1, 1], predicted [0, 2, 2, 0]: pairs (i < j), ties (2, 3) left out.

    (0,1) [1 - (-1)(0 - 2)]_+ = 0; (0,2) 0; (0,3) [1 - (-1)(0 - 0)]_+ = 1; (1,2) [1 - (2 - 2)]_+ = 1;
    (1,3) [1 - (2 - 0)]_+ = 0. Sum 2 over 5 pairs; per token (4 tokens): 2 * 4 / 5 = 1.6.
    """
    gold = torch.tensor([[-1, 2, 1, 1]])
    pred = torch.tensor([[0.0, 2.0, 2.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.bool)
    assert nsd_rank_hinge(pred, gold, mask, D).item() == pytest.approx(2.0)
    assert nsd_rank_hinge(pred, gold, mask, D, norm="none").item() == pytest.approx(2.0)
    assert nsd_rank_hinge(pred, gold, mask, D, norm="token").item() == pytest.approx(1.6)
    # two rows: each normalised by its own pairs and tokens; a row without pairs contributes 0
    gold2 = torch.cat([gold, torch.tensor([[3, 3, 0, 0]])])
    pred2 = torch.cat([pred, torch.tensor([[0.0, 5.0, 0.0, 0.0]], dtype=torch.float64)])
    mask2 = torch.tensor([[True] * 4, [True, True, False, False]])  # row 1: one tie pair only
    assert nsd_rank_hinge(pred2, gold2, mask2, D, norm="token").item() == pytest.approx(1.6)
    with pytest.raises(ValueError, match="--nsd-rank-norm"):
        nsd_rank_hinge(pred, gold, mask, D, norm="pairs")


# ----------------------------------------------------------------- </s> is left out


def eos_sample(gold, tokens):
    src = torch.tensor([tokens])
    return {
        "net_input": {"src_tokens": src, "src_syntax": {"distance": torch.tensor([gold])}},
        "target": torch.zeros(1, 1, dtype=torch.long),
    }


def test_losses_leave_out_eos_by_hand():
    """Pieces gold [-1, 2, 1, 1] predicted [0, 2, 2, 0]; </s> gold 5 predicted -4 (D = 8).

    Without </s> (default): squared error 1 + 0 + 1 + 1 = 3; hinge 2 (see above), per token 1.6;
    accuracy 1 of 4. With </s> (--nsd-loss-eos, --nsd-rank-norm none, 0.2's loss): squared error
    3 + 9^2 = 84; the pairs with </s> (gold 5 above every piece) add [1 + (0 + 4)] + [1 + 6] + [1 + 6]
    + [1 + 4] = 24, hinge 26; accuracy 1 of 5.
    """
    gold, predicted = [-1, 2, 1, 1, 5], [0, 2, 2, 0, -4]
    tokens = [WORDS.index(w) for w in "a b c d".split()] + [WORDS.eos()]
    net_output = (None, {NSD_LOGITS_KEY: [peaked_logits(predicted)], NSD_MASK_KEY: [torch.zeros(1, 5, dtype=torch.bool)]})
    sample = eos_sample(gold, tokens)
    criterion = LabelSmoothedCrossEntropyWithNSDCriterion(TASK, sentence_avg=False, label_smoothing=0.0,
                                                          nsd_dist_units="raw")
    terms = criterion.compute_nsd_losses(net_output, sample)
    assert terms["mse"].item() == pytest.approx(3.0, abs=1e-4)
    assert terms["rank"].item() == pytest.approx(1.6, abs=1e-4)
    # the default units: distances over the range D, so the squared error / D^2 and the hinge / D
    ranged = LabelSmoothedCrossEntropyWithNSDCriterion(TASK, sentence_avg=False, label_smoothing=0.0)
    in_range = ranged.compute_nsd_losses(net_output, sample)
    assert in_range["mse"].item() == pytest.approx(3.0 / D ** 2, abs=1e-6)
    assert in_range["rank"].item() == pytest.approx(1.6 / D, abs=1e-6)
    assert in_range["ent"].item() == pytest.approx(terms["ent"].item())  # eq. 20 has no distance units
    assert (terms["tokens"].item(), terms["correct"].item()) == (4, 1)
    # eq. 20: -log p(gold) is ~0 where the prediction is right, ~100 where it is wrong (3 pieces)
    assert terms["ent"].item() == pytest.approx(300.0, rel=1e-3)
    old = LabelSmoothedCrossEntropyWithNSDCriterion(TASK, sentence_avg=False, label_smoothing=0.0,
                                                    nsd_loss_eos=True, nsd_rank_norm="none", nsd_dist_units="raw")
    terms = old.compute_nsd_losses(net_output, sample)
    assert terms["mse"].item() == pytest.approx(84.0, abs=1e-4)
    assert terms["rank"].item() == pytest.approx(26.0, abs=1e-4)
    assert (terms["tokens"].item(), terms["correct"].item()) == (5, 1)


def test_eos_gets_no_gradient_and_padding_neither():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 2 * D + 1, requires_grad=True)
    gold = torch.tensor([[3, -1, 2, 7], [0, 1, -1, 4]])
    padding = torch.tensor([[False] * 4, [True, False, False, False]])
    counted = torch.tensor([[True, True, True, False], [True, True, True, False]])  # last column: </s>
    terms = nsd_losses(logits, gold, padding, counted, rank_norm="token")
    (terms["mse"] + terms["rank"] + terms["ent"]).backward()
    assert torch.all(logits.grad[:, 3] == 0) and torch.all(logits.grad[1, 0] == 0)
    assert logits.grad[0, :3].abs().sum() > 0 and terms["tokens"].item() == 5


# ----------------------------------------------------------------- the weights


def test_criterion_weights_each_term():
    model, _ = build("transformer_nsd")
    from .helpers import nsd_sample

    sample = nsd_sample(model, [(table1_tokens(), table1_features(model.syntax_inputs())),
                                other_sentence(model.syntax_inputs())])
    criterion = LabelSmoothedCrossEntropyWithNSDCriterion(
        TASK, sentence_avg=False, label_smoothing=0.1, nsd_dist_weight=0.5, nsd_mse_weight=0.2,
        nsd_rank_weight=3.0, nsd_ent_weight=0.7,
    )
    loss, _, log = criterion(model, sample)
    net_output = model(**sample["net_input"])
    nmt, _ = criterion.compute_loss(model, net_output, sample)
    terms = criterion.compute_nsd_losses(net_output, sample, model)
    expected = nmt + 0.5 * (0.2 * terms["mse"] + 3.0 * terms["rank"]) + 0.7 * terms["ent"]
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert log["nsd_tokens"] == 8 + 3  # Table I's 8 words and "a b c", no </s>
    # all NSD weights 0: the NMT loss alone (paper 002 Table 1, "L_NMT" row)
    off = LabelSmoothedCrossEntropyWithNSDCriterion(TASK, sentence_avg=False, label_smoothing=0.1,
                                                    nsd_dist_weight=0.0, nsd_ent_weight=0.0)
    assert off(model, sample)[0].item() == pytest.approx(nmt.item(), rel=1e-6)


@pytest.mark.parametrize("name,value", [("nsd_mse_weight", -1.0), ("nsd_rank_weight", math.nan),
                                        ("nsd_dist_weight", math.inf), ("nsd_ent_weight", -0.5)])
def test_bad_weights_stop_at_start_naming_the_flag(name, value):
    flag = "--" + name.replace("_", "-")
    with pytest.raises(UsageError, match=flag):
        LabelSmoothedCrossEntropyWithNSDCriterion(TASK, sentence_avg=False, label_smoothing=0.1, **{name: value})


def test_old_weight_flags_still_parse():
    from fairseq import options

    parser = options.get_training_parser(default_task="translation")
    args = options.parse_args_and_arch(parser, [
        "/nonexistent", "--arch", "transformer_nsd", "--criterion", "label_smoothed_cross_entropy_with_nsd",
        "--nsd-dist-weight", "0.1", "--nsd-ent-weight", "1.0", "--nsd-rank-weight", "0.5",
        "--nsd-rank-norm", "none", "--nsd-loss-eos"])
    assert (args.nsd_dist_weight, args.nsd_ent_weight, args.nsd_rank_weight, args.nsd_mse_weight) == (0.1, 1.0, 0.5, 1.0)
    assert args.nsd_rank_norm == "none" and args.nsd_loss_eos is True


# ----------------------------------------------------------------- roots of several sentences


def test_roots_of_a_second_sentence_left_padded():
    """``a b . c d .`` parsed as two sentences (roots b at 2 and d at 5), left-padded by 2.

    Line positions: d_D = [-1, 2, 1, -1, 5, 1, </s> 7 - 5 = 2]; within its own sentence the
    second root is position 2 of the sentence starting at 4: d_D(d) = 2.
    """
    heads = torch.tensor([2, 0, 2, 5, 0, 5, 5])  # </s> attaches to the last root
    sentences = [(heads, torch.full((7,), 4), torch.full((7,), 4))]
    h, l, p, real = collate_trees(sentences, 1, 1, left_pad=True, length=9)
    out = batch_features(h, l, p, real, {"distance", "distance_line"})
    assert out["distance_line"][0].tolist() == [0, 0, -1, 2, 1, -1, 5, 1, 2]
    assert out["distance"][0].tolist() == [0, 0, -1, 2, 1, -1, 2, 1, 2]


def test_nsd_roots_option_picks_the_feature_and_old_checkpoints_keep_line():
    model, _ = build("transformer_nsd", ["--nsd-roots", "line"])
    assert model.syntax_inputs() == {"distance_line"}
    assert nsd_distance_key("dependency") == "distance"
    args = parse("transformer_nsd")
    del args.nsd_roots  # a checkpoint's args from before the option: a model built, nsd_roots unknown
    del args.syntax_format_version  # nor the model format, stored since
    args.syntax_num_labels = 9
    fill_unset(args, {})
    assert args.nsd_roots == "line"


# ----------------------------------------------------------------- constituency distances


MERGES = {
    4: [(0, 1), (2, 3), (4, 5)],  # ((a b) (c d))
    3: [(1, 2), (0, 3)],  # (a (b c))
}


def constituency_batch(lengths, with_tree, left_pad=True):
    """A batch of lines of ``lengths`` pieces (+ </s>), trees from MERGES, no tree where not ``with_tree``."""
    sentences = [(torch.zeros(n + 1, dtype=torch.long), torch.full((n + 1,), 4), torch.full((n + 1,), 4))
                 for n in lengths]
    width = max(lengths) + 1 + 1  # one column of padding more than needed
    h, l, p, real = collate_trees(sentences, 1, 1, left_pad=left_pad, length=width)
    merges = [torch.tensor(MERGES[n]) if keep else torch.zeros(0, 2, dtype=torch.long)
              for n, keep in zip(lengths, with_tree)]
    phrase, mask = collate_nodes(merges, 0)
    return h, l, p, real, phrase, mask, merges


def test_constituency_distances_of_a_hand_built_tree():
    """((a b) (c d)): d_S = [1, 2, 1, H = 2]; d_G = [2, 1, 2, 0]; d_R = [2, -1, 1, -2]."""
    h, l, p, real, phrase, mask, _ = constituency_batch([4], [True], left_pad=False)
    keys = {"distance_height", "distance_depth", "distance_relative", "distance_height_mask"}
    out = batch_features(h, l, p, real, keys, phrase, mask)
    assert out["distance_height"][0].tolist() == [1, 2, 1, 2, 0, 0]  # </s> 0, padding 0
    assert out["distance_depth"][0].tolist() == [2, 1, 2, 0, 0, 0]
    assert out["distance_relative"][0].tolist() == [2, -1, 1, -2, 0, 0]
    assert out["distance_height_mask"][0].tolist() == [True] * 4 + [False] * 2


@pytest.mark.parametrize("left_pad", [True, False])
def test_constituency_features_equal_trees_per_sentence(left_pad):
    lengths, with_tree = [4, 3, 3], [True, True, False]  # the third line kept by --phrase-fallback
    h, l, p, real, phrase, mask, merges = constituency_batch(lengths, with_tree, left_pad)
    keys = {"distance_height", "distance_depth", "distance_relative",
            "distance_height_mask", "distance_depth_mask", "distance_relative_mask"}
    out = batch_features(h, l, p, real, keys, phrase, mask)
    width = real.size(1)
    for b, (n, m) in enumerate(zip(lengths, merges)):
        alone = phrase_trees.constituency_distances(m.view(1, -1, 2), torch.ones(1, m.size(0), dtype=torch.bool),
                                             torch.tensor([n]))
        start = width - (n + 1) if left_pad else 0
        for key, expected in zip(("distance_height", "distance_depth", "distance_relative"), alone):
            row = out[key][b]
            assert row[start:start + n].tolist() == expected[0, :n].tolist(), (key, b)
            assert row[start + n].item() == 0  # </s>
            assert row.sum().item() == expected[0, :n].sum().item()  # padding 0
        has_tree = out["distance_relative_mask"][b]
        assert has_tree.sum().item() == (n if with_tree[b] else 0)
        assert not has_tree[start + n]  # </s> never counts
    assert out["distance_height"][2].abs().sum().item() == 0  # no tree: zeros, excluded from the losses


def test_constituency_model_asks_for_its_key_and_mask_and_the_loss_skips_lines_without_a_tree():
    model, _ = build("transformer_nsd", ["--nsd-distance", "constituency-relative"])
    assert model.syntax_inputs() == {"distance_relative", "distance_relative_mask"}
    gold = torch.tensor([[2, -1, 1, -2, 0]])
    logits = peaked_logits([0, 0, 0, 0, 0])
    net_output = (None, {NSD_LOGITS_KEY: [logits], NSD_MASK_KEY: [torch.zeros(1, 5, dtype=torch.bool)]})
    tokens = [WORDS.index(w) for w in "a b c d".split()] + [WORDS.eos()]
    sample = {"net_input": {"src_tokens": torch.tensor([tokens]),
                            "src_syntax": {"distance_relative": gold,
                                           "distance_relative_mask": torch.tensor([[True] * 4 + [False]])}}}
    criterion = LabelSmoothedCrossEntropyWithNSDCriterion(TASK, sentence_avg=False, label_smoothing=0.0,
                                                          nsd_dist_units="raw")
    terms = criterion.compute_nsd_losses(net_output, sample, model)
    assert terms["mse"].item() == pytest.approx(4 + 1 + 1 + 4, abs=1e-4) and terms["tokens"].item() == 4
    sample["net_input"]["src_syntax"]["distance_relative_mask"] = torch.zeros(1, 5, dtype=torch.bool)
    terms = criterion.compute_nsd_losses(net_output, sample, model)
    assert terms["mse"].item() == 0 and terms["tokens"].item() == 0


def test_unknown_nsd_distance_stops_naming_the_flag():
    with pytest.raises((ModelOptionError, SystemExit)):
        parse("transformer_nsd", ["--nsd-distance", "constituency"])


# ----------------------------------------------------------------- d_D over words


def test_word_units_give_every_piece_its_words_distance():
    """Pieces ``a1 a2 b c1 c2`` of words A B C, B the root, A and C its dependents (projection ``first``).

    Over words (A = 1, B = 2, C = 3, </s> = 4): d_D = [A -1, -1, B 2, C 1, 1, </s> 2];
    over pieces: [1 - 3, 2 - 1, 3, 4 - 3, 5 - 4, 6 - 3] = [-2, 1, 3, 1, 1, 3].
    """
    from .conftest import LABELS

    sub, other = LABELS.index("<subword>"), LABELS.index("det")
    heads = torch.tensor([3, 1, 0, 3, 4, 3])  # </s> attaches to the root b
    labels = torch.tensor([other, sub, other, other, sub, LABELS.eos()])
    h, l, p, real = collate_trees([(heads, labels, torch.full((6,), 4))], LABELS.pad(), 1, left_pad=True, length=8)
    keys = {"distance", "distance_word", "distance_line_word"}
    out = batch_features(h, l, p, real, keys, subword_label=sub)
    assert out["distance_word"][0].tolist() == [0, 0, -1, -1, 2, 1, 1, 2]
    assert out["distance_line_word"][0].tolist() == [0, 0, -1, -1, 2, 1, 1, 2]
    assert out["distance"][0].tolist() == [0, 0, -2, 1, 3, 1, 1, 3]
    model, _ = build("transformer_nsd", ["--nsd-units", "word"])
    assert model.syntax_inputs() == {"distance_word"}
    with pytest.raises(ModelOptionError, match="--nsd-units word"):
        parse("transformer_nsd", ["--nsd-units", "word", "--nsd-distance", "constituency-depth"])
