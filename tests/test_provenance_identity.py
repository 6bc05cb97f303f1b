"""A checkpoint carries the identity of its data-bin: dictionaries and BPE codes are compared by hash.

Every load of a checkpoint onto a data-bin (fairseq-generate, -interactive, and fairseq-train
restoring weights) refuses a data-bin whose dictionaries or BPE codes differ from the ones the
checkpoint was trained with, naming the files and both hashes on one line; ``--allow-other-data-bin``
goes on with a warning. Checkpoints of earlier releases record no hashes: one warning says so.
Training on some of the shards of a sharded data-bin warns, naming the missing ones.

The CLI tests train one tiny model on the release fixture's data-bin (no parser run).
"""

import json
import logging
import os
import shutil

import pytest

from .conftest import call, spacy_model, syntax_task, tool
from .helpers import _swap_two_symbols

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_1")
TASK_LOGGER = "fairseq_syntax.tasks.syntax_translation"
TINY = ["--arch", "transformer_dep_rel", "--encoder-layers", "1", "--decoder-layers", "1",
        "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
        "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
        "--optimizer", "adam", "--lr", "0.01", "--max-tokens", "2000", "--no-epoch-checkpoints",
        "--no-progress-bar", "--valid-subset", "test", "--seed", "1"]
REFUSED = "from the data-bin the checkpoint was trained on"
OLD = "records no hashes of its data-bin's dictionaries and BPE codes"


def _sha(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def _ids_sha(path) -> str:
    """The short hash of a dictionary's ids (its symbols in order), as provenance records it."""
    from fairseq_syntax.data import provenance

    return provenance.dictionary_ids_sha256(str(path))[:12]


# ------------------------------------------------------------------------------ fast
def test_data_bin_provenance_hashes_every_dictionary_and_names_the_differing_ones(tmp_path):
    from fairseq_syntax.data import provenance

    data_bin = tmp_path / "data-bin"
    shutil.copytree(os.path.join(FIXTURE, "data-bin"), data_bin)
    meta = json.loads((data_bin / "syntax.json").read_text(encoding="utf-8"))
    trained = provenance.decode(provenance.encode(provenance.of_data_bin(str(data_bin), meta)))
    assert sorted(trained[provenance.DICTIONARIES]) == ["dict.de.txt", "dict.en.deplabel.txt", "dict.en.pos.txt",
                                                        "dict.en.txt"]
    before = _ids_sha(data_bin / "dict.en.txt")
    _swap_two_symbols(data_bin)
    (data_bin / "bpe.codes").write_text((data_bin / "bpe.codes").read_text() + "d o\n")
    now = provenance.of_data_bin(str(data_bin), meta)
    assert provenance.differing_files(trained, now) == [
        f"dict.en.txt (symbols by id: sha256 {before} at training, {_ids_sha(data_bin / 'dict.en.txt')} now)",
        f"bpe.codes (sha256 {trained['bpe_codes_sha256'][:12]} at training, {_sha(data_bin / 'bpe.codes')} now)",
    ]
    # a dictionary the data-bin given now lacks (an unparsed target side) is not needed to decode
    del now[provenance.DICTIONARIES]["dict.en.txt"]
    assert provenance.differing_files(trained, dict(now, bpe_codes_sha256=trained["bpe_codes_sha256"])) == []
    # what older checkpoints lack: everything (0.1), or the dictionaries (provenance before this)
    assert provenance.unchecked(None) and provenance.unchecked({}) and provenance.unchecked(trained) is None
    assert "dictionaries" in provenance.unchecked(provenance.decode(json.dumps({"bpe_codes_sha256": "a" * 64})))


def test_fairseq_train_restores_the_checkpoint_fairseq_chooses(tmp_path):
    import argparse

    from fairseq_syntax.data.provenance import restored_checkpoint

    args = argparse.Namespace(restore_file="checkpoint_last.pt", save_dir=str(tmp_path / "ckpt"),
                              finetune_from_model=None, continue_once=None, checkpoint_suffix="")
    assert restored_checkpoint(args) is None  # a fresh run restores nothing
    pretrained = tmp_path / "pretrained.pt"
    pretrained.write_bytes(b"x")
    args.finetune_from_model = str(pretrained)
    assert restored_checkpoint(args) == str(pretrained)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "checkpoint_last.pt").write_bytes(b"x")  # once it has saved, it resumes its own
    assert restored_checkpoint(args) == str(tmp_path / "ckpt" / "checkpoint_last.pt")
    args.restore_file, args.finetune_from_model = str(pretrained), None
    assert restored_checkpoint(args) == str(pretrained)


