// Chaos test of a live `cortiq serve` (issue 27 §8). Started by tests/chaos_serve_test.cc, which passes:
//   CHAOS_CLI        the cortiq binary;  CHAOS_MODEL  the .cmf to serve;  CHAOS_TMP  a scratch folder
//   CHAOS_TOKENIZER  the model's tokenizer.json (ids of byte / special tokens, the local decoder)
//   CHAOS_CHAT       "none": the model has no chat template (chat must answer the documented 400)
//   CHAOS_SEED (1), CHAOS_REQUESTS (400), CHAOS_CONCURRENCY (8)
// It starts the server on 127.0.0.1 with --parallel 4, sends CHAOS_REQUESTS random but valid requests
// (a list fixed by the seed) from CHAOS_CONCURRENCY clients, checks every answer, the server's RSS and
// that it still serves at the end. When the server dies, the requests in flight are replayed one by
// one on a fresh server to name the one that kills it. Exits non-zero after printing every failure
// with its request body.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { makeSpecs, mulberry } from './chaos_gen.mjs';
import { Vocab } from './chaos_vocab.mjs';

const env = process.env;
const SEED = Number(env.CHAOS_SEED ?? 1);
const COUNT = Number(env.CHAOS_REQUESTS ?? 400);
const CONC = Number(env.CHAOS_CONCURRENCY ?? 8);
const LABEL = path.basename(env.CHAOS_MODEL);
const vocab = new Vocab(JSON.parse(fs.readFileSync(env.CHAOS_TOKENIZER, 'utf8')));
const failures = [];
const stats = { sent: 0, status: {}, aborted: 0, idChecks: 0, idUnresolved: 0, pairChecks: 0, named500: 0, maxRss: 0 };
const MB = 1 << 20;
console.log(`chaos ${LABEL}: seed ${SEED} (CHAOS_SEED), ${COUNT} requests, ${CONC} clients`);

// ---- the server ---------------------------------------------------------------------------------
let runNo = 0;
const live = new Set();  // servers not yet exited: killed when this process ends, however it ends
process.on('exit', () => { for (const s of live) s.child.kill('SIGKILL'); });
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(2));
async function startServer() {
  const errPath = path.join(env.CHAOS_TMP, `serve${++runNo}.err`);
  const err = fs.openSync(errPath, 'w');
  const args = ['serve', env.CHAOS_MODEL, '--host', '127.0.0.1', '--port', '0', '--parallel', '4', '--threads', '1'];
  const child = spawn(env.CHAOS_CLI, args, { stdio: ['ignore', 'pipe', err] });
  fs.closeSync(err);
  const srv = { child, errPath, exited: false, base: null };
  live.add(srv);
  child.on('exit', (code, sig) => { srv.exited = true; srv.exit = sig ?? code; live.delete(srv); });
  let out = '';
  srv.base = await new Promise((resolve) => {
    const t = setTimeout(() => resolve(null), 30000);
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/Listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) { clearTimeout(t); resolve(m[1]); }
    });
    child.on('exit', () => { clearTimeout(t); resolve(null); });
  });
  child.stdout.resume();
  if (!srv.base) throw new Error(`server did not start: ${fs.readFileSync(errPath, 'utf8')}`);
  return srv;
}
async function stopServer(srv) {
  if (srv.exited) return;
  const gone = new Promise((r) => srv.child.on('exit', r));
  srv.child.kill('SIGTERM');
  const t = setTimeout(() => srv.child.kill('SIGKILL'), 10000);
  await gone;
  clearTimeout(t);
}
function rssBytes(pid) {
  let status = '';
  try { status = fs.readFileSync(`/proc/${pid}/status`, 'utf8'); } catch { /* gone: judged by alive() */ }
  const m = status.match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) * 1024 : 0;
}
const tail = (p, n = 2000) => { const s = fs.readFileSync(p, 'utf8'); return s.slice(Math.max(0, s.length - n)); };

// ---- HTTP ---------------------------------------------------------------------------------------
async function post(srv, p, body, signal) {
  const r = await fetch(srv.base + p, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    signal: signal ?? AbortSignal.timeout(60000),
  });
  return r;
}
async function postJson(srv, p, body) {
  const r = await post(srv, p, body);
  const text = await r.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: r.status, text, json, type: r.headers.get('content-type') ?? '' };
}
// Reads an SSE body: the parsed events (objects, or 'DONE'); stops reading after `abortAfter` events.
async function readSse(r, ctl, abortAfter) {
  const events = [];
  const dec = new TextDecoder();
  let buf = '';
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, at);
      buf = buf.slice(at + 2);
      if (!ev.startsWith('data: ')) throw new Error(`SSE event without 'data: ': ${JSON.stringify(ev)}`);
      const d = ev.slice(6);
      events.push(d === '[DONE]' ? 'DONE' : JSON.parse(d));  // throws on an invalid event
      if (abortAfter && events.length >= abortAfter) { ctl.abort(); return { events, aborted: true }; }
    }
  }
  if (buf.trim()) throw new Error(`SSE body ends with a partial event: ${JSON.stringify(buf)}`);
  return { events, aborted: false };
}

