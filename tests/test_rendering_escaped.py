"""Everything rendered from names and fields of files or the command line is escaped by construction
(fairseq_syntax_analysis/rendering.py): Markdown tables keep their rows and columns and inject no
HTML, and matplotlib draws ``$...$`` as text instead of failing on mathtext."""

import json
import re

import pytest

from fairseq_syntax_analysis import results as rs
from fairseq_syntax_analysis.evaluate import cli_main as evaluate_main
from .conftest import parsed_bin, write
from .helpers import DECODED_RUN, REFS, decoded_at, fake_result

HOSTILE = ["a|b", "x\ny", "`code`", "<script>alert(1)</script>", "$\\frac$", "**bold**", "a\\|b", "[l](http://x)",
           "&lt;", "_u_", " spaced ", "|", "``", "\\", "a\r\n\n|b"]
PNG = b"\x89PNG\r\n\x1a\n"


def _cells(row: str):
    """A GitHub table row's cells: split on pipes not escaped by a backslash, the escaping backslash removed."""
    assert row.startswith("| ") and row.endswith(" |"), row
    cells, current, i = [], "", 1
    while i < len(row) - 1:
        if row[i] == "\\" and row[i + 1] == "|":
            current += "|"
            i += 2
            continue
        if row[i] == "|":
            cells.append(current.strip())
            current = ""
        else:
            current += row[i]
        i += 1
    cells.append(current.strip())
    return cells


def _code_span(cell: str) -> str:
    """The text of a cell that is one code span (CommonMark: one space stripped at both ends)."""
    fence = re.match("`+", cell).group(0)
    assert cell.endswith(fence) and len(cell) > 2 * len(fence), cell
    inner = cell[len(fence):-len(fence)]
    return inner[1:-1] if inner.startswith(" ") and inner.endswith(" ") and inner.strip(" ") else inner


def _hostile_table(tmp_path):
    results = [fake_result("transformer", 1, REFS)] + [fake_result(name, 1, REFS) for name in HOSTILE]
    results[1]["stopped"] = "<b>capped</b> | x\n| y"
    folder = tmp_path / "results"
    folder.mkdir()
    for k, r in enumerate(results):
        r["tests"] = {"<i>test</i>|\n": r["tests"]["test_2016_flickr"]}  # a hostile test-set name too
        (folder / f"{k}.json").write_text(json.dumps(r), encoding="utf-8")
    return rs.make_table(rs.load_results([str(folder)]), "transformer", [("a|b", "x\ny")])


def test_report_table_with_hostile_names_parses_back_to_its_rows_and_columns(tmp_path):
    one_line = lambda name: name.replace("\r", "\\r").replace("\n", "\\n")  # line breaks spelled out
    table = _hostile_table(tmp_path)
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| model |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(_cells(line))
    assert len(_cells(lines[start])) == 6 and lines[start + 1] == "|---|---|---|---|---|---|"
    assert len(rows) == 1 + len(HOSTILE) and all(len(r) == 6 for r in rows)
    assert sorted(_code_span(r[0]) for r in rows) == sorted(one_line(n) for n in ["transformer"] + HOSTILE)
    # no raw HTML anywhere: every < that could open a tag is inside a code span or escaped
    outside_code = re.sub(r"(`+).*?\1", "", table)
    assert re.search(r"(?<!\\)<[A-Za-z/!?]", outside_code) is None


def test_report_table_with_hostile_names_renders_as_one_table_without_html(tmp_path):
    markdown_it = pytest.importorskip("markdown_it")
    html = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(_hostile_table(tmp_path))
    assert html.count("<table>") == 1 and "<script" not in html and "<b>" not in html and "<i>" not in html
    body = html.split("<tbody>")[1].split("</tbody>")[0]
    assert body.count("<tr>") == 1 + len(HOSTILE)
    assert all(row.count("<td>") == 6 for row in body.split("<tr>")[1:])


def test_evaluate_plot_draws_mathtext_and_underscore_names_as_text(tmp_path, capsys):
    src = ["the dog runs fast .", "big dogs chase small cats", "stop"]
    conllu = "".join("".join(f"{i}\t{w}\t_\tX\t_\t_\t{0 if i == 1 else 1}\t{'root' if i == 1 else 'dep'}\t_\t_\n"
                             for i, w in enumerate(line.split(), 1)) + "\n" for line in src)
    refs = ["der Hund rennt schnell .", "große Hunde jagen kleine Katzen", "Halt"]
    data_bin = parsed_bin(tmp_path, {"train": (src, refs, conllu)}, bpe_symbols=3)
    ref = write(tmp_path / "ref.txt", "\n".join(refs) + "\n")
    base = write(tmp_path / "base.txt", "der Hund rennt .\ngroße Hunde jagen Katzen\nHalt\n")
    plot = tmp_path / "eval.png"
    assert evaluate_main(["-r", ref, "-b", f"$b$={base}", "-s", f"$\\frac$={ref}", "-s", f"_hidden={ref}",
                          "-s", f"x\ny={ref}", "--data-bin", str(data_bin), "--split", "train", "--length-buckets",
                          "2", "--depth-buckets", "1", "--plot", str(plot), "--quiet"]) == 0
    assert plot.read_bytes()[:8] == PNG
    out = capsys.readouterr().out
    assert "x\\ny" in out and "\nx\ny" not in out  # the plain-text tables keep a row on one line


def test_bucket_figure_legend_shows_every_system_as_given():
    from fairseq_syntax_analysis.evaluate import bucket_figure

    names = ["base", "$\\frac$", "_hidden"]
    report = {"baseline": "base", "systems": [{"name": n} for n in names],
              "buckets": {"length": {"names": ["<2", ">=2"], "sentences": [1, 2], "title": "length",
                                     "BLEU": {n: [10.0, 20.0] for n in names}}}}
    fig = bucket_figure(report)
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert texts == ["\\$\\frac\\$", "_hidden"]  # matplotlib draws \$ as $ outside math
    fig.canvas.draw()  # no mathtext error


def test_report_noise_plot_and_awsl_title_with_mathtext(tmp_path):
    import matplotlib.pyplot as plt

    from fairseq_syntax_analysis.awsl import awsl_figure

    ev, ev2 = tmp_path / "ev.json", tmp_path / "ev2.json"
    ev.write_text(json.dumps({"systems": [{"name": "$\\frac$.seed1", "scores": {"BLEU": 30.0}, "decoded": DECODED_RUN}],
                              "perturbation": 0}), encoding="utf-8")
    ev2.write_text(json.dumps({"systems": [{"name": "_m.seed1", "scores": {"BLEU": 30.0},
                                             "decoded": decoded_at(DECODED_RUN, 0.1)}],
                               "perturbation": 0.1}), encoding="utf-8")
    plot = tmp_path / "noise.png"
    assert rs.cli_main(["noise", "--plot", str(plot), "--title", "$\\frac$ {", "--point", f"$\\frac$:0={ev}",
                        "--point", f"_m:0.1={ev2}"]) == 0
    assert plot.read_bytes()[:8] == PNG
    fig = awsl_figure([{"layer": 0, "awsl_syntax": 0.4, "awsl_content": 0.6}], title="$\\frac$ on $x")
    fig.savefig(tmp_path / "awsl.png", format="png")
    plt.close(fig)
    assert (tmp_path / "awsl.png").read_bytes()[:8] == PNG
