#!/usr/bin/env bash
# Four real skills on the testbed model (issue 30 item 5): one donor per domain fine-tuned from the
# f16 backbone with only the FFN of layers 4 and 5 trainable, added as skills `code`, `scripture`,
# `dictionary`, `manuals` (overlays at f16, router descriptor from 128 train-split windows, rank 8,
# φ after layer 4) into OUTDIR/testbed-skills.cmf; then the measurements of models/testbed/SKILLS.md:
# each domain's test-split perplexity, backbone vs its skill (materialize → export → apply → ppl),
# and routing accuracy on 16/32/64-token windows of the test splits (`skill eval-routing`).
# Donors train in parallel, one thread each; a finished donor (OUTDIR/donor-D/model.safetensors) is
# not trained again. Results: OUTDIR/results.txt.
# Usage: scripts/make_skills.sh OUTDIR [STEPS=200] [LR=3e-3]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/make_skills.sh OUTDIR [STEPS] [LR]}
STEPS=${2:-200}
LR=${3:-3e-3}
CORPUS=../shared/data/testbed-corpus
BIN=build/cortiq
DOMAINS="code scripture dictionary manuals"
mkdir -p "$OUT"
$BIN convert models/testbed --quant f16 -o "$OUT/base.cmf" >/dev/null

start=$(date +%s)
pids=()
for d in $DOMAINS; do
  [ -f "$OUT/donor-$d/model.safetensors" ] && continue
  $BIN train --init "$OUT/base.cmf" --trainable 'model.layers.4.mlp.*,model.layers.5.mlp.*' \
    --tokenizer models/testbed/tokenizer.json --data "$CORPUS/$d/train.txt" -o "$OUT/donor-$d" \
    --steps "$STEPS" --batch 8 --seq-len 256 --lr "$LR" --min-lr "$(python3 -c "print($LR/10)")" --warmup 10 \
    --clip 1.0 --threads 1 --seed 3 --log "$OUT/donor-$d.jsonl" >"$OUT/donor-$d.out" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
echo "donors: $(( $(date +%s) - start )) s wall (4 in parallel, 1 thread each)" | tee "$OUT/results.txt"

cp "$OUT/base.cmf" "$OUT/skills.tmp"
for d in $DOMAINS; do
  python3 scripts/skill_prompts.py "$CORPUS/$d/train.txt" 128 --seed 7 --min-chars 40 --max-chars 300 \
    >"$OUT/prompts-$d.txt"
  $BIN skill add "$OUT/skills.tmp" --from "$OUT/donor-$d" --id "$d" --name "$d" --tensors ffn --layers 4-5 \
    --prompts "$OUT/prompts-$d.txt" --rank 8 -o "$OUT/skills.next" | tee -a "$OUT/results.txt"
  mv "$OUT/skills.next" "$OUT/skills.tmp"
done
# router calibration (header.routing: temperature, novelty θ) from windows of the VAL splits — held
# out from the descriptors' train-split prompts and from the test splits measured below
cal=()
for d in $DOMAINS; do cal+=(--domain "$d=$CORPUS/$d/val.txt"); done
$BIN skill calibrate "$OUT/skills.tmp" "${cal[@]}" --tokens 32 --samples 48 -o "$OUT/testbed-skills.cmf" \
  | tee -a "$OUT/results.txt"
rm "$OUT/skills.tmp"
$BIN skill list "$OUT/testbed-skills.cmf" | tee -a "$OUT/results.txt"
ls -l "$OUT/base.cmf" "$OUT/testbed-skills.cmf" | tee -a "$OUT/results.txt"

ppl() { $BIN ppl "$1" -f "$2" --ctx 256 --chunks 24 2>/dev/null | sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p'; }
echo "| domain | backbone ppl | skill ppl | change | auto ppl (routed to) |" | tee -a "$OUT/results.txt"
for d in $DOMAINS; do
  $BIN skill materialize "$OUT/testbed-skills.cmf" "$d" -o "$OUT/spec-$d.cmf" >/dev/null
  $BIN skill export "$OUT/spec-$d.cmf" --base "$OUT/base.cmf" --id "$d" -o "$OUT/skill-$d.cmf" >/dev/null
  $BIN skill apply "$OUT/base.cmf" "$OUT/skill-$d.cmf" -o "$OUT/applied-$d.cmf" >/dev/null
  b=$(ppl "$OUT/base.cmf" "$CORPUS/$d/test.txt")
  s=$(ppl "$OUT/applied-$d.cmf" "$CORPUS/$d/test.txt")
  # routed: --skill auto on the skills file (the decision is taken on the text's first 128 tokens)
  a=$($BIN ppl "$OUT/testbed-skills.cmf" -f "$CORPUS/$d/test.txt" --ctx 256 --chunks 24 --skill auto 2>"$OUT/auto-$d.err" \
    | sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')
  to=$(sed -n 's/^routed to \(skill: \)\{0,1\}\([A-Za-z0-9_-]*\).*/\2/p' "$OUT/auto-$d.err" | head -1)
  echo "| $d | $b | $s | $(python3 -c "print(f'{($s/$b-1)*100:+.1f} %')") | $a ($to) |" | tee -a "$OUT/results.txt"
done
# resident memory: the backbone alone vs one skill active (bench's RSS line after its tests, mmap)
for sk in none code; do
  $BIN bench "$OUT/testbed-skills.cmf" --skill "$sk" -p 64 -n 16 -r 1 -t 1 2>/dev/null \
    | grep -E '^(skill|load):' | tee -a "$OUT/results.txt"
done
doms=()
for d in $DOMAINS; do doms+=(--domain "$d=$CORPUS/$d/test.txt"); done
$BIN skill eval-routing "$OUT/testbed-skills.cmf" "${doms[@]}" --tokens 16,32,64 --samples 64 | tee -a "$OUT/results.txt"
