"""Binary phrase structures (paper 004's trees): conversion, import, projection, storage, distances."""

import json

import numpy as np
import pytest
import torch

from fairseq_syntax_core import phrase_trees
from fairseq_syntax_core.errors import DataBinError, InputError
from fairseq_syntax_core.phrase import expand_to_pieces, from_dependency, merge_problem
from fairseq_syntax_core.stream_checks import check_merges

from .conftest import parsed_bin, syntax_task
from .helpers import HEADS, PTB, PHRASE_SRC as SRC, PHRASE_TGT as TGT, _conllu  # noqa: F401


# ------------------------------------------------------------------ dependency conversion
def test_a_head_absorbs_its_dependents_nearest_first():
    # The big dog barked loudly .   (dog <- The, big; barked <- dog, loudly, .)
    merges = from_dependency([3, 3, 4, 0, 4, 4])
    # (big dog)=6, (The 6)=7; barked: dog and loudly tie at distance 1, the left one first:
    # (7 barked)=8, (8 loudly)=9, then the farther "." (9 .)=10
    assert merges.tolist() == [[1, 2], [0, 6], [7, 3], [8, 4], [9, 5]]


def test_the_roots_of_a_multi_sentence_line_join_left_to_right():
    assert from_dependency([0, 1, 0]).tolist() == [[0, 1], [3, 2]]
    assert from_dependency([0]).tolist() == [] and from_dependency([]).tolist() == []


def test_a_non_projective_tree_still_converts_to_one_binary_tree():
    heads = [3, 4, 0, 3]  # arcs 1-3 and 2-4 cross
    assert merge_problem(from_dependency(heads), 4) is None


def test_a_cycle_is_refused():
    with pytest.raises(ValueError, match="cycle"):
        from_dependency([2, 1, 0, 3][:2])


def test_the_pieces_of_a_word_form_a_right_branching_subtree():
    word_merges = from_dependency([2, 3, 0, 3])  # The dog runs . -> [[0,1],[4,2],[5,3]]
    # pieces: Th@@ e | dog | r@@ u@@ ns | .
    pieces = expand_to_pieces(word_merges, np.array([0, 0, 1, 2, 2, 2, 3]))
    # (Th e)=7, (u ns)=8, (r 8)=9, then the word tree on word nodes 7, 2, 9, 6
    assert pieces.tolist() == [[0, 1], [4, 5], [3, 8], [7, 2], [10, 9], [11, 6]]
    assert merge_problem(pieces, 7) is None
    assert expand_to_pieces(None, np.array([0, 0, 1])).tolist() == []  # a line without a tree


# ------------------------------------------------------------------ bracket import
def test_unary_chains_collapse_and_nary_nodes_binarize_right_factored():
    from fairseq_syntax_preprocess.ptb import tree_merges

    merges, leaves = tree_merges(
        "(ROOT (S (NP (DT The) (JJ big) (NN dog)) (VP (VBD barked) (ADVP (RB loudly))) (. .)))")
    assert leaves == ["The", "big", "dog", "barked", "loudly", "."]
    # NP (The (big dog)); ADVP -> loudly collapses; S (NP (VP .))
    assert merges.tolist() == [[1, 2], [0, 6], [3, 4], [8, 5], [7, 9]]
    two, leaves = tree_merges("(S (NP a)) (S (VP b) (. c))")  # two trees on one line
    assert leaves == ["a", "b", "c"] and two.tolist() == [[1, 2], [0, 3]]


@pytest.mark.parametrize("line, message", [
    ("(S (NP a)", r"do not parse: expected '\)'"),
    ("", "empty line"),
    ("a b c", "expected a bracketed tree"),
    ("(S (NP) (VP b))", r"constituent \(NP\) is empty"),
    ("(S (NP a)) b", "word 'b' stands outside"),
])
def test_malformed_brackets_say_what_was_expected(line, message):
    from fairseq_syntax_preprocess.ptb import BracketError, tree_merges

    with pytest.raises(BracketError, match=message):
        tree_merges(line)


