"""fairseq-syntax-report: results that accumulate, and the table with mean, spread and paired tests per seed."""

import glob
import json
import os
import re
import shlex
import subprocess

import pytest
from sacrebleu.metrics import BLEU

from fairseq_syntax_analysis import results as rs
from fairseq_syntax_analysis.rendering import md_code
from fairseq_syntax_analysis import scoring

from . import fork_server
from .conftest import REPO, SAMPLE, tool
from .helpers import DECODED_RUN, REFS, _folder, decoded_at, fake_result  # noqa: F401


def test_result_says_early_stopped_or_capped():
    # best epoch 7, last epoch 9: two epochs without improvement
    assert fake_result("transformer", 1, REFS, updates=1400, patience=2)["stopped"] == "early-stopped"
    assert fake_result("transformer", 1, REFS, updates=2000, patience=2)["stopped"] == "capped at 2000 updates"


def test_a_run_that_stopped_without_early_stopping_is_not_called_early_stopped():
    # an interrupted run: fewer epochs after the best one than the patience, or no patience known
    assert fake_result("transformer", 1, REFS, updates=1400, patience=5)["stopped"] == "stopped before the cap"
    assert fake_result("transformer", 1, REFS, updates=1400)["stopped"] == "stopped before the cap"


def test_table_has_mean_std_over_seeds_and_per_seed_paired_tests(tmp_path):
    worse = [r.replace("a ", "the ", 1) for r in REFS]
    results = [fake_result("transformer", s, worse) for s in (1, 2)]
    results += [fake_result("transformer_rel", s, REFS) for s in (1, 2)]
    results += [fake_result("transformer_dep_rel", 1, REFS)]
    for r in results:
        (tmp_path / f"{r['model']}.seed{r['seed']}.json").write_text(json.dumps(r), encoding="utf-8")
    (tmp_path / "notes.json").write_text("{}", encoding="utf-8")  # not a result: skipped
    loaded = rs.load_results([str(tmp_path)])
    assert len(loaded) == 5
    table = rs.make_table(loaded, "transformer", [("transformer_dep_rel", "transformer_rel")])
    base_bleu = BLEU().corpus_score(worse, [REFS]).score
    assert f"| `transformer` | 1,2 | capped at 2000 updates (2000/2000 updates) | {base_bleu:.2f} ± 0.00 |" in table
    rel_row = next(line for line in table.splitlines() if line.startswith("| `transformer_rel`"))
    assert "2/2 seeds significantly better" in rel_row
    # identical systems: a zero difference, p = 1, not significant
    assert "`transformer_dep_rel` against `transformer_rel` (same seeds): no significant difference in 1 seed: " \
           "+0.00 (p=1.000)" in table


def test_epochs_are_counted_as_fairseq_logs_them():
    # saved at the end of epoch 6, fairseq's iterator state already names epoch 7 with no iterations in it
    assert rs.epoch_of({"epoch": 7, "iterations_in_epoch": 0}) == 6
    assert rs.epoch_of({"epoch": 16, "iterations_in_epoch": 80}) == 16  # saved in the middle of epoch 16
    assert rs.epoch_of({"epoch": 1, "iterations_in_epoch": 0}) == 1
    assert rs.epoch_of({}) == 0
    assert rs.epoch_of({"epoch": 7}) == 7  # no count of iterations (a streaming iterator): taken as it is


def test_a_damaged_result_is_named(tmp_path):
    (tmp_path / "x.json").write_text('{"format": ', encoding="utf-8")
    with pytest.raises(rs.InputError, match="x.json:1: is not valid JSON .*; expected a JSON result"):
        rs.load_results([str(tmp_path)])


#: the recipes' Transformer flags for the end-to-end tests: a model that trains in seconds
TINY_TRANSFORMER = ("--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 --decoder-embed-dim 32 "
                    "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --encoder-attention-heads 2 "
                    "--decoder-attention-heads 2 --share-all-embeddings")


def _sample_multi30k(tmp_path, target="de"):
    data = tmp_path / "m30k"
    data.mkdir()
    for ours, theirs in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        for lang in ("en", target):
            with open(os.path.join(SAMPLE, f"{ours}.{lang}"), encoding="utf-8") as handle:
                lines = handle.readlines()[:200]
            (data / f"{theirs}.{lang}").write_text("".join(lines), encoding="utf-8")
    return data


def _run_recipe(tmp_path, script, target="de", **env_vars):
    data = _sample_multi30k(tmp_path, target)
    env = dict(os.environ, PYTHONPATH="", SEEDS="1", MAX_UPDATE="6", PATIENCE="2", THREADS="1", WARMUP="2",
               RESULTS=str(tmp_path / "results"), **env_vars)
    # the installed commands, started by fork from a worker that imported torch, fairseq and spaCy once
    env["PATH"] = os.pathsep.join([fork_server.shims(tmp_path / "bin"), os.path.dirname(tool("fairseq-train")),
                                   env["PATH"]])
    cmd = ["bash", os.path.join(REPO, "examples", *script), str(data), str(tmp_path / "run")]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    return data, cmd, env


