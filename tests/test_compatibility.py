"""Data-bins and checkpoints of the first release keep working: same translations, still train.

``tests/fixtures/release_0_1/`` holds a tiny data-bin and one tiny checkpoint per model family
made before the redesign (``make.sh`` says how), with their ``fairseq-generate`` output. Each
checkpoint must load through the installed ``fairseq-generate`` and give the same hypotheses
and the same scores: a renamed option or parameter that fell back to its default would
change them.
"""

import os
import shutil

import pytest

from .conftest import call, tool

pytestmark = pytest.mark.slow  # end-to-end runs of the installed commands

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_1")
ARCHS = sorted(name[: -len(".pt")] for name in os.listdir(os.path.join(FIXTURE, "checkpoints")))


@pytest.fixture(scope="module")
def old_release(tmp_path_factory):
    """A copy of the fixture outside the checkout (fairseq-train writes beside nothing of ours)."""
    work = tmp_path_factory.mktemp("release_0_1")
    shutil.copytree(FIXTURE, work / "release", ignore=shutil.ignore_patterns("make.sh"))
    return work / "release"


def _scored(lines):
    """{id: (kind, tokens or scores)} with scores rounded to what float noise cannot change."""
    out = {}
    for line in lines:
        kind_id, *fields = line.rstrip("\n").split("\t")
        if kind_id.startswith("H-"):
            out[kind_id] = (round(float(fields[0]), 4), fields[1] if len(fields) > 1 else "")
        elif kind_id.startswith("P-"):
            out[kind_id] = tuple(round(float(x), 3) for x in fields[0].split())
    return out


def test_fixture_covers_every_model_family():
    assert ARCHS == ["transformer_dep_rel", "transformer_gps", "transformer_nsd", "transformer_pascal",
                     "transformer_structural", "transformer_syntax_embed", "transformer_syntax_spe"]


@pytest.mark.parametrize("arch", ARCHS)
def test_old_checkpoint_translates_as_it_did(old_release, arch):
    result = call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", f"checkpoints/{arch}.pt", "--gen-subset", "test",
                   "--beam", "2", "--max-len-b", "10", "--batch-size", "8"], cwd=old_release)
    got = _scored(l for l in result.stdout.splitlines() if l[:2] in ("H-", "P-"))
    with open(os.path.join(old_release, "expected", f"{arch}.txt"), encoding="utf-8") as handle:
        expected = _scored(handle)
    assert len(expected) == 40 and got == expected


def test_old_data_bin_still_trains(old_release):
    call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
          "--arch", "transformer_dep_rel", "--encoder-layers", "1", "--decoder-layers", "1",
          "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
          "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
          "--optimizer", "adam", "--lr", "0.01", "--max-update", "2", "--max-tokens", "2000",
          "--save-dir", "retrained", "--no-epoch-checkpoints", "--no-progress-bar", "--valid-subset", "test"],
         cwd=old_release)
    assert os.path.exists(os.path.join(old_release, "retrained", "checkpoint_last.pt"))
