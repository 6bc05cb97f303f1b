"""What another hostile review found: results older than a record's reference digest or training data paired with
newer ones unchecked; fairseq-train resumed with another batching or reset counters; fairseq-interactive
constraints on an empty line or of words outside the dictionary; checkpoint names with a suffix."""

import glob
import gzip
import json
import os

import pytest

from fairseq_syntax_analysis import results as rs

from .helpers import _folder, fake_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_TESTS = os.path.join(ROOT, "..", "shared", "data", "multi30k")
HYPS = ["a man rides a bike", "two dogs play", "a woman reads", "kids swim"] * 5


# ------------------------------------------------------------------ results of two ages
def test_a_table_refuses_to_pair_a_result_without_a_reference_digest_with_one_that_has_it(tmp_path, capsys):
    base, other = fake_result("transformer", 1, HYPS), fake_result("other", 1, HYPS)
    base["tests"]["test_2016_flickr"]["reference_sha256"] = "a" * 64
    assert rs.cli_main(["table", str(_folder(tmp_path, [base, other])), "--baseline", "transformer"]) == 1
    err = capsys.readouterr().err
    assert "other.seed1.json" in err and "records no reference_sha256" in err, err
    assert "cannot tell whether they scored the same references" in err and len(err.strip().splitlines()) == 1
    other["tests"]["test_2016_flickr"]["reference_sha256"] = "a" * 64
    assert rs.cli_main(["table", str(_folder(tmp_path, [base, other], "both")), "--baseline", "transformer"]) == 0


def test_a_table_refuses_a_row_whose_seeds_record_training_data_unevenly(tmp_path, capsys):
    one, two = fake_result("transformer_dep_rel", 1, HYPS), fake_result("transformer_dep_rel", 2, HYPS)
    two["training_data"] = {"dictionaries_sha256": {"dict.en.txt": "a" * 64}, "bpe_codes_sha256": None,
                            "perturbation": None}
    assert rs.cli_main(["table", str(_folder(tmp_path, [one, two])), "--baseline", "transformer_dep_rel"]) == 1
    err = capsys.readouterr().err
    assert "seed 1 and records no training_data" in err and "seed2.json" in err, err
    one["training_data"] = two["training_data"]
    assert rs.cli_main(["table", str(_folder(tmp_path, [one, two], "both")), "--baseline",
                        "transformer_dep_rel"]) == 0


def test_an_evaluation_with_a_digest_is_not_the_reference_of_one_without():
    assert not rs.same_reference({"reference": "raw/a.fr", "sentences": 5, "reference_sha256": "a" * 64},
                                 {"reference": "raw/a.fr", "sentences": 5})


COMMITTED = sorted(p for p in glob.glob(os.path.join(ROOT, "examples", "*", "results", "*", "*.json"))
                   if json.load(open(p, encoding="utf-8")).get("format", "").startswith("fairseq-syntax-result"))


def test_every_committed_result_records_the_digest_of_its_references():
    assert COMMITTED
    for path in COMMITTED:
        for name, test in json.load(open(path, encoding="utf-8"))["tests"].items():
            assert len(test.get("reference_sha256", "")) == 64, (path, name)


@pytest.mark.skipif(not os.path.isdir(SHARED_TESTS), reason="needs ../shared/data/multi30k")
def test_the_committed_digests_are_those_of_the_multi30k_references(tmp_path):
    """Each digest is that of the lines of a Multi30k reference whose sentence count the result has."""
    from fairseq_syntax_core.fileio import lines_sha256, read_lines

    references = {}
    for lang in ("de", "fr"):
        (tmp_path / lang).write_bytes(gzip.open(os.path.join(SHARED_TESTS, f"test_2016_flickr.{lang}.gz")).read())
        lines = read_lines(str(tmp_path / lang))
        references[lines_sha256(lines)] = len(lines)
    for path in COMMITTED:
        for name, test in json.load(open(path, encoding="utf-8"))["tests"].items():
            assert references.get(test["reference_sha256"]) == test["sentences"], (path, name)