def test_ptb_and_moses_escapes_compare_equal():
    from fairseq_syntax_preprocess.ptb import leaf_view

    for leaf, token in [("-LRB-", "("), ("``", "&quot;"), ("''", "&quot;"), ("-", "@-@"), ("'s", "&apos;s"),
                        ("1\\/2", "1/2"), ("&", "&amp;")]:
        assert leaf_view(leaf) == leaf_view(token), (leaf, token)
    assert leaf_view("ca") != leaf_view("can")


def _stored(data_bin, split="train"):
    from fairseq.data import data_utils

    data = data_utils.load_indexed_dataset(str(data_bin / f"{split}.en-de.en.phrase"), None, "mmap")
    pieces = [line.split() for line in (data_bin.parent / "bin" / f"{split}.en-de.en.conllu").read_text().split("\n\n")]
    return [data[i].numpy().reshape(-1, 2) for i in range(len(data))], pieces


def _word_of_piece(data_bin, split, i):
    """0-based word of each piece of line i, from the piece-level CoNLL-U the pipeline writes."""
    block = (data_bin / f"{split}.en-de.en.conllu").read_text().strip().split("\n\n")[i]
    rows = [r.split("\t") for r in block.splitlines() if not r.startswith("#")]
    word = -1
    out = []
    for row in rows:
        if row[7] != "<subword>":
            word += 1
        out.append(word)
    return np.array(out)


def test_every_data_bin_carries_the_converted_phrase_structure(tmp_path):
    data_bin = parsed_bin(tmp_path, {"train": (SRC, TGT, _conllu(SRC, HEADS))}, bpe_symbols=20)
    meta = json.loads((data_bin / "syntax.json").read_text())
    assert "phrase" in meta["parsed_langs"]["en"]
    assert meta["phrase_structure"]["source"] == "dependency-conversion"
    stored, _ = _stored(data_bin)
    for i, heads in enumerate(HEADS):
        expected = expand_to_pieces(from_dependency(heads), _word_of_piece(data_bin, "train", i))
        assert stored[i].tolist() == expected.tolist()


def test_imported_brackets_are_stored_projected_onto_pieces(tmp_path):
    from fairseq_syntax_preprocess.ptb import tree_merges

    data_bin = parsed_bin(tmp_path, {"train": (SRC, TGT, _conllu(SRC, HEADS), PTB)}, bpe_symbols=20,
                          extra=["--constituency-parse", "ptb"])
    assert json.loads((data_bin / "syntax.json").read_text())["phrase_structure"]["source"] == "ptb"
    stored, _ = _stored(data_bin)
    for i, line in enumerate(PTB):
        expected = expand_to_pieces(tree_merges(line)[0], _word_of_piece(data_bin, "train", i))
        assert stored[i].tolist() == expected.tolist()
    # the imported tree of line 1 differs from the conversion: ((the (big dog)) ...) vs (((the (big dog)) barked) ...)
    assert stored[0].tolist() != expand_to_pieces(from_dependency(HEADS[0]), _word_of_piece(data_bin, "train", 0)).tolist()


def test_leaves_that_differ_from_the_text_name_file_line_and_leaf(tmp_path):
    bad = PTB[:1] + ["(S (NP (DT a) (NN dog)) (VP (VBD slept)) (. .))"] + PTB[2:]
    with pytest.raises(InputError, match=r"train\.en\.ptb:2: leaves differ from .*train\.en line 2: leaf 2 is 'dog' "
                                         r"in the tree, 'cat' in the text"):
        parsed_bin(tmp_path, {"train": (SRC, TGT, _conllu(SRC, HEADS), bad)}, extra=["--constituency-parse", "ptb"])
    assert not (tmp_path / "bin").exists()


