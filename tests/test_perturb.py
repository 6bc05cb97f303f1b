"""fairseq-syntax-perturb: word-level parse noise that keeps a tree, projected back onto the pieces."""

import json
import os
import shutil

import numpy as np
import pytest
import torch

from fairseq_syntax_core import trees
from fairseq_syntax_preprocess import perturb as pt
from .conftest import parsed_bin, syntax_task

SUB = 9  # the <subword> label id in these examples
POOL = np.array([4, 5, 6, 7])


def is_tree(heads_1based) -> bool:
    try:
        trees.validate_heads(list(heads_1based))
        return True
    except ValueError:
        return False


def test_p_0_changes_nothing_and_p_1_changes_every_word_and_keeps_a_tree():
    rng = np.random.default_rng(0)
    # "the dog@@ gy runs": words the, doggy (2 pieces), runs (root)
    heads = np.array([2, 4, 2, 0])
    labels = np.array([4, 5, SUB, 6])
    same_h, same_l, count = pt.perturb_pieces(heads, labels, SUB, 0.0, POOL, rng)
    assert count == 0 and same_h.tolist() == heads.tolist() and same_l.tolist() == labels.tolist()
    for seed in range(20):
        h, lab, count = pt.perturb_pieces(heads, labels, SUB, 1.0, POOL, np.random.default_rng(seed))
        assert count == 2  # the two non-root words; the root keeps its head and label
        assert is_tree(h) and h[3] == 0 and lab[3] == labels[3]  # the root stays the root, labelled as before
        assert h[2] == 2 and lab[2] == SUB  # the arc inside "doggy" is untouched
        assert all(lab[i] != labels[i] for i in (0, 1)) and set(lab[[0, 1]]) <= set(POOL)
        assert h[1] != 2  # a first piece never hangs from a later piece of its own word


def test_reattachment_never_makes_a_cycle_and_stays_in_its_own_sentence():
    # two sentences on one line: words 0-2 (root 1) and 3-4 (root 4)
    heads = np.array([2, 0, 2, 5, 0])
    labels = np.array([4, 5, 6, 4, 5])
    for seed in range(50):
        h, _, _ = pt.perturb_pieces(heads, labels, SUB, 0.7, POOL, np.random.default_rng(seed))
        assert is_tree(h)
        assert h[1] == 0 and h[4] == 0
        assert set(h[[0, 2]]) <= {1, 2, 3} and h[3] in (5,)


def test_a_perturbed_word_gets_another_head_where_its_tree_has_one():
    # random trees of 12 words at p = 1: a word keeps its head only when, at its turn, every other word but
    # its head already hangs below it (about 4%; 15% when the present head could be drawn again)
    rng = np.random.default_rng(0)
    kept = total = 0
    for _ in range(300):
        order = rng.permutation(12)
        heads = np.zeros(12, dtype=np.int64)
        for k in range(1, 12):
            heads[order[k]] = order[rng.integers(k)] + 1
        h, _, _ = pt.perturb_pieces(heads, np.full(12, 4), SUB, 1.0, POOL, rng)
        assert is_tree(h)
        kept += int(((h == heads) & (heads != 0)).sum())
        total += 11
    assert kept / total < 0.06
    # "a b c": the first word to move always has another head (the other leaf)
    for seed in range(20):
        h, _, _ = pt.perturb_pieces(np.array([0, 1, 1]), np.array([6, 4, 5]), SUB, 1.0, POOL,
                                    np.random.default_rng(seed))
        assert h.tolist() in ([0, 3, 1], [0, 1, 2])
    # two words: the dependent's only possible head is the one it has; its label still changes
    h, lab, count = pt.perturb_pieces(np.array([2, 0]), np.array([4, 6]), SUB, 1.0, POOL, np.random.default_rng(0))
    assert h.tolist() == [2, 0] and lab[0] != 4 and count == 1


@pytest.mark.parametrize("heads, labels, expected", [
    # the helper's example: a <subword> piece as the root makes the words a cycle (1 -> 2 -> 1)
    ([3, 0, 2], [4, SUB, 5], "piece 2 continues a word (<subword>) but is a root"),
    # "doggy" = pieces 2-3; piece 3 hangs from piece 4, a word of its own
    ([2, 0, 4, 2], [4, 5, SUB, 6], "piece 3 continues a word (<subword>) but hangs from piece 4, in another word"),
])
def test_a_piece_tree_whose_words_are_not_a_tree_is_refused(heads, labels, expected):
    heads, labels = np.array(heads), np.array(labels)
    problem = pt._tree_problem(heads, labels, np.full(len(heads), 4), len(heads), SUB, 10, 10, [0, 1, 2])
    assert problem == ("head", expected)


def test_rate_is_about_p():
    rng = np.random.default_rng(1)
    heads = np.array([0] + [1] * 199)
    labels = np.full(200, 4)
    total = sum(pt.perturb_pieces(heads, labels, SUB, 0.2, POOL, rng)[2] for _ in range(20))
    assert 0.17 < total / 4000 < 0.23


