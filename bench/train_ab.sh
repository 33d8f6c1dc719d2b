#!/usr/bin/env bash
# Trainer speed, interleaved (issue 29 item 6): `cortiq train` of two binaries (before / after) and
# PyTorch (bench/train_vs_torch.py) on the testbed shape (llama, hidden 256, 6 layers, 8 heads / 4
# KV, FFN 768, vocab 4096 tied, batch 16 × 256), at each thread count, in rounds A, B, torch, A, B,
# torch, … so drift on a shared host lands on all three alike. cortiq's wall rate is taken from its
# --log between the end of step 1 and the end of the last step (the first step pays the binding and
# the data load); torch's from its own timer after one warm-up step. On a host shared with other
# jobs the wall rate drifts with their load, so each run also reports a CPU rate: tokens per
# CPU-second of the process (cortiq: the whole process, startup and step 1 included, so it
# understates cortiq; torch: the timed steps, time.process_time) — at 1 thread the speed the run
# would have alone (up to cache sharing); at 2 threads it counts both threads' seconds.
# Usage: bench/train_ab.sh BEFORE_BIN AFTER_BIN [STEPS=10] [ROUNDS=2] [THREADS="1 2"] [OUT=/tmp/train-ab]
# Prints one line per run: "<who> threads=<t> round=<r> <tok/s>".
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1
B=$2
STEPS=${3:-10}
ROUNDS=${4:-2}
THREADS=${5:-"1 2"}
OUT=${6:-/tmp/train-ab}
mkdir -p "$OUT"
DATA=../shared/data/testbed-corpus/scripture/val.txt  # ~50k tokens: plenty of 256-token windows
TOK=models/testbed/tokenizer.json
run_cortiq() {  # bin label threads round
  local log="$OUT/$2-t$3-r$4.jsonl"
  rm -rf "$OUT/run-$2" "$log"
  /usr/bin/time -f "%U %S" -o "$log.cpu" "$1" train -o "$OUT/run-$2" --tokenizer "$TOK" --data "$DATA" --hidden-size 256 --layers 6 --heads 8 \
    --kv-heads 4 --intermediate-size 768 --context 256 --steps "$STEPS" --batch 16 --seq-len 256 --lr 2e-3 \
    --warmup 2 --seed 1 --init-seed 1 --threads "$3" --save-every 0 --log "$log" > /dev/null
  python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
u, s = map(float, open(sys.argv[1] + ".cpu").read().split()[-2:])
print("%s threads=%s round=%s wall %.0f tok/s  cpu %.0f tok/s" % (sys.argv[2], sys.argv[3], sys.argv[4],
      (r[-1]["tokens"] - r[0]["tokens"]) / (r[-1]["seconds"] - r[0]["seconds"]), r[-1]["tokens"] / (u + s)))' "$log" "$2" "$3" "$4"
}
for r in $(seq "$ROUNDS"); do
  for t in $THREADS; do
    run_cortiq "$A" before "$t" "$r"
    run_cortiq "$B" after "$t" "$r"
    /usr/bin/python3 bench/train_vs_torch.py "$t" "$STEPS" | sed "s/^/torch round=$r /"
  done
done