def test_a_missing_tree_line_is_an_error_unless_the_fallback_is_asked(tmp_path):
    short = PTB[:2]
    with pytest.raises(InputError, match=r"train\.en\.ptb:3: line-count mismatch: 2 bracketed trees for the 3 lines"):
        parsed_bin(tmp_path, {"train": (SRC, TGT, _conllu(SRC, HEADS), short)}, extra=["--constituency-parse", "ptb"])
    broken = PTB[:1] + ["(S (NP a cat) (VP slept ."] + PTB[2:]
    with pytest.raises(InputError, match=r"train\.en\.ptb:2: the brackets do not parse.*--phrase-fallback"):
        parsed_bin(tmp_path, {"train": (SRC, TGT, _conllu(SRC, HEADS), broken)}, extra=["--constituency-parse", "ptb"])
    data_bin = parsed_bin(tmp_path, {"train": (SRC, TGT, _conllu(SRC, HEADS), broken)}, bpe_symbols=20,
                          extra=["--constituency-parse", "ptb", "--phrase-fallback"])
    meta = json.loads((data_bin / "syntax.json").read_text())
    assert meta["phrase_structure"]["fallback_lines"] == {"train": [2]}
    stored, _ = _stored(data_bin)
    assert len(stored[1]) == 0 and len(stored[0]) > 0  # line 2 has no tree, the others have theirs


def test_the_fallback_needs_imported_trees():
    from fairseq_syntax_core.errors import UsageError
    from fairseq_syntax_preprocess.cli import Split, check_args, get_parser

    args = get_parser().parse_args(["-s", "en", "-t", "de", "--trainpref", "x", "--external-parse", "conllu",
                                    "--no-bpe", "--phrase-fallback"])
    with pytest.raises(UsageError, match="--phrase-fallback applies to imported trees"):
        check_args(args, [Split("train", "x", "en", "de")])


# ------------------------------------------------------------------ the task's batches
def test_batches_carry_the_merges_and_their_mask(tmp_path):
    data_bin = parsed_bin(tmp_path, {"train": (SRC, TGT, _conllu(SRC, HEADS))}, bpe_symbols=20)
    task = syntax_task(data_bin)
    task.syntax_requested.add("phrase")
    task.load_dataset("train")
    dataset = task.dataset("train")
    batch = dataset.collater([dataset[i] for i in range(3)])
    phrase, mask = batch["net_input"]["src_syntax"]["phrase"], batch["net_input"]["src_syntax"]["phrase_mask"]
    src = batch["net_input"]["src_tokens"]
    n = src.ne(task.source_dictionary.pad()).sum(1) - 1  # pieces without </s>
    assert phrase.shape == (3, int(n.max()) - 1, 2) and mask.sum(1).tolist() == (n - 1).tolist()
    stored, _ = _stored(data_bin)
    for row, index in enumerate(batch["id"].tolist()):
        assert phrase[row][mask[row]].tolist() == stored[index].tolist()


def test_a_damaged_phrase_stream_is_refused_on_load(tmp_path):
    from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder

    data_bin = parsed_bin(tmp_path, {"train": (SRC, TGT, _conllu(SRC, HEADS))}, bpe_symbols=20)
    stored, _ = _stored(data_bin)
    stored[1] = stored[1].copy()
    stored[1][-1] = stored[1][0]  # a node with two parents
    prefix = str(data_bin / "train.en-de.en.phrase")
    builder = MMapIndexedDatasetBuilder(prefix + ".bin", dtype=np.int32)
    for merges in stored:
        builder.add_item(torch.from_numpy(merges.reshape(-1).astype(np.int32)))
    builder.finalize(prefix + ".idx")
    task = syntax_task(data_bin)
    with pytest.raises(DataBinError, match=r"sentence 1: the phrase side-file: node \d+ is the child of 2 merges"):
        task.load_dataset("train")


