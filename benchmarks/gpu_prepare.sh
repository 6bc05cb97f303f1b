#!/usr/bin/env bash
# Packs what the GPU check (benchmarks/gpu_check.sh) needs on a machine with Python 3.12 and
# PyTorch but no package index: cp312 wheels of fairseq (ve-fairseq) and of the fairseq needs such
# a machine may lack (hydra-core, omegaconf, antlr4-python3-runtime built with pip wheel, bitarray),
# and the data-bins as tarballs without their CoNLL-U copies (Multi30k: about 3 MB en-de, 5 MB en-fr).
#
#   bash benchmarks/gpu_prepare.sh runs/multi30k_dep_rel/data-bin runs/multi30k_en_fr/data-bin [.whl]
#
# Everything lands in .whl/ (add "/.whl/" to .git/info/exclude; carry it to the GPU machine),
# 30 MB in all, well inside a 64 MiB transfer. The plugin itself travels as the checkout.
set -euo pipefail
SRC=${1:?data-bin with a source-side parse}; TGT=${2:-}; W=${3:-.whl}
mkdir -p "$W"
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT \
  -d "$W" ve-fairseq==0.12.3 hydra-core==1.3.2 omegaconf==2.3.0 bitarray
python3 -m pip wheel -q --no-deps -w "$W" antlr4-python3-runtime==4.9.3
tar czf "$W/source.tgz" --exclude='*.conllu' -C "$(dirname "$SRC")" "$(basename "$SRC")" --transform 's,^[^/]*,source,'
if [ -n "$TGT" ]; then
  tar czf "$W/target.tgz" --exclude='*.conllu' -C "$(dirname "$TGT")" "$(basename "$TGT")" --transform 's,^[^/]*,target,'
fi
du -sh "$W"
