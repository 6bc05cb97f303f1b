#!/usr/bin/env bash
# Choosing Ma et al. (2019)'s loss weights and target-side predictor on the VALIDATION set (never the test
# set): short fairseq-train runs of a small model on one data-bin, one per variant, each ending in
# the validation metrics of its last update -- nll_loss (gold target distances, the training way),
# nll_loss_fed (the distances generation feeds back), their gap, and the distance accuracy -- one
# JSON line per variant appended to $OUT/valid.jsonl.
#
#   bash examples/nsd/choose_weights.sh DATA_BIN OUT [NAME=FLAGS ...]
#   UPDATES=300 ARCH=transformer_nsd_target bash examples/nsd/choose_weights.sh runs/multi30k_en_fr/data-bin runs/nsd_weights \
#     "ent0.25=--nsd-ent-weight 0.25" "state=--nsd-target-predict-from state --nsd-ent-weight 0.25"
#
# The model: 2+2 layers, 128 wide, 4 heads, FFN 512, shared embeddings, dropout 0.1; batches of
# 4,096 tokens, inverse-sqrt schedule with 150 warm-up updates, lr 0.001; UPDATES (300) updates.
# A variant named "transformer" trains fairseq's transformer with label_smoothed_cross_entropy
# as the reference. Needs the package installed (scripts/setup.sh).
set -euo pipefail
DATA=${1:?data-bin}
OUT=${2:?output folder}
shift 2
ARCH=${ARCH:-transformer_nsd_target}
UPDATES=${UPDATES:-300}
THREADS=${THREADS:-1}
SEED=${SEED:-1}
mkdir -p "$OUT"
SMALL="--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 128 --decoder-embed-dim 128
  --encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512 --encoder-attention-heads 4 --decoder-attention-heads 4
  --share-all-embeddings --dropout 0.1"
for variant in "$@"; do
  name=${variant%%=*}; flags=${variant#*=}
  arch=$ARCH; criterion=label_smoothed_cross_entropy_with_nsd
  if [ "$name" = transformer ]; then arch=transformer; criterion=label_smoothed_cross_entropy; fi
  log="$OUT/$name.log"
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=$THREADS fairseq-train "$DATA" --user-dir fairseq_syntax --task syntax_translation \
    --arch "$arch" $SMALL --criterion "$criterion" --label-smoothing 0.1 $flags \
    --optimizer adam --adam-betas '(0.9, 0.98)' --lr 0.001 --lr-scheduler inverse_sqrt --warmup-updates 150 \
    --max-tokens 4096 --max-update "$UPDATES" --seed "$SEED" --num-workers 0 --no-save --validate-interval 1000 \
    --log-format json --log-interval 50 > "$log" 2>&1
  # the one validation: at the last update (--validate-interval beyond the run)
  python - "$name" "$flags" "$log" "$OUT/valid.jsonl" <<'PY'
import json, sys
name, flags, log, out = sys.argv[1:]
rows = [json.loads(l.split("|", 3)[-1]) for l in open(log, encoding="utf-8") if "| valid |" in l]
if not rows:
    sys.exit(f"{log}: no validation line")
last = rows[-1]
keep = {k[len("valid_"):]: last[k] for k in last if k.startswith("valid_")}
with open(out, "a", encoding="utf-8") as f:
    f.write(json.dumps({"name": name, "flags": flags, **keep}, sort_keys=True) + "\n")
print(name, keep)
PY
done