def test_a_model_that_needs_a_stream_the_data_bin_lacks_is_told_to_remake_it(tmp_path):
    data_bin = parsed_bin(tmp_path, {"train": (SRC, TGT, _conllu(SRC, HEADS))}, bpe_symbols=20)
    meta = json.loads((data_bin / "syntax.json").read_text())
    meta["parsed_langs"]["en"].remove("phrase")  # as a data-bin of an older version
    (data_bin / "syntax.json").write_text(json.dumps(meta))
    task = syntax_task(data_bin)

    class Tree2Seq:
        def syntax_inputs(self):
            return {"phrase"}

    with pytest.raises(DataBinError, match=r"syntax\.json: the model needs the phrase side-file.*rebuild the data-bin"):
        task.request_inputs(Tree2Seq())


# ------------------------------------------------------------------ whole-split validation
def test_the_split_validator_agrees_with_the_per_sentence_check():
    rng = np.random.default_rng(0)
    sentences = []
    for _ in range(200):
        n = int(rng.integers(1, 9))
        merges = from_dependency([0] + [int(rng.integers(1, i + 1)) for i in range(1, n)])
        if len(merges) and rng.random() < 0.5:
            merges = merges.copy()
            merges[rng.integers(len(merges)), rng.integers(2)] = rng.integers(-1, 2 * n)
        sentences.append(merges)
    flat = np.concatenate([m.reshape(-1) for m in sentences])
    sizes = np.array([m.size for m in sentences])
    first_bad = next((i for i, m in enumerate(sentences) if merge_problem(m, len(m) + 1) is not None), None)
    problem = check_merges(flat, sizes)
    assert (problem[0] if problem else None) == first_bad


# ------------------------------------------------------------------ paper 002's constituency distances
def test_constituency_distances_of_a_hand_built_tree():
    # ((a b) (c (d e))): (a b)=5 h1, (d e)=6 h1, (c 6)=7 h2, root 8 h3
    phrase = torch.tensor([[[0, 1], [3, 4], [2, 6], [5, 7]]])
    d_S, d_G, d_R = phrase_trees.constituency_distances(phrase, torch.ones(1, 4, dtype=torch.bool), torch.tensor([5]))
    assert d_S.tolist() == [[1, 3, 2, 1, 3]]  # LCA heights; d_S(w_n) = H = 3 (eq. 1)
    assert d_G.tolist() == [[2, 1, 2, 3, 0]]  # common ancestors, LCA included; d_G(w_n) = 0
    assert d_R.tolist() == [[2, -1, 1, 1, -3]]  # eq. 3


def test_constituency_distances_batch_rows_of_other_sizes_and_rows_without_a_tree():
    one = torch.tensor([[[0, 1], [3, 4], [2, 6], [5, 7]]])
    batch = torch.tensor([[[0, 1], [3, 4], [2, 6], [5, 7]], [[0, 1], [2, 3], [4, 5], [0, 0]], [[0, 0]] * 4])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [0, 0, 0, 0]]).bool()
    d_S, d_G, d_R = phrase_trees.constituency_distances(batch, mask, torch.tensor([5, 4, 3]))
    alone = phrase_trees.constituency_distances(one, torch.ones(1, 4, dtype=torch.bool), torch.tensor([5]))
    assert [x[0].tolist() for x in (d_S, d_G, d_R)] == [x[0].tolist() for x in alone]
    assert d_S[1].tolist() == [1, 2, 1, 2, 0] and d_G[1].tolist() == [2, 1, 2, 0, 0]  # ((a b) (c d))
    assert d_S[2].abs().sum() == 0 and d_G[2].abs().sum() == 0  # no tree: nothing in common


# ------------------------------------------------------------------ raw text at inference
def _online_parser(metadata, **kwargs):
    from fairseq.data import Dictionary

    from fairseq_syntax.data.online_parser import OnlineParser

    from .conftest import spacy_model

    meta = dict(metadata, parser={"name": spacy_model()}, bpe={"name": "none"})
    src = Dictionary()
    for word in "the dog runs . birds sing".split():
        src.add_symbol(word)
    return OnlineParser(meta, src, Dictionary(), Dictionary(), **kwargs), src