def test_one_reference_saved_another_way_has_one_digest(tmp_path):
    """CRLF, a byte-order mark or no final line end: the lines scored are the same, and so is the digest."""
    from fairseq_syntax_core.fileio import lines_sha256, read_lines

    saved = {"lf": b"ein Mann .\nzwei Hunde .\n", "crlf": b"ein Mann .\r\nzwei Hunde .\r\n",
             "bom": b"\xef\xbb\xbfein Mann .\nzwei Hunde .\n", "no_end": b"ein Mann .\nzwei Hunde ."}
    digests = set()
    for name, data in saved.items():
        (tmp_path / name).write_bytes(data)
        digests.add(lines_sha256(read_lines(str(tmp_path / name))))
    assert len(digests) == 1
    (tmp_path / "other").write_bytes(b"ein Mann .\nzwei Hunde\n")
    assert lines_sha256(read_lines(str(tmp_path / "other"))) not in digests


# ------------------------------------------------------------------ fairseq-train resumed
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "release_0_2")
TINY = ["data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--arch", "transformer",
        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2", "--optimizer", "adam", "--lr", "0.001", "--valid-subset", "test",
        "--save-dir", "ck", "--no-epoch-checkpoints"]


@pytest.fixture
def stopped_mid_epoch(tmp_path):
    """A run stopped after its first batch of 100 tokens (the epoch has several)."""
    import shutil

    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    from .conftest import call, tool

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    call([tool("fairseq-train"), *TINY, "--max-tokens", "100", "--max-update", "1"], cwd=tmp_path)
    state = load_fairseq_checkpoint(str(tmp_path / "ck" / "checkpoint_last.pt"))
    assert state["extra_state"]["train_iterator"]["iterations_in_epoch"] == 1
    return tmp_path


@pytest.mark.parametrize("flags, words", [
    (["--max-tokens", "200"], "batched with --max-tokens 100; this run batches with --max-tokens 200"),
    (["--max-tokens", "100", "--seed", "7"], "batched with --seed 1; this run batches with --seed 7"),
    (["--max-tokens", "100", "--required-batch-size-multiple", "1"], "--required-batch-size-multiple 8"),
])
def test_a_resume_mid_epoch_with_other_batches_is_refused(stopped_mid_epoch, flags, words):
    from .conftest import call, tool
    from .helpers import one_line_error

    result = call([tool("fairseq-train"), *TINY, *flags, "--max-update", "2"], cwd=stopped_mid_epoch,
                  expect_ok=False)
    one_line_error(result, "fairseq-train", "ck/checkpoint_last.pt stopped after 1 batches of epoch 1", words,
                   "fairseq would skip its first 1 batches, not those trained")


def test_a_resume_mid_epoch_with_the_same_batches_or_a_reset_dataloader_goes_on(stopped_mid_epoch):
    from .conftest import call, tool

    call([tool("fairseq-train"), *TINY, "--max-tokens", "200", "--max-update", "2", "--reset-dataloader"],
         cwd=stopped_mid_epoch)
    call([tool("fairseq-train"), *TINY, "--max-tokens", "200", "--max-update", "3", "--update-freq", "2"],
         cwd=stopped_mid_epoch)  # --update-freq groups the same batches


def test_a_reset_optimizer_is_warned_and_record_refuses_the_run(stopped_mid_epoch, capsys):
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    from .conftest import call, tool

    result = call([tool("fairseq-train"), *TINY, "--max-tokens", "100", "--max-update", "3", "--reset-optimizer"],
                  cwd=stopped_mid_epoch)
    assert "--reset-optimizer: ck/checkpoint_last.pt was at update 1; this run counts its updates from 0" in \
        result.stderr + result.stdout
    state = load_fairseq_checkpoint(str(stopped_mid_epoch / "ck" / "checkpoint_last.pt"))
    assert state["task_state"]["update_restarts"] == [1]
    assert [h["num_updates"] for h in state["optimizer_history"]] == [1, 3]  # the counts alone look like a resume
    call([tool("fairseq-train"), *TINY, "--max-tokens", "100", "--max-update", "4"], cwd=stopped_mid_epoch)
    state = load_fairseq_checkpoint(str(stopped_mid_epoch / "ck" / "checkpoint_last.pt"))
    assert state["task_state"]["update_restarts"] == [1]  # carried by later resumes
    from fairseq_syntax_core.errors import InputError

    with pytest.raises(InputError, match="counted 1 updates, then again from 0: a resume with --reset-optimizer"):
        rs.checkpoint_facts(str(stopped_mid_epoch / "ck"))