// ---- checks -------------------------------------------------------------------------------------
function fail(spec, why, extra = '') {
  failures.push({ spec, why, extra });
  if (failures.length > 60) return;  // the count is printed at the end
  console.log(`FAIL #${spec.i} ${spec.path} ${why}\n  request: ${JSON.stringify(spec.body)}${extra ? '\n  ' + extra : ''}`);
}
// A server error that names its cause passes, but is listed.
function note(spec, what) {
  stats.named500++;
  console.log(`NOTE #${spec.i} ${spec.path} ${what}\n  request: ${JSON.stringify(spec.body)}`);
}
// A non-2xx answer: JSON {"error":{"message"}}; a 5xx only when its message names a cause (a
// request that is valid may get one, a wrong one must get its 400).
function checkError(spec, res) {
  const msg = res.json?.error?.message;
  if (typeof msg !== 'string' || !msg) return fail(spec, `status ${res.status} without a JSON error`, res.text.slice(0, 300));
  if (res.status >= 500) {
    if (msg.length < 12) return fail(spec, `status ${res.status} with a vague error`, res.text.slice(0, 300));
    if (spec.expect !== 400) return note(spec, `answered ${res.status}: ${msg}`);
  }
  if (spec.expect === 200) fail(spec, `expected 200, got ${res.status}`, res.text.slice(0, 300));
  if (spec.expect === 400 && res.status !== 400) fail(spec, `expected 400, got ${res.status}`, res.text.slice(0, 300));
}
function choiceText(ch, chat) { return chat ? (ch.delta?.content ?? ch.message?.content ?? '') : ch.text; }
function checkCompletionBody(spec, j) {
  const ch = j?.choices?.[0];
  const chat = spec.path.includes('chat');
  if (!ch || typeof choiceText(ch, chat) !== 'string' || !['stop', 'length'].includes(ch.finish_reason))
    return fail(spec, 'malformed completion', JSON.stringify(j).slice(0, 400));
  const u = j.usage;
  if (!Number.isInteger(u?.completion_tokens) || u.completion_tokens > (spec.body.max_tokens ?? 16))
    fail(spec, 'usage.completion_tokens missing or above max_tokens', JSON.stringify(u));
}
// Text = what /detokenize gives for the ids: the ids are recovered from logprobs' tokens (several ids
// may spell the same bytes; the local decoder picks one that explains the text), then the server's
// own /detokenize must agree: detok(prompt ++ ids) == detok(prompt) + text.
async function checkIds(srv, spec, j) {
  const ch = j.choices[0];
  if (!ch.logprobs || spec.body.echo || (spec.body.stop && ch.finish_reason === 'stop')) return;
  const prompt = await promptIds(srv, spec.body.prompt);
  if (!prompt || !vocab.endsClean(prompt)) return;
  const cands = ch.logprobs.tokens.map((t) => vocab.candidates(t));
  const ids = vocab.resolve(prompt, cands, ch.text);
  if (ids === null) { stats.idUnresolved++; return; }
  stats.idChecks++;
  const both = await postJson(srv, '/detokenize', { tokens: [...prompt, ...ids] });
  const head = await postJson(srv, '/detokenize', { tokens: prompt });
  const want = both.json?.content, pre = head.json?.content;
  if (typeof want !== 'string' || typeof pre !== 'string' || !want.startsWith(pre) || want.slice(pre.length) !== ch.text)
    fail(spec, 'text differs from /detokenize of its ids',
      `ids ${JSON.stringify(ids)}\n  text ${JSON.stringify(ch.text)}\n  detokenize ${JSON.stringify(want)} (prompt part ${JSON.stringify(pre)})`);
}
async function promptIds(srv, prompt) {
  if (typeof prompt === 'string' || (Array.isArray(prompt) && typeof prompt[0] === 'string')) {
    const r = await postJson(srv, '/tokenize', { content: typeof prompt === 'string' ? prompt : prompt[0], add_special: true });
    return r.json?.tokens ?? null;
  }
  return Array.isArray(prompt[0]) ? prompt[0] : prompt;
}

