#!/usr/bin/env bash
# The README's "default (int8) vs --exact" perplexity table: stories260K converted to each codec,
# `cortiq ppl --ctx 256` on the TinyStories sample and the wikitext-2 test set (from ../shared), once
# with the default int8 activations and once with --exact. Prints the markdown rows.
# usage: scripts/ppl_table.sh [QUANT...]   (default: q8 q4tp vbit q1t q1s); needs build/cortiq.
set -euo pipefail
cd "$(dirname "$0")/.."
CORTIQ=build/cortiq
TS=../shared/data/tinystories-sample/tinystories_sample.txt
WT=../shared/data/wikitext-2-raw-test/wikitext-test.crlf.txt
for f in "$TS" "$WT"; do
  [ -f "$f" ] || { echo "ppl_table: $f missing (needs ../shared/data)" >&2; exit 1; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ppl() {  # FILE.cmf DATA [--exact] → the perplexity value
  "$CORTIQ" ppl "$1" -f "$2" --ctx 256 "${@:3}" 2>/dev/null | sed -n 's/^PPL = \([^ ]*\) .*/\1/p'
}
[ $# -gt 0 ] || set -- q8 q4tp vbit q1t q1s
echo "| file | TinyStories sample | wikitext-2 test |"
echo "|---|---|---|"
for q in "$@"; do
  "$CORTIQ" convert models/stories260K --quant "$q" -o "$TMP/$q.cmf" >/dev/null 2>&1
  echo "| $q | $(ppl "$TMP/$q.cmf" "$TS") vs $(ppl "$TMP/$q.cmf" "$TS" --exact) |" \
       "$(ppl "$TMP/$q.cmf" "$WT") vs $(ppl "$TMP/$q.cmf" "$WT" --exact) |"
done
