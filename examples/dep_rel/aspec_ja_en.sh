#!/usr/bin/env bash
# Omote et al. (2019)'s own setting (Omote, Tamura, Ninomiya 2019, section 5.1): ASPEC Japanese-to-English,
# Transformer_abs / _rel / _dep / _dep+rel. Documented, not run here: ASPEC is distributed by
# JST/NICT on application (https://jipsti.jst.go.jp/aspec/, Nakazawa et al. 2016), and the
# paper's tools (KyTea for Japanese words, the EDA dependency parser) are outside PyPI.
#
#   bash examples/dep_rel/aspec_ja_en.sh ASPEC_DIR [OUT]
#
# ASPEC_DIR/ASPEC-JE/{train/train-1.txt,train/train-2.txt,dev/dev.txt,test/test.txt}, lines
# "score ||| id ||| ja ||| en" (train) or "id ||| ja ||| en" (dev, test), as distributed.
#
# What follows the paper exactly: the first 1.5M train pairs, pairs of <= 50 words on both
# sides, word-level vocabularies (ja words seen >= 7 times, en >= 10), 6+6 layers, d=512,
# 8 heads, FFN 2048, Adam (0.9, 0.98, 1e-9), Vaswani et al.'s schedule (inverse-sqrt, 4000 warm-up
# steps, peak 512^-0.5 * 4000^-0.5 = 7e-4),
# k = 2, l = 2, batches of 256 sentences, 30 epochs, best validation checkpoint, greedy search.
# Where we differ: Japanese words come from KyTea if you give them pre-segmented
# (JA_PRETOKENIZED=1 with files you made with `kytea -out tok`), else from the parser's own
# segmentation step below; the parse is ginza (spaCy ja_ginza, UD labels) instead of EDA,
# or any parse you convert to CoNLL-U and pass with --external-parse conllu.
set -euo pipefail
ASPEC=${1:?usage: aspec_ja_en.sh ASPEC_DIR [OUT]}
OUT=${2:-runs/aspec_ja_en}
ARCHS=${ARCHS:-"transformer transformer_rel transformer_dep transformer_dep_rel"}
SEED=${SEED:-1}
mkdir -p "$OUT/raw"
JE="$ASPEC/ASPEC-JE"

# 1. text: first 1.5M train pairs (train-1 + train-2), <= 50 words on both sides after tokenization
cat "$JE/train/train-1.txt" "$JE/train/train-2.txt" | head -n 1500000 | awk -F ' \\|\\|\\| ' '{print $3 > "'"$OUT"'/raw/train.ja.raw"; print $4 > "'"$OUT"'/raw/train.en.raw"}'
for split in dev test; do
  awk -F ' \\|\\|\\| ' '{print $2 > "'"$OUT"'/raw/'"$split"'.ja.raw"; print $3 > "'"$OUT"'/raw/'"$split"'.en.raw"}' "$JE/$split/$split.txt"
done
for split in train dev test; do
  if [ "${JA_PRETOKENIZED:-0}" = 1 ]; then cp "$OUT/raw/$split.ja.tok" "$OUT/raw/$split.ja"
  else python -c "
import sys, spacy
nlp = spacy.blank('ja')  # SudachiPy word segmentation, as ginza uses
for line in open(sys.argv[1], encoding='utf-8'):
    print(' '.join(t.text for t in nlp.make_doc(line.strip()) if not t.is_space))
" "$OUT/raw/$split.ja.raw" > "$OUT/raw/$split.ja"; fi
  fairseq-syntax-tokenize --lang en --input "$OUT/raw/$split.en.raw" --output "$OUT/raw/$split.en" --workers 2 --overwrite
done
valid=dev
fairseq-syntax-preprocess -s ja -t en --pretokenized \
  --trainpref "$OUT/raw/train" --validpref "$OUT/raw/$valid" --testpref "$OUT/raw/test" \
  --destdir "$OUT/data-bin" --overwrite --parser ja_ginza --no-bpe \
  --thresholdsrc 7 --thresholdtgt 10 --max-len 50 --max-len-action skip --workers "$(nproc)"

# 2. models (paper settings)
for arch in $ARCHS; do
  fairseq-train "$OUT/data-bin" --user-dir fairseq_syntax --task syntax_translation --arch "$arch" \
    --encoder-layers 6 --decoder-layers 6 --encoder-embed-dim 512 --decoder-embed-dim 512 \
    --encoder-ffn-embed-dim 2048 --decoder-ffn-embed-dim 2048 \
    --encoder-attention-heads 8 --decoder-attention-heads 8 \
    --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 --lr 0.0007 \
    --lr-scheduler inverse_sqrt --warmup-updates 4000 --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 --dropout 0.1 --batch-size 256 --max-epoch 30 --seed "$SEED" \
    --save-dir "$OUT/checkpoints/$arch" --no-epoch-checkpoints --log-format simple
  fairseq-generate "$OUT/data-bin" --user-dir fairseq_syntax --task syntax_translation \
    --path "$OUT/checkpoints/$arch/checkpoint_best.pt" --gen-subset test --beam 1 --batch-size 128 \
    > "$OUT/generate.$arch.txt"
  grep '^H-' "$OUT/generate.$arch.txt" | sort -t- -k2 -n | cut -f3 > "$OUT/test.$arch.en"
  sacrebleu "$OUT/raw/test.en" -i "$OUT/test.$arch.en" --tokenize none -b | tee "$OUT/bleu.$arch.txt"
done
