"""The pipeline's stages: projection, CoNLL-U import, bad input, atomic and reproducible output."""

import hashlib
import io
import os

import numpy as np
import pytest

from fairseq_syntax_preprocess.bpe import join_pieces, word_index_of_pieces
from fairseq_syntax_preprocess.cli import get_parser, run
from fairseq_syntax_preprocess.conllu import format_conllu, read_conllu, trees_for_lines
from fairseq_syntax_core.errors import InputError
from fairseq_syntax_preprocess.projection import SUBWORD_LABEL, project
from fairseq_syntax_preprocess.tokenize import parser_view, tokenize_line
from fairseq_syntax_preprocess.word_tree import WordTree

from .conftest import SRC, TGT, conllu_for, corpus, spacy_model, write


def omote_tree() -> WordTree:
    # paper 000 Figure 2: "My father bought a red car ."
    return WordTree(
        words="My father bought a red car .".split(),
        heads=np.array([2, 3, 0, 6, 6, 3, 3]),
        labels=["poss", "nsubj", "root", "det", "amod", "dobj", "punct"],
        pos=["PRP$", "NN", "VBD", "DT", "JJ", "NN", "."],
    )


# ----------------------------------------------------------------- projection
def test_word_index_of_pieces_and_join():
    pieces = ["My", "fa@@", "ther", "bou@@", "gh@@", "t", "a"]
    assert word_index_of_pieces(pieces).tolist() == [0, 1, 1, 2, 2, 2, 3]
    assert join_pieces(pieces) == ["My", "father", "bought", "a"]


def test_duan_first_piece_rule():
    """Paper 003 sec. III.D: the first piece inherits; later pieces attach to it."""
    pieces = ["My", "fa@@", "ther", "bou@@", "gh@@", "t", "a", "red", "car", "."]
    piece_tree = project(omote_tree(), pieces, "first")
    # word heads: My->father, father->bought, bought root, a->car, red->car, car->bought, .->bought
    # first pieces: My=1 fa=2 bou=4 a=7 red=8 car=9 .=10
    assert piece_tree.heads.tolist() == [2, 4, 2, 0, 4, 4, 9, 9, 4, 4]
    assert piece_tree.labels == ["poss", "nsubj", SUBWORD_LABEL, "root", SUBWORD_LABEL, SUBWORD_LABEL,
                                 "det", "amod", "dobj", "punct"]
    assert piece_tree.pos == ["PRP$", "NN", "NN", "VBD", "VBD", "VBD", "DT", "JJ", "NN", "."]


def test_chain_rule():
    pieces = ["My", "fa@@", "ther", "bou@@", "gh@@", "t", "a", "red", "car", "."]
    piece_tree = project(omote_tree(), pieces, "chain")
    assert piece_tree.heads.tolist() == [2, 4, 2, 0, 4, 5, 9, 9, 4, 4]
    assert piece_tree.labels[5] == SUBWORD_LABEL


def test_projection_without_splits_is_identity():
    tree = omote_tree()
    assert project(tree, tree.words, "first").heads.tolist() == tree.heads.tolist()


def test_projection_keeps_several_roots():
    tree = WordTree(words="Run . Stop now .".split(), heads=np.array([0, 1, 0, 3, 3]),
                    labels=["ROOT", "punct", "ROOT", "advmod", "punct"], pos=["VERB"] * 5)
    piece_tree = project(tree, ["R@@", "un", ".", "Stop", "now", "."], "first")
    assert piece_tree.heads.tolist() == [0, 1, 1, 0, 4, 4]


def test_projection_rejects_wrong_pieces():
    with pytest.raises(ValueError, match="spell"):
        project(omote_tree(), ["My", "father"], "first")


# ------------------------------------------------------------------- tokenize
def test_moses_settings_match_fairseq_tokenizer():
    # fairseq's --tokenizer moses: aggressive dash splits and XML escaping
    assert tokenize_line("A well-known man's dog & cat.", "en") == [
        "A", "well", "@-@", "known", "man", "&apos;s", "dog", "&amp;", "cat", "."]
    assert parser_view("&apos;s") == "'s" and parser_view("&amp;") == "&"
    assert tokenize_line("  keep  these   tokens ", "en", pretokenized=True) == ["keep", "these", "tokens"]


