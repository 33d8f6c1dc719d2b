#!/usr/bin/env bash
# End-to-end benchmark (issue 6 item 4): generates a random-weight Qwen2.5-0.5B-shaped checkpoint
# (tests/tools/gen_checkpoint.py --preset qwen2.5-0.5b: hidden 896, 24 layers, 14 heads / 2 KV,
# FFN 4864, vocab 151936, tied embeddings, the real Qwen2.5 tokenizer), converts it to each codec
# and runs `cortiq bench` on every file, writing one combined markdown report (and the JSON
# records of every run next to it).
#
# Usage: bench/e2e_bench.sh [options]
#   --cortiq PATH     cortiq binary (default: $CORTIQ, else build/cortiq, else the newest build-*/cortiq)
#   --work DIR        scratch dir for the checkpoint and .cmf files (default /tmp/cortiq-e2e-bench);
#                     files already there are reused (delete the dir to regenerate)
#   --out FILE        report (default bench/results/e2e-<date>.md)
#   --quants LIST     comma-separated (default f16,q8,q8_2f,q4t,q4tp,q2tp,q1t,q1s,vbit)
#   -p N -n N -r N -t LIST   passed to `cortiq bench` (defaults 512, 128, 3, 1,2)
#   --exact           passed to `cortiq bench`
#   --no-mmap         passed to `cortiq bench` (load into huge-page memory instead of mmap)
#   --clean           remove the work dir at the end (default: kept, so a rerun skips generation)
# Needs /usr/bin/python3 with numpy (Debian python3-numpy) and ~3 GB of free disk.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CORTIQ="${CORTIQ:-}"
WORK=/tmp/cortiq-e2e-bench
OUT=""
QUANTS="f16,q8,q8_2f,q4t,q4tp,q2tp,q1t,q1s,vbit"
P=512 N=128 R=3 T=1,2
EXACT=""
NOMMAP=""
CLEAN=0

while [[ $# -gt 0 ]]; do
  case "$1" in
    --cortiq) CORTIQ="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --quants) QUANTS="$2"; shift 2 ;;
    -p) P="$2"; shift 2 ;;
    -n) N="$2"; shift 2 ;;
    -r) R="$2"; shift 2 ;;
    -t) T="$2"; shift 2 ;;
    --exact) EXACT="--exact"; shift ;;
    --no-mmap) NOMMAP="--no-mmap"; shift ;;
    --clean) CLEAN=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "e2e_bench: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [[ -z "$CORTIQ" ]]; then
  if [[ -x "$ROOT/build/cortiq" ]]; then
    CORTIQ="$ROOT/build/cortiq"
  else
    CORTIQ="$(ls -t "$ROOT"/build-*/cortiq 2>/dev/null | head -1 || true)"
  fi
fi
[[ -n "$CORTIQ" && -x "$CORTIQ" ]] || { echo "e2e_bench: no cortiq binary (build cortiq_cli or pass --cortiq)" >&2; exit 2; }
[[ -z "$OUT" ]] && OUT="$ROOT/bench/results/e2e-$(date +%Y%m%d-%H%M%S).md"
mkdir -p "$WORK" "$(dirname "$OUT")"
PY=/usr/bin/python3

HF="$WORK/qwen2.5-0.5b-random"
if [[ ! -f "$HF/config.json" ]]; then
  echo "e2e_bench: generating the checkpoint in $HF" >&2
  "$PY" "$ROOT/tests/tools/gen_checkpoint.py" --preset qwen2.5-0.5b --tokenizer qwen2.5 --dtype bf16 \
    --seed 1 --out "$HF" >&2
fi

{
  echo "# cortiq e2e bench — Qwen2.5-0.5B-shaped random checkpoint"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cpus," \
       "flags: $(grep -m1 -o -w -E 'avx512_vnni|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "- host load (1/5/15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- binary: $CORTIQ"
  echo "- bench: -p $P -n $N -r $R -t $T $EXACT $NOMMAP"
  echo
} > "$OUT"

IFS=',' read -r -a QL <<< "$QUANTS"
for q in "${QL[@]}"; do
  cmf="$WORK/qwen05-$q.cmf"
  if [[ ! -f "$cmf" ]]; then
    echo "e2e_bench: converting to $q" >&2
    "$CORTIQ" convert --model "$HF" --quant "$q" --threads 2 -o "$cmf" >&2
  fi
  echo "e2e_bench: bench $q" >&2
  {
    echo "## $q"
    echo
  } >> "$OUT"
  if "$CORTIQ" bench "$cmf" -p "$P" -n "$N" -r "$R" -t "$T" $EXACT $NOMMAP --progress \
       --json-file "${OUT%.md}-$q.json" > "$WORK/bench-$q.md"; then
    cat "$WORK/bench-$q.md" >> "$OUT"
  else
    echo "**bench failed for $q** (see stderr)" >> "$OUT"
  fi
  echo >> "$OUT"
done

echo "e2e_bench: report in $OUT" >&2
[[ "$CLEAN" == 1 ]] && rm -rf "$WORK"
exit 0