// ---- one request --------------------------------------------------------------------------------
async function runSpec(srv, spec) {
  stats.sent++;
  const count = (s) => { stats.status[s] = (stats.status[s] ?? 0) + 1; };
  if (!spec.body.stream) {
    const res = await postJson(srv, spec.path, spec.body);
    count(res.status);
    if (res.json === undefined) return fail(spec, `status ${res.status}: body is not JSON`, res.text.slice(0, 300));
    if (res.status !== 200) return checkError(spec, res);
    if (spec.expect === 400) return fail(spec, 'expected 400, got 200', res.text.slice(0, 300));
    if (spec.kind !== 'gen') return spec.check?.(res.json, fail.bind(null, spec));
    checkCompletionBody(spec, res.json);
    if (!spec.greedy && !spec.path.includes('chat')) await checkIds(srv, spec, res.json);
    if (spec.pair) await pairCheck(srv, spec, res.json.choices[0].text);
    return;
  }
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 60000);
  try {
    const r = await post(srv, spec.path, spec.body, ctl.signal);
    count(r.status);
    if (!(r.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
      const text = await r.text();
      let json;
      try { json = JSON.parse(text); } catch { return fail(spec, `status ${r.status}: body is neither SSE nor JSON`, text.slice(0, 300)); }
      if (r.status === 200) return fail(spec, 'a stream answered with a JSON 200', text.slice(0, 300));
      return checkError(spec, { status: r.status, json, text });
    }
    const { events, aborted } = await readSse(r, ctl, spec.abortAfter);
    if (aborted) { stats.aborted++; return; }
    checkSse(spec, events);
  } catch (e) {
    if (ctl.signal.aborted && spec.abortAfter) { stats.aborted++; return; }
    if (e instanceof SyntaxError) return fail(spec, `invalid SSE event JSON: ${e.message}`);
    throw e;
  } finally { clearTimeout(timer); }
}
function sseText(spec, events) {
  const chat = spec.path.includes('chat');
  return events.filter((e) => e !== 'DONE' && e.choices?.length).map((e) => choiceText(e.choices[0], chat) ?? '').join('');
}
function checkSse(spec, events) {
  if (events.at(-1) !== 'DONE') return fail(spec, 'stream does not end with [DONE]', JSON.stringify(events.slice(-2)));
  const err = events.find((e) => e !== 'DONE' && e.error);
  if (err) {
    const msg = err.error.message;
    if (typeof msg !== 'string' || msg.length < 12) return fail(spec, 'stream error event without a cause', JSON.stringify(err));
    return note(spec, `stream error event: ${msg}`);
  }
  const fin = events.filter((e) => e !== 'DONE' && e.choices?.[0]?.finish_reason).map((e) => e.choices[0].finish_reason);
  if (fin.length !== 1 || !['stop', 'length'].includes(fin[0])) fail(spec, `stream finish_reason ${JSON.stringify(fin)}`);
  return sseText(spec, events);
}
// Same seed, streamed: the concatenated pieces equal the non-streamed text.
async function pairCheck(srv, spec, text) {
  const ctl = new AbortController();
  const r = await post(srv, spec.path, { ...spec.body, stream: true }, ctl.signal);
  if (r.status !== 200) return fail(spec, `stream twin answered ${r.status}`);
  const { events } = await readSse(r, ctl, 0);
  const s = checkSse(spec, events);
  stats.pairChecks++;
  if (s !== undefined && s !== text)
    fail(spec, 'streamed text differs from the non-streamed text of the same seed', `stream ${JSON.stringify(s)}\n  whole  ${JSON.stringify(text)}`);
}

