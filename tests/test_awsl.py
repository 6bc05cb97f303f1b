"""``fairseq-syntax-awsl`` end to end on a tiny trained ``transformer_gps`` checkpoint (installed package)."""

import csv

import pytest

from .conftest import call, tool, train

pytestmark = pytest.mark.slow  # end-to-end runs of the installed commands


def test_awsl_command_writes_table_and_plot(outside):
    checkpoint = train(outside, "transformer_gps", "ckpt_awsl", "--gps-label-dim", "8", "--gps-path-dim", "16",
                       "--encoder-layers", "2", "--gps-layers", "all")
    result = call([tool("fairseq-syntax-awsl"), "data-bin", "--path", checkpoint, "--split", "valid",
                   "--max-sentences", "25", "--batch-size", "8", "--out", "awsl/valid", "--cpu"], cwd=outside)
    with open(outside / "awsl" / "valid.tsv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    assert [int(r["layer"]) for r in rows] == [0, 1]
    for r in rows:
        syntax, content = float(r["awsl_syntax"]), float(r["awsl_content"])
        assert 0.0 <= syntax <= 1.0 and 0.0 <= content <= 1.0
        assert syntax + content == pytest.approx(1.0, abs=1e-5)
        assert 0.0 < syntax < 1.0  # the syntax term is on and not everything
        assert int(r["sentences"]) == 25
    png = outside / "awsl" / "valid.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "layer 0" in result.stdout


def test_awsl_refuses_a_model_without_syntax_layers(outside):
    checkpoint = train(outside, "transformer_pascal", "ckpt_awsl_pascal", "--pascal-heads", "1",
                       "--max-update", "1")
    result = call([tool("fairseq-syntax-awsl"), "data-bin", "--path", checkpoint, "--out", "x", "--cpu"],
                  cwd=outside, expect_ok=False)
    assert result.returncode != 0 and "no syntactic-position layers" in result.stderr
