#!/usr/bin/env bash
# Build the documentation site, docs/ -> docs/_build/html, as CI does: warnings are errors (-W) and
# every cross-reference must resolve (-n). Sets up .venv (scripts/setup.sh) and adds the docs extra
# (Sphinx, MyST, furo, sphinx-argparse, sphinxcontrib-bibtex; pinned in constraints.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. "${VENV:-.venv}/bin/activate"
python -m pip install -qq -c constraints.txt ".[docs]"
rm -rf docs/_build/html
python -m sphinx -W --keep-going -n -q -b html docs docs/_build/html
echo "docs/_build/html/index.html"