@pytest.mark.slow
def test_recipe_run_writes_a_result_and_the_table(tmp_path):
    """examples/dep_rel/multi30k.sh end to end on the embedded sample (tiny model, a few updates)."""
    tool("fairseq-syntax-report")
    data, cmd, env = _run_recipe(
        tmp_path, ("dep_rel", "multi30k.sh"), ARCHS="transformer transformer_rel",
        MODEL=TINY_TRANSFORMER)
    results = tmp_path / "results"
    result = json.loads((results / "transformer_rel.seed1.json").read_text(encoding="utf-8"))
    assert result["model"] == "transformer_rel" and result["seed"] == 1 and result["updates"] <= 6
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # the commit training started from, taken by the recipe (--commit)
        assert result["commit"].split("+")[0] == head.stdout.strip()
    test = result["tests"]["test_2016_flickr"]
    n_test = len((data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines())
    assert len(test["statistics"]["BLEU"]) == test["sentences"] == len(test["hypotheses"]) == n_test
    assert test["signatures"]["BLEU"].startswith("nrefs:1|")
    # the best checkpoint's logged validation, the translation's own loss among it (--train-log)
    assert result["best_checkpoint_metric"] == "loss" and result["best_valid"]["num_updates"] == result["best_updates"]
    assert result["best_valid"]["loss"] == pytest.approx(result["best_valid_loss"], abs=1e-3)
    assert 0 < result["best_valid"]["nll_loss"] < result["best_valid"]["loss"]
    assert 0 <= result["train_seconds"] <= result["wall_seconds"]  # training (all invocations) + decoding and scoring
    table = (results / "README.md").read_text(encoding="utf-8")
    assert "| `transformer_rel` | 1 |" in table and "(baseline)" in table
    # a second call skips the finished runs and rebuilds the same table
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0 and "exists: skipped" in again.stdout


@pytest.mark.slow
def test_tree2seq_recipe_compares_against_fairseq_lstm(tmp_path):
    """examples/tree2seq/multi30k.sh: tree2seq and its lstm baseline through the same protocol."""
    tool("fairseq-syntax-report")
    _run_recipe(tmp_path, ("tree2seq", "multi30k.sh"),
                RNN_MODEL="--encoder-embed-dim 16 --encoder-hidden-size 16 --decoder-embed-dim 16 "
                          "--decoder-hidden-size 16 --decoder-out-embed-dim 16 --share-all-embeddings")
    results = tmp_path / "results"
    assert {p.name for p in results.glob("*.json")} == {"lstm.seed1.json", "tree2seq.seed1.json"}
    table = (results / "README.md").read_text(encoding="utf-8")
    assert "| `tree2seq` | 1 |" in table and "vs `lstm`" in table and "`tree2seq` against `lstm`" in table


@pytest.mark.slow
def test_en_fr_recipe_trains_target_side_nsd_against_the_transformer(tmp_path):
    """examples/nsd/multi30k_en_fr.sh: the French target parsed (--target-parser), target-side NSD
    against fairseq's transformer through the same protocol (issue 14's recipe)."""
    from .conftest import french_model

    tool("fairseq-syntax-report")
    french_model()
    data, _, _ = _run_recipe(tmp_path, ("nsd", "multi30k_en_fr.sh"), target="fr", ARCHS="transformer transformer_nsd_both",
                COMPARE="transformer_nsd_both:transformer",
                MODEL=TINY_TRANSFORMER)
    results = tmp_path / "results"
    assert {p.name for p in results.glob("*.json")} == {"transformer.seed1.json", "transformer_nsd_both.seed1.json"}
    both = json.loads((results / "transformer_nsd_both.seed1.json").read_text(encoding="utf-8"))
    n_test = len((data / "test_2016_flickr.fr").read_text(encoding="utf-8").splitlines())
    assert both["tests"]["test_2016_flickr"]["sentences"] == n_test
    metadata = json.loads((tmp_path / "run" / "data-bin" / "syntax.json").read_text(encoding="utf-8"))
    assert "fr" in metadata["parsed_langs"]  # the target was parsed
    # chosen on the translation as it decodes (paper 002's target side), that loss kept in the result
    assert both["best_checkpoint_metric"] == "nll_loss_fed"
    assert both["best_valid"]["nll_loss_fed"] == pytest.approx(both["best_valid_loss"], abs=1e-3)


@pytest.mark.slow
def test_parse_noise_recipe_plots_bleu_against_p(tmp_path):
    """examples/dep_rel/parse_noise.sh on the recipe's checkpoints: the test set decoded under perturbed
    parses, one point per (model, p); the model that reads no parse is the flat control."""
    tool("fairseq-syntax-perturb")
    _, _, env = _run_recipe(
        tmp_path, ("dep_rel", "multi30k.sh"), ARCHS="transformer transformer_dep_rel",
        MODEL=TINY_TRANSFORMER)
    env = dict(env, RUNS="transformer.seed1 transformer_dep_rel.seed1", PS="0 0.4", PLOT_NAME="noise_small")
    cmd = ["bash", os.path.join(REPO, "examples", "dep_rel", "parse_noise.sh"), str(tmp_path / "run")]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    results = tmp_path / "results"
    points = json.loads((results / "noise_small.json").read_text(encoding="utf-8"))
    assert sorted(points) == ["transformer", "transformer_dep_rel"]
    assert [p for p, _ in points["transformer_dep_rel"]] == [0.0, 0.4]
    assert points["transformer"][0][1] == points["transformer"][1][1]  # reads no parse: flat
    assert (results / "noise_small.png").read_bytes()[:4] == b"\x89PNG"
    assert not (results / "parse_noise.png").exists()  # PLOT_NAME keeps another plot in the folder
    noisy = tmp_path / "run" / "noise" / "data-bin.p0.4"
    record = json.loads((noisy / "syntax.json").read_text(encoding="utf-8"))["perturbation"]
    assert record["p"] == 0.4 and record["splits"] == ["test"]
    # a second call reuses the perturbed copy of the same p, seed and scheme
    stamp = (noisy / "syntax.json").stat().st_mtime_ns
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (noisy / "syntax.json").stat().st_mtime_ns == stamp

def test_noise_plot_from_evaluations(tmp_path, capsys):
    paths = []
    for model, p, bleu in (("transformer_rel", 0.0, 30.0), ("transformer_rel", 0.2, 30.0),
                           ("transformer_dep_rel", 0.0, 31.0), ("transformer_dep_rel", 0.2, 29.5)):
        path = tmp_path / f"{model}.{p}.json"
        path.write_text(json.dumps({"systems": [{"name": f"{model}.seed1", "scores": {"BLEU": bleu},
                                                 "decoded": decoded_at(DECODED_RUN, p)}],
                                    "reference": "test.de", "sentences": 10, "perturbation": p}), encoding="utf-8")
        paths.append(f"{model}:{p}={path}")
    plot = tmp_path / "noise.png"
    argv = ["noise", "--plot", str(plot), "--json", str(tmp_path / "noise.json")]
    for spec in paths:
        argv += ["--point", spec]
    assert rs.cli_main(argv) == 0
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "noise.json").read_text())["transformer_dep_rel"] == [[0.0, 31.0], [0.2, 29.5]]
    assert rs.cli_main(["noise", "--plot", str(plot), "--point", "bad"]) == 1
    assert "expected MODEL:P=EVAL_JSON" in capsys.readouterr().err


