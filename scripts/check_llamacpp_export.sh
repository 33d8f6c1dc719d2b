#!/usr/bin/env bash
# Runs `cortiq export-gguf` output in llama.cpp and compares it with cortiq on the CMF it came from.
# For each test model (random-weight llama f32 / f16, gemma, gemma2 written by
# tests/tools/gen_checkpoint.py with stories260K's tokenizer; stories260K f32 and q4; a defragged
# stories260K specialist, exported as `deci`):
#   - greedy text: llama.cpp's `llama-simple -n N PROMPT` against `cortiq run --raw --greedy -n N`,
#     with cortiq's default int8 activations and with --exact (f32 activations) ("same" when
#     cortiq's continuation appears verbatim in llama-simple's output, which echoes the prompt
#     first; both read as UTF-8 with invalid bytes replaced);
#   - perplexity: llama.cpp's `llama-perplexity -c CTX --chunks K` against `cortiq ppl --ctx CTX
#     --chunks K` (chunked mode: llama-perplexity's procedure) on the TinyStories sample.
# Prints a markdown table. gemma2 gets 26 layers: llama.cpp b4748 aborts on other gemma2 depths.
#
# usage: scripts/check_llamacpp_export.sh LLAMA_BIN_DIR   (needs build/cortiq, python3 + numpy,
#        ../shared/data/tinystories-sample; env N (tokens, 32), CTX (128), CHUNKS (4), THREADS (2))
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:?usage: scripts/check_llamacpp_export.sh LLAMA_BIN_DIR}
CORTIQ=${CORTIQ:-build/cortiq}
N=${N:-32}
CTX=${CTX:-128}
CHUNKS=${CHUNKS:-4}
THREADS=${THREADS:-2}
PROMPT="Once upon a time, there was a little"
TS=../shared/data/tinystories-sample/tinystories_sample.txt
for f in "$BIN/llama-simple" "$BIN/llama-perplexity" "$CORTIQ" "$TS"; do
  [ -e "$f" ] || { echo "check_llamacpp_export: $f missing" >&2; exit 1; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

gen() {  # NAME ARGS… → $TMP/NAME (an HF folder with stories260K's tokenizer)
  local name=$1
  shift
  /usr/bin/python3 tests/tools/gen_checkpoint.py --out "$TMP/$name" --tokenizer-dir models/stories260K \
    --vocab 512 --hidden 64 --heads 4 --kv-heads 2 --ffn 96 --std 0.1 "$@" >/dev/null
}
cmf() {  # SRC QUANT OUT.cmf
  "$CORTIQ" convert "$1" --quant "$2" -o "$3" >/dev/null 2>&1
}

gen llama --family llama --layers 2 --seed 1
gen gemma --family gemma --layers 2 --tied --seed 2
gen gemma2 --family gemma2 --layers 26 --head-dim 16 --tied --sliding-window 16 --seed 3
cmf "$TMP/llama" f32 "$TMP/llama-f32.cmf"
cmf "$TMP/llama" f16 "$TMP/llama-f16.cmf"
cmf "$TMP/gemma" f32 "$TMP/gemma.cmf"
cmf "$TMP/gemma2" f32 "$TMP/gemma2.cmf"
cmf models/stories260K f32 "$TMP/stories260K-f32.cmf"
cmf models/stories260K q4 "$TMP/stories260K-q4.cmf"
# a specialist with per-layer FFN widths (compile's L1 mask made physical)
"$CORTIQ" compile "$TMP/stories260K-f32.cmf" --task stories --corpus "$TS" --chunk 32 --select-chunks 4 \
  --report-chunks 4 --budget 6 --eval-every 3 --lr 0.5 --l1-aggression 50 --target-sparsity 0.3 \
  --ffn-align 1 --fcd-steps 0 -q --accept-worse -o "$TMP/stories260K-defrag.cmf" >/dev/null 2>&1

utf8() {  # stdin as UTF-8 with each invalid byte a U+FFFD (llama-simple prints raw token bytes)
  /usr/bin/python3 -c 'import sys; sys.stdout.write(sys.stdin.buffer.read().decode("utf-8", "replace"))'
}
ppl_of() {  # llama.cpp's "Final estimate: PPL = X" or cortiq's "PPL = X"
  sed -n 's/.*PPL = \([0-9.]*\).*/\1/p' | tail -1
}
echo "| model | GGUF arch | greedy $N tokens (cortiq default / --exact) | llama.cpp ppl | cortiq ppl |"
echo "|---|---|---|---|---|"
for m in llama-f32 llama-f16 gemma gemma2 stories260K-f32 stories260K-q4 stories260K-defrag; do
  c="$TMP/$m.cmf" g="$TMP/$m.gguf"
  if ! "$CORTIQ" export-gguf "$c" -o "$g" >"$TMP/export.log" 2>&1; then
    echo "| $m | export failed: $(tail -1 "$TMP/export.log") | | | |"
    continue
  fi
  arch=$(sed -n 's/^\([a-z0-9]*\): [0-9]* tensors, .* exact.*/\1/p' "$TMP/export.log" | head -1)
  want=$("$CORTIQ" run "$c" -p "$PROMPT" --raw --greedy -n "$N" -t "$THREADS" 2>/dev/null | utf8 | tr -d '\n' || true)
  got=$("$BIN/llama-simple" -m "$g" -n "$N" "$PROMPT" 2>/dev/null | utf8 | tr -d '\n' || true)
  wantx=$("$CORTIQ" run "$c" -p "$PROMPT" --raw --greedy -n "$N" -t "$THREADS" --exact 2>/dev/null | utf8 |
    tr -d '\n' || true)
  if [ -n "$want" ] && [[ "$got" == *"$want"* ]]; then same="same"; else same="differs"; fi
  if [ -n "$wantx" ] && [[ "$got" == *"$wantx"* ]]; then same="$same / same"; else same="$same / differs"; fi
  lp=$("$BIN/llama-perplexity" -m "$g" -f "$TS" -c "$CTX" --chunks "$CHUNKS" -t "$THREADS" 2>&1 | ppl_of || true)
  cp=$("$CORTIQ" ppl "$c" -f "$TS" --ctx "$CTX" --chunks "$CHUNKS" -t "$THREADS" 2>&1 | ppl_of || true)
  echo "| $m | $arch | $same | ${lp:-failed} | ${cp:-failed} |"
  if [[ "$same" == *differs* ]] && [ -n "${VERBOSE:-}" ]; then
    printf '  cortiq:    %s\n  --exact:   %s\n  llama.cpp: %s\n' "$want" "$wantx" "$got" >&2
  fi
done
