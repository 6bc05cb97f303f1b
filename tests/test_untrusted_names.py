"""Names read from files (syntax.json's splits, languages, streams, BPE codes file, shard records) are
untrusted: each is checked against one pattern (fairseq_syntax_core/names.py) where the file is read,
so no command builds a path outside its folder from one, and each is refused as one line naming the key."""

import json
import os
import shutil

import pytest

from fairseq_syntax_core.errors import DataBinError
from fairseq_syntax_preprocess import perturb as pt
from fairseq_syntax_preprocess.destdir import our_metadata
from .conftest import REPO, call, parsed_bin, syntax_task, tool
from .helpers import small_bin  # noqa: F401

RELEASE_0_1 = os.path.join(REPO, "tests", "fixtures", "release_0_1", "data-bin")
HOSTILE = ["../payload", "a/b", "", ".", "..", "te\x00st", "te\nst", "test/../../payload", "te\\st", "test ok",
           "x" * 65]


def _files(root):
    """Every file under ``root`` with its size and modification time."""
    found = {}
    for folder, _dirs, files in os.walk(root):
        for f in files:
            path = os.path.join(folder, f)
            st = os.lstat(path)
            found[path] = (st.st_size, st.st_mtime_ns)
    return found


def _hostile_copy(small_bin, root, edit):
    """A copy of ``small_bin`` at ``root/src/bin`` whose syntax.json ``edit`` changes; returns its path."""
    copy = root / "src" / "bin"
    shutil.copytree(small_bin, copy)
    meta = json.loads((copy / "syntax.json").read_text(encoding="utf-8"))
    edit(meta)
    (copy / "syntax.json").write_text(json.dumps(meta), encoding="utf-8")
    return copy


# ------------------------------------------------------------------------------ the patterns
def test_every_name_the_pipeline_writes_passes_and_hostile_names_do_not():
    from fairseq_syntax_core import names

    for split in ("train", "valid", "valid1", "test", "test12"):
        assert names.name_problem(names.SPLIT, split) is None
    for lang in ("en", "de", "fr", "ja", "en_US", "zh-Hans", "en_XX", "pt-BR"):
        assert names.name_problem(names.LANGUAGE, lang) is None
    for stream in ("head", "deplabel", "pos", "phrase"):
        assert names.name_problem(names.STREAM, stream) is None
    assert names.name_problem(names.FILE_NAME, "bpe.codes") is None
    for kind in (names.SPLIT, names.LANGUAGE, names.STREAM, names.FILE_NAME):
        for bad in HOSTILE + ["/abs", "-x", None, 3, ["en"]]:
            problem = names.name_problem(kind, bad)
            assert problem is not None and "\n" not in problem and "\x00" not in problem, (kind, bad)


def test_the_data_bin_of_release_0_1_still_passes():
    from fairseq_syntax.data.data_bin_checks import read_metadata

    path = os.path.join(RELEASE_0_1, "syntax.json")
    assert read_metadata(path)["splits"].keys() == {"test", "train"}
    assert our_metadata(path) is not None


# -------------------------------------------------------------------------------- perturb
@pytest.mark.parametrize("hostile", HOSTILE + ["ABSOLUTE"], ids=repr)
def test_perturb_writes_nothing_outside_destdir_for_a_hostile_split_name(small_bin, tmp_path, capsys, hostile):
    if hostile == "ABSOLUTE":
        hostile = str(tmp_path / "elsewhere" / "payload")
        (tmp_path / "elsewhere").mkdir()

    def add_split(meta):  # a split beside test, with the test split's files where its name points
        meta["splits"][hostile] = dict(meta["splits"]["test"])

    data_bin = _hostile_copy(small_bin, tmp_path, add_split)
    for name in os.listdir(small_bin):
        if name.startswith("test."):
            target = os.path.join(str(data_bin), hostile + name[len("test"):])
            try:
                if not os.path.exists(target):
                    shutil.copy2(small_bin / name, target)
            except (OSError, ValueError):  # a name no file can have ('', NUL): only the metadata is hostile
                pass
    before = _files(tmp_path)
    dest = tmp_path / "dst" / "out"
    (tmp_path / "dst").mkdir()
    assert pt.cli_main([str(data_bin), "--destdir", str(dest), "--p", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    assert "syntax.json: key splits[2]: " in err and f"{hostile[:64]!r}"[:-1] in err and "is not a valid split name" in err
    assert _files(tmp_path) == before and os.listdir(tmp_path / "dst") == []


@pytest.mark.parametrize("key,value,where", [
    ("source_lang", "../en", "key source_lang"),
    ("target_lang", "/de", "key target_lang"),
    ("parsed_langs", {"../en": ["head", "deplabel", "pos"]}, "key parsed_langs[0]"),
    ("parsed_langs", {"en": ["head", "../../deplabel", "pos"]}, "key parsed_langs.en[1]"),
    ("bpe", {"name": "subword_nmt", "codes": "../../secret"}, "key bpe.codes"),
    ("splits", ["test"], "key splits: list"),
    ("shard", {"id": "0\nforged", "num_shards": 1, "train_lines": [0, 2], "train_total_lines": 2,
               "train_files": ["train.en", "train.de"]}, "key shard: id '0\\nforged'"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_every_reader_of_syntax_json_refuses_a_hostile_name_naming_the_key(small_bin, tmp_path, key, value, where):
    from fairseq_syntax.data.data_bin_checks import read_metadata

    data_bin = _hostile_copy(small_bin, tmp_path, lambda meta: meta.__setitem__(key, value))
    path = str(data_bin / "syntax.json")
    for read in (read_metadata, our_metadata):  # the plugin's reader, the pipeline's reader
        with pytest.raises(DataBinError) as caught:
            read(path)
        assert str(caught.value).startswith(f"{path}: {where}") and "\n" not in str(caught.value)


def test_the_task_refuses_a_data_bin_with_a_hostile_split(small_bin, tmp_path):
    data_bin = _hostile_copy(small_bin, tmp_path, lambda meta: meta["splits"].__setitem__("../payload", {}))
    with pytest.raises(DataBinError, match=r"syntax\.json: key splits\[2\]: '\.\./payload' is not a valid split name"):
        syntax_task(data_bin)


@pytest.mark.slow
def test_fairseq_generate_on_a_hostile_data_bin_is_a_one_line_error(small_bin, tmp_path):
    data_bin = _hostile_copy(small_bin, tmp_path, lambda meta: meta["splits"].__setitem__("../payload", {}))
    result = call([tool("fairseq-generate"), str(data_bin), "--user-dir", "fairseq_syntax",
                   "--task", "syntax_translation", "--path", str(tmp_path / "none.pt"), "--cpu"],
                  cwd=str(tmp_path), expect_ok=False)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "syntax.json: key splits[2]: '../payload' is not a valid split name" in last
    assert "Traceback" not in result.stderr


def test_preprocess_refuses_a_language_code_outside_the_pattern(tmp_path):
    from fairseq_syntax_core.errors import UsageError
    from fairseq_syntax_preprocess.cli import get_parser, run

    from .conftest import corpus

    prefix = corpus(tmp_path)
    for lang in ("e:n", "../en", "en\x00"):
        args = get_parser().parse_args(["-s", "en", "-t", "de", "--trainpref", prefix, "--destdir",
                                        str(tmp_path / "bin"), "--external-parse", "conllu"])
        args.source_lang = lang
        with pytest.raises(UsageError, match="a language code names files"):
            run(args)
    assert not (tmp_path / "bin").exists()
