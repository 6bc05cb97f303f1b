"""fairseq-syntax-show: displaCy pictures of the piece-level trees, valid SVG/HTML with our reserved labels."""

import xml.etree.ElementTree as ET

import pytest

from fairseq_syntax_analysis.show import cli_main, displacy_parse, render
from .conftest import parsed_bin

SVG = "{http://www.w3.org/2000/svg}"

SRC = ["R&B singers <sing> loudly", "Stop"]
CONLLU = (
    "1\tR&B\t_\tNOUN\t_\t_\t2\tcompound\t_\t_\n2\tsingers\t_\tNOUN\t_\t_\t3\tnsubj\t_\t_\n"
    "3\t<sing>\t_\tVERB\t_\t_\t0\troot\t_\t_\n4\tloudly\t_\tADV\t_\t_\t3\tadvmod\t_\t_\n\n"
    "1\tStop\t_\tVERB\t_\t_\t0\troot\t_\t_\n\n"
)


@pytest.fixture
def show_bin(tmp_path):
    return parsed_bin(tmp_path, {"train": (SRC, ["R&B Sänger singen laut", "Halt"], CONLLU)}, bpe_symbols=3)


def labels_and_words(svg_root):
    labels = [e.text for e in svg_root.iter(f"{SVG}textPath")]
    words = [[t.text for t in e.iter(f"{SVG}tspan")] for e in svg_root.iter(f"{SVG}text")
             if e.get("class") == "displacy-token"]
    return labels, words


def test_reserved_labels_and_markup_in_words_give_valid_svg():
    parse = displacy_parse(["R&B", "sing@@", "ers", "</s>"], [2, 0, 2, 2], ["compound", "root", "<subword>", "</s>"],
                           ["NOUN", "NOUN", "NOUN", "</s>"])
    root = ET.fromstring(render([parse], page=False))  # raises if not well-formed
    labels, words = labels_and_words(root)
    assert sorted(labels) == ["</s>", "<subword>", "compound"]
    assert words[0] == ["R&B", "NOUN"] and words[3] == ["</s>", "</s>"]


def test_arcs_point_from_head_to_dependent():
    parse = displacy_parse(["a", "b", "c"], [2, 0, 2], ["x", "root", "y"], ["T", "T", "T"])
    assert parse["arcs"] == [{"start": 0, "end": 1, "label": "x", "dir": "left"},
                             {"start": 1, "end": 2, "label": "y", "dir": "right"}]


def test_split_sentences_as_the_model_sees_them_html_page(show_bin, tmp_path):
    out = tmp_path / "trees.html"
    assert cli_main([str(show_bin), "--split", "train", "--sentences", "0,1", "--out", str(out)]) == 0
    page = ET.fromstring(out.read_text(encoding="utf-8"))  # displaCy's page is well-formed XML too
    svgs = list(page.iter(f"{SVG}svg"))
    assert len(svgs) == 2
    labels, words = labels_and_words(svgs[0])
    assert words[-1] == ["</s>", "</s>"] and "</s>" in labels  # the appended </s>, attached to the root
    assert "<subword>" in labels  # 3 BPE merges split the words into pieces
    text = "".join(w[0] for w in words[:-1]).replace("@@", "")
    assert text == "".join(SRC[0].split())


def test_svg_folder_and_no_eos(show_bin, tmp_path):
    out = tmp_path / "svgs"
    assert cli_main([str(show_bin), "--split", "train", "--sentences", "1", "--format", "svg", "--no-eos",
                     "--out", str(out)]) == 0
    root = ET.parse(out / "train.1.svg").getroot()
    labels, words = labels_and_words(root)
    # "Stop" alone: only the <subword> arcs between its pieces, no </s>
    assert set(labels) <= {"<subword>"} and "</s>" not in [w[0] for w in words]
    assert "".join(w[0] for w in words).replace("@@", "") == "Stop"


def test_sentence_out_of_range_is_a_clear_error(show_bin, tmp_path, capsys):
    assert cli_main([str(show_bin), "--split", "train", "--sentences", "7", "--out", str(tmp_path / "t.html")]) == 1
    assert "--sentences: 7 is not a sentence of split 'train' (0..1)" in capsys.readouterr().err
    assert not (tmp_path / "t.html").exists()


def test_raw_text_is_parsed_as_the_data_bin_records(multi30k_bin, tmp_path):
    out = tmp_path / "svgs"
    assert cli_main([str(multi30k_bin), "--text", "A man rides a bike .", "--format", "svg", "--out", str(out)]) == 0
    labels, words = labels_and_words(ET.parse(out / "text.0.svg").getroot())
    assert [w[0] for w in words][-1] == "</s>" and "nsubj" in labels


def test_refuses_to_write_inside_the_data_bin(show_bin, capsys):
    before = (show_bin / "syntax.json").read_bytes()
    assert cli_main([str(show_bin), "--split", "train", "--out", str(show_bin / "syntax.json")]) == 1
    assert "is inside the data-bin" in capsys.readouterr().err
    assert (show_bin / "syntax.json").read_bytes() == before
    assert cli_main([str(show_bin), "--split", "nope", "--out", "x.html"]) == 1
    assert "--split nope: the data-bin" in capsys.readouterr().err


# ------------------------------------------------------------------ hostile inputs
def test_control_characters_are_drawn_as_replacement_characters_in_valid_svg():
    svg = render([displacy_parse(["x\x01y", "w\x08z", "\ud800"], [2, 0, 2], ["a\x02", "ROOT", "dep"],
                                 ["X\x1f", "Y", "Z"])], page=False)
    ET.fromstring(svg)  # well-formed XML
    assert "x\ufffdy" in svg and "\x01" not in svg and "\x08" not in svg


def test_bad_arguments_are_refused_before_any_work(show_bin, tmp_path, capsys):
    out = str(tmp_path / "t.html")
    for bad in (["--text", "a b", "--sentences", "1"], ["--format", "svg", "--out", ""], ["--syntax-parser", "x"],
                ["--sentences", ",".join(str(i) for i in range(1001))]):
        argv = [str(show_bin), *bad] + ([] if "--out" in bad else ["--out", out])
        with pytest.raises(SystemExit):
            cli_main(argv)
    assert cli_main([str(show_bin), "--text", "a \udcff man", "--out", out]) == 1
    assert "--text: is not UTF-8 (byte b'\\xff'" in capsys.readouterr().err
    assert not (tmp_path / "t.html").exists()


def test_svg_files_are_written_all_or_none(show_bin, tmp_path):
    out = tmp_path / "svgs"
    out.mkdir()
    (out / "train.1.svg").mkdir()  # the second file cannot be written
    assert cli_main([str(show_bin), "--split", "train", "--sentences", "0,1", "--format", "svg", "--out", str(out)]) == 1
    assert sorted(p.name for p in out.iterdir()) == ["train.1.svg"]
