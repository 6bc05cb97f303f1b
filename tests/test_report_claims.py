"""``fairseq-syntax-report claims``: a paper's direction of effect, judged from its seeds' paired tests."""

import pytest

from fairseq_syntax_analysis import results as rs
from fairseq_syntax_analysis.claims import direction

from .helpers import REFS, _folder, fake_result

GOOD = REFS  # the references themselves: BLEU 100
POOR = ["a man rides", "two dogs", "a woman", "kids"] * 5
MIDDLE = REFS[:10] + POOR[10:]


def _rows(*pairs):
    return [{"seed": k, "difference": d, "p_value": p} for k, (d, p) in enumerate(pairs, 1)]


@pytest.mark.parametrize("rows, verdict", [
    (_rows((1.46, 0.003), (0.84, 0.047), (1.20, 0.033)), "**holds** (significant in 3 of 3 seeds)"),
    (_rows((0.74, 0.053), (2.19, 0.001), (1.14, 0.043)), "**holds** (significant in 2 of 3 seeds)"),
    (_rows((0.64, 0.078), (1.73, 0.002), (0.86, 0.085)), "same direction, not significant (1 of 3 seeds significant)"),
    (_rows((-0.69, 0.074), (0.49, 0.109), (-0.73, 0.059)), "not reproduced (mean difference -0.31 over 3 seeds)"),
    (_rows((-1.5, 0.01), (-0.9, 0.03), (0.2, 0.4)), "**reversed** (significantly worse in 2 of 3 seeds)"),
    (_rows((2.0, 0.01), (-2.5, 0.01), (1.0, 0.01)), "same direction, not significant (2 of 3 seeds significant)"),
    ([], "not tested: no seed of both"),
])
def test_the_direction_holds_only_when_most_seeds_are_significantly_better_and_none_worse(rows, verdict):
    """The README's rows: Duan et al.'s SPE (3 of 3), its embeddings (2 of 3), Omote et al.'s depths (1 of 3, and
    against relative positions a negative mean); one significantly worse seed withholds "holds"."""
    assert direction(rows, 0.05) == verdict


def test_claims_rows_pair_each_papers_model_with_its_baseline_per_folder(tmp_path, capsys):
    folder = _folder(tmp_path, [fake_result("transformer", 1, POOR), fake_result("transformer", 2, POOR),
                                fake_result("transformer_gps", 1, GOOD), fake_result("transformer_gps", 2, GOOD),
                                fake_result("transformer_pascal", 1, MIDDLE)])
    out = tmp_path / "claims.md"
    assert rs.cli_main(["claims", "--claim", "Xie et al. (2021)", str(folder), "transformer_gps", "transformer",
                        "--claim", "Xie et al. (2021)", str(folder), "transformer_gps", "transformer_pascal",
                        "--markdown", str(out)]) == 0
    table = out.read_text(encoding="utf-8")
    assert table == capsys.readouterr().out[:-1]  # printed, then written: the same Markdown
    rows = [line for line in table.splitlines() if line.startswith("| Xie")]
    assert len(rows) == 2 and "| 1,2 / 1,2 |" in rows[0] and "**holds** (significant in 2 of 2 seeds)" in rows[0]
    assert "| 1,2 / 1 |" in rows[1] and "(significant in 1 of 1 seed)" in rows[1]  # seed 2 has no pair
    assert f"claims --claim 'Xie et al. (2021)' {folder} transformer_gps transformer" in table  # how to rebuild it


def test_a_claim_on_a_model_without_results_or_a_model_against_itself_is_refused(tmp_path, capsys):
    folder = _folder(tmp_path, [fake_result("transformer", 1, POOR), fake_result("tree2seq", 1, GOOD)])
    assert rs.cli_main(["claims", "--claim", "Eriguchi", str(folder), "tree2seq", "lstm"]) == 1
    assert "holds no result of the model 'lstm'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rs.cli_main(["claims", "--claim", "Eriguchi", str(folder), "tree2seq", "tree2seq"])
    assert "a label and two different models" in capsys.readouterr().err


