"""Layering without cycles: the pipeline imports no fairseq component; the shared package imports neither side."""

import json
import subprocess
import sys

import pytest


def _modules_after(statement: str):
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("module", ["fairseq_syntax_preprocess.cli", "fairseq_syntax_preprocess.stages"])
def test_pipeline_imports_no_model_task_or_criterion(module):
    loaded = _modules_after(f"import {module}")
    assert not [m for m in loaded if m == "fairseq_syntax" or m.startswith("fairseq_syntax.")]


def test_shared_package_imports_neither_the_plugin_nor_the_pipeline():
    loaded = _modules_after("import fairseq_syntax_core.trees, fairseq_syntax_core.databin, fairseq_syntax_core.errors")
    assert not [m for m in loaded if m.split(".")[0] in ("fairseq_syntax", "fairseq_syntax_preprocess", "fairseq")]