# ------------------------------------------------------------------ fairseq-interactive --constraints
@pytest.mark.parametrize("stdin, words", [
    ("a man is walking .\tun\n\tun\n", "input line 2: 1 constraint(s) after the tab and no source text before it"),
    ("a man is walking .\tzzqqxx\n", "input line 1: constraint 1 holds a word the target dictionary lacks"),
    ("a man is walking .\tun\t\n", "input line 1: constraint 2 is empty"),
])
def test_interactive_refuses_constraints_it_would_drop_or_force_as_unk(tmp_path, stdin, words):
    from .conftest import call, tool
    from .helpers import one_line_error

    checkpoint = os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt")
    result = call([tool("fairseq-interactive"), os.path.join(FIXTURE, "data-bin"), "--user-dir", "fairseq_syntax",
                   "--task", "syntax_translation", "--path", checkpoint, "--constraints"], cwd=tmp_path,
                  stdin=stdin, expect_ok=False)
    one_line_error(result, "fairseq-interactive", words)


def test_interactive_translates_with_constraints_of_known_words(tmp_path):
    from .conftest import call, tool

    checkpoint = os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt")
    result = call([tool("fairseq-interactive"), os.path.join(FIXTURE, "data-bin"), "--user-dir", "fairseq_syntax",
                   "--task", "syntax_translation", "--path", checkpoint, "--constraints"], cwd=tmp_path,
                  stdin="a man is walking .\tbâtiment\n")
    hypothesis = next(line for line in result.stdout.splitlines() if line.startswith("H-0"))
    assert "bâtiment" in hypothesis.split("\t")[2].split()


# ------------------------------------------------------------------ --checkpoint-suffix and fairseq's pruning
def test_a_new_run_with_a_suffix_refuses_only_the_files_fairseq_would_prune(tmp_path):
    import shutil

    from .conftest import call, tool
    from .helpers import one_line_error

    shutil.copytree(os.path.join(FIXTURE, "data-bin"), tmp_path / "data-bin")
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "checkpoint_x_1_3.pt").write_text("mine\n")  # fairseq's pattern does not match it
    keep = [*TINY, "--max-tokens", "500", "--max-update", "1", "--save-interval-updates", "1",
            "--keep-interval-updates", "1", "--checkpoint-suffix", "_x"]
    call([tool("fairseq-train"), *keep], cwd=tmp_path)
    assert (tmp_path / "ck" / "checkpoint_x_1_3.pt").read_text() == "mine\n"
    shutil.rmtree(tmp_path / "ck")
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "checkpoint_1_3_x.pt").write_text("mine\n")  # fairseq would delete this one
    result = call([tool("fairseq-train"), *keep], cwd=tmp_path, expect_ok=False)
    one_line_error(result, "fairseq-train", "--save-dir ck holds checkpoint_1_3_x.pt and no checkpoint_last_x.pt")
    assert (tmp_path / "ck" / "checkpoint_1_3_x.pt").read_text() == "mine\n"


@pytest.mark.parametrize("flags", [["--checkpoint-suffix", ".v("], ["--keep-best-checkpoints", "1",
                                                                    "--best-checkpoint-metric", "a.b"]])
def test_a_suffix_or_metric_fairseq_would_read_as_a_regular_expression_is_refused(tmp_path, flags):
    from .conftest import call, tool
    from .helpers import one_line_error

    result = call([tool("fairseq-train"), *TINY, "--max-tokens", "500", "--max-update", "1",
                   "--keep-last-epochs", "1", *flags], cwd=tmp_path, expect_ok=False)
    one_line_error(result, "fairseq-train", "fairseq finds the checkpoints to delete with a regular expression")


# ------------------------------------------------------------------ twenty-third pass: the checkpoint lifecycle
DATA = os.path.join(FIXTURE, "data-bin")
GENERATE = ["--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--gen-subset", "test", "--beam", "2"]


def _edited(folder, edit, name="edited.pt"):
    """The release fixture's dep_rel checkpoint with ``edit(state)`` applied, saved as ``folder/name``."""
    import torch

    from fairseq_syntax_core.checkpoint_loader import load_checkpoint

    from .helpers import RELEASE_CHECKPOINT

    state = load_checkpoint(RELEASE_CHECKPOINT)
    edit(state)
    torch.save(state, os.path.join(str(folder), name))
    return os.path.join(str(folder), name)


