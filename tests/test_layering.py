"""Layering without cycles: the pipeline imports no fairseq component; the shared package imports neither side."""

import json
import subprocess
import sys

import pytest
from .helpers import _modules_after  # noqa: F401


@pytest.mark.parametrize("module", ["fairseq_syntax_preprocess.cli", "fairseq_syntax_preprocess.stages"])
def test_pipeline_imports_no_model_task_or_criterion(module):
    loaded = _modules_after(f"import {module}")
    assert not [m for m in loaded if m == "fairseq_syntax" or m.startswith("fairseq_syntax.")]


def test_shared_package_imports_neither_the_plugin_nor_the_pipeline():
    loaded = _modules_after("import fairseq_syntax_core.trees, fairseq_syntax_core.databin, fairseq_syntax_core.errors")
    assert not [m for m in loaded if m.split(".")[0] in ("fairseq_syntax", "fairseq_syntax_preprocess", "fairseq")]


def _imported_by(argv):
    """The modules ``python -X importtime ARGV`` imports (its stderr lists each)."""
    result = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("argv, absent", [
    (["-m", "fairseq_syntax_analysis.results", "--help"], ("fairseq", "fairseq_syntax", "torch")),
    (["-m", "fairseq_syntax_analysis.results", "table", "--help"], ("fairseq", "fairseq_syntax", "torch")),
    (["-m", "fairseq_syntax_analysis.evaluate", "--help"], ("fairseq", "fairseq_syntax")),  # trees use torch
])
def test_report_and_evaluate_import_no_fairseq(argv, absent):
    """Tables of results and scores are JSON and statistics: no fairseq, no model registered."""
    loaded = _imported_by(argv)
    assert not [m for m in loaded if m.split(".")[0] in absent]
    assert "fairseq_syntax_analysis.commands" in loaded  # the command ran (as __main__)


def test_no_source_module_is_over_500_lines():
    """One concept per module: a module past 500 lines holds several (split it, as config.py was)."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    long = []
    for package in ("fairseq_syntax", "fairseq_syntax_core", "fairseq_syntax_analysis", "preprocess"):
        for folder, _dirs, files in os.walk(os.path.join(root, package)):
            for name in files:
                if name.endswith(".py"):
                    with open(os.path.join(folder, name), encoding="utf-8") as handle:
                        count = sum(1 for _ in handle)
                    if count > 500:
                        long.append(f"{os.path.relpath(os.path.join(folder, name), root)}: {count}")
    assert not long, long