def _shards(tmp_path, ids, num_shards=4):
    """Copies of the fixture's data-bin recorded as shards ``ids`` of ``num_shards`` (same dictionaries)."""
    out = []
    for k in ids:
        shard = tmp_path / "bin" / f"shard{k}"
        shutil.copytree(os.path.join(FIXTURE, "data-bin"), shard)
        meta = json.loads((shard / "syntax.json").read_text(encoding="utf-8"))
        meta["shard"] = {"id": k, "num_shards": num_shards, "train_lines": [300 * k, 300 * (k + 1)],
                         "train_total_lines": 300 * num_shards, "train_files": ["train.en", "train.de"]}
        (shard / "syntax.json").write_text(json.dumps(meta), encoding="utf-8")
        out.append(shard)
    return out


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == TASK_LOGGER and r.levelno == logging.WARNING]


def test_training_on_some_shards_warns_once_naming_the_missing_ones(tmp_path, caplog):
    shard0, shard1 = _shards(tmp_path, (0, 1))
    task = syntax_task(f"{shard0}:{shard1}")
    caplog.set_level(logging.WARNING, logger=TASK_LOGGER)
    for epoch in (1, 2, 3):
        task.load_dataset("train", epoch=epoch)
    warnings = [w for w in _warnings(caplog) if "shards" in w]
    assert len(warnings) == 1, warnings
    assert f"hold 2 of the 4 shards of their run; missing: {tmp_path / 'bin' / 'shard2'}, " \
           f"{tmp_path / 'bin' / 'shard3'}," in warnings[0]


def test_a_shard_listed_twice_is_refused_and_a_data_bin_listed_twice_warned(tmp_path, caplog):
    from fairseq_syntax_core.errors import DataBinError

    shard0, shard1 = _shards(tmp_path, (0, 1), num_shards=2)
    with pytest.raises(DataBinError, match=f"^{shard0}: is shard 0 again \\(also {shard0}, data path 1\\)"):
        syntax_task(f"{shard0}:{shard1}:{shard0}")
    copy = tmp_path / "copy0"
    shutil.copytree(shard0, copy)  # another folder, the same shard
    with pytest.raises(DataBinError, match="list each shard once"):
        syntax_task(f"{shard0}:{copy}")
    caplog.set_level(logging.WARNING, logger=TASK_LOGGER)
    data_bin = os.path.join(FIXTURE, "data-bin")
    syntax_task(f"{data_bin}:{data_bin}/")  # not a shard: an upsampling, or a slip
    assert any(f"{data_bin}/ is listed twice in the data paths (also as path 1)" in w for w in _warnings(caplog))


def test_one_shard_alone_warns_when_trained_on_not_when_decoded(tmp_path, caplog):
    (shard0,) = _shards(tmp_path, (0,), num_shards=3)
    caplog.set_level(logging.WARNING, logger=TASK_LOGGER)
    task = syntax_task(str(shard0))
    task.load_dataset("test")  # fairseq-generate on data-bin/shard0: the usual case
    assert not [w for w in _warnings(caplog) if "shards" in w]
    task.load_dataset("train")
    (warning,) = [w for w in _warnings(caplog) if "shards" in w]
    assert f"missing: {tmp_path / 'bin' / 'shard1'}, {tmp_path / 'bin' / 'shard2'}," in warning


def test_shards_whose_paths_do_not_follow_their_ids_are_named_by_id():
    from fairseq_syntax_core.shards import missing_shards

    record = {"shard": {"id": 0, "num_shards": 3}}
    assert "missing: shard 1, shard 2," in missing_shards([("corpus/first", record)])
    assert missing_shards([("bin/shard0/", record)]).count("bin/shard1") == 1
    complete = [(f"s{k}", {"shard": {"id": k, "num_shards": 2}}) for k in (1, 0)]
    assert missing_shards(complete) is None and missing_shards([("bin", {})]) is None


