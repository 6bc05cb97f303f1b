"""Data-bins and checkpoints of the first release keep working: same translations, still train.

``tests/fixtures/release_0_1/`` holds a tiny data-bin and one tiny checkpoint per model family
made before the redesign (``make.sh`` says how), with their ``fairseq-generate`` output;
``tests/fixtures/target_side_8b0e53c/`` the same for the families that fixture lacks (target-side
and two-sided NSD on a parsed French target, tree2seq), made before the NSD decoder changed. Each
checkpoint must load through the installed ``fairseq-generate`` and give the same hypotheses
and the same scores: a renamed option or parameter that fell back to its default would
change them.
"""

import os
import shutil

import pytest

from .conftest import call, tool

pytestmark = pytest.mark.slow  # end-to-end runs of the installed commands

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
FIXTURE = os.path.join(FIXTURES, "release_0_1")
TARGET_SIDE = os.path.join(FIXTURES, "target_side_8b0e53c")
ARCHS = sorted(name[: -len(".pt")] for name in os.listdir(os.path.join(FIXTURE, "checkpoints")))
TARGET_SIDE_ARCHS = sorted(name[: -len(".pt")] for name in os.listdir(os.path.join(TARGET_SIDE, "checkpoints")))
RELEASE_0_2 = os.path.join(FIXTURES, "release_0_2")
RELEASE_0_2_ARCHS = sorted(name[: -len(".pt")] for name in os.listdir(os.path.join(RELEASE_0_2, "checkpoints")))


@pytest.fixture(scope="module")
def old_release(tmp_path_factory):
    """A copy of the fixture outside the checkout (fairseq-train writes beside nothing of ours)."""
    work = tmp_path_factory.mktemp("release_0_1")
    shutil.copytree(FIXTURE, work / "release", ignore=shutil.ignore_patterns("make.sh"))
    return work / "release"


@pytest.fixture(scope="module")
def old_target_side(tmp_path_factory):
    """A copy of the target-side fixture outside the checkout."""
    work = tmp_path_factory.mktemp("target_side")
    shutil.copytree(TARGET_SIDE, work / "release", ignore=shutil.ignore_patterns("make.sh"))
    return work / "release"


@pytest.fixture(scope="module")
def release_0_2(tmp_path_factory):
    """A copy of the 0.2.0 fixture (model format 3) outside the checkout."""
    work = tmp_path_factory.mktemp("release_0_2")
    shutil.copytree(RELEASE_0_2, work / "release", ignore=shutil.ignore_patterns("make.sh"))
    return work / "release"


def _scored(lines):
    """{id: (tokens, scores)}: the hypothesis text, and its sentence or position scores."""
    out = {}
    for line in lines:
        kind_id, *fields = line.rstrip("\n").split("\t")
        if kind_id.startswith("H-"):
            out[kind_id] = (fields[1] if len(fields) > 1 else "", [float(fields[0])])
        elif kind_id.startswith("P-"):
            out[kind_id] = ("", [float(x) for x in fields[0].split()])
    return out


def _same_output(got, expected, tolerance=1e-3):
    """The same hypotheses, and scores equal up to float summation order (printed with 4 decimals)."""
    assert sorted(got) == sorted(expected)
    for key, (text, scores) in expected.items():
        assert got[key][0] == text, key
        assert len(got[key][1]) == len(scores) and all(abs(a - b) <= tolerance for a, b in zip(got[key][1], scores)), key


def test_fixture_covers_every_model_family():
    assert ARCHS == ["transformer_dep_rel", "transformer_gps", "transformer_nsd", "transformer_pascal",
                     "transformer_structural", "transformer_syntax_embed", "transformer_syntax_spe"]
    assert TARGET_SIDE_ARCHS == ["transformer_nsd_both", "transformer_nsd_target", "tree2seq"]
    assert RELEASE_0_2_ARCHS == ["transformer_dep_rel", "transformer_gps", "transformer_nsd", "transformer_nsd_both",
                                 "transformer_pascal", "transformer_structural", "transformer_syntax_embed",
                                 "transformer_syntax_spe", "tree2seq"]


