"""The documentation's generated tables (``<!-- table: COMMAND -->`` ... ``<!-- /table -->`` in README.md,
docs/, examples/ and benchmarks/) are what their commands give from the committed JSON, byte for byte:
a result added, edited or removed without ``python docs/refresh_tables.py`` fails here."""

import importlib.util
import os

import pytest

from .conftest import REPO
from .helpers import REFS, _folder, fake_result  # noqa: F401


def _refresh():
    spec = importlib.util.spec_from_file_location("refresh_tables", os.path.join(REPO, "docs", "refresh_tables.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_generated_table_is_what_the_committed_json_gives(capsys):
    refresh = _refresh()
    papers = [os.path.join(REPO, "examples", name, "README.md") for name in
              ("dep_rel", "gps", "nsd", "syntax_embed", "tree2seq")]
    for readme in papers:  # every paper's example has its results table, rebuilt from JSON
        assert "<!-- table: fairseq-syntax-report table " in open(readme, encoding="utf-8").read(), readme
    assert refresh.main(["--check"]) == 0, capsys.readouterr().err


def test_a_stale_block_is_named_and_rebuilt(tmp_path, monkeypatch, capsys):
    refresh = _refresh()
    folder = _folder(tmp_path, [fake_result("transformer", 1, REFS), fake_result("transformer_rel", 1, REFS)])
    page = tmp_path / "page.md"
    command = f"fairseq-syntax-report table {folder} --baseline transformer"
    page.write_text(f"# Results\n\n<!-- table: {command} -->\n| old |\n<!-- /table -->\n\nAfter.\n", encoding="utf-8")
    assert refresh.main(["--check", str(page)]) == 1
    assert f"stale: {command}" in capsys.readouterr().err
    assert refresh.main([str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "| old |" not in text and "| `transformer_rel` | 1 |" in text and text.endswith("<!-- /table -->\n\nAfter.\n")
    assert refresh.main(["--check", str(page)]) == 0


def test_only_the_two_table_commands_run(tmp_path, capsys):
    refresh = _refresh()
    page = tmp_path / "page.md"
    page.write_text("<!-- table: rm -rf / -->\n<!-- /table -->\n", encoding="utf-8")
    assert refresh.main(["--check", str(page)]) == 1
    assert "unknown table command 'rm -rf /'" in capsys.readouterr().err


def test_the_readme_opens_with_the_two_commands_ci_runs():
    """README.md: at most 300 lines, opening with the main job and the test command; CI (.ci/run) runs that
    test command, then the documentation build; every relative link of the README names a file of the checkout."""
    import re

    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    assert len(readme.splitlines()) <= 300
    opening = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in opening.splitlines() if line and not line.startswith("#")]
    assert commands == ["bash scripts/quickstart.sh", "bash scripts/run_tests.sh"]
    ci = [line for line in open(os.path.join(REPO, ".ci", "run"), encoding="utf-8").read().splitlines()
          if line and not line.startswith("#")]
    assert ci.index("bash scripts/run_tests.sh") < ci.index("bash scripts/build_docs.sh")
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme):
        assert os.path.exists(os.path.join(REPO, target)), target
