#!/usr/bin/env bash
# The main job on the embedded default model (models/stories260K, HF layout):
# convert → verify → run a prompt → perplexity on the TinyStories sample (when ../shared has it).
set -euo pipefail
cd "$(dirname "$0")/.."
CORTIQ=build/cortiq
OUT=build/stories260K.cmf
"$CORTIQ" convert models/stories260K --quant f32 -o "$OUT"
"$CORTIQ" verify "$OUT"
"$CORTIQ" run "$OUT" -p "Once upon a time" --greedy -n 64
if [ -f ../shared/data/tinystories-sample/tinystories_sample.txt ]; then
  "$CORTIQ" ppl "$OUT" -f ../shared/data/tinystories-sample/tinystories_sample.txt --ctx 256
else
  echo "demo: perplexity skipped (../shared/data/tinystories-sample is not beside the repo)"
fi
