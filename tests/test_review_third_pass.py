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
        "format": "fairseq-syntax-result/1", "model": "m", "seed": 1, "stopped": "c", "updates": 1, "max_update": 1,
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


# ------------------------------------------------------------------ checkpoints and identity (third pass)

RELEASE_0_2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_2")


@pytest.fixture
def release(tmp_path):
    """The 0.2.0 fixture (a data-bin, tiny checkpoints) copied outside the checkout."""
    shutil.copytree(RELEASE_0_2, tmp_path / "r", ignore=shutil.ignore_patterns("make.sh"))
    return tmp_path / "r"


def _forged(release, edit, name="forged.pt", source="transformer_dep_rel"):
    import torch

    from fairseq_syntax_core.checkpoint_loader import load_checkpoint

    state = load_checkpoint(str(release / "checkpoints" / f"{source}.pt"))
    edit(state, state["cfg"]["model"])
    torch.save(state, release / name)
    return name


def _generate(release, path, *extra):
    from .conftest import call, tool

    return call([tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                 "syntax_translation", "--path", path, "--gen-subset", "test", "--beam", "2", "--max-len-b", "5",
                 "--batch-size", "8", *extra], cwd=str(release), expect_ok=False)


def _refused_in_one_line(result, *words):
    err = result.stderr
    assert result.returncode != 0 and "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "\x1b" not in err, err[-3000:]
    assert all(w in errors[0] for w in words), errors[0]
    return errors[0]


@pytest.mark.slow
@pytest.mark.parametrize("edit, words", [
    (lambda s, m: (setattr(m, "encoder_embed_dim", 2 ** 20), setattr(m, "decoder_embed_dim", 2 ** 20)),
     ("encoder_embed_dim", "squared")),
    (lambda s, m: setattr(m, "max_source_positions", 1e13), ("max_source_positions", "whole number")),
])
def test_forged_sizes_are_refused_before_fairseq_builds_the_model(release, edit, words):
    _refused_in_one_line(_generate(release, _forged(release, edit)), "forged.pt", *words)


@pytest.mark.slow
def test_model_overrides_that_build_beyond_any_model_are_refused(release):
    result = _generate(release, "checkpoints/transformer_dep_rel.pt", "--model-overrides",
                       "{'max_source_positions': 10000000000000}")
    _refused_in_one_line(result, "transformer_dep_rel.pt", "--model-overrides")


@pytest.mark.slow
@pytest.mark.parametrize("edit, words", [
    (lambda s, m: s["model"].__setitem__("../../etc/passwd\x1b[31m", __import__("torch").zeros(1)),
     ("forged.pt: ", "weights do not fit", "unexpected", "\\x1b")),
    (lambda s, m: s["model"].pop("decoder.layers.0.fc1.weight"), ("forged.pt: ", "weights do not fit", "1 missing")),
    (lambda s, m: s["model"].__setitem__("encoder.embed_tokens.weight",
                                         s["model"]["encoder.embed_tokens.weight"].to_sparse()), ("sparse",)),
])
def test_weights_that_do_not_fit_the_model_are_one_line(release, edit, words):
    _refused_in_one_line(_generate(release, _forged(release, edit)), *words)


@pytest.mark.slow
def test_restoring_a_checkpoint_of_another_architecture_names_it_in_one_line(release):
    from .conftest import call, tool

    result = call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                   "--arch", "transformer_rel", "--encoder-layers", "1", "--decoder-layers", "1",
                   "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
                   "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
                   "--optimizer", "adam", "--lr", "0.01", "--max-update", "2", "--max-tokens", "2000",
                   "--save-dir", "ck", "--restore-file", str(release / "checkpoints" / "transformer_gps.pt"),
                   "--no-progress-bar", "--valid-subset", "test"], cwd=str(release), expect_ok=False)
    _refused_in_one_line(result, "transformer_gps.pt", "weights do not fit")


def test_a_checkpoint_saying_it_ran_10_to_the_40_updates_is_refused():
    from fairseq_syntax_core.checkpoint_loader import structure_problem

    import torch

    state = {"model": {"w": torch.zeros(1)}, "cfg": {"model": {}, "task": {}}, "extra_state": {},
             "optimizer_history": [{"num_updates": 10 ** 40}]}
    assert "not a count of updates" in structure_problem(state)
    state["optimizer_history"] = [{"num_updates": -5}]
    assert "not a count of updates" in structure_problem(state)


