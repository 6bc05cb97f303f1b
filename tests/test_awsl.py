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


def test_awsl_refuses_another_data_bin_unless_allowed_as_its_message_says(outside):
    import shutil

    from .helpers import _swap_two_symbols

    checkpoint = train(outside, "transformer_gps", "ckpt_awsl_other", "--gps-label-dim", "8", "--gps-path-dim", "16",
                       "--encoder-layers", "1", "--max-update", "1")
    if not (outside / "other-bin").exists():
        shutil.copytree(outside / "data-bin", outside / "other-bin")
        _swap_two_symbols(outside / "other-bin")
    argv = [tool("fairseq-syntax-awsl"), "other-bin", "--path", checkpoint, "--max-sentences", "4", "--out", "o", "--cpu"]
    refused = call(argv, cwd=outside, expect_ok=False)
    assert refused.returncode != 0 and "give --allow-other-data-bin to go on" in refused.stderr, refused.stderr[-2000:]
    allowed = call(argv + ["--allow-other-data-bin"], cwd=outside)
    assert "going on (--allow-other-data-bin)" in allowed.stderr and (outside / "o.tsv").exists()


def test_awsl_refuses_a_model_without_syntax_layers(outside):
    checkpoint = train(outside, "transformer_pascal", "ckpt_awsl_pascal", "--pascal-heads", "1",
                       "--max-update", "1")
    result = call([tool("fairseq-syntax-awsl"), "data-bin", "--path", checkpoint, "--out", "x", "--cpu"],
                  cwd=outside, expect_ok=False)
    assert result.returncode != 0 and "no syntactic-position layers" in result.stderr