# ------------------------------------------------------------------------- installed commands
@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The fixture's data-bin, a tiny model trained on it by this release, and ``other-bin``: the same
    data-bin with two words of ``dict.en.txt`` swapped."""
    root = tmp_path_factory.mktemp("identity")
    shutil.copytree(os.path.join(FIXTURE, "data-bin"), root / "data-bin")
    shutil.copytree(os.path.join(FIXTURE, "checkpoints"), root / "old")
    shutil.copytree(root / "data-bin", root / "other-bin")
    _swap_two_symbols(root / "other-bin")
    call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
          *TINY, "--max-update", "2", "--save-dir", "ckpt"], cwd=root)
    return root


def _generate(work, data_bin, checkpoint, *extra, expect_ok=True):
    return call([tool("fairseq-generate"), data_bin, "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                 "--path", checkpoint, "--gen-subset", "test", "--beam", "2", "--max-len-b", "5", "--batch-size", "8",
                 *extra], cwd=work, expect_ok=expect_ok)


def _interactive(work, data_bin, *extra, expect_ok=True):
    return call([tool("fairseq-interactive"), data_bin, "--user-dir", "fairseq_syntax", "--task",
                 "syntax_translation", "--path", "ckpt/checkpoint_last.pt", "--source-lang", "en", "--target-lang",
                 "de", "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", f"{data_bin}/bpe.codes",
                 "--beam", "2", "--max-len-b", "5", *extra], cwd=work, stdin="A dog runs.\n", expect_ok=expect_ok)


def _assert_refused(result, work):
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [l for l in result.stderr.splitlines() if REFUSED in l]
    trained, now = _ids_sha(work / "data-bin" / "dict.en.txt"), _ids_sha(work / "other-bin" / "dict.en.txt")
    assert f": error: other-bin: dict.en.txt (symbols by id: sha256 {trained} at training, {now} now) differs {REFUSED}" \
        in line, line
    assert "--allow-other-data-bin" in line and "H-" not in result.stdout


@pytest.mark.slow
def test_generate_refuses_a_data_bin_with_another_dictionary_unless_allowed(work):
    assert REFUSED not in _generate(work, "data-bin", "ckpt/checkpoint_last.pt").stderr  # its own data-bin
    _assert_refused(_generate(work, "other-bin", "ckpt/checkpoint_last.pt", expect_ok=False), work)
    allowed = _generate(work, "other-bin", "ckpt/checkpoint_last.pt", "--allow-other-data-bin")
    assert [l for l in allowed.stderr.splitlines() if REFUSED in l and "going on (--allow-other-data-bin)" in l]
    assert len([l for l in allowed.stdout.splitlines() if l.startswith("H-")]) == 20


@pytest.mark.slow
def test_interactive_refuses_a_data_bin_with_another_dictionary_unless_allowed(work):
    spacy_model()  # the model parses the raw text
    _assert_refused(_interactive(work, "other-bin", expect_ok=False), work)
    allowed = _interactive(work, "other-bin", "--allow-other-data-bin")
    assert REFUSED in allowed.stderr and "H-0" in allowed.stdout


@pytest.mark.slow
@pytest.mark.parametrize("flags, words", [
    ([], "no --tokenizer is given: raw text reaches BPE and the parser split at spaces alone; give --tokenizer moses "
         "--source-lang en --target-lang de"),
    (["--tokenizer", "space"], "--tokenizer space is given: give --tokenizer moses"),
    (["--tokenizer", "moses", "--moses-no-dash-splits"], "drop --moses-no-dash-splits"),
    (["--tokenizer", "moses"], None),  # as the data-bin's text was tokenized
])
def test_raw_text_tokenized_otherwise_than_the_data_bin_is_warned_once(work, flags, words):
    spacy_model()
    result = call([tool("fairseq-interactive"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", "ckpt/checkpoint_last.pt", "--source-lang", "en", "--target-lang",
                   "de", "--bpe", "subword_nmt", "--bpe-codes", "data-bin/bpe.codes", "--beam", "2", "--max-len-b", "5",
                   *flags], cwd=work, stdin="A dog runs.\nA cat sleeps.\n")
    warned = [l for l in result.stderr.splitlines() if "the data-bin's text was tokenized by Moses" in l]
    assert "H-1" in result.stdout
    assert (warned == []) if words is None else (len(warned) == 1 and words in warned[0]), result.stderr[-2000:]


def _with_projection(work, name, rule):
    """A copy of the work data-bin whose syntax.json records another projection rule."""
    if not (work / name).exists():
        shutil.copytree(work / "data-bin", work / name)
        meta = json.loads((work / name / "syntax.json").read_text(encoding="utf-8"))
        meta["projection"]["rule"] = rule
        (work / name / "syntax.json").write_text(json.dumps(meta), encoding="utf-8")
    return name


@pytest.mark.slow
def test_generate_refuses_a_data_bin_of_another_projection_rule_unless_allowed(work):
    chain = _with_projection(work, "chain-bin", "chain")
    result = _generate(work, chain, "ckpt/checkpoint_last.pt", expect_ok=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [l for l in result.stderr.splitlines() if ": error: " in l]
    assert "chain-bin: its projection rule 'chain' (syntax.json) is not the 'first' the checkpoint was trained " \
           "with" in line and "--allow-other-data-bin" in line, line
    allowed = _generate(work, chain, "ckpt/checkpoint_last.pt", "--allow-other-data-bin")
    assert "going on (--allow-other-data-bin)" in allowed.stderr and "H-0" in allowed.stdout


def test_data_paths_of_other_projection_rules_are_refused(work):
    from fairseq_syntax_core.errors import DataBinError

    chain = _with_projection(work, "chain-bin", "chain")
    with pytest.raises(DataBinError, match=r"chain-bin/syntax.json: projection \{'rule': 'chain'"):
        syntax_task(f"{work / 'data-bin'}:{work / chain}")


@pytest.mark.slow
def test_an_old_checkpoint_without_hashes_warns_once(work):
    path = "old/transformer_dep_rel.pt"
    result = _generate(work, "data-bin", f"{path}:{path}")  # an ensemble: two loads, one warning
    assert result.stderr.count(OLD) == 1, result.stderr[-3000:]
    assert REFUSED not in result.stderr
    assert OLD not in _generate(work, "data-bin", "ckpt/checkpoint_last.pt").stderr  # this release's records them


@pytest.mark.slow
def test_fine_tuning_on_another_dictionary_needs_the_flag_and_records_the_new_data_bin(work):
    train = [tool("fairseq-train"), "other-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
             *TINY, "--max-update", "3", "--restore-file", "ckpt/checkpoint_last.pt", "--reset-optimizer",
             "--reset-dataloader", "--reset-meters", "--save-dir", "tuned"]
    refused = call(train, cwd=work, expect_ok=False)
    assert refused.returncode != 0 and "the checkpoint fairseq-train restores (ckpt/checkpoint_last.pt)" in \
        refused.stderr and "--allow-other-data-bin" in refused.stderr, refused.stderr[-3000:]
    assert not os.path.exists(work / "tuned" / "checkpoint_last.pt")
    call(train + ["--allow-other-data-bin"], cwd=work)
    # the fine-tuned checkpoint records other-bin: decoded there without a word, refused on data-bin
    assert REFUSED not in _generate(work, "other-bin", "tuned/checkpoint_last.pt").stderr
    assert REFUSED in _generate(work, "data-bin", "tuned/checkpoint_last.pt", expect_ok=False).stderr
    # resuming on the same data-bin (tuned/checkpoint_last.pt, no --restore-file) needs no flag
    call([tool("fairseq-train"), "other-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
          *TINY, "--max-update", "4", "--save-dir", "tuned"], cwd=work)


@pytest.fixture(scope="module")
def both_sides(tmp_path_factory):
    """The 0.2.0 fixture's en-fr data-bin (both sides parsed, joined dictionary) and a tiny en -> fr model
    trained on it by this release (its provenance records the direction)."""
    root = tmp_path_factory.mktemp("direction")
    release = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_2")
    shutil.copytree(os.path.join(release, "data-bin"), root / "data-bin")
    shutil.copytree(os.path.join(release, "checkpoints"), root / "old")
    call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
          *TINY, "--max-update", "1", "--save-dir", "ckpt", "--valid-subset", "test"], cwd=root)
    return root


@pytest.mark.slow
def test_a_checkpoint_decoded_in_the_other_direction_is_refused_unless_allowed(both_sides):
    # a joined dictionary and both sides parsed: fr -> en reads without any other error, and translates nonsense
    argv = [tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
            "--path", "ckpt/checkpoint_last.pt", "--gen-subset", "test", "--beam", "2", "--max-len-b", "5",
            "--batch-size", "8", "--source-lang", "fr", "--target-lang", "en"]
    refused = call(argv, cwd=both_sides, expect_ok=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    (line,) = [l for l in refused.stderr.splitlines() if ": error: " in l]
    assert "data-bin: the checkpoint translates en -> fr, not fr -> en as asked" in line and \
        "--allow-other-data-bin" in line, line
    allowed = call(argv + ["--allow-other-data-bin"], cwd=both_sides)
    assert "going on (--allow-other-data-bin)" in allowed.stderr and "H-0" in allowed.stdout
    assert "translates" not in call(argv[:-4], cwd=both_sides).stderr  # its own direction


@pytest.mark.slow
def test_an_earlier_releases_checkpoint_decoded_against_the_data_bins_direction_is_warned(both_sides):
    result = call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", "old/tree2seq.pt", "--gen-subset", "test", "--beam", "2",
                   "--max-len-b", "5", "--batch-size", "8", "--source-lang", "fr", "--target-lang", "en"],
                  cwd=both_sides)
    assert result.stderr.count("records no direction") == 1 and "made for en -> fr and you decode fr -> en" in \
        result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("flags, words", [
    (["--bpe-separator", "##"], "--bpe-separator ##: the data-bin's pieces end in @@ (its syntax.json)"),
    (["--bpe", "fastbpe"], "--bpe fastbpe: the data-bin's text was segmented by subword-nmt"),
])
def test_raw_text_segmented_otherwise_than_the_data_bin_is_refused_unless_allowed(work, flags, words):
    spacy_model()
    refused = _interactive(work, "data-bin", *flags, expect_ok=False)  # its --bpe subword_nmt, then these
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    (line,) = [l for l in refused.stderr.splitlines() if ": error: " in l]
    assert words in line and "--allow-other-data-bin" in line, line
    allowed = _interactive(work, "data-bin", *flags, "--allow-other-data-bin", expect_ok=False)
    assert "going on (--allow-other-data-bin)" in allowed.stderr and "Traceback" not in allowed.stderr


def test_generate_refuses_a_data_bin_whose_pos_column_is_not_the_one_trained_on(work):
    """Raw text is tagged from syntax.json's pos_column: an edited one fed the model another tagset, exit 0."""
    if not (work / "xpos-bin").exists():
        shutil.copytree(work / "data-bin", work / "xpos-bin")
        meta = json.loads((work / "xpos-bin" / "syntax.json").read_text(encoding="utf-8"))
        meta["pos_column"] = "xpos"
        (work / "xpos-bin" / "syntax.json").write_text(json.dumps(meta), encoding="utf-8")
    result = _generate(work, "xpos-bin", "ckpt/checkpoint_last.pt", expect_ok=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [l for l in result.stderr.splitlines() if ": error: " in l]
    assert "its POS tags are the 'xpos' column (syntax.json's pos_column), the checkpoint was trained on the 'upos'" \
           in line and "--allow-other-data-bin" in line, line


def test_a_text_dictionary_of_a_language_the_checkpoint_was_not_trained_on_is_no_sign_of_an_old_release():
    """An en->de checkpoint on an en-fr data-bin: the direction check refuses it; "made by an earlier release"
    (it records no hash of dict.fr.txt) was a wrong cause, printed first."""
    from fairseq_syntax.data import provenance

    trained = {provenance.DICTIONARIES: {"dict.en.txt": "a" * 64, "dict.de.txt": "b" * 64},
               provenance.DIRECTION: ["en", "de"]}
    now = {provenance.DICTIONARIES: {"dict.en.txt": "a" * 64, "dict.fr.txt": "c" * 64}}
    assert provenance.unchecked(trained, now) is None
    del trained[provenance.DIRECTION]  # an earlier release's checkpoint records no direction: it cannot be told
    assert provenance.unchecked(trained, now) == "records no hash of dict.fr.txt"