# -------------------------------------------------------------------- CoNLL-U
CONLLU_MWT = """# text = Je vais au marché.
1\tJe\tje\tPRON\t_\t_\t2\tnsubj\t_\t_
2\tvais\taller\tVERB\t_\t_\t0\troot\t_\t_
3-4\tau\t_\t_\t_\t_\t_\t_\t_\t_
3\tà\tà\tADP\t_\t_\t5\tcase\t_\t_
4\tle\tle\tDET\t_\t_\t5\tdet\t_\t_
4.1\tELIDED\t_\t_\t_\t_\t_\t_\t_\t_
5\tmarché\tmarché\tNOUN\t_\t_\t2\tobl\t_\t_
6\t.\t.\tPUNCT\t_\t_\t2\tpunct\t_\t_

"""


def test_conllu_multiword_tokens_and_empty_nodes():
    [(line, tree)] = list(read_conllu(io.StringIO(CONLLU_MWT), "x.conllu"))
    assert line == 2
    assert tree.words == ["Je", "vais", "au", "marché", "."]
    # "au" = à (case -> marché) + le (det -> marché): the token takes the word whose head is outside
    assert tree.heads.tolist() == [2, 0, 4, 2, 2]
    assert tree.labels[2] == "case" and tree.pos[2] == "ADP"


def test_conllu_roundtrip():
    text = format_conllu(omote_tree(), "sent_id = 1", "xpos")
    [(_, tree)] = list(read_conllu(io.StringIO(text), "x", "xpos"))
    assert tree.words == omote_tree().words and tree.heads.tolist() == omote_tree().heads.tolist()
    assert tree.pos == omote_tree().pos


@pytest.mark.parametrize(
    "row, message",
    [
        ("1\tA\t_\tDET\t_\t_\t2\tdet\t_", "expected 10 tab-separated"),
        ("1\tA\t_\tDET\t_\t_\tx\tdet\t_\t_", "HEAD must be a whole number"),
        ("1\tA\t_\tDET\t_\t_\t7\tdet\t_\t_", "HEAD 7 is outside 0..2"),
    ],
)
def test_conllu_bad_rows_name_file_and_line(row, message):
    text = f"# c\n{row}\n2\tman\t_\tNOUN\t_\t_\t0\troot\t_\t_\n\n"
    with pytest.raises(InputError, match=message) as error:
        list(read_conllu(io.StringIO(text), "bad.conllu"))
    assert str(error.value).startswith("bad.conllu:2:")


def test_conllu_cycle_and_no_root():
    cycle = "1\tA\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tB\t_\tX\t_\t_\t1\tdep\t_\t_\n3\tC\t_\tX\t_\t_\t0\troot\t_\t_\n\n"
    with pytest.raises(InputError, match="bad.conllu:1: not a dependency tree.*cycle"):
        list(read_conllu(io.StringIO(cycle), "bad.conllu"))
    no_root = "1\tA\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tB\t_\tX\t_\t_\t1\tdep\t_\t_\n\n"
    with pytest.raises(InputError, match="no root"):
        list(read_conllu(io.StringIO(no_root), "bad.conllu"))


def test_conllu_sentences_joined_to_cover_a_line(tmp_path):
    """A parser that splits a line into two sentences: the line keeps both roots."""
    two = ("1\tRun\t_\tVERB\t_\t_\t0\troot\t_\t_\n2\t.\t_\tPUNCT\t_\t_\t1\tpunct\t_\t_\n\n"
           "1\tStop\t_\tVERB\t_\t_\t0\troot\t_\t_\n2\t.\t_\tPUNCT\t_\t_\t1\tpunct\t_\t_\n\n")
    path = write(tmp_path / "x.conllu", two)
    [tree] = list(trees_for_lines(path, [["Run", ".", "Stop", "."]], "x.en"))
    assert tree.heads.tolist() == [0, 1, 0, 3] and tree.num_roots == 2


def test_conllu_words_differ_from_text(tmp_path):
    path = write(tmp_path / "x.conllu", "1\tRun\t_\tVERB\t_\t_\t0\troot\t_\t_\n2\t!\t_\tPUNCT\t_\t_\t1\tpunct\t_\t_\n\n")
    with pytest.raises(InputError, match=r"x.conllu:1: parse words differ from x.en line 1: token 2 is '!'"):
        list(trees_for_lines(path, [["Run", "."]], "x.en"))


