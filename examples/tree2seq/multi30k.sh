#!/usr/bin/env bash
# Multi30k en-de, Eriguchi et al. (2016): tree2seq against fairseq's own lstm (1 layer, 256, input feeding) on
# the same data-bin, with the run protocol of examples/dep_rel/multi30k.sh (early stopping, the
# shared 2,000-update cap, one JSON result per (model, seed) under examples/tree2seq/results/).
#
#   bash examples/tree2seq/multi30k.sh [MULTI30K_DIR] [OUT]
#   SEEDS="1 2 3" THREADS=1 bash examples/tree2seq/multi30k.sh
#   ARCHS=tree2seq TAG=.lenprior GEN_FLAGS="--length-prior --unnormalized" bash examples/tree2seq/multi30k.sh
#
# The data-bin carries the phrase structures converted from the dependency parse (every data-bin
# made by this version does); a data-bin of an older version lacks them: use another OUT.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ARCHS=${ARCHS-"lstm tree2seq"} BASELINE=lstm COMPARE=tree2seq:lstm \
  RESULTS=${RESULTS:-examples/tree2seq/results/multi30k} \
  exec bash "$HERE/../dep_rel/multi30k.sh" "${1:-../shared/data/multi30k}" "${2:-runs/multi30k_tree2seq}"