def _translates_as_it_did(release, arch):
    result = call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", f"checkpoints/{arch}.pt", "--gen-subset", "test",
                   "--beam", "2", "--max-len-b", "10", "--batch-size", "8"], cwd=release)
    got = _scored(l for l in result.stdout.splitlines() if l[:2] in ("H-", "P-"))
    with open(os.path.join(release, "expected", f"{arch}.txt"), encoding="utf-8") as handle:
        expected = _scored(handle)
    assert len(expected) == 40
    _same_output(got, expected)


@pytest.mark.parametrize("arch", ARCHS)
def test_old_checkpoint_translates_as_it_did(old_release, arch):
    _translates_as_it_did(old_release, arch)


@pytest.mark.parametrize("arch", TARGET_SIDE_ARCHS)
def test_target_side_checkpoint_translates_as_it_did(old_target_side, arch):
    """Target-side NSD feeds its predicted distances back: a changed decoder changes the scores."""
    _translates_as_it_did(old_target_side, arch)


@pytest.mark.parametrize("arch", RELEASE_0_2_ARCHS)
def test_release_0_2_checkpoint_translates_as_it_did(release_0_2, arch):
    """The first release that stores its model format (3): later formats must still read it."""
    _translates_as_it_did(release_0_2, arch)


def test_model_formats_are_recognised_and_a_newer_one_refused():
    import argparse

    from fairseq_syntax.models.syntax_transformer.legacy import MODEL_FORMAT, model_format, upgrade_args
    from fairseq_syntax.models.syntax_transformer.options import ModelOptionError
    from fairseq_syntax_core.checkpoint_loader import load_checkpoint

    stored = load_checkpoint(os.path.join(RELEASE_0_2, "checkpoints", "transformer_dep_rel.pt"))
    assert stored["cfg"]["model"].syntax_format_version == 3 == MODEL_FORMAT
    assert model_format(argparse.Namespace(rel_no_keys=False)) == 1  # 0.1 stored rel_no_keys
    assert model_format(argparse.Namespace(syntax_num_labels=9)) == 2  # a built model before the format
    with pytest.raises(ModelOptionError, match="newer fairseq-syntax"):
        upgrade_args(argparse.Namespace(syntax_format_version=MODEL_FORMAT + 1))


def test_old_data_bin_still_trains(old_release):
    call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
          "--arch", "transformer_dep_rel", "--encoder-layers", "1", "--decoder-layers", "1",
          "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
          "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
          "--optimizer", "adam", "--lr", "0.01", "--max-update", "2", "--max-tokens", "2000",
          "--save-dir", "retrained", "--no-epoch-checkpoints", "--no-progress-bar", "--valid-subset", "test"],
         cwd=old_release)
    assert os.path.exists(os.path.join(old_release, "retrained", "checkpoint_last.pt"))


def test_stored_options_of_0_1_are_renamed_not_dropped():
    """0.1 stored ``rel_no_keys``/``rel_no_values``/``spe_parent_constant`` and centred PASCAL's </s> on
    the last root: the architecture (run by fairseq on a checkpoint's args) upgrades them."""
    import argparse

    from fairseq_syntax.models.syntax_transformer.architectures import syntax_base_architecture

    old = argparse.Namespace(arch="transformer_dep_rel", rel_no_keys=True, rel_no_values=False,
                             spe_parent_constant=1000.0, syntax_features="pos,parent", pascal_layers="none")
    syntax_base_architecture(old)
    assert (old.rel_keys, old.rel_values, old.spe_head_constant) == (False, True, 1000.0)
    assert old.syntax_features == "pos,head" and old.pascal_eos_parent == "last-root"
    assert not hasattr(old, "rel_no_keys")
    new = argparse.Namespace(arch="transformer_pascal", pascal_layers="0")
    syntax_base_architecture(new)
    assert new.pascal_eos_parent == "self" and new.rel_keys is True
