#!/usr/bin/env bash
# Measures the committed testbed model (models/testbed/, made by scripts/train_testbed.sh) and prints
# the numbers its MANIFEST gives: per-domain perplexity on the val and test splits (`cortiq ppl
# --ctx 256`, llama.cpp's chunked procedure: the second half of each 256-token chunk is scored) and
# one greedy continuation per domain, after convert → verify; the loss curve as a PNG.
# Usage: scripts/testbed_report.sh [WORK_DIR=/tmp/cortiq-testbed-report] [THREADS=2] [CHUNKS=-1]
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-/tmp/cortiq-testbed-report}
THREADS=${2:-2}
CHUNKS=${3:--1}  # chunks per split (-1 = all)
CORPUS=../shared/data/testbed-corpus
BIN=build/cortiq
mkdir -p "$WORK"
$BIN convert models/testbed --quant f32 -o "$WORK/testbed-f32.cmf" >/dev/null
$BIN verify "$WORK/testbed-f32.cmf"
echo "| domain | val ppl | test ppl |"
echo "|---|---:|---:|"
for d in code scripture dictionary manuals; do
  v=$($BIN ppl "$WORK/testbed-f32.cmf" -f "$CORPUS/$d/val.txt" --ctx 256 --chunks "$CHUNKS" --threads "$THREADS" --exact 2>/dev/null |
    sed -n 's/.*PPL = \([0-9.]*\).*/\1/p' | tail -1)
  t=$($BIN ppl "$WORK/testbed-f32.cmf" -f "$CORPUS/$d/test.txt" --ctx 256 --chunks "$CHUNKS" --threads "$THREADS" --exact 2>/dev/null |
    sed -n 's/.*PPL = \([0-9.]*\).*/\1/p' | tail -1)
  echo "| $d | $v | $t |"
done
declare -A prompt=([code]="def read_config(path):" [scripture]="And the LORD said unto Moses," \
  [dictionary]='Candle \Can"dle\, n.' [manuals]="NAME
       ls - list directory contents

SYNOPSIS")
for d in code scripture dictionary manuals; do
  echo "### $d"
  echo '```'
  $BIN run "$WORK/testbed-f32.cmf" --raw -p "${prompt[$d]}" -n 48 --greedy --threads "$THREADS" 2>/dev/null
  echo
  echo '```'
done
/usr/bin/python3 scripts/plot_train_log.py models/testbed/train_log.jsonl models/testbed/loss.png \
  "testbed: llama 5.8M on code / scripture / dictionary / manuals"
