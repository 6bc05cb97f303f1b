#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite. Extra arguments go to pytest,
# e.g. `bash scripts/run_tests.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. "${VENV:-.venv}/bin/activate"
python -m pytest -q -p no:cacheprovider "$@"