@pytest.fixture
def small_bin(tmp_path):
    src = ["the big dog runs fast .", "birds sing"]
    test = ["the dog runs .", "birds sing loudly"]
    # labels root, dep and obj: a non-root word always has another label to get
    conll = lambda words, heads: "".join(
        f"{i}\t{w}\t_\tX\t_\t_\t{h}\t{'root' if h == 0 else ('dep', 'obj')[i % 2]}\t_\t_\n"
        for i, (w, h) in enumerate(zip(words, heads), 1)) + "\n"
    return parsed_bin(tmp_path, {
        "train": (src, ["der große Hund rennt schnell .", "Vögel singen"],
                  conll(src[0].split(), [3, 3, 4, 0, 4, 4]) + conll(src[1].split(), [2, 0])),
        "test": (test, ["der Hund rennt .", "Vögel singen laut"],
                 conll(test[0].split(), [2, 3, 0, 3]) + conll(test[1].split(), [2, 0, 2])),
    })


def test_perturbed_copy_is_recorded_loads_and_leaves_train_alone(small_bin, tmp_path):
    dest = tmp_path / "noisy"
    counts = pt.run(pt.get_parser().parse_args([str(small_bin), "--destdir", str(dest), "--p", "1", "--seed", "3"]))
    assert counts == {"test": 5}  # every non-root word of the 2 test sentences
    meta = json.loads((dest / "syntax.json").read_text(encoding="utf-8"))
    assert meta["perturbation"] == {"p": 1.0, "seed": 3, "splits": ["test"], "source": str(small_bin),
                                    "words_perturbed": {"test": 5}, "phrase_structure_reconverted": True,
                                    "sides": ["en"], "unchanged_sides": [],
                                    "rng": pt.SCHEME}
    assert (dest / "train.en-de.en.head.bin").read_bytes() == (small_bin / "train.en-de.en.head.bin").read_bytes()
    assert (dest / "test.en-de.en.deplabel.bin").read_bytes() != (small_bin / "test.en-de.en.deplabel.bin").read_bytes()
    task = syntax_task(dest)
    task.load_dataset("test")  # the task's own checks accept the perturbed trees (phrase structures included)
    _check_phrases_follow_the_heads(dest)
    same = pt.run(pt.get_parser().parse_args([str(small_bin), "--destdir", str(tmp_path / "again"), "--p", "1",
                                              "--seed", "3"]))
    assert same == counts
    assert (tmp_path / "again" / "test.en-de.en.head.bin").read_bytes() == (dest / "test.en-de.en.head.bin").read_bytes()


def test_refuses_a_bad_p_an_unknown_split_and_an_existing_destdir(small_bin, tmp_path):
    args = lambda *a: pt.get_parser().parse_args([str(small_bin), "--destdir", str(tmp_path / "x"), *a])
    with pytest.raises(pt.UsageError, match=r"--p 1.5: expected a probability"):
        pt.run(args("--p", "1.5"))
    with pytest.raises(pt.UsageError, match=r"the data-bin holds \['train', 'test'\]|the data-bin holds \['test', 'train'\]"):
        pt.run(args("--p", "0.1", "--splits", "valid"))
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "mine.txt").write_text("user file")
    with pytest.raises(pt.UsageError, match="exists and is not empty"):
        pt.run(args("--p", "0.1"))
    assert (tmp_path / "x" / "mine.txt").read_text() == "user file"


def test_refuses_a_destdir_inside_the_source_and_perturbs_a_split_once(small_bin, tmp_path):
    with pytest.raises(pt.UsageError, match="is inside the data-bin"):
        pt.run(pt.get_parser().parse_args([str(small_bin), "--destdir", str(small_bin / "inner"), "--p", "0.1"]))
    assert not (small_bin / "inner").exists()
    once = pt.run(pt.get_parser().parse_args([str(small_bin), "--destdir", str(tmp_path / "a"), "--p", "0.5",
                                              "--splits", "test,test"]))
    assert list(once) == ["test"]