@pytest.mark.parametrize("hashes", [{}, {"dict.en.txt": None}, "x"])
def test_a_provenance_with_an_empty_or_malformed_hash_table_is_reported_unchecked(hashes):
    from fairseq_syntax.data import provenance

    assert "records no hashes" in provenance.unchecked({"dictionaries_sha256": hashes})
    full = {"dictionaries_sha256": {"dict.en.txt": "a" * 64, "dict.fr.txt": "b" * 64}}
    assert provenance.unchecked({"dictionaries_sha256": {"dict.en.txt": "a" * 64}}, full) == \
        "records no hash of dict.fr.txt"
    assert provenance.unchecked(full, full) is None


@pytest.mark.slow
def test_interactive_without_bpe_for_a_model_of_bpe_pieces_warns(release):
    from .conftest import call, tool

    result = call([tool("fairseq-interactive"), "data-bin", "--user-dir", "fairseq_syntax", "--task",
                   "syntax_translation", "--path", "checkpoints/transformer_dep_rel.pt", "--source-lang", "en",
                   "--target-lang", "fr", "--beam", "2", "--max-len-b", "5", "--tokenizer", "moses"],
                  cwd=str(release), stdin="The bikers are riding quickly .\n")
    assert "no --bpe is given" in result.stderr


# ------------------------------------------------------------------ errors at the edges (third pass)

TINY_TRAIN = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
              "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
              "--decoder-attention-heads", "2", "--max-update", "2", "--max-tokens", "2000", "--save-dir", "ck",
              "--no-progress-bar", "--valid-subset", "test"]