// ---- the run ------------------------------------------------------------------------------------
async function alive(srv) {
  try { return (await fetch(srv.base + '/health', { signal: AbortSignal.timeout(10000) })).status === 200; } catch { return false; }
}
const greedyBody = { prompt: 'Once upon a time', max_tokens: 24, temperature: 0 };
// A completion outside the chaos (warm-up, final check); null, and the failure listed, when it fails.
async function guarded(srv, body, what) {
  try {
    return await postJson(srv, '/v1/completions', body);
  } catch (e) {
    if (!(await alive(srv))) {
      await stopServer(srv);
      console.log(`SERVER DIED on the ${what} request ${JSON.stringify(body)} (exit ${srv.exit}); its stderr (tail):\n${tail(srv.errPath)}`);
    }
    failures.push({ why: `${what} request failed (${e.cause?.code ?? e.message}): POST /v1/completions ${JSON.stringify(body)}` });
    return null;
  }
}
// Runs the specs from CONC clients. After a death the requests in flight are replayed to name the
// killer, and the rest go on against a new server (at most MAX_DEATHS times).
const MAX_DEATHS = 3;
async function chaosRun() {
  let srv = await startServer();
  const warm = await guarded(srv, greedyBody, 'warm-up');
  for (let k = 0; k < 8 && !srv.exited; ++k) await guarded(srv, { ...greedyBody, prompt: `Lily ${k}`, max_tokens: 8 }, 'warm-up');
  if (srv.exited) srv = await startServer();
  const base = rssBytes(srv.child.pid);
  const bound = 2 * base + 50 * MB;
  console.log(`warm-up RSS ${(base / MB).toFixed(1)} MB, bound ${(bound / MB).toFixed(1)} MB`);
  const specs = makeSpecs(mulberry(SEED), COUNT, vocab, env.CHAOS_CHAT === 'none');
  let next = 0, dead = false, deaths = 0;
  const inFlight = new Set();
  const suspects = new Set();  // requests that failed in transport, and those in flight at a death
  async function client() {
    while (!dead && next < specs.length) {
      const spec = specs[next++];
      inFlight.add(spec);
      try {
        await runSpec(srv, spec);
      } catch (e) {
        suspects.add(spec);
        if (!(await alive(srv))) {
          if (!dead) console.log(`SERVER DIED during #${spec.i}: ${e.cause?.code ?? e.message}`);
          dead = true;
          return;
        }
        fail(spec, `request failed: ${e.cause?.code ?? e.message}`);
      } finally { inFlight.delete(spec); }
      const rss = rssBytes(srv.child.pid);
      stats.maxRss = Math.max(stats.maxRss, rss);
      if (rss > bound && !failures.some((f) => f.why.startsWith('RSS')))
        fail(spec, `RSS ${(rss / MB).toFixed(1)} MB above the bound ${(bound / MB).toFixed(1)} MB`);
    }
  }
  for (;;) {
    dead = false;
    suspects.clear();
    const clients = Array.from({ length: CONC }, () => client().catch((e) => { console.log(`client error: ${e.stack}`); dead = true; }));
    const watch = setInterval(() => { if (srv.exited) for (const s of inFlight) suspects.add(s); }, 5);
    await Promise.all(clients);
    clearInterval(watch);
    if (!dead && !srv.exited && (await alive(srv))) break;
    failures.push({ why: `server died (${++deaths})` });
    await stopServer(srv);
    console.log(`server exit: ${srv.exit}; its stderr (tail):\n${tail(srv.errPath)}`);
    await triage([...suspects].sort((a, b) => a.i - b.i));
    if (deaths >= MAX_DEATHS || next >= specs.length) {
      if (next < specs.length) console.log(`stopping after ${deaths} deaths: ${specs.length - next} requests not sent`);
      return;
    }
    console.log(`going on with request #${next} against a new server`);
    srv = await startServer();
  }
  const end = await guarded(srv, greedyBody, 'final greedy');
  if (!end) return;
  if (end.status !== 200 || (warm && end.json?.choices?.[0]?.text !== warm.json?.choices?.[0]?.text))
    failures.push({ why: `final greedy completion: ${end.status} ${end.text.slice(0, 200)} (warm-up: ${warm?.text.slice(0, 200)})` });
  console.log(`server alive at the end: /health ok, greedy ${JSON.stringify(end.json?.choices?.[0]?.text)}`);
  await stopServer(srv);
  if (srv.exit !== 0 && srv.exit !== 'SIGTERM') failures.push({ why: `server exit on SIGTERM: ${srv.exit}` });
}
// Replays the suspects one at a time on a fresh server; names the first after which it is gone.
async function triage(suspects) {
  console.log(`replaying the ${suspects.length} request(s) in flight (#${suspects.map((s) => s.i).join(', #')}), one at a time, on a fresh server`);
  let srv = await startServer();
  for (const spec of suspects) {
    try { await runSpec(srv, { ...spec, abortAfter: 0 }); } catch { /* judged by alive() */ }
    if (!(await alive(srv))) {
      console.log(`KILLER REQUEST #${spec.i}: POST ${spec.path} ${JSON.stringify(spec.body)}\nserver stderr (tail):\n${tail(srv.errPath)}`);
      failures.push({ why: `killer request #${spec.i}` });
      await stopServer(srv);
      srv = await startServer();
    }
  }
  await stopServer(srv);
}

try {
  await chaosRun();
} catch (e) {
  failures.push({ why: `harness: ${e.stack}` });
}
const rss = (stats.maxRss / MB).toFixed(1);
console.log(`chaos ${LABEL}: ${stats.sent} sent, statuses ${JSON.stringify(stats.status)}, ${stats.aborted} streams cut, ` +
  `${stats.idChecks} id checks (${stats.idUnresolved} unresolved), ${stats.pairChecks} stream/whole pairs, ` +
  `${stats.named500} named server errors, max RSS ${rss} MB`);
for (const f of failures.filter((f) => !f.spec)) console.log(`FAIL ${f.why}`);
console.log(failures.length ? `chaos ${LABEL}: ${failures.length} failure(s)` : `chaos ${LABEL}: ok`);
process.exit(failures.length ? 1 : 0);
