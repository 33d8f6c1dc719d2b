#!/usr/bin/env bash
# Trains the testbed model (issue 29 item 5): a byte-level BPE tokenizer and a small Llama on the
# four domains of ../shared/data/testbed-corpus (code, scripture, dictionary, manuals), with this
# repo's own trainer. The HF folder lands in models/testbed/ (the training state, ~3× the model,
# stays in the work folder). Interrupted (Ctrl-C saves a checkpoint)? Run it again with the same
# work folder: it resumes.
# Usage: scripts/train_testbed.sh [WORK_DIR=/tmp/cortiq-testbed] [THREADS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-/tmp/cortiq-testbed}
THREADS=${2:-2}
CORPUS=../shared/data/testbed-corpus
BIN=build/cortiq
mkdir -p "$WORK" models/testbed
DOMAINS="code scripture dictionary manuals"
train=() val=()
for d in $DOMAINS; do train+=(--data "$CORPUS/$d/train.txt"); val+=(--val "$CORPUS/$d/val.txt"); done
if [ ! -f "$WORK/tokenizer.json" ]; then
  $BIN train-tokenizer "$CORPUS"/*/train.txt -o "$WORK/tokenizer.json" --vocab-size 4096
fi
resume=()
if [ -f "$WORK/run/checkpoint/trainer.json" ]; then resume=(--resume "$WORK/run/checkpoint"); fi
$BIN train -o "$WORK/run" --tokenizer "$WORK/tokenizer.json" "${train[@]}" "${val[@]}" "${resume[@]}" \
  --hidden-size 256 --layers 6 --heads 8 --kv-heads 4 --intermediate-size 768 --context 256 \
  --steps 700 --batch 16 --seq-len 256 --lr 2e-3 --min-lr 2e-4 --warmup 30 --clip 1.0 \
  --seed 1 --init-seed 1 --threads "$THREADS" --eval-every 50 --eval-windows 16 --save-every 50 \
  --log "$WORK/train_log.jsonl"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do cp "$WORK/run/$f" models/testbed/; done
cp "$WORK/train_log.jsonl" models/testbed/train_log.jsonl
echo "train_testbed: models/testbed/ written from $WORK/run"