def test_a_second_result_of_the_same_model_and_seed_is_refused(tmp_path):
    r = fake_result("transformer", 1, REFS)
    (tmp_path / "a.json").write_text(json.dumps(r), encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "copy.json").write_text(json.dumps(r), encoding="utf-8")
    with pytest.raises(rs.InputError, match="is a second result of 'transformer' seed 1"):
        rs.load_results([str(tmp_path)])
    assert len(rs.load_results([str(tmp_path / "sub"), str(tmp_path / "sub")])) == 1  # a folder given twice


def test_record_refuses_an_evaluation_of_several_systems(tmp_path):
    path = tmp_path / "ev.json"
    path.write_text(json.dumps({"sentences": 1, "systems": [{"name": "a", "scores": {}}, {"name": "b", "scores": {}}]}))
    with pytest.raises(rs.InputError, match="evaluates 2 systems"):
        rs.read_evaluation(str(path))


def test_sentences_in_another_order_are_not_paired(tmp_path):
    base, rel = fake_result("transformer", 1, REFS), fake_result("transformer_rel", 1, REFS)
    rel["tests"]["test_2016_flickr"]["statistics"]["BLEU"].insert(0, rel["tests"]["test_2016_flickr"]["statistics"]["BLEU"].pop())
    with pytest.raises(rs.InputError, match="sentence 0 has a reference of .* not in the same order"):
        rs.make_table(rs.load_results([str(_folder(tmp_path, [base, rel]))]), "transformer", [])


def test_results_scored_with_other_settings_are_not_compared(tmp_path):
    base, rel = fake_result("transformer", 1, REFS), fake_result("transformer_rel", 1, REFS)
    rel["tests"]["test_2016_flickr"]["signatures"]["BLEU"] = "nrefs:1|tok:intl|version:1.4.14"
    with pytest.raises(rs.InputError, match="was scored with BLEU 'nrefs:1\\|tok:intl"):
        rs.make_table(rs.load_results([str(_folder(tmp_path, [base, rel]))]), "transformer", [])


def test_seeds_without_a_baseline_run_are_said_untested(tmp_path):
    results = [fake_result("transformer", 1, REFS), fake_result("transformer_rel", 1, REFS),
               fake_result("transformer_rel", 3, REFS)]
    table = rs.make_table(rs.load_results([str(_folder(tmp_path, results))]), "transformer", [])
    assert "no significant difference in 1 seed: +0.00 (p=1.000) (seed 3 without a `transformer` run: not tested)" in table


