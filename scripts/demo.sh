#!/usr/bin/env bash
# The main job, from nothing but the repository:
#  1. the embedded stories260K checkpoint (HF layout): convert → verify → run a prompt (seconds);
#  2. task compilation on the embedded testbed model: convert, compile a scripture specialist with
#     small budgets, verify it, and compare it with the dense model on the same prompt, in size and
#     in held-out perplexity (scripts/demo_compile.sh; its files stay in build/demo/).
set -euo pipefail
cd "$(dirname "$0")/.."
CORTIQ=build/cortiq
OUT=build/stories260K.cmf
echo "== stories260K: convert → verify → run"
"$CORTIQ" convert models/stories260K --quant f32 -o "$OUT"
"$CORTIQ" verify "$OUT"
"$CORTIQ" run "$OUT" -p "Once upon a time" --greedy -n 64
echo
echo "== the testbed model: compile a specialist for one task"
bash scripts/demo_compile.sh build/demo
