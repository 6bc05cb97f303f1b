#!/usr/bin/env bash
# Parse-noise robustness (Xie et al. (2021)'s first item of future work): the trained checkpoints of
# multi30k.sh decode test_2016_flickr under parses perturbed with probability p (word level:
# heads reattached within the tree, labels replaced; fairseq-syntax-perturb), and BLEU is
# plotted against p per model.
#
#   bash examples/dep_rel/parse_noise.sh [OUT]
#   RUNS="transformer_rel.seed1 transformer_dep_rel.seed1" PS="0 0.1 0.2 0.4" bash examples/dep_rel/parse_noise.sh
#
# OUT is multi30k.sh's output folder (its data-bin, raw/ and checkpoints/). Models are trained on
# clean parses; only the test set is perturbed (seed NOISE_SEED). A model that reads no parse
# (transformer, transformer_rel) is a flat line: a check that the perturbation reaches only
# syntax. Writes $RESULTS/$PLOT_NAME.{png,json} (PLOT_NAME: parse_noise unless set, so a second plot of other
# models does not replace the first).
set -euo pipefail
OUT=${1:-runs/multi30k_dep_rel}
RUNS=${RUNS:-"transformer_rel.seed1 transformer_dep_rel.seed1"}
PS=${PS:-"0 0.1 0.2 0.4"}
NOISE_SEED=${NOISE_SEED:-1}
THREADS=${THREADS:-2}
RESULTS=${RESULTS:-examples/dep_rel/results/multi30k}
PLOT_NAME=${PLOT_NAME:-parse_noise}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v fairseq-train >/dev/null && [ -f "$REPO/.venv/bin/activate" ]; then . "$REPO/.venv/bin/activate"; fi
mkdir -p "$OUT/noise" "$RESULTS"
points=()
for p in $PS; do
  bin="$OUT/data-bin"
  if [ "$p" != 0 ]; then
    bin="$OUT/noise/data-bin.p$p"
    # a copy made before (same p and seed) is reused, unless an older fairseq-syntax-perturb drew its noise another way
    if ! python - "$bin/syntax.json" "$p" "$NOISE_SEED" 2>/dev/null <<'EOF'
import json, sys
from fairseq_syntax_preprocess.perturb import SCHEME
record = json.load(open(sys.argv[1], encoding="utf-8"))["perturbation"]
sys.exit(0 if (record.get("rng"), record["p"], record["seed"]) == (SCHEME, float(sys.argv[2]), int(sys.argv[3])) else 1)
EOF
    then
      fairseq-syntax-perturb "$OUT/data-bin" --destdir "$bin" --p "$p" --seed "$NOISE_SEED" --splits test --overwrite
    fi
  fi
  for run in $RUNS; do
    gen="$OUT/noise/generate.$run.p$p.txt"
    OMP_NUM_THREADS=$THREADS fairseq-generate "$bin" --user-dir fairseq_syntax --task syntax_translation \
      --path "$OUT/checkpoints/$run/checkpoint_best.pt" --gen-subset test --beam 5 --batch-size 128 \
      --remove-bpe --tokenizer moses --source-lang en --target-lang de > "$gen"
    # --data-bin: the evaluation records the p of the data-bin decoded, which report noise checks against --point
    fairseq-syntax-evaluate --reference "$OUT/raw/test_2016_flickr.de" --baseline "$run=$gen" --target-lang de \
      --data-bin "$bin" --split test --quiet --json "$OUT/noise/eval.$run.p$p.json" > /dev/null
    points+=(--point "${run%.seed*}:$p=$OUT/noise/eval.$run.p$p.json")
  done
done
fairseq-syntax-report noise "${points[@]}" --plot "$RESULTS/$PLOT_NAME.png" --json "$RESULTS/$PLOT_NAME.json" \
  --title "Multi30k test_2016_flickr, parses perturbed with probability p (seed $NOISE_SEED)"