@pytest.mark.parametrize("damage", [
    lambda r: r.pop("stopped"), lambda r: r.pop("updates"), lambda r: r.update(seed=True),
    lambda r: r["tests"]["test_2016_flickr"].pop("signatures"),
    lambda r: r["tests"]["test_2016_flickr"]["scores"].update(BLEU=float("nan")),
    lambda r: r["tests"]["test_2016_flickr"]["scores"].update(BLEU="37.5"),
    lambda r: r["tests"]["test_2016_flickr"]["statistics"]["BLEU"][0].pop(),
    lambda r: r["tests"]["test_2016_flickr"]["statistics"]["BLEU"][0].__setitem__(0, "x"),
    # rows of another width than the metric's (BLEU 10 numbers, chrF2 18), or negative counts
    lambda r: r["tests"]["test_2016_flickr"]["statistics"].update(BLEU=[row[:3] for row in r["tests"]["test_2016_flickr"]["statistics"]["BLEU"]]),
    lambda r: r["tests"]["test_2016_flickr"]["statistics"].update(chrF2=[row[:5] for row in r["tests"]["test_2016_flickr"]["statistics"]["chrF2"]]),
    lambda r: r["tests"]["test_2016_flickr"]["statistics"].update(BLEU=[row + [0.0, 0.0] for row in r["tests"]["test_2016_flickr"]["statistics"]["BLEU"]]),
    lambda r: r["tests"]["test_2016_flickr"]["statistics"]["BLEU"][0].__setitem__(2, -1.0),
    # a score that its own statistics do not give
    lambda r: r["tests"]["test_2016_flickr"]["scores"].update(BLEU=r["tests"]["test_2016_flickr"]["scores"]["BLEU"] + 5),
])
def test_a_damaged_result_is_one_error_not_a_traceback(tmp_path, damage, capsys):
    r = fake_result("transformer", 1, REFS)
    damage(r)
    folder = _folder(tmp_path, [r])
    assert rs.cli_main(["table", str(folder)]) == 1
    assert "is a damaged fairseq-syntax-result/1 result" in capsys.readouterr().err


def test_deeply_nested_json_and_newer_formats_are_named(tmp_path, capsys):
    folder = _folder(tmp_path, [fake_result("transformer", 1, REFS)])
    newer = dict(fake_result("transformer", 2, REFS), format="fairseq-syntax-result/2")
    (folder / "newer.json").write_text(json.dumps(newer), encoding="utf-8")
    assert len(rs.load_results([str(folder)])) == 1
    assert "newer.json: format 'fairseq-syntax-result/2'" in capsys.readouterr().err
    (folder / "deep.json").write_text("[" * 100000 + "]" * 100000, encoding="utf-8")
    with pytest.raises(rs.InputError, match="deep.json: is JSON nested too deeply to read; expected a JSON result"):
        rs.load_results([str(folder)])


def test_outputs_never_replace_what_the_command_reads(tmp_path, capsys):
    folder = _folder(tmp_path, [fake_result("transformer", 1, REFS)])
    notes = folder / "parse_noise.json"
    notes.write_text("{}", encoding="utf-8")
    assert rs.cli_main(["table", str(folder), "--markdown", str(notes)]) == 1
    assert "would replace a .json file" in capsys.readouterr().err and notes.read_text() == "{}"
    ckpt = tmp_path / "ck"
    ckpt.mkdir()
    (ckpt / "checkpoint_best.pt").write_bytes(b"weights")
    ev = tmp_path / "ev.json"
    ev.write_text("{}", encoding="utf-8")
    assert rs.cli_main(["record", "--model", "m", "--seed", "1", "--max-update", "10", "--save-dir", str(ckpt),
                        "--eval", f"t={ev}", "--out", str(ckpt / "checkpoint_best.pt")]) == 1
    assert (ckpt / "checkpoint_best.pt").read_bytes() == b"weights"


def _point(tmp_path, name, system, reference="test.de", sentences=10, perturbation=0.0):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"systems": [{"name": system, "scores": {"BLEU": 30.0},
                                             "decoded": decoded_at(DECODED_RUN, perturbation)}],
                                "reference": reference, "sentences": sentences, "perturbation": perturbation}),
                    encoding="utf-8")
    return path


@pytest.mark.parametrize("second, words", [
    (("transformer_dep_rel.seed1",), "evaluates the system 'transformer_dep_rel.seed1', not 'transformer'"),
    (("transformer.seed2",), "evaluates 'transformer.seed2', "),  # another seed's run at p = 0.2
    (("transformer.seed1", "test_2017.de"), "scores against the reference 'test_2017.de' (10 sentences)"),
    (("transformer.seed1", "test.de", 9), "every point must score one test set"),
])
def test_noise_points_of_one_curve_are_one_runs_on_one_test_set(tmp_path, capsys, second, words):
    first = _point(tmp_path, "a", "transformer.seed1")
    other = _point(tmp_path, "b", *second, perturbation=0.2)
    plot = tmp_path / "n.png"
    assert rs.cli_main(["noise", "--plot", str(plot), "--point", f"transformer:0={first}",
                        "--point", f"transformer:0.2={other}"]) == 1
    err = capsys.readouterr().err
    assert f"{other}: " in err and words in err and len(err.strip().splitlines()) == 1, err
    assert not plot.exists()


def test_a_noise_point_is_the_p_its_evaluation_records_and_one_evaluation_one_point(tmp_path, capsys):
    plot = tmp_path / "n.png"
    clean = _point(tmp_path, "clean", "transformer.seed1")
    noisy = _point(tmp_path, "noisy", "transformer.seed1", perturbation=0.3)  # evaluate --data-bin records it
    assert rs.cli_main(["noise", "--plot", str(plot), "--point", f"transformer:0={clean}",
                        "--point", f"transformer:0.1={noisy}"]) == 1
    assert f"{noisy}: evaluates a data-bin perturbed with p = 0.3 (its perturbation, from --data-bin), not the " \
           "p = 0.1 its --point gives" in capsys.readouterr().err
    assert rs.cli_main(["noise", "--plot", str(plot), "--point", f"transformer:0={clean}",
                        "--point", f"transformer:0.9={clean}"]) == 1
    assert "is given for two points (transformer:0=" in capsys.readouterr().err and not plot.exists()
    assert rs.cli_main(["noise", "--plot", str(plot), "--point", f"transformer:0={clean}",
                        "--point", f"transformer:0.3={noisy}"]) == 0