def test_a_failed_copy_to_checkpoint_last_leaves_the_earlier_one_whole(tmp_path, monkeypatch):
    import errno
    import shutil

    import fairseq_syntax  # noqa: F401 - installs the wrappers
    from fairseq import checkpoint_utils

    (tmp_path / "checkpoint3.pt").write_bytes(b"new" * 1000)
    (tmp_path / "checkpoint_last.pt").write_bytes(b"old checkpoint")

    def half_copy(src, dst):
        with open(dst, "wb") as handle:
            handle.write(b"ne")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "copyfile", half_copy)
    with pytest.raises(OSError) as raised:
        checkpoint_utils.PathManager.copy(str(tmp_path / "checkpoint3.pt"), str(tmp_path / "checkpoint_last.pt"),
                                          overwrite=True)
    assert (raised.value.filename, raised.value.filename2) == (str(tmp_path / "checkpoint3.pt"),
                                                               str(tmp_path / "checkpoint_last.pt"))
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == b"old checkpoint"
    assert sorted(os.listdir(tmp_path)) == ["checkpoint3.pt", "checkpoint_last.pt"]


def test_a_failed_checkpoint_save_leaves_no_partial_file(tmp_path, monkeypatch):
    import errno

    import fairseq_syntax  # noqa: F401 - installs the wrappers
    from fairseq import checkpoint_utils

    def half_save(obj, handle):
        handle.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_utils, "_torch_persistent_save", half_save)
    with pytest.raises(OSError, match="No space left on device") as raised:
        checkpoint_utils.torch_persistent_save({"x": 1}, str(tmp_path / "checkpoint2.pt"))
    assert raised.value.filename == str(tmp_path / "checkpoint2.pt")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("flags, words", [
    (["--best-checkpoint-metric", "ppl"], "kept its best checkpoint by --best-checkpoint-metric loss, and fairseq "
                                          "would compare that best value with ppl"),
    (["--lr-scheduler", "reduce_lr_on_plateau"], "was trained with --lr-scheduler fixed, and fairseq would load its "
                                                 "state into reduce_lr_on_plateau"),
])
def test_a_resume_that_would_misread_the_carried_state_is_refused(stopped_mid_epoch, flags, words):
    from .conftest import call, tool
    from .helpers import one_line_error

    result = call([tool("fairseq-train"), *TINY, "--max-tokens", "100", "--max-update", "3", *flags],
                  cwd=stopped_mid_epoch, expect_ok=False)
    one_line_error(result, "fairseq-train", "ck/checkpoint_last.pt", words)
    fixes = {"--best-checkpoint-metric": "--reset-meters", "--lr-scheduler": "--reset-lr-scheduler"}
    call([tool("fairseq-train"), *TINY, "--max-tokens", "100", "--max-update", "3", *flags, fixes[flags[0]]],
         cwd=stopped_mid_epoch)


