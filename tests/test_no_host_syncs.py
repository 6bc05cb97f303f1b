"""No host-device sync raised from our code in any model's forward.

A sync (``.item()``, ``.tolist()``, ``if tensor``, ``nonzero``, boolean-mask indexing, ``bincount``...)
makes the host wait for the GPU. ``benchmarks/op_profile.py`` records them and attributes each to
the innermost Python frame outside torch: ours when it is a file under ``fairseq_syntax/`` or
``fairseq_syntax_core/`` (fairseq's own, e.g. its sinusoidal positions, are exempt). Here every
family runs its training forward with its loss, the encoder forward for inference and
incremental decoder steps at a beam of 2, tiny (2 layers, 32 wide, 4 heads), on a data-bin made
from the embedded sample with hand-made parses of both sides. The families that sync today are
marked ``xfail(strict=True)`` with the sites found: the mark must go when the sync does.
"""

import importlib.util
import os
import types

import pytest
import torch

from .conftest import REPO, SAMPLE, parsed_bin, write


def _op_profile() -> types.ModuleType:
    """``benchmarks/op_profile.py`` (not a package), imported by path."""
    spec = importlib.util.spec_from_file_location("op_profile", os.path.join(REPO, "benchmarks", "op_profile.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


op_profile = _op_profile()

#: the phases that are a model's forward (the backward pass is not checked here)
FORWARD_PHASES = ("train_forward", "encoder_forward", "decoder_step")
SMALL = types.SimpleNamespace(dim=32, layers=2)
HEADS = 4

#: families that sync from our code today: the sites found (fairseq_syntax/..., op); none (the level-wise
#: recurrences of paper 001's path LSTM and paper 004's Tree-LSTM get their level sizes from the collater)
SYNCING: dict = {}  # family -> the sync sites found, while one syncs


def _conllu(lines) -> str:
    """A CoNLL-U parse of whitespace-tokenized lines: word i attaches to word i // 2 (a branching tree)."""
    labels, tags = ("nsubj", "obj", "det", "amod"), ("NOUN", "VERB", "DET", "ADJ")
    out = []
    for line in lines:
        rows = [f"{i}\t{w}\t_\t{tags[i % 4]}\t_\t_\t{i // 2}\t{'root' if i == 1 else labels[i % 4]}\t_\t_"
                for i, w in enumerate(line.split(), start=1)]
        out.append("\n".join(rows) + "\n\n")
    return "".join(out)


@pytest.fixture(scope="module")
def both_sides_bin(tmp_path_factory):
    """The sample's first en-de lines, both sides parsed by hand (``--target-external-parse conllu``)."""
    folder = tmp_path_factory.mktemp("no_syncs")
    splits = {}
    for split, n in (("train", 60), ("valid", 12)):
        side = {}
        for lang in ("en", "de"):
            with open(os.path.join(SAMPLE, f"{split}.{lang}"), encoding="utf-8") as handle:
                side[lang] = [next(handle).strip() for _ in range(n)]
        write(folder / f"{split}.de.conllu", _conllu(side["de"]))
        splits[split] = (side["en"], side["de"], _conllu(side["en"]))
    return parsed_bin(folder, splits, bpe_symbols=40, extra=["--target-external-parse", "conllu"])


def _ours_in_forward(data_bin, arch):
    torch.manual_seed(1)
    flags = op_profile.model_flags(arch, HEADS, SMALL)
    task, model, criterion, _ = op_profile.build(str(data_bin), arch, flags, torch.device("cpu"))
    task.request_inputs(model, require_target=True)
    sample = op_profile.draw_batch(task, "valid", max_tokens=4096)
    row = op_profile.profile_family(task, model, criterion, op_profile.share(sample, model), beam=2, prefix=3,
                                    backward=False, warmup=False)
    assert row["train_step"]["forward_ops"] > 0 and row["decoder_step"]["ops"] > 0
    return [r for r in row["syncs"]["ours"] if r["phase"] in FORWARD_PHASES]


@pytest.mark.parametrize("arch", [
    pytest.param(arch, marks=pytest.mark.xfail(strict=True, raises=AssertionError,
                                               reason=f"syncs from our code: {SYNCING[arch]}"))
    if arch in SYNCING else arch
    for arch in op_profile.FAMILIES
])
def test_no_sync_from_our_code_in_forward(both_sides_bin, arch):
    ours = _ours_in_forward(both_sides_bin, arch)
    assert not ours, "host-device syncs raised from our code:\n" + "\n".join(
        f"  {r['phase']}: {r['site']} {r['op']} x{r['calls']}" for r in ours)


def test_the_recorder_finds_syncs_in_our_frames_only(tmp_path):
    """The detector itself: ``.item()``, ``.tolist()``, ``if tensor``, a boolean mask, ``nonzero`` and
    ``bincount`` in a file under a ``fairseq_syntax/`` folder are ours, at their lines; the same calls
    elsewhere are not; views are not counted as ops."""
    code = ("def f(x):\n"
            "    a = x.sum().item()\n"          # 2
            "    b = x.tolist()\n"              # 3
            "    c = x[x > 0]\n"                # 4
            "    d = x.nonzero()\n"             # 5
            "    e = x.long().bincount()\n"     # 6
            "    if x.any():\n"                 # 7
            "        pass\n"
            "    x[x > 0] = 0.0\n"              # 9: a scalar: masked_fill, no sync
            "    return x.view(-1).t()\n")
    folder = tmp_path / "fairseq_syntax"
    folder.mkdir()
    write(folder / "fake.py", code)
    spec = importlib.util.spec_from_file_location("fake_syncs", str(folder / "fake.py"))
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    recorder = op_profile.OpRecorder()
    with op_profile.recording(recorder, "train_forward"):
        fake.f(torch.arange(4.0))
        torch.arange(3.0).sum().item()  # this file's: not ours
    report = op_profile._sync_report(recorder.syncs)
    found = {(r["site"].split(":")[-1], r["op"]) for r in report["ours"]}
    assert found == {("2", "aten::_local_scalar_dense"), ("3", "Tensor.tolist"), ("4", "aten::index (bool mask)"),
                     ("5", "aten::nonzero"), ("6", "aten::bincount"), ("7", "aten::_local_scalar_dense")}, found
    assert all(r["site"].startswith("fairseq_syntax/fake.py:") for r in report["ours"])
    assert report["exempt_calls"] == {"other": 1}
    assert "aten::view" not in recorder.ops["train_forward"] and recorder.views["train_forward"]["aten::view"] == 1