def test_a_noise_point_must_be_one_models_evaluation(tmp_path, capsys):
    two = tmp_path / "two.json"
    two.write_text(json.dumps({"systems": [{"scores": {"BLEU": 100.0}}, {"scores": {"BLEU": 30.0}}]}))
    assert rs.cli_main(["noise", "--plot", str(tmp_path / "n.png"), "--point", f"one:0={two}"]) == 1
    assert "evaluates 2 systems" in capsys.readouterr().err
    assert not (tmp_path / "n.png").exists()


def test_model_names_cannot_break_the_markdown_table(tmp_path):
    results = [fake_result("transformer", 1, REFS), fake_result("a|b`c", 1, REFS)]
    table = rs.make_table(rs.load_results([str(_folder(tmp_path, results))]), "transformer", [])
    row = next(line for line in table.splitlines() if line.startswith("| ``a"))
    assert row.startswith("| ``a\\|b`c`` |") and row.count(" | ") == 5  # the name as it is, one code span


COMMITTED_TABLES = sorted(glob.glob(os.path.join(REPO, "examples", "*", "results", "*", "README.md")))
REBUILT_BY = re.compile(r"\nRebuilt from \d+ result files? by (`+) ?(.+?) ?\1\.\n\Z", re.S)


@pytest.mark.parametrize("markdown", COMMITTED_TABLES, ids=lambda p: os.path.relpath(os.path.dirname(p), REPO))
def test_committed_tables_are_what_the_committed_results_give(markdown, tmp_path, monkeypatch, capsys):
    """Every results table in the README comes from the committed JSON: rebuilt by the command it names, it is
    the same, byte for byte (a result added, edited or removed without rebuilding the table fails here)."""
    committed = open(markdown, encoding="utf-8").read()
    found = REBUILT_BY.search(committed)
    assert found, f"{markdown} does not end with the command that rebuilds it"
    argv = shlex.split(found.group(2))
    assert argv[:2] == ["fairseq-syntax-report", "table"]
    monkeypatch.chdir(REPO)  # the command names the results folder relative to the checkout
    out = tmp_path / "table.md"
    assert rs.cli_main(argv[1:] + ["--markdown", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == committed


def test_the_table_names_the_command_that_rebuilds_it(tmp_path, capsys):
    folder = _folder(tmp_path, [fake_result("transformer", 1, REFS), fake_result("transformer_rel", 1, REFS)])
    assert rs.cli_main(["table", str(folder), "--compare", "transformer_rel:transformer", "--alpha", "0.01"]) == 0
    text = capsys.readouterr().out
    command = shlex.join(["fairseq-syntax-report", "table", str(folder), "--baseline", "transformer",
                          "--compare", "transformer_rel:transformer", "--alpha", "0.01"])
    assert f"\nRebuilt from 2 result files by `{command}`.\n" in text


def test_a_command_with_backticks_stays_one_code_span():
    assert md_code("table a`b") == "``table a`b``"
    assert md_code("`x") == "`` `x ``"


def test_models_keeps_the_listed_models_the_baseline_and_the_compared_pair(tmp_path, capsys):
    """A page about one paper tables its own models from a folder that holds several papers' results."""
    folder = _folder(tmp_path, [fake_result(m, 1, REFS) for m in
                                ("transformer", "transformer_rel", "transformer_gps", "transformer_nsd")])
    assert rs.cli_main(["table", str(folder), "--models", "transformer_gps",
                        "--compare", "transformer_nsd:transformer_rel"]) == 0
    text = capsys.readouterr().out
    rows = [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| `")]
    assert rows == ["| `transformer`", "| `transformer_gps`", "| `transformer_nsd`", "| `transformer_rel`"]
    command = shlex.join(["fairseq-syntax-report", "table", str(folder), "--baseline", "transformer",
                          "--models", "transformer_gps", "--compare", "transformer_nsd:transformer_rel"])
    assert f"\nRebuilt from 4 result files by `{command}`.\n" in text
    assert rs.cli_main(["table", str(folder), "--models", "transformer_gps"]) == 0
    assert "Rebuilt from 2 result files" in capsys.readouterr().out
    assert rs.cli_main(["table", str(folder), "--models", "tree2seq", "--baseline", "lstm"]) == 1
    assert "holds no result of --models" in capsys.readouterr().err


def test_record_refuses_the_checkpoints_of_another_run(tmp_path, capsys):
    """The result is named by --model/--arch/--seed; the checkpoints say which run they are (their settings)."""
    import os
    import shutil

    from .helpers import _evaluation

    release = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_2", "checkpoints")
    ckpt = tmp_path / "ck"
    ckpt.mkdir()
    for which in ("last", "best"):
        shutil.copy(os.path.join(release, "transformer_dep_rel.pt"), ckpt / f"checkpoint_{which}.pt")
    ev = _evaluation(tmp_path / "ev.json")

    def record(*flags):
        return rs.cli_main(["record", "--max-update", "60", "--save-dir", str(ckpt), "--eval", f"t={ev}",
                            "--out", str(tmp_path / "r.json"), *flags])

    assert record("--model", "transformer_gps", "--seed", "5") == 1
    err = capsys.readouterr().err
    assert "checkpoint_last.pt: records arch 'transformer_dep_rel', seed 1, not the arch and seed given" in err
    assert record("--model", "transformer_dep_rel.tagged", "--seed", "2") == 1  # the tag is not the arch
    assert "not the seed given (--seed 2)" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()
    shutil.copy(os.path.join(release, "transformer_gps.pt"), ckpt / "checkpoint_best.pt")
    assert record("--model", "transformer_dep_rel", "--seed", "1") == 1
    assert "checkpoint_best.pt: belongs to another run than checkpoint_last.pt" in capsys.readouterr().err


def _record_run(tmp_path, edit_best=None, name="transformer_dep_rel.seed1", log_seed=1, max_update="60",
                logged_loss="1.228", extra=(), edit_last=None, logged_run_id=None, fresh=True):
    """record on the 0.2.0 fixture's checkpoint as one run's checkpoint_last/best, checkpoint_best's settings
    edited by ``edit_best``, an evaluation of the system ``name`` and a training log of seed ``log_seed``."""
    import os
    import shutil

    import torch

    from fairseq_syntax_core.checkpoint_loader import load_fairseq_checkpoint

    from .helpers import _evaluation, decoded_record

    release = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "release_0_2", "checkpoints")
    ckpt = tmp_path / "ck"
    ckpt.mkdir(exist_ok=True)
    for which in ("last", "best"):
        shutil.copy(os.path.join(release, "transformer_dep_rel.pt"), ckpt / f"checkpoint_{which}.pt")
    for which, edit in (("best", edit_best), ("last", edit_last)):
        if edit is not None:
            state = load_fairseq_checkpoint(str(ckpt / f"checkpoint_{which}.pt"))
            edit(state)
            torch.save(state, ckpt / f"checkpoint_{which}.pt")
    ev = _evaluation(tmp_path / "ev.json", decoded_record(ckpt / "checkpoint_best.pt"))
    text = (tmp_path / "ev.json").read_text(encoding="utf-8").replace('"m"', json.dumps(name))
    (tmp_path / "ev.json").write_text(text, encoding="utf-8")
    save_dir = "/tmp/tmp.VGhNdM64SS/transformer_dep_rel"  # as the fixture's checkpoints record it
    log = tmp_path / "train.log"
    log.write_text(f"2026-01-01 10:00:00 | INFO | fairseq_cli.train | {{'_name': None, 'common': {{'seed': {log_seed}}}, "
                   f"'model': Namespace(_name='transformer_dep_rel', arch='transformer_dep_rel', seed={log_seed}), "
                   f"'checkpoint': {{'save_dir': '{save_dir}'}}}}\n"
                   + ("2026-01-01 10:00:00 | INFO | fairseq.trainer | No existing checkpoint found ck/checkpoint_last.pt\n"
                      if fresh else "2026-01-01 10:00:00 | INFO | fairseq.trainer | Loaded checkpoint ck/checkpoint_last.pt\n")
                   + (f"2026-01-01 10:00:00 | INFO | fairseq_syntax.compat | run {logged_run_id}: the identifier its "
                      "checkpoints carry\n" if logged_run_id else "")
                   + f"2026-01-01 10:00:01 | INFO | valid | valid on 'valid' "
                   f"subset | loss {logged_loss} | nll_loss 3.2 | num_updates 60\n", encoding="utf-8")
    return rs.cli_main(["record", "--model", "transformer_dep_rel", "--seed", "1", "--max-update", max_update,
                        "--save-dir", str(ckpt), "--eval", f"t={ev}", "--train-log", str(log),
                        "--out", str(tmp_path / "r.json"), "--commit", "x", *extra])


def _other_save_dir(state):
    state["cfg"]["checkpoint"]["save_dir"] = "runs/other/checkpoints/transformer_dep_rel.seed1"


def _saved_later(state):
    state["optimizer_history"][-1]["num_updates"] = 61


@pytest.mark.parametrize("case, words", [
    ({"edit_best": _other_save_dir}, "checkpoint_best.pt: belongs to another run than checkpoint_last.pt: save_dir "
     "'runs/other/checkpoints/transformer_dep_rel.seed1'"),  # same arch and seed, another run's folder
    ({"edit_best": _saved_later}, "checkpoint_best.pt: was saved at update 61, after checkpoint_last.pt"),
    ({"max_update": "2000"}, "records max_update 60, not the max_update given (--max-update 2000)"),
    ({"name": "transformer_gps.seed1"}, "evaluates the system 'transformer_gps.seed1', not --model"),
    ({"name": "transformer_dep_rel.seed2"}, "evaluates the system 'transformer_dep_rel.seed2'"),
    ({"name": "transformer_dep_rel"}, "evaluates the system 'transformer_dep_rel', not --model"),  # any seed's
    ({"log_seed": 2}, "train.log: logs the run seed 2, not that of"),
])
def test_record_refuses_what_belongs_to_another_run_of_the_same_arch_and_seed(tmp_path, capsys, case, words):
    assert _record_run(tmp_path, **case) == 1
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r.json").exists()


def test_record_refuses_one_evaluation_for_two_test_sets_and_warns_of_a_reference_of_another_name(tmp_path, capsys):
    import shutil

    assert _record_run(tmp_path) == 0
    capsys.readouterr()
    data = json.loads((tmp_path / "ev.json").read_text(encoding="utf-8"))
    (tmp_path / "ev.json").write_text(json.dumps(dict(data, reference="raw/test_2016_flickr.de")), encoding="utf-8")
    shutil.copy(tmp_path / "ev.json", tmp_path / "ev2.json")
    (tmp_path / "r.json").unlink()
    argv = ["record", "--model", "transformer_dep_rel", "--seed", "1", "--max-update", "60", "--save-dir",
            str(tmp_path / "ck"), "--eval", f"test_2016_flickr={tmp_path / 'ev.json'}", "--out", str(tmp_path / "r.json"),
            "--commit", "x"]
    assert rs.cli_main(argv + ["--eval", f"test_2017={tmp_path / 'ev2.json'}"]) == 1
    assert f"{tmp_path / 'ev2.json'}: scores the reference 'raw/test_2016_flickr.de' (1 sentences), as the --eval " \
           "of 'test_2016_flickr' does" in capsys.readouterr().err and not (tmp_path / "r.json").exists()
    assert rs.cli_main(argv[:9] + ["--eval", f"test_2017_mscoco={tmp_path / 'ev.json'}"] + argv[11:]) == 0
    assert "--eval test_2017_mscoco: " in capsys.readouterr().err  # warned: a reference of another name


def test_record_refuses_one_reference_reached_under_two_names_and_keeps_its_digest(tmp_path, capsys):
    assert _record_run(tmp_path) == 0
    capsys.readouterr()
    data = json.loads((tmp_path / "ev.json").read_text(encoding="utf-8"))
    digest = "c" * 64
    (tmp_path / "ev.json").write_text(json.dumps(dict(data, reference="raw/test_2016_flickr.de",
                                                      reference_sha256=digest)), encoding="utf-8")
    (tmp_path / "ev2.json").write_text(json.dumps(dict(data, reference="copy/test_2016_flickr2.de",
                                                       reference_sha256=digest)), encoding="utf-8")
    (tmp_path / "r.json").unlink()
    argv = ["record", "--model", "transformer_dep_rel", "--seed", "1", "--max-update", "60", "--save-dir",
            str(tmp_path / "ck"), "--eval", f"test_2016_flickr={tmp_path / 'ev.json'}", "--out", str(tmp_path / "r.json"),
            "--commit", "x"]
    assert rs.cli_main(argv + ["--eval", f"test_2016_flickr2={tmp_path / 'ev2.json'}"]) == 1
    assert "as the --eval of 'test_2016_flickr' does (the same text)" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()
    assert rs.cli_main(argv) == 0
    recorded = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert recorded["tests"]["test_2016_flickr"]["reference_sha256"] == digest


def test_record_refuses_translations_its_generate_log_says_another_runs_checkpoint_made(tmp_path, capsys):
    assert _record_run(tmp_path) == 0
    capsys.readouterr()
    data = json.loads((tmp_path / "ev.json").read_text(encoding="utf-8"))
    own = {"arch": "transformer_dep_rel", "seed": 1, "save_dir": "/tmp/tmp.VGhNdM64SS/transformer_dep_rel"}
    argv = ["record", "--model", "transformer_dep_rel", "--seed", "1", "--max-update", "60", "--save-dir",
            str(tmp_path / "ck"), "--eval", f"t={tmp_path / 'ev.json'}", "--out", str(tmp_path / "r2.json"),
            "--commit", "x"]
    for other, ok in (({}, True), ({"seed": 2}, False), ({"save_dir": "runs/other/transformer_dep_rel.seed1"}, False),
                      ({"arch": "transformer"}, False), ({"updates": 61}, False), ({"data": "other/data-bin"}, False),
                      ({"training_data": {"bpe_codes_sha256": "0" * 64}}, False)):
        data["systems"][0]["decoded"] = {"checkpoints": [dict(dict(own, updates=60), **other)], "perturbation": None}
        (tmp_path / "ev.json").write_text(json.dumps(data), encoding="utf-8")
        assert rs.cli_main(argv) == (0 if ok else 1)
        err = capsys.readouterr().err
        assert ok or "evaluates translations a checkpoint of another run made" in err, err
    (tmp_path / "r2.json").unlink()  # the run's own translations were recorded above
    for edited in (["not", "a", "record"], {"checkpoints": []}, None):  # edited, or a log cut before its record
        data["systems"][0]["decoded"] = edited
        (tmp_path / "ev.json").write_text(json.dumps(data), encoding="utf-8")
        assert rs.cli_main(argv) == 1
        err = capsys.readouterr().err
        assert "evaluates translations whose log has no fairseq-syntax-decoded line" in err, err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "r2.json").exists()


def test_record_takes_one_runs_checkpoints_evaluation_and_log(tmp_path, capsys):
    assert _record_run(tmp_path) == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert (result["arch"], result["seed"], result["updates"], result["best_valid"]["nll_loss"]) == \
        ("transformer_dep_rel", 1, 60, 3.2)


@pytest.mark.parametrize("key, value", [("arch", "transformer_dep_rel"), ("flags", "--totally-other"),
                                        ("max_update", 5000)])
def test_the_seeds_of_a_row_must_be_one_system(tmp_path, capsys, key, value):
    other = fake_result("transformer", 2, REFS)
    other[key] = value
    folder = _folder(tmp_path, [fake_result("transformer", 1, REFS), other, fake_result("transformer_rel", 1, REFS)])
    assert rs.cli_main(["table", str(folder), "--baseline", "transformer"]) == 1
    err = capsys.readouterr().err
    assert f"transformer.seed2.json: is 'transformer' seed 2 with {key} " in err and "transformer.seed1.json" in err \
        and "the seeds of a row must be one system" in err and len(err.strip().splitlines()) == 1, err


def test_record_refuses_a_train_log_of_another_run_and_a_patience_not_the_runs(tmp_path, capsys):
    assert _record_run(tmp_path, logged_loss="4.1") == 1
    assert "train.log: logs loss 4.1 at update 60, but checkpoint_best.pt was saved with 1.228: the log of another " \
        "run" in capsys.readouterr().err

    def patience(state):
        state["cfg"]["checkpoint"]["patience"] = 5

    assert _record_run(tmp_path, extra=("--patience", "1"), edit_last=patience) == 1
    assert "checkpoint_last.pt: was trained with --patience 5, not the --patience 1 given" in capsys.readouterr().err
    assert _record_run(tmp_path, extra=("--patience", "5"), edit_last=patience) == 0


def _run_id(state, run_id="a" * 32):
    state.setdefault("task_state", {})["run_id"] = run_id


def test_record_refuses_the_train_log_of_another_run_of_the_same_arch_seed_and_folder(tmp_path, capsys):
    """fairseq-train logs the identifier of its run: two runs logged alike (and alike in value) are told apart."""
    assert _record_run(tmp_path, edit_best=_run_id, edit_last=_run_id, logged_run_id="a" * 32) == 0, \
        capsys.readouterr().err
    capsys.readouterr()
    (tmp_path / "r.json").unlink()
    assert _record_run(tmp_path, edit_best=_run_id, edit_last=_run_id, logged_run_id="b" * 32) == 1
    err = capsys.readouterr().err
    assert f"train.log: logs the run {'b' * 32}, not the run {'a' * 32} of" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


def test_record_refuses_a_train_log_of_the_resumed_part_of_a_run_only(tmp_path, capsys):
    """Killed and resumed: the log of the second invocation alone gave a fraction of the training time."""
    assert _record_run(tmp_path, fresh=False) == 1
    err = capsys.readouterr().err
    assert "train.log: begins with a resume (fairseq-train loaded a checkpoint" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "r.json").exists()


def test_a_noise_point_whose_p_its_own_decoded_record_contradicts_is_refused(tmp_path, capsys):
    """A clean evaluation with only its top-level perturbation edited to 0.4 became the p = 0.4 point."""
    clean = _point(tmp_path, "clean", "transformer.seed1")
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(dict(json.loads(clean.read_text(encoding="utf-8")), perturbation=0.4)),
                      encoding="utf-8")
    argv = ["noise", "--plot", str(tmp_path / "n.png"), "--point", f"transformer:0={clean}"]
    assert rs.cli_main(argv + ["--point", f"transformer:0.4={edited}"]) == 1
    assert "says its translations were decoded with p = 0.4, but the log's fairseq-syntax-decoded line it keeps " \
           "says p = 0.0" in capsys.readouterr().err
    data = json.loads(clean.read_text(encoding="utf-8"))
    data["systems"][0]["decoded"]["checkpoints"][0]["seed"] = -1
    edited.write_text(json.dumps(data), encoding="utf-8")
    assert rs.cli_main(argv[:-1] + [f"transformer:0={edited}"]) == 1
    assert "is not what fairseq-generate writes" in capsys.readouterr().err


def test_a_number_of_hundreds_of_digits_or_hypotheses_not_one_per_line_are_refused_in_one_line(tmp_path, capsys):
    result = fake_result("transformer", 1, REFS)
    huge = json.loads(json.dumps(result))
    huge["tests"]["test_2016_flickr"]["scores"]["BLEU"] = 10 ** 400
    from fairseq_syntax_analysis.result_format import is_number

    assert not is_number(10 ** 400)
    folder = _folder(tmp_path, [huge])
    assert rs.cli_main(["table", str(folder)]) == 1
    assert "needs finite BLEU and chrF2 scores" in capsys.readouterr().err
    for hyps in (REFS[:-1], REFS[:-1] + ["two\nlines"], REFS[:-1] + [None]):
        edited = json.loads(json.dumps(result))
        edited["tests"]["test_2016_flickr"]["hypotheses"] = hyps
        (folder / "transformer.seed1.json").write_text(json.dumps(edited), encoding="utf-8")
        assert rs.cli_main(["table", str(folder)]) == 1
        assert "its hypotheses are not one line per sentence" in capsys.readouterr().err