def _train(release, *extra):
    from .conftest import call, tool

    return call([tool("fairseq-train"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
                 *TINY_TRAIN, *extra], cwd=str(release), expect_ok=False)


@pytest.mark.slow
def test_a_fifo_as_checkpoint_is_refused_not_waited_on(release):
    os.mkfifo(release / "fifo")
    _refused_in_one_line(_generate(release, "fifo"), "fifo", "not a regular file")


@pytest.mark.slow
@pytest.mark.parametrize("extra, words", [
    (["--arch", "transformer_nsd", "--criterion", "label_smoothed_cross_entropy_with_nsd", "--optimizer", "adam",
      "--nsd-distance-key", "bogus"], ("--nsd-distance-key", "bogus")),
    (["--arch", "transformer_dep_rel", "--criterion", "label_smoothed_cross_entropy_with_nsd", "--optimizer", "adam",
      "--label-smoothing", "2"], ("--label-smoothing",)),
    (["--arch", "transformer_nsd", "--optimizer", "adam", "--nsd-max-distance", "100000000000"],
     ("--nsd-max-distance", "beyond any model size")),
    (["--arch", "transformer", "--optimizer", "adam", "--encoder-ffn-embed-dim", "100000000000"],
     ("--encoder-ffn-embed-dim", "beyond any model size")),
    (["--arch", "transformer_dep_rel"], ("--optimizer is required",)),
])
def test_training_options_that_fail_late_are_refused_before_training(release, extra, words):
    result = _train(release, *extra)
    _refused_in_one_line(result, *words)
    assert not os.path.exists(release / "ck" / "crash.pt")


@pytest.mark.slow
@pytest.mark.parametrize("extra, words", [(["--beam", "0"], ("--beam 0",)), (["--beam", "-1"], ("--beam -1",)),
                                          (["--max-len-a", "-5", "--max-len-b", "-5"], ("--max-len-a",)),
                                          (["--model-overrides", "{'bogus"], ("--model-overrides",))])
def test_search_settings_that_fail_in_the_generator_are_one_line(release, extra, words):
    _refused_in_one_line(_generate(release, "checkpoints/transformer_dep_rel.pt", *extra), *words)


@pytest.mark.slow
def test_token_ids_outside_the_dictionary_name_the_text_file(release):
    with open(release / "data-bin" / "test.en-fr.en.bin", "r+b") as handle:
        handle.write(b"\xff" * 16)
    _refused_in_one_line(_generate(release, "checkpoints/transformer_dep_rel.pt"), "test.en-fr.en.bin",
                         "outside its dictionary")


@pytest.mark.slow
def test_too_few_open_files_is_one_line_not_an_endless_loop(release):
    import resource
    import subprocess

    from .conftest import tool

    def limit(soft, hard):
        return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    argv = [tool("fairseq-generate"), "data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation",
            "--path", "checkpoints/transformer_dep_rel.pt", "--gen-subset", "test", "--beam", "2", "--max-len-b", "5",
            "--batch-size", "8", "--results-path", "out"]
    env = dict(os.environ, PYTHONPATH="", OMP_NUM_THREADS="1")
    refused = subprocess.run(argv, cwd=str(release), env=env, capture_output=True, text=True, timeout=300,
                             preexec_fn=limit(30, 30))
    _refused_in_one_line(refused, "ulimit -n 30")
    assert not os.path.exists(release / "out" / "generate-test.txt")
    raised = subprocess.run(argv, cwd=str(release), env=env, capture_output=True, text=True, timeout=300,
                            preexec_fn=limit(30, 4096))  # a low soft limit under a high hard one: raised
    assert raised.returncode == 0, raised.stderr[-2000:]


def test_data_bin_files_that_are_folders_are_named_as_such(tmp_path):
    from fairseq_syntax.data.data_bin_checks import check_indexed_dataset, read_metadata

    (tmp_path / "syntax.json").mkdir()
    with pytest.raises(DataBinError, match="not a regular file"):
        read_metadata(str(tmp_path / "syntax.json"))
    (tmp_path / "t.idx").write_bytes(b"")
    (tmp_path / "t.bin").mkdir()
    with pytest.raises(DataBinError, match="t.bin: is not a regular file"):
        check_indexed_dataset(str(tmp_path / "t"))


# ------------------------------------------------------------------ a fourth pass (fresh cases per class)

@pytest.mark.parametrize("value", ["[1]", "7", '"x"'])
def test_a_provenance_that_is_not_an_object_is_marked_damaged_not_a_crash(value):
    """Present but not a record (edited): marked, and refused when the checkpoint keeps no whole copy."""
    from fairseq_syntax.data import provenance

    assert provenance.decode(value) == {provenance.DAMAGED: True}
    whole = {"dictionaries_sha256": {"dict.en.txt": "a" * 64}}
    assert provenance.kept(provenance.decode(value), whole) == whole
    assert provenance.kept(None, provenance.decode(value)) == {provenance.DAMAGED: True}


def test_a_malformed_bpe_codes_hash_is_reported_unchecked_not_compared():
    import json

    from fairseq_syntax.data import provenance

    trained = provenance.decode(json.dumps({"bpe_codes_sha256": "zz", "dictionaries_sha256": {"dict.en.txt": "a" * 64}}))
    assert provenance.differing_files(trained, {"bpe_codes_sha256": "b" * 64}) == []
    assert provenance.unchecked(trained) == "records a bpe_codes_sha256 that is not a SHA-256"


def test_every_error_message_is_one_line_whatever_values_it_holds():
    from fairseq_syntax_core.errors import UsageError
    from fairseq_syntax_core.interrupts import error_message

    message = error_message(UsageError("--splits x\x1b[31mR\nY: the data-bin holds ['test']"))
    assert "\n" not in message and "\x1b" not in message
    assert "\n" not in error_message(FileNotFoundError(2, "No such file", "a\nb\x1b"))


@pytest.mark.parametrize("edit, words", [
    (lambda s: setattr(s["cfg"]["model"], "encoder_layers", 1 << 20), "beyond any model's depth"),
    (lambda s: setattr(s["cfg"]["model"], "encoder_embed_dim", "16"), "is not a number"),
    (lambda s: setattr(s["cfg"]["model"], "syntax_format_version", "3\n4"), "not a format number"),
    (lambda s: s.__setitem__("model", {k: v.to(__import__("torch").complex64) for k, v in s["model"].items()}),
     "not real-valued"),
    (lambda s: s.__setitem__("model", {k: (v * 100).to(__import__("torch").int8) for k, v in s["model"].items()}),
     "not real-valued"),
    (lambda s: s["extra_state"].__setitem__("best", "abc"), "best 'abc' is not a number"),
    (lambda s: s["extra_state"].__setitem__("metrics", {"train": 5}), "metrics"),
    (lambda s: s["extra_state"].__setitem__("previous_training_time", "x"), "previous_training_time"),
    (lambda s: s["extra_state"]["train_iterator"].__setitem__("epoch", 10 ** 15), "epoch"),
    (lambda s: s["extra_state"]["train_iterator"].__setitem__("iterations_in_epoch", 10 ** 15),
     "iterations_in_epoch"),
])
def test_forged_checkpoint_fields_are_refused_naming_the_file(tmp_path, edit, words):
    import torch

    from fairseq_syntax_core.checkpoint_loader import load_checkpoint, load_fairseq_checkpoint
    from fairseq_syntax_core.errors import CheckpointError

    state = load_checkpoint(os.path.join(RELEASE_0_2, "checkpoints", "transformer_gps.pt"))
    state["extra_state"].setdefault("train_iterator", {"epoch": 2, "iterations_in_epoch": 0})
    edit(state)
    torch.save(state, tmp_path / "forged.pt")
    with pytest.raises(CheckpointError) as error:
        load_fairseq_checkpoint(str(tmp_path / "forged.pt"))
    assert "forged.pt" in str(error.value) and words in str(error.value) and "\n" not in str(error.value)


@pytest.mark.slow
@pytest.mark.parametrize("extra, words", [
    (["--arch", "transformer_dep_rel", "--optimizer", "adam", "--update-freq", "0"], ("--update-freq 0", ">= 1")),
    (["--arch", "transformer_dep_rel", "--optimizer", "adam", "--adam-betas", "(0.9,)"], ("--adam-betas (0.9,)", "[0, 1)")),
    (["--arch", "transformer_dep_rel", "--optimizer", "adam", "--dropout", "-0.5"], ("--dropout -0.5", "probability")),
    (["--arch", "transformer", "--optimizer", "adam", "--attention-dropout", "2"], ("--attention-dropout 2.0",)),
    (["--arch", "transformer", "--criterion", "blackout", "--blackout-samples", "10", "--blackout-beta", "500",
      "--optimizer", "adam"], ("--blackout-beta 500",)),
])
def test_fairseq_settings_it_does_not_check_are_one_line(release, extra, words):
    _refused_in_one_line(_train(release, *extra), *words)
    assert not os.path.exists(release / "ck" / "crash.pt")


@pytest.mark.slow
@pytest.mark.parametrize("extra, words", [(["--temperature", "0"], ("--temperature 0",)),
                                          (["--constraints"], ("--constraints: the data-bin's splits carry no",)),
                                          (["--lenpen", "nan"], ("--lenpen nan",))])
def test_generation_settings_fairseq_does_not_check_are_one_line(release, extra, words):
    _refused_in_one_line(_generate(release, "checkpoints/transformer_dep_rel.pt", *extra), *words)


def test_a_length_table_count_beyond_any_corpus_is_refused():
    from fairseq_syntax_core.length_prior import LengthPrior

    prior = LengthPrior({(3, 4): 2, (5, 5): 1}, 100, "en", "fr", ["train"], 3, 0)
    data = prior.to_json()
    data["counts"][0][2] = 10 ** 400
    with pytest.raises(ValueError, match="outside 0..1000000000000000"):
        LengthPrior.from_json(data)


@pytest.mark.slow
@pytest.mark.parametrize("extra, words", [
    (["--arch", "transformer_dep_rel", "--optimizer", "adam", "--required-batch-size-multiple", "0"],
     ("--required-batch-size-multiple 0",)),
    (["--arch", "transformer_dep_rel", "--optimizer", "adam", "--seed", "99999999999999999999"],
     ("stopped on its settings", "Seed must be between")),
])
def test_batching_settings_that_kill_or_crash_fairseq_are_one_line(release, extra, words):
    _refused_in_one_line(_train(release, *extra), *words)