def test_finetune_from_model_on_a_run_that_resumes_is_said(stopped_mid_epoch):
    from .conftest import call, tool

    result = call([tool("fairseq-train"), *TINY, "--max-tokens", "100", "--max-update", "2",
                   "--finetune-from-model", os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt")],
                  cwd=stopped_mid_epoch)
    assert "ck/checkpoint_last.pt exists, so fairseq resumes that run and does not read the model" in \
        result.stderr + result.stdout


def test_record_reads_the_checkpoints_of_the_suffix_given(stopped_mid_epoch):
    from fairseq_syntax_core.errors import InputError

    folder = stopped_mid_epoch / "ck"
    for which in ("last", "best"):
        os.rename(folder / f"checkpoint_{which}.pt", folder / f"checkpoint_{which}_x.pt")
    with pytest.raises(InputError, match=r"checkpoint_last.pt: not found \(it holds 'checkpoint_last_x.pt': give "):
        rs.checkpoint_facts(str(folder))
    assert rs.checkpoint_facts(str(folder), "_x")["last_updates"] == 1
    decoded = {"checkpoint": str(folder / "checkpoint_best_x.pt")}
    assert rs._other_suffix(decoded, str(folder), "") == str(folder / "checkpoint_best_x.pt")
    assert rs._other_suffix(decoded, str(folder), "_x") is None


def _damage_provenance(state):
    state["cfg"]["model"].syntax_provenance = None
    state["task_state"]["syntax_provenance"] = "{bad"


@pytest.mark.parametrize("edit, words", [
    (_damage_provenance, "its stored syntax_provenance (cfg.model, task_state) is not a record of the data"),
    (lambda state: setattr(state["cfg"]["model"], "dropout", "0.1"),
     "its stored settings: its stored setting dropout is '0.1', not the number --dropout takes"),
])
def test_generate_refuses_a_checkpoint_whose_stored_records_were_edited(tmp_path, edit, words):
    from .conftest import call, tool
    from .helpers import one_line_error

    path = _edited(tmp_path, edit)
    result = call([tool("fairseq-generate"), DATA, *GENERATE, "--path", path], cwd=tmp_path, expect_ok=False)
    one_line_error(result, "fairseq-generate", "edited.pt", words)


def test_validate_refuses_stored_languages_the_data_bin_does_not_hold(tmp_path):
    from .conftest import call, tool
    from .helpers import one_line_error

    path = _edited(tmp_path, lambda state: state["cfg"]["task"].update(source_lang=5))
    result = call([tool("fairseq-validate"), DATA, "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                   "--path", path, "--valid-subset", "test", "--max-tokens", "2000"], cwd=tmp_path, expect_ok=False)
    one_line_error(result, "fairseq-validate", "--source-lang 5 (given, or stored in", "edited.pt's settings)",
                   "holds en and fr (its syntax.json)")


# ------------------------------------------------------------------ twenty-fourth pass: the stage tools' outputs
@pytest.mark.parametrize("argv, output", [
    (["fairseq-syntax-tokenize", "--lang", "en", "--input", "text.en", "--output"], "out.txt"),
    (["fairseq-syntax-bpe", "--learn", "text.en", "--symbols", "5", "--codes"], "out.txt"),
])
def test_a_stage_tool_replaces_an_existing_file_only_with_overwrite_and_never_a_data_bins(tmp_path, argv, output):
    import shutil

    from .conftest import call, tool
    from .helpers import one_line_error

    (tmp_path / "text.en").write_text("a man is walking .\ntwo dogs play in the snow .\n" * 5, encoding="utf-8")
    (tmp_path / output).write_text("mine\n", encoding="utf-8")
    command = [tool(argv[0]), *argv[1:]]
    result = call([*command, output], cwd=tmp_path, expect_ok=False)
    one_line_error(result, argv[0], f"{output}: {argv[-1]} exists: give --overwrite to replace it")
    assert (tmp_path / output).read_text(encoding="utf-8") == "mine\n"
    call([*command, output, "--overwrite"], cwd=tmp_path)
    assert (tmp_path / output).read_text(encoding="utf-8") != "mine\n"
    shutil.copytree(DATA, tmp_path / "data-bin")
    for inside in ("data-bin/dict.en.txt", "data-bin/new.txt", "data-bin/syntax.json"):
        before = sorted(os.listdir(tmp_path / "data-bin"))
        result = call([*command, inside, "--overwrite"], cwd=tmp_path, expect_ok=False)
        one_line_error(result, argv[0], f"{argv[-1]} is inside the data-bin", "write elsewhere")
        assert sorted(os.listdir(tmp_path / "data-bin")) == before
    assert (tmp_path / "data-bin" / "dict.en.txt").read_bytes() == open(os.path.join(DATA, "dict.en.txt"), "rb").read()


# ------------------------------------------------------------------ twenty-fourth pass: decoding
def test_hard_alignments_of_tree2seq_are_refused_before_decoding(tmp_path):
    from .conftest import call, tool
    from .helpers import one_line_error

    path = os.path.join(FIXTURE, "checkpoints", "tree2seq.pt")
    result = call([tool("fairseq-generate"), DATA, *GENERATE, "--path", path, "--print-alignment"], cwd=tmp_path,
                  expect_ok=False)
    one_line_error(result, "fairseq-generate", "--print-alignment hard: tree2seq attends over phrases as well as words")
    call([tool("fairseq-generate"), DATA, *GENERATE, "--path", path, "--print-alignment", "soft"], cwd=tmp_path)


@pytest.mark.parametrize("kwargs, words", [
    ({"prefix_size": 1}, "prefix_size=1: the hub has no reference to take a prefix from"),
    ({"score_reference": True}, "score_reference: the hub translates sentences and has no reference to score"),
    ({"constraints": "ordered"}, "constraints: the hub passes no constraints to the search"),
    ({"print_alignment": True}, "print_alignment=True: expected 'hard' or 'soft'"),
])
def test_the_hub_refuses_generation_keywords_it_has_no_use_for(kwargs, words):
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_syntax  # noqa: F401
    from fairseq_syntax_core.errors import UsageError

    hub = ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
        os.path.join(FIXTURE, "checkpoints"), checkpoint_file="transformer_dep_rel.pt", data_name_or_path=DATA)
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        hub.translate(["a man is walking ."], **kwargs)


def test_interactive_refuses_constraints_longer_than_the_longest_translation(tmp_path):
    from .conftest import call, tool
    from .helpers import one_line_error

    checkpoint = os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt")
    result = call([tool("fairseq-interactive"), DATA, "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                   "--path", checkpoint, "--constraints", "--max-len-b", "10"], cwd=tmp_path,
                  stdin="a man .\tun\na dog runs .\tun homme un homme un homme un homme un homme un homme\n",
                  expect_ok=False)
    one_line_error(result, "fairseq-interactive", "input line 2: constraints of 12 tokens do not fit the longest "
                   "translation of 10 tokens")


def test_a_run_restored_onto_parses_perturbed_otherwise_is_refused(stopped_mid_epoch):
    from .conftest import call, tool
    from .helpers import one_line_error

    call([tool("fairseq-syntax-perturb"), "data-bin", "--destdir", "p05", "--p", "0.5", "--seed", "1"],
         cwd=stopped_mid_epoch)
    argv = [tool("fairseq-train"), "p05", *TINY[1:], "--max-tokens", "100", "--max-update", "2", "--reset-dataloader"]
    result = call(argv, cwd=stopped_mid_epoch, expect_ok=False)
    one_line_error(result, "fairseq-train", "ck/checkpoint_last.pt trained on clean parses, and this data-bin has "
                   "parses perturbed with p = 0.5")
    call(argv + ["--allow-other-data-bin"], cwd=stopped_mid_epoch)


# ------------------------------------------------------------------ twenty-fifth pass
@pytest.mark.parametrize("flags, words", [
    (["--weight-decay", "0.5"], "was trained with --weight-decay 0.0, and fairseq restores the optimizer's state with "
                                "it, not this run's 0.5"),
    (["--update-ordered-indices-seed"], "batched with --update-ordered-indices-seed False; this run batches with "
                                        "--update-ordered-indices-seed True"),
    (["--batch-size", "4"], "resume without --batch-size (or --reset-dataloader"),
])
def test_a_resume_with_settings_fairseq_would_not_apply_is_refused(stopped_mid_epoch, flags, words):
    from .conftest import call, tool
    from .helpers import one_line_error

    result = call([tool("fairseq-train"), *TINY, "--max-tokens", "100", "--max-update", "3", *flags],
                  cwd=stopped_mid_epoch, expect_ok=False)
    one_line_error(result, "fairseq-train", "ck/checkpoint_last.pt", words)


def test_a_failed_write_logs_no_traceback_of_fairseqs(tmp_path, monkeypatch, caplog):
    import fairseq_syntax  # noqa: F401 - installs the wrappers
    from fairseq import checkpoint_utils

    def full(obj, handle):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    monkeypatch.setattr(checkpoint_utils.torch, "save", full)
    monkeypatch.setattr(checkpoint_utils.time, "sleep", lambda seconds: None)
    with pytest.raises(OSError, match="is the disk full"):
        checkpoint_utils.torch_persistent_save({"x": 1}, str(tmp_path / "checkpoint1.pt"))
    assert not [r for r in caplog.records if str(r.msg).startswith("Traceback")]
    assert os.listdir(tmp_path) == []


def test_record_refuses_a_run_started_from_another_models_weights(stopped_mid_epoch):
    from fairseq_syntax_core.errors import InputError

    from .conftest import call, tool

    call([tool("fairseq-train"), *TINY[:-3], "--save-dir", "ft", "--no-epoch-checkpoints", "--max-tokens", "100",
          "--max-update", "2", "--finetune-from-model", "ck/checkpoint_last.pt"], cwd=stopped_mid_epoch)
    with pytest.raises(InputError, match="records --finetune-from-model 'ck/checkpoint_last.pt': its run started"):
        rs.checkpoint_facts(str(stopped_mid_epoch / "ft"))


@pytest.mark.parametrize("path", ["ck/\x00/checkpoint_best.pt", "ck/\ud800/checkpoint_best.pt"])
def test_record_refuses_a_decoded_checkpoint_that_is_no_path(tmp_path, path):
    from fairseq_syntax_core.errors import InputError

    with pytest.raises(InputError, match="is recorded as the decoded checkpoint but is no path"):
        rs._other_suffix({"checkpoint": path}, str(tmp_path), "")


# ------------------------------------------------------------------ twenty-sixth pass: scale-out
def test_a_resume_mid_epoch_on_other_data_paths_is_refused(stopped_mid_epoch):
    import shutil

    from .conftest import call, tool
    from .helpers import one_line_error

    shutil.copytree(stopped_mid_epoch / "data-bin", stopped_mid_epoch / "moved")
    result = call([tool("fairseq-train"), "moved", *TINY[1:], "--max-tokens", "100", "--max-update", "3"],
                  cwd=stopped_mid_epoch, expect_ok=False)
    one_line_error(result, "fairseq-train", "batched with the data path data-bin; this run batches with the data path "
                   "moved", "resume with the data path data-bin")
    call([tool("fairseq-train"), "./data-bin/", *TINY[1:], "--max-tokens", "100", "--max-update", "2"],
         cwd=stopped_mid_epoch)  # the same folder, written otherwise


def test_data_paths_perturbed_otherwise_are_refused(tmp_path):
    import shutil

    from .conftest import call, tool
    from .helpers import one_line_error

    shutil.copytree(DATA, tmp_path / "data-bin")
    call([tool("fairseq-syntax-perturb"), "data-bin", "--destdir", "p05", "--p", "0.5", "--seed", "1"], cwd=tmp_path)
    result = call([tool("fairseq-train"), "data-bin:p05", *TINY[1:], "--max-tokens", "500", "--max-update", "1"],
                  cwd=tmp_path, expect_ok=False)
    one_line_error(result, "fairseq-train", "p05/syntax.json: records the parse perturbation", "the first data path None",
                   "epochs would alternate parses")


def test_cluster_check_only_refuses_options_it_would_not_read(tmp_path):
    from .conftest import call, tool

    result = call([tool("fairseq-syntax-preprocess-cluster"), "--num-shards", "2", "--destdir", "shards",
                   "--check-only", "--trainpref", "x", "--no-such-option", "7"], cwd=tmp_path, expect_ok=False)
    assert result.returncode == 2
    assert "--check-only checks the shards against their own records and takes no fairseq-syntax-preprocess " \
           "options: --trainpref x --no-such-option 7" in result.stderr


def test_ranks_started_with_other_settings_are_refused(tmp_path):
    import shutil
    import subprocess

    from .conftest import tool

    shutil.copytree(DATA, tmp_path / "data-bin")
    common = [tool("fairseq-train"), *TINY, "--max-tokens", "400", "--max-update", "2", "--cpu",
              "--distributed-world-size", "2", "--distributed-no-spawn", "--distributed-backend", "gloo",
              "--distributed-init-method", f"tcp://127.0.0.1:{_free_port()}", "--ddp-backend", "legacy_ddp",
              "--disable-validation"]
    env = dict(os.environ, PYTHONPATH="", OMP_NUM_THREADS="1")
    ranks = [subprocess.Popen(common + ["--distributed-rank", str(rank), "--lr", lr], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank, lr in ((0, "0.001"), (1, "0.01"))]
    outputs = [rank.communicate(timeout=300) for rank in ranks]
    for rank, (_, err) in zip(ranks, outputs):
        assert rank.returncode == 1, err[-2000:]
        assert "rank 1 was started with --lr [0.01], rank 0 with [0.001] (lr_scheduler.lr): every rank must" in err


@pytest.mark.parametrize("flag", ["--encoder-layers-to-keep", "--decoder-layers-to-keep"])
def test_layers_to_keep_fairseq_cannot_build_is_refused_at_start(tmp_path, flag):
    from .conftest import call, tool
    from .helpers import one_line_error

    result = call([tool("fairseq-train"), DATA, *TINY[1:], "--max-tokens", "500", "--max-update", "1", flag, "0"],
                  cwd=tmp_path, expect_ok=False)
    one_line_error(result, "fairseq-train", f"{flag}: fairseq cannot build a model with it here")
    assert not (tmp_path / "ck").exists()


# ------------------------------------------------------------------ twenty-seventh pass
def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _two_ranks(folder, port, extra0=(), extra1=(), data1="data-bin"):
    import subprocess

    from .conftest import tool

    port = _free_port()  # the port given is only a label: a fixed one may still be held by an earlier run
    common = [*TINY[1:], "--max-tokens", "200", "--cpu", "--distributed-world-size", "2", "--distributed-no-spawn",
              "--distributed-backend", "gloo", "--distributed-init-method", f"tcp://127.0.0.1:{port}",
              "--ddp-backend", "legacy_ddp", "--disable-validation", "--num-workers", "0"]
    env = dict(os.environ, PYTHONPATH="", OMP_NUM_THREADS="1")
    ranks = [subprocess.Popen([tool("fairseq-train"), data, *common, "--distributed-rank", str(rank), *extra],
                              cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank, data, extra in ((0, "data-bin", extra0), (1, data1, extra1))]
    return [(rank.communicate(timeout=300)[1], rank.returncode) for rank in ranks]


def test_a_two_rank_run_resumes_and_ranks_may_name_the_data_bin_otherwise(tmp_path):
    import shutil

    shutil.copytree(DATA, tmp_path / "data-bin")
    os.symlink("data-bin", tmp_path / "same")
    for port, updates, data1 in ((29761, "2", "data-bin"), (29762, "4", str(tmp_path / "same"))):
        for err, code in _two_ranks(tmp_path, port, ["--max-update", updates],
                                    ["--max-update", updates, "--eval-bleu-print-samples"], data1):
            assert code == 0, err[-3000:]
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    state = load_fairseq_checkpoint(str(tmp_path / "ck" / "checkpoint_last.pt"))
    assert state["optimizer_history"][-1]["num_updates"] == 4


def test_ranks_that_resume_differently_are_refused(tmp_path):
    import shutil

    shutil.copytree(DATA, tmp_path / "data-bin")
    for err, code in _two_ranks(tmp_path, 29763, ["--max-update", "2"], ["--max-update", "2"]):
        assert code == 0, err[-3000:]
    for err, code in _two_ranks(tmp_path, 29764, ["--max-update", "4"], ["--max-update", "4", "--save-dir", "x"]):
        assert code == 1, err[-3000:]
        assert "rank 1 starts a new run, rank 0 resumes a checkpoint at update 2: every rank must resume" in err, \
            err[-3000:]


@pytest.mark.parametrize("command, flags, words", [
    ("fairseq-train", ["--optimizer", "sgd", "--momentum", "nan"], "--momentum nan: expected a finite momentum"),
    ("fairseq-train", ["--optimizer", "nag", "--momentum", "-1"], "--momentum -1: expected a finite momentum"),
    ("fairseq-train", ["--optimizer", "adafactor", "--adafactor-eps", "(1e-30,nan)"], "--adafactor-eps (1e-30,nan)"),
    ("fairseq-train", ["--load-alignments"], "--load-alignments: the syntax_translation task reads no alignment"),
    ("fairseq-train", ["--fp16"], "--fp16: half precision needs a CUDA GPU"),
    ("fairseq-generate", ["--diverse-beam-groups", "2", "--beam", "4"], "--diverse-beam-groups 2: fairseq-generate's"),
    ("fairseq-generate", ["--diverse-beam-groups", "0"], "--diverse-beam-groups 0: expected -1 (off"),
    ("fairseq-generate", ["--diversity-rate", "-0.5"], "--diversity-rate -0.5: expected -1 (off"),
    ("fairseq-interactive", ["--buffer-size", "-4"], "--buffer-size -4: expected a number of lines >= 1"),
])
def test_fairseq_options_it_would_misread_are_refused(tmp_path, command, flags, words):
    from .conftest import call, tool
    from .helpers import one_line_error

    if command == "fairseq-train":
        argv = [tool(command), DATA, *TINY[1:], "--max-tokens", "500", "--max-update", "1", *flags]
    else:
        argv = [tool(command), DATA, *GENERATE[:4], "--path", os.path.join(FIXTURE, "checkpoints",
                                                                          "transformer_dep_rel.pt"), *flags]
    result = call(argv, cwd=tmp_path, stdin="a man .\n", expect_ok=False)
    one_line_error(result, command, words)
