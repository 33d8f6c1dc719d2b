#!/usr/bin/env bash
# Fixture of the C API and Python tests: the embedded stories260K with a small chat template,
# converted to f32 CMF, and what the CLI answers for it — the oracles the tests compare against.
# Usage: prepare.sh CORTIQ_CLI OUT_DIR
set -euo pipefail
cli=$1
out=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$out"
mkdir -p "$out/hf"
for f in "$src"/models/stories260K/*; do ln -s "$f" "$out/hf/"; done
printf '%s' '{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}
{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}' >"$out/hf/chat_template.jinja"
"$cli" convert "$out/hf" -o "$out/s.cmf" --quant f32 >/dev/null 2>&1
mkdir -p "$out/sh"  # the same model as a shard set (its first shard's name opens the set)
"$cli" convert "$out/hf" -o "$out/sh/s.cmf" --quant f32 --shard-max-gb 0.001 >/dev/null 2>&1
"$cli" run "$out/s.cmf" --raw -p "Once upon a time" --greedy -n 40 --threads 1 >"$out/greedy.txt" 2>/dev/null
"$cli" tokenize "$out/s.cmf" --text "Once upon a time, Lily" --ids-only >"$out/ids.txt"
printf '%s' '[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me a story."}]' >"$out/msgs.json"
"$cli" template "$out/s.cmf" --messages "$out/msgs.json" >"$out/chat.txt"
printf '%s' 'One day, a little girl named Lily found a needle in her room. She knew it was difficult to play with it.' >"$out/ppl.txt"
"$cli" ppl "$out/s.cmf" -f "$out/ppl.txt" --mode prefix --threads 1 >"$out/ppl.out" 2>/dev/null
echo "capi fixture ready in $out"
