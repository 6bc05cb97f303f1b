"""A third hostile pass (fresh cases per class): values read from result JSON, data-bin settings, BPE
codes and generate output end in one line naming the file, and rendered text cannot start a link."""

import json
import os
import shutil

import pytest

from fairseq_syntax_core.databin import check_metadata
from fairseq_syntax_core.errors import DataBinError, InputError


def _one_line_error(capsys, code):
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "\x1b" not in err and len(err) < 2000, err
    return lines[0]


def test_report_table_refuses_statistics_whose_sums_overflow(tmp_path, capsys):
    from fairseq_syntax_analysis.results import cli_main

    test = {"sentences": 2, "scores": {"BLEU": 1.0, "chrF2": 1.0}, "signatures": {"BLEU": "s", "chrF2": "s"},
            "statistics": {"BLEU": [[1e308] * 10] * 2, "chrF2": [[1] * 18] * 2}}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "m.json").write_text(json.dumps({
        "format": "fairseq-syntax-result/1", "model": "m", "seed": 1, "stopped": "c", "updates": 1,
        "tests": {"test": test}}))
    line = _one_line_error(capsys, cli_main(["table", str(tmp_path / "results")]))
    assert "m.json" in line and "damaged" in line and "counts" in line


def test_report_record_refuses_an_evaluation_whose_statistics_are_not_rows(tmp_path, capsys):
    from fairseq_syntax_analysis.results import cli_main

    ev = tmp_path / "ev.json"
    ev.write_text(json.dumps({"systems": [{"name": "s", "scores": {}}], "sentences": 1, "signatures": {},
                              "statistics": {"s": {"BLEU": 5, "chrF2": 5}}}))
    code = cli_main(["record", "--out", str(tmp_path / "r.json"), "--model", "m", "--seed", "1", "--save-dir",
                     str(tmp_path / "ck"), "--max-update", "10", "--eval", f"t={ev}"])
    line = _one_line_error(capsys, code)
    assert "ev.json" in line


@pytest.mark.parametrize("key, value", [(("projection", "rule"), "bogus\n\x1b[31mFAKE"), (("bpe", "separator"), 5),
                                        (("pos_column",), 5), (("pos_column",), ["x"]),
                                        (("phrase_structure", "source"), 5), (("tokenizer", "name"), "spacy")])
def test_settings_decoding_applies_are_checked_where_syntax_json_is_read(key, value):
    meta = {"source_lang": "en", "target_lang": "de", "bpe": {"name": "subword_nmt", "codes": "bpe.codes",
            "separator": "@@"}, "projection": {"rule": "first"}, "pos_column": "upos",
            "phrase_structure": {"source": "ptb"}, "tokenizer": {"name": "moses"}}
    check_metadata(json.loads(json.dumps(meta)), "bin/syntax.json")
    target = meta
    for k in key[:-1]:
        target = target[k]
    target[key[-1]] = value
    with pytest.raises(DataBinError) as error:
        check_metadata(meta, "bin/syntax.json")
    message = str(error.value)
    assert "bin/syntax.json" in message and ".".join(key) in message
    assert "\n" not in message and "\x1b" not in message


@pytest.mark.slow
@pytest.mark.parametrize("codes", [b"#version: 0.2\n\x1b[31mfairseq-syntax-show: error: FAKE\x1b[0m\n",
                                   b"#version: 0.2\n\xff\xfe x\n", None])
def test_show_text_checks_the_data_bins_bpe_codes_as_interactive_does(multi30k_bin, tmp_path, capsys, codes):
    from fairseq_syntax_analysis.show import cli_main

    data = tmp_path / "d"
    shutil.copytree(multi30k_bin, data)
    if codes is None:  # syntax.json names another file of the data-bin as its codes
        meta = json.loads((data / "syntax.json").read_text())
        meta["bpe"]["codes"] = "test.en-de.en.bin"
        (data / "syntax.json").write_text(json.dumps(meta))
    else:
        (data / "bpe.codes").write_bytes(codes)
    code = cli_main([str(data), "--text", "The big dog runs .", "--out", str(tmp_path / "d.html")])
    line = _one_line_error(capsys, code)
    assert "bpe.codes" in line or "test.en-de.en.bin" in line
    assert not (tmp_path / "d.html").exists()


def test_evaluate_refuses_a_sentence_id_too_long_to_be_one(tmp_path, capsys):
    from fairseq_syntax_analysis.evaluate import cli_main

    (tmp_path / "ref.txt").write_text("a b c\nd e f\n")
    (tmp_path / "base.txt").write_text("a b c\nd e f\n")
    (tmp_path / "gen.txt").write_text("H-0\t-0.1\ta b c\nH-" + "9" * 5000 + "\t-0.1\td e f\n")
    code = cli_main(["-r", str(tmp_path / "ref.txt"), "-b", f"b={tmp_path / 'base.txt'}",
                     "-s", f"s={tmp_path / 'gen.txt'}", "--quiet"])
    line = _one_line_error(capsys, code)
    assert "gen.txt:2" in line


@pytest.mark.parametrize("text", ["see https://evil.example/login", "www.evil.example", "x@evil.example",
                                  "mailto:x"])
def test_markdown_text_that_an_autolinker_would_link_is_a_code_span(text):
    from fairseq_syntax_analysis.rendering import md_text

    assert md_text(text) == f"`{text}`"
    assert md_text("early stopping: patience 5") == "early stopping: patience 5"


def test_a_shard_record_with_huge_file_names_is_refused_in_a_short_line():
    record = {"id": 1, "num_shards": 2, "train_lines": [450, 900], "train_total_lines": 900,
              "train_files": ["x" * 1000] * 3000}
    with pytest.raises(DataBinError) as error:
        check_metadata({"shard": record}, "s1/syntax.json")
    assert "s1/syntax.json" in str(error.value) and len(str(error.value)) < 600


def test_report_prints_names_from_the_command_line_escaped(tmp_path, capsys):
    from fairseq_syntax_analysis.results import cli_main

    point = tmp_path / "n.json"
    point.write_text("{}")
    cli_main(["noise", "--point", f"m\n\x1b[31mFAKE\u202e:0={point}", "--plot", str(tmp_path / "p.png")])
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err and "\u202e" not in captured.out + captured.err