def test_conllu_count_mismatch(tmp_path):
    path = write(tmp_path / "x.conllu", "1\tRun\t_\tVERB\t_\t_\t0\troot\t_\t_\n\n")
    with pytest.raises(InputError, match="ends before line 2"):
        list(trees_for_lines(path, [["Run"], ["Stop"]], "x.en"))
    path = write(tmp_path / "y.conllu", "1\tRun\t_\tVERB\t_\t_\t0\troot\t_\t_\n\n1\tGo\t_\tVERB\t_\t_\t0\troot\t_\t_\n\n")
    with pytest.raises(InputError, match="y.conllu:3: the parse has more sentences"):
        list(trees_for_lines(path, [["Run"]], "x.en"))


# ------------------------------------------------------------ the whole command
def _args(prefix, destdir, *extra):
    return get_parser().parse_args(
        ["-s", "en", "-t", "de", "--trainpref", prefix, "--destdir", str(destdir), "--pretokenized",
         "--external-parse", "conllu", "--bpe-symbols", "20", "--joined-dictionary", *extra]
    )


def test_external_parse_end_to_end(tmp_path):
    destdir = tmp_path / "bin"
    summary = run(_args(corpus(tmp_path), destdir))
    assert summary["sentences"] == 3
    for name in ("dict.en.txt", "dict.en.deplabel.txt", "dict.en.pos.txt", "bpe.codes", "syntax.json",
                 "train.en-de.en.head.bin", "train.en-de.en.head.idx", "train.en-de.en.conllu"):
        assert (destdir / name).exists(), name
    assert not (destdir / "preprocess.log").exists()
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_word_level_without_bpe(tmp_path):
    import json

    destdir = tmp_path / "bin"
    args = _args(corpus(tmp_path), destdir, "--no-bpe")
    run(args)
    assert json.loads((destdir / "syntax.json").read_text())["bpe"] == {"name": "none"}
    assert not (destdir / "bpe.codes").exists()
    words = (destdir / "train.en-de.en.conllu").read_text().split("\n")[1:5]
    assert [w.split("\t")[1] for w in words] == ["The", "dog", "runs", "."]


@pytest.mark.parametrize(
    "src, tgt, message",
    [
        (SRC[:2], TGT, r"train.en:3: line-count mismatch"),
        (SRC[:1] + [""] + SRC[2:], TGT, r"train.en:2: empty line"),
    ],
)
def test_bad_text_names_file_and_line(tmp_path, src, tgt, message):
    prefix = corpus(tmp_path, src, tgt, conllu=conllu_for([s for s in src if s]))
    with pytest.raises(InputError, match=message):
        run(_args(prefix, tmp_path / "bin"))
    assert not (tmp_path / "bin").exists()
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_max_len_error_and_counted_skip(tmp_path):
    prefix = corpus(tmp_path)
    with pytest.raises(InputError, match=r"train.en:2: line has 7 tokens, more than --max-len 5"):
        run(_args(prefix, tmp_path / "bin", "--max-len", "5"))
    summary = run(_args(prefix, tmp_path / "bin", "--max-len", "5", "--max-len-action", "skip"))
    assert summary["sentences"] == 2 and summary["skipped_too_long"] == 1


def test_failed_run_leaves_existing_destdir_untouched(tmp_path):
    prefix = corpus(tmp_path)
    destdir = tmp_path / "bin"
    run(_args(prefix, destdir))
    before = {p: (destdir / p).read_bytes() for p in os.listdir(destdir)}
    write(tmp_path / "train.en.conllu", conllu_for(SRC).replace("\t0\troot", "\t9\troot", 1))
    with pytest.raises(InputError, match="HEAD 9 is outside"):
        run(_args(prefix, destdir, "--overwrite"))
    assert {p: (destdir / p).read_bytes() for p in os.listdir(destdir)} == before


def _digest(directory):
    return {p: hashlib.sha256((directory / p).read_bytes()).hexdigest() for p in sorted(os.listdir(directory))}


def test_rerun_is_byte_identical_with_spacy(tmp_path):
    model = spacy_model()
    write(tmp_path / "train.en", "Two dogs play in the snow.\nA woman reads a newspaper. She smiles.\n")
    write(tmp_path / "train.de", "Zwei Hunde spielen im Schnee.\nEine Frau liest eine Zeitung. Sie lächelt.\n")
    argv = ["-s", "en", "-t", "de", "--trainpref", str(tmp_path / "train"), "--parser", model,
            "--bpe-symbols", "30", "--joined-dictionary"]
    first = run(get_parser().parse_args(argv + ["--destdir", str(tmp_path / "a")]))
    run(get_parser().parse_args(argv + ["--destdir", str(tmp_path / "b")]))
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert first["multi_root"] == 1  # the second line holds two sentences