def test_a_damaged_stream_is_named(small_bin, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(small_bin, broken)
    head = broken / "test.en-de.en.head.bin"
    head.write_bytes(head.read_bytes()[:-4])
    with pytest.raises(pt.InputError, match=r"test.en-de.en.head.bin: truncated"):
        pt.run(pt.get_parser().parse_args([str(broken), "--destdir", str(tmp_path / "out"), "--p", "0.1"]))
    assert not (tmp_path / "out").exists()


def _check_phrases_follow_the_heads(data_bin):
    """The perturbed copy's phrase structures are the conversion of its perturbed dependency trees."""
    from fairseq.data import Dictionary, data_utils

    labels = Dictionary.load(str(data_bin / "dict.en.deplabel.txt"))
    load = lambda s: data_utils.load_indexed_dataset(str(data_bin / f"test.en-de.en.{s}"), None, "mmap")  # noqa: E731
    heads, deplabels, phrases = load("head"), load("deplabel"), load("phrase")
    for i in range(len(heads)):
        expected = pt.phrase_of_pieces(heads[i].numpy(), deplabels[i].numpy() != labels.index("<subword>"))
        assert phrases[i].numpy().reshape(-1, 2).tolist() == expected.tolist()


def test_imported_brackets_are_kept_when_the_dependency_parse_is_perturbed(tmp_path):
    from .helpers import HEADS, PTB, PHRASE_SRC as SRC, PHRASE_TGT as TGT, _conllu

    source = parsed_bin(tmp_path, {"train": (SRC, TGT, _conllu(SRC, HEADS), PTB), "test": (SRC, TGT, _conllu(SRC, HEADS), PTB)},
                        bpe_symbols=20, extra=["--constituency-parse", "ptb"])
    dest = tmp_path / "noisy"
    pt.run(pt.get_parser().parse_args([str(source), "--destdir", str(dest), "--p", "1", "--seed", "1"]))
    assert json.loads((dest / "syntax.json").read_text())["perturbation"]["phrase_structure_reconverted"] is False
    assert (dest / "test.en-de.en.phrase.bin").read_bytes() == (source / "test.en-de.en.phrase.bin").read_bytes()
    assert (dest / "test.en-de.en.head.bin").read_bytes() != (source / "test.en-de.en.head.bin").read_bytes()


# ------------------------------------------------------------------ hostile inputs
def _damage(small_bin, tmp_path, stream, change):
    from fairseq.data import data_utils
    from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder

    broken = tmp_path / "broken"
    shutil.copytree(small_bin, broken)
    prefix = str(broken / f"test.en-de.en.{stream}")
    rows = [t.clone() for t in data_utils.load_indexed_dataset(prefix, None, "mmap")]
    rows[1] = change(rows[1])
    builder = MMapIndexedDatasetBuilder(prefix + ".bin.new", dtype=np.int16)
    for r in rows:
        builder.add_item(r)
    builder.finalize(prefix + ".idx.new")
    os.replace(prefix + ".bin.new", prefix + ".bin")
    os.replace(prefix + ".idx.new", prefix + ".idx")
    return broken


@pytest.mark.parametrize("stream,change,message", [
    ("pos", lambda r: r[:-1], r"\d+ values for \d+ pieces"),
    ("deplabel", lambda r: torch.full_like(r, 200), "piece 1 has label id 200"),
    ("deplabel", lambda r: torch.full_like(r, 1), "piece 1 has label id 1"),  # <pad>
])
def test_damaged_pos_and_impossible_ids_are_named(small_bin, tmp_path, stream, change, message):
    broken = _damage(small_bin, tmp_path, stream, change)
    with pytest.raises(pt.InputError, match=f"{stream}.bin: sentence 1: {message}"):
        pt.run(pt.get_parser().parse_args([str(broken), "--destdir", str(tmp_path / "out"), "--p", "0.5"]))
    assert not (tmp_path / "out").exists()


def test_metadata_of_another_data_bin_is_refused(small_bin, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(small_bin, broken)
    meta = json.loads((broken / "syntax.json").read_text(encoding="utf-8"))
    meta["splits"]["test"]["sentences"] = 1000
    (broken / "syntax.json").write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(pt.InputError, match="records 1000 sentences for split 'test', its files hold 2"):
        pt.run(pt.get_parser().parse_args([str(broken), "--destdir", str(tmp_path / "out"), "--p", "0.5"]))


def test_a_splits_noise_does_not_depend_on_the_other_splits_chosen(small_bin, tmp_path):
    for name, splits in (("a", "test,train"), ("b", "train,test")):
        pt.run(pt.get_parser().parse_args([str(small_bin), "--destdir", str(tmp_path / name), "--p", "0.5",
                                           "--splits", splits]))
    for f in ("test.en-de.en.head.bin", "test.en-de.en.deplabel.bin", "train.en-de.en.head.bin"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


def test_p_0_keeps_the_conllu_pieces_and_a_negative_seed_is_refused(small_bin, tmp_path):
    pt.run(pt.get_parser().parse_args([str(small_bin), "--destdir", str(tmp_path / "p0"), "--p", "0"]))
    forms = lambda path: [line.split("\t")[1] for line in path.read_text(encoding="utf-8").splitlines()
                          if line and not line.startswith("#")]
    assert forms(tmp_path / "p0" / "test.en-de.en.conllu") == forms(small_bin / "test.en-de.en.conllu")
    with pytest.raises(pt.UsageError, match="--seed -1: expected a non-negative integer"):
        pt.run(pt.get_parser().parse_args([str(small_bin), "--destdir", str(tmp_path / "neg"), "--p", "0.5",
                                           "--seed", "-1"]))
