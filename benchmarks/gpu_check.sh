#!/usr/bin/env bash
# The GPU check in one command, on a machine with Python 3.12 and PyTorch but no package index,
# from the repository root, with the folder made by benchmarks/gpu_prepare.sh beside it:
#
#   bash benchmarks/gpu_check.sh [.whl] [OUT_DIR] [BUDGET_SECONDS]
#
# Installs the carried wheels into /tmp/site (no index, no dependencies resolved), unpacks the
# data-bins into /tmp/gpu_check_data, and runs benchmarks/gpu_check.py (fairseq-train throughput,
# beam-5 fairseq-generate speed, top CUDA ops; every family against fairseq's model), which
# writes OUT_DIR/gpu_check.json and keeps to the budget (default 450 s: the whole check then fits
# a 15-minute GPU lease with the machine's start-up and a rerun's margin).
set -euo pipefail
W=${1:-.whl}; DEST=${2:-${OUT:-.}}; BUDGET=${3:-450}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$W"/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=/tmp/gpu_check_data; mkdir -p "$D"
for t in "$W"/source.tgz "$W"/target.tgz; do [ -f "$t" ] && tar xzf "$t" -C "$D"; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
TARGET=(); [ -d "$D/target" ] && TARGET=(--target-data-bin "$D/target")
PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --data-bin "$D/source" "${TARGET[@]}" \
  --out "$DEST/gpu_check.json" --budget "$BUDGET" "${@:4}"