def test_a_paper_label_cannot_break_the_table(tmp_path, capsys):
    folder = _folder(tmp_path, [fake_result("transformer", 1, POOR), fake_result("tree2seq", 1, GOOD)])
    assert rs.cli_main(["claims", "--claim", "A | B\n<script>x</script>", str(folder), "tree2seq",
                        "transformer"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "tree2seq" in line and line.startswith("|"))
    import re

    assert "\\<script\\>" in row and len(re.split(r"(?<!\\)\|", row)) == 10  # 8 cells: the label's pipe escaped


def test_a_model_and_a_baseline_run_on_other_kinds_of_device_are_marked(tmp_path, capsys):
    gpu = fake_result("transformer_gps", 1, GOOD)
    gpu["device"] = "cuda: NVIDIA H100 80GB HBM3"
    folder = _folder(tmp_path, [fake_result("transformer", 1, POOR), gpu])
    assert rs.cli_main(["claims", "--claim", "Xie et al. (2021)", str(folder), "transformer_gps", "transformer"]) == 0
    assert "runs on other devices (cuda against cpu)" in capsys.readouterr().out


def test_seeds_scored_against_other_references_are_not_averaged_into_one_row(tmp_path, capsys):
    """An en-de seed and an en-fr seed both named test_2016_flickr: the row averaged them and said "holds"."""
    other = fake_result("transformer", 2, POOR)
    other["tests"]["test_2016_flickr"]["statistics"]["BLEU"][0][1] += 1  # another reference of sentence 0
    folder = _folder(tmp_path, [fake_result("transformer", 1, POOR), other, fake_result("tree2seq", 1, GOOD)])
    assert rs.cli_main(["claims", "--claim", "P", str(folder), "tree2seq", "transformer"]) == 1
    assert "sentences are not in the same order (or not the same references)" in capsys.readouterr().err


def test_a_claim_twice_through_another_spelling_of_its_folder_and_an_empty_markdown_are_refused(tmp_path, capsys):
    folder = _folder(tmp_path, [fake_result("transformer", 1, POOR), fake_result("tree2seq", 1, GOOD)])
    for argv, words in [(["--claim", "P", str(folder), "tree2seq", "transformer", "--claim", "Q", f"{folder}/./",
                          "tree2seq", "transformer"], "is given twice"),
                        (["--claim", "P", str(folder), "tree2seq", "transformer", "--markdown", ""],
                         "--markdown '': expected a file name"),
                        (["--claim", "P", str(folder), "tree2seq", "transformer", "--alpha", "0.0005"],
                         "nothing could be significant")]:
        with pytest.raises(SystemExit):
            rs.cli_main(["claims", *argv])
        assert words in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rs.cli_main(["table", str(folder), "--markdown", " "])
    assert "--markdown '': expected a file name" in capsys.readouterr().err


def test_a_p_value_is_shown_with_the_digits_that_keep_it_on_its_side_of_alpha():
    from fairseq_syntax_analysis.table import p_text

    assert p_text(0.001998, 0.002) == "0.001998" and p_text(0.046, 0.05) == "0.046" and p_text(0.0502, 0.05) == "0.050"


@pytest.mark.parametrize("key, value, words", [
    ("bpe_codes_sha256", "b" * 64, "BPE codes"),
    ("perturbation", {"rounds": [{"p": 0.5, "seed": 1}]}, "perturbation of the parses"),
    ("dictionaries_sha256", {"dict.de.txt": "c" * 64, "dict.en.pos.txt": "d" * 64}, "dict.de.txt")])
def test_a_model_and_a_baseline_trained_on_other_text_are_not_compared(tmp_path, capsys, key, value, words):
    """The baseline's results recorded from another data-bin (other BPE codes, a text dictionary) or the model's
    from perturbed parses: a verdict was given, exit 0."""
    data = {"bpe_codes_sha256": "a" * 64, "perturbation": None,
            "dictionaries_sha256": {"dict.de.txt": "e" * 64, "dict.en.pos.txt": "f" * 64}}
    base, model = fake_result("transformer", 1, POOR), fake_result("transformer_gps", 1, GOOD)
    base["training_data"], model["training_data"] = dict(data), dict(data, **{key: value})
    folder = _folder(tmp_path, [base, model])
    assert rs.cli_main(["claims", "--claim", "Xie", str(folder), "transformer_gps", "transformer"]) == 1
    assert words in capsys.readouterr().err
    assert rs.cli_main(["table", str(folder), "--baseline", "transformer"]) == 1
    assert words in capsys.readouterr().err
    model["training_data"]["dictionaries_sha256"] = {"dict.de.txt": "e" * 64, "dict.en.deplabel.txt": "0" * 64}
    if key == "dictionaries_sha256":  # a syntax data-bin's stream dictionaries besides the same text ones: compared
        (folder / "transformer_gps.seed1.json").write_text(__import__("json").dumps(model), encoding="utf-8")
        assert rs.cli_main(["claims", "--claim", "Xie", str(folder), "transformer_gps", "transformer"]) == 0


def test_a_model_and_a_baseline_trained_under_other_update_caps_are_not_compared(tmp_path, capsys):
    """60 updates against 20: "holds" (+21 BLEU), and the table said significantly better."""
    long = fake_result("transformer_dep_rel", 1, GOOD, updates=60, cap=60)
    folder = _folder(tmp_path, [fake_result("transformer", 1, POOR, updates=20, cap=20), long])
    assert rs.cli_main(["claims", "--claim", "Omote", str(folder), "transformer_dep_rel", "transformer"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| Omote"))
    assert row.endswith("| not compared: trained under other update caps (60 against 20) |") and "holds" not in row
    assert rs.cli_main(["table", str(folder), "--baseline", "transformer",
                        "--compare", "transformer_dep_rel:transformer"]) == 0
    out = capsys.readouterr().out
    assert out.count("not compared: trained under other update caps (60 against 20)") == 2
    assert "significantly better" not in out
