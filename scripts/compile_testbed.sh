#!/usr/bin/env bash
# Compiles a specialist for each testbed domain (issue 31 item 5) and tabulates it against the
# dense testbed at the same codec: test-split ppl of the domain (never seen by compile) and of the
# three other domains, kept FFN fraction, file size, decode tok/s (cortiq bench, dense and
# specialist interleaved). Writes models/testbed/specialists/dense.cmf (the testbed at QUANT),
# specialists/<domain>.cmf, specialists/<domain>.log and specialists/<domain>.html, and the table
# to stdout (copy it into models/testbed/SPECIALISTS.md).
# Usage: scripts/compile_testbed.sh [domain …]   (default: code scripture dictionary manuals)
# Env: CORTIQ (binary, build/cortiq), CORPUS (../shared/data/testbed-corpus), QUANT (q8),
#      COMPILE_FLAGS (the recipe below), PPL_CHUNKS (100 chunks of 256 per test split), THREADS (1).
set -euo pipefail
cd "$(dirname "$0")/.."
CORTIQ=${CORTIQ:-build/cortiq}
CORPUS=${CORPUS:-../shared/data/testbed-corpus}
QUANT=${QUANT:-q8}
THREADS=${THREADS:-1}
PPL_CHUNKS=${PPL_CHUNKS:-100}
COMPILE_FLAGS=${COMPILE_FLAGS:---budget 240 --l1-aggression 6 --target-sparsity 0.5 --fcd-steps 90 --fcd-lr 3e-4}
OUT=models/testbed/specialists
DOMAINS=("$@")
[ ${#DOMAINS[@]} -gt 0 ] || DOMAINS=(code scripture dictionary manuals)
ALL=(code scripture dictionary manuals)
mkdir -p "$OUT"
[ -f "$OUT/dense.cmf" ] || "$CORTIQ" convert models/testbed --quant "$QUANT" -o "$OUT/dense.cmf" --threads "$THREADS" >/dev/null

ppl() {  # file split-file → ppl
  "$CORTIQ" ppl "$1" -f "$2" -c 256 --chunks "$PPL_CHUNKS" --threads "$THREADS" 2>/dev/null |
    sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p'
}
tg() {  # file → decode tok/s (tg128, 1 thread, 5 repetitions)
  "$CORTIQ" bench "$1" -p 0 -n 128 -r 5 -t 1 --json 2>/dev/null |
    python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)[0]["avg_ts"])'
}

declare -A DENSE
for d in "${ALL[@]}"; do DENSE[$d]=$(ppl "$OUT/dense.cmf" "$CORPUS/$d/test.txt"); done
dense_size=$(stat -c %s "$OUT/dense.cmf")
echo "| domain | kept FFN | test ppl dense → specialist | other domains' ppl (dense → specialist) | file MB (× smaller) | decode tok/s dense / spec (×) | compile |"
echo "|---|---|---|---|---|---|---|"
for d in "${DOMAINS[@]}"; do
  t0=$(date +%s)
  rc=0
  "$CORTIQ" compile "$OUT/dense.cmf" --task "$d" --corpus "$CORPUS/$d/train.txt" -o "$OUT/$d.cmf" \
    --report "$OUT/$d.html" --accept-worse --threads "$THREADS" $COMPILE_FLAGS >"$OUT/$d.log" 2>&1 || rc=$?
  t1=$(date +%s)
  if [ "$rc" != 0 ]; then echo "| $d | compile failed (exit $rc, see $OUT/$d.log) |||||| "; continue; fi
  kept=$(sed -n 's/.*keep sets (align [0-9]*): kept \([0-9.]*\)%.*/\1/p' "$OUT/$d.log")
  own=$(ppl "$OUT/$d.cmf" "$CORPUS/$d/test.txt")
  others=""
  for o in "${ALL[@]}"; do
    [ "$o" = "$d" ] && continue
    others+="$o ${DENSE[$o]} → $(ppl "$OUT/$d.cmf" "$CORPUS/$o/test.txt"); "
  done
  # decode: dense and specialist interleaved, best of 3 rounds each
  bd=0; bs=0
  for r in 1 2 3; do
    x=$(tg "$OUT/dense.cmf"); bd=$(python3 -c "print(max($bd,$x))")
    x=$(tg "$OUT/$d.cmf"); bs=$(python3 -c "print(max($bs,$x))")
  done
  size=$(stat -c %s "$OUT/$d.cmf")
  python3 - "$d" "$kept" "${DENSE[$d]}" "$own" "$others" "$dense_size" "$size" "$bd" "$bs" "$((t1 - t0))" <<'PY'
import sys
d, kept, dp, sp, others, ds, ss, bd, bs, sec = sys.argv[1:]
print(f"| {d} | {kept}% | {dp} → {sp} | {others.rstrip('; ')} | {int(ds)/1e6:.2f} → {int(ss)/1e6:.2f} "
      f"({int(ds)/int(ss):.2f}×) | {float(bd):.0f} / {float(bs):.0f} ({float(bs)/float(bd):.2f}×) | {int(sec)//60} min {int(sec)%60} s |")
PY
done
