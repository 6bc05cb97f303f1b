#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite. Extra arguments go to pytest,
# e.g. `bash scripts/run_tests.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. "${VENV:-.venv}/bin/activate"
# two workers (pytest-xdist), a test file per worker at a time (module fixtures built once), one
# torch thread each: the suite fits CI's 20 minutes on 2 cores. TEST_WORKERS=0 runs in one process.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
python -m pytest -q -p no:cacheprovider -n "${TEST_WORKERS:-2}" --dist loadfile "$@"
