// Bounded loopback load test for `cortiq serve` (issue 7 "Measure").
// usage: node bench.mjs BASE_URL [--key K] [--requests N] [--max-tokens M] [--levels 1,2,4,8] [--prompt P]
//                        [--rounds R]
// For each concurrency level: N streamed /v1/completions requests (greedy, ignore EOS impossible:
// max_tokens fixed, prompt fixed), C at a time. Prints TTFT p50/p99 (ms, first content chunk),
// aggregate completion tok/s (all tokens / wall time) and aggregate decode tok/s (tokens after the
// first of each request / sum over time of the decode phases overlapped = tokens / wall), failures.
// --rounds R (default 1) runs the whole cycle of levels R times, one table row per level and round,
// then a summary: per level the median aggregate decode tok/s over the rounds, and the median of the
// per-round ratios to the 1-stream rate of the same round. On a shared host whose speed drifts by
// ±20-30% over a minute, a ratio between levels measured seconds apart in one round is far less
// noisy than one between a single pass's first and third level.
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
const ROUNDS = Number(opt('rounds', '1'));

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
  if (!s.length) return NaN;  // every request of the level failed
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
};

/// N requests, c at a time; the row of the table as numbers.
async function level(c) {
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
  return { c, ttft50: pct(ttfts, 50), ttft99: pct(ttfts, 99), agg: toks / wall, aggDecode: decodeToks / wall,
    perStream: pct(perStream, 50), failed: results.length - ok.length };
}

const median = (a) => {
  const s = [...a].sort((x, y) => x - y);
  if (!s.length) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
console.log(`${ROUNDS > 1 ? 'round ' : ''}streams requests ttft_p50_ms ttft_p99_ms agg_tok_s agg_decode_tok_s ` +
  'per_stream_decode_tok_s failed');
const rounds = [];
for (let r = 0; r < ROUNDS; ++r) {
  const rows = [];
  for (const c of LEVELS) {
    const x = await level(c);
    rows.push(x);
    console.log([...(ROUNDS > 1 ? [r + 1] : []), c, N, x.ttft50.toFixed(1), x.ttft99.toFixed(1), x.agg.toFixed(1),
      x.aggDecode.toFixed(1), x.perStream.toFixed(1), x.failed].join(' '));
  }
  rounds.push(rows);
}
if (ROUNDS > 1) {
  const base = LEVELS.indexOf(1);
  console.log('\nsummary over rounds: streams median_agg_decode_tok_s median_ratio_to_1_stream ratios failed');
  LEVELS.forEach((c, i) => {
    const ratios = base >= 0 ? rounds.map((rows) => rows[i].aggDecode / rows[base].aggDecode) : [];
    console.log([c, median(rounds.map((rows) => rows[i].aggDecode)).toFixed(1),
      ratios.length ? median(ratios).toFixed(2) : '-', ratios.map((x) => x.toFixed(2)).join(',') || '-',
      rounds.reduce((s, rows) => s + rows[i].failed, 0)].join(' '));
  });
}