def test_raw_text_gets_the_phrase_structure_converted_from_its_parse():
    from fairseq.data import data_utils

    parser, src = _online_parser({})
    lines = ["the dog runs .", "birds sing ."]
    tokens = data_utils.collate_tokens([src.encode_line(line, add_if_not_exist=False) for line in lines],
                                       src.pad(), left_pad=True)
    features = parser.features_for(tokens, {"phrase"}, lines)
    assert set(features) == {"phrase", "phrase_mask", "phrase_heights", "phrase_level_sizes"}  # + the host schedule
    for row, line in enumerate(lines):
        tree = parser.piece_trees([line.split()])[0]
        expected = from_dependency(tree.heads)  # no BPE: pieces are words
        assert features["phrase"][row][features["phrase_mask"][row]].tolist() == expected.tolist()


def test_a_model_trained_on_imported_brackets_is_warned_or_refused_on_raw_text(caplog):
    from fairseq_syntax_core.errors import UsageError

    parser, src = _online_parser({"phrase_structure": {"source": "ptb"}})
    tokens = src.encode_line("the dog runs .", add_if_not_exist=False).unsqueeze(0)
    with caplog.at_level("WARNING"):
        parser.features_for(tokens, {"phrase"}, ["the dog runs ."])
    assert "trained on phrase structures from 'ptb' brackets" in caplog.text and "dependency-conversion" in caplog.text
    strict, _ = _online_parser({}, strict_phrase_structure=True, trained_phrase_structure="ptb")
    with pytest.raises(UsageError, match="--strict-phrase-structure refuses"):
        strict.features_for(tokens, {"phrase"}, ["the dog runs ."])
    converted, _ = _online_parser({"phrase_structure": {"source": "ptb"}}, strict_phrase_structure=True,
                                  trained_phrase_structure="dependency-conversion")
    converted.features_for(tokens, {"phrase"}, ["the dog runs ."])  # trained on conversions: nothing to say


def test_lines_skipped_for_length_skip_their_trees_too(tmp_path):
    data_bin = parsed_bin(tmp_path, {"train": (SRC, TGT, _conllu(SRC, HEADS), PTB)}, bpe_symbols=20,
                          extra=["--constituency-parse", "ptb", "--max-len", "5", "--max-len-action", "skip"])
    from fairseq_syntax_preprocess.ptb import tree_merges

    stored, _ = _stored(data_bin)  # line 1 (6 tokens) is skipped: lines 2 and 3 remain, with their own trees
    assert len(stored) == 2
    for i, line in enumerate(PTB[1:]):
        assert stored[i].tolist() == expand_to_pieces(tree_merges(line)[0], _word_of_piece(data_bin, "train", i)).tolist()


def test_a_tree_dropped_in_the_middle_names_the_first_shifted_line_too(tmp_path):
    # before: only "line-count mismatch" at the end of the file; the tree missing at line 2 shifts
    # every later one, and line 2 is where to look
    from fairseq_syntax_preprocess.ptb import read_trees

    tokens = [["a", "dog"], ["the", "cat", "sat"], ["birds", "fly"], ["it", "rains"]]
    trees = ["(S (NP a) (VP dog))", "(S (NP birds) (VP fly))", "(S (NP it) (VP rains))"]
    path = tmp_path / "train.en.ptb"
    path.write_text("\n".join(trees) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"train\.en\.ptb:4: line-count mismatch: 3 bracketed trees for the 4 lines"
                                         r".*the first tree that does not fit its line is line 2"):
        read_trees(str(path), tokens, "train.en")
    path.write_text("\n".join(trees[:1] + ["(S (NP the cat) (VP sat))"] + trees[1:2]) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"line-count mismatch: 3 bracketed trees for the 4 lines of train\.en: "
                                         r"expected one tree per line$"):  # the end is missing: no hint
        read_trees(str(path), tokens, "train.en")
