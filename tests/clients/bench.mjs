// Bounded loopback load test for `cortiq serve` (issue 7 "Measure").
// usage: node bench.mjs BASE_URL [--key K] [--requests N] [--max-tokens M] [--levels 1,2,4,8] [--prompt P]
// For each concurrency level: N streamed /v1/completions requests (greedy, ignore EOS impossible:
// max_tokens fixed, prompt fixed), C at a time. Prints TTFT p50/p99 (ms, first content chunk),
// aggregate completion tok/s (all tokens / wall time) and aggregate decode tok/s (tokens after the
// first of each request / sum over time of the decode phases overlapped = tokens / wall), failures.
const args = process.argv.slice(2);
const BASE = args[0];
const opt = (name, def) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : def;
};
const KEY = opt('key', 'none');
const N = Number(opt('requests', '16'));
const M = Number(opt('max-tokens', '128'));
const LEVELS = opt('levels', '1,2,4,8').split(',').map(Number);
const PROMPT = opt('prompt', 'Once upon a time');

async function one() {
  const t0 = performance.now();
  const r = await fetch(`${BASE}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ prompt: PROMPT, max_tokens: M, temperature: 0, stream: true,
      stream_options: { include_usage: true } }),
  });
  if (r.status !== 200) return { ok: false, status: r.status };
  let ttft = null;
  let tokens = 0;
  let buf = '';
  const dec = new TextDecoder();
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      if (j.choices?.length && j.choices[0].text && ttft === null) ttft = performance.now() - t0;
      if (j.usage) tokens = j.usage.completion_tokens;
    }
  }
  const total = performance.now() - t0;
  return { ok: true, ttft: ttft ?? total, total, tokens };
}

const pct = (a, p) => {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
};

console.log('streams requests ttft_p50_ms ttft_p99_ms agg_tok_s agg_decode_tok_s per_stream_decode_tok_s failed');
for (const c of LEVELS) {
  const results = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: c }, async () => {
    while (next < N) {
      next++;
      results.push(await one().catch((e) => ({ ok: false, err: String(e) })));
    }
  }));
  const wall = (performance.now() - t0) / 1000;
  const ok = results.filter((r) => r.ok);
  const toks = ok.reduce((s, r) => s + r.tokens, 0);
  const decodeToks = ok.reduce((s, r) => s + Math.max(0, r.tokens - 1), 0);
  const perStream = ok.map((r) => Math.max(0, r.tokens - 1) / ((r.total - r.ttft) / 1000));
  const ttfts = ok.map((r) => r.ttft);
  console.log([c, N, pct(ttfts, 50).toFixed(1), pct(ttfts, 99).toFixed(1), (toks / wall).toFixed(1),
    (decodeToks / wall).toFixed(1), pct(perStream, 50).toFixed(1), results.length - ok.length].join(' '));
}
