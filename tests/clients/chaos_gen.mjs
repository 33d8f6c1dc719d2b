// The request list of tests/clients/chaos.mjs, fixed by a seed: completions and chats with random
// sampling settings, logit_bias on byte / special / random ids, stop strings, logprobs, echo, prompts
// as text or ids, streams (some cut off after a few events), and /tokenize, /detokenize bodies. A
// spec: {i, kind: gen|tok|detok, path, body, expect: 200|400|'any', greedy, pair, abortAfter, check}.

/** A deterministic generator of floats in [0, 1) (mulberry32). */
export function mulberry(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const PROMPTS = ['Once upon a time', 'The cat', 'Lily wanted', 'One day, a big', 'Tom and Sue went to the park.',
  'She said "hi"', 'Der Bär aß Honig', 'café 🐱 naïve', '日本語のテキスト', '\tx\n\ny', '~^|{}', 'a'];
const STOPS = ['\n', '.', ' the', 'Lily', '\uFFFD', 'a', 'é', '🐱', ' ', 'ing', '"', 'x'];

/** `n` specs from `rng`; `noChat`: the model has no chat template (chat answers 400). */
export function makeSpecs(rng, n, vocab, noChat) {
  const R = {
    f: (a, b) => a + (b - a) * rng(),
    int: (a, b) => a + Math.floor(rng() * (b - a + 1)),
    pick: (xs) => xs[Math.floor(rng() * xs.length)],
    p: (x) => rng() < x,
  };
  const anyId = () => R.pick([() => R.pick(vocab.bytes), () => R.pick(vocab.specials), () => R.int(0, vocab.size - 1)])();
  const specs = [];
  for (let i = 0; i < n; ++i) {
    const u = rng();
    const s = u < 0.62 ? completion(R, vocab, anyId) : u < 0.77 ? chat(R, vocab, anyId, noChat)
      : u < 0.88 ? tokenize(R, vocab) : detokenize(R, vocab, anyId);
    specs.push({ i, ...s });
  }
  // the request (it killed the server) and a plain greedy answer long enough to reach the
  // random model's invalid byte runs
  const fixed = [
    { prompt: 'Once upon a time', max_tokens: 40, temperature: 1.5, top_k: 0, top_p: 1, min_p: 0, seed: 2,
      logit_bias: { 68: 100, 166: 100, 265: 80 } },
    { prompt: 'Once upon a time', max_tokens: 40, temperature: 0 },
  ];
  fixed.forEach((body, k) => {
    const at = Math.floor((n * (k + 1)) / 3);
    specs.splice(at, 0, { kind: 'gen', path: '/v1/completions', body, expect: 200, greedy: body.temperature === 0 });
  });
  specs.forEach((s, k) => { s.i = k; });
  return specs;
}

// temperature 0–2 (greedy a quarter of the time), top_k −1–100, top_p / min_p 0–1, seed, penalties
function sampling(R, body) {
  const greedy = R.p(0.25);
  body.temperature = greedy ? 0 : Math.round(R.f(0.05, 2) * 1000) / 1000;
  if (R.p(0.7)) body.top_k = R.p(0.1) ? -1 : R.int(0, 100);
  if (R.p(0.7)) body.top_p = R.pick([0, 1, Math.round(R.f(0, 1) * 1000) / 1000]);
  if (R.p(0.6)) body.min_p = R.pick([0, 1, Math.round(R.f(0, 1) * 1000) / 1000]);
  if (R.p(0.85)) body.seed = R.p(0.1) ? -R.int(1, 1e9) : R.int(0, 2 ** 31);
  if (R.p(0.25)) body.repeat_penalty = Math.round(R.f(0.5, 2) * 100) / 100;
  if (R.p(0.25)) body.frequency_penalty = Math.round(R.f(-2, 2) * 100) / 100;
  if (R.p(0.25)) body.presence_penalty = Math.round(R.f(-2, 2) * 100) / 100;
  return greedy;
}
function logitBias(R, anyId) {
  const lb = {};
  const k = R.int(1, 6);
  for (let j = 0; j < k; ++j) lb[String(anyId())] = R.p(0.5) ? R.pick([100, -100, 80]) : Math.round(R.f(-100, 100));
  return lb;
}
function promptOf(R, vocab, anyId) {
  const t = R.pick(PROMPTS);
  const ids = () => Array.from({ length: R.int(1, 12) }, anyId);
  return R.pick([() => t, () => t, () => [t], () => ids(), () => [ids()]])();
}
function stopOf(R) {
  return R.p(0.3) ? R.pick(STOPS) : Array.from({ length: R.int(1, 4) }, () => R.pick(STOPS));
}
// One of the ways a request is out of range; the server must answer 400 (a JSON error).
function spoil(R, body, vocab, chat) {
  const w = R.int(0, 3);
  if (w === 0) body.temperature = Math.round(R.f(2.01, 5) * 100) / 100;
  else if (w === 1) body.n = R.int(2, 4);
  else if (w === 2) body.logit_bias = { [vocab.size + R.int(0, 100)]: 100 };
  else if (chat) Object.assign(body, { logprobs: false, top_logprobs: 3 });  // needs logprobs: true
  else body.top_p = 1.5;
}
function streamOpts(R, body, spec) {
  if (!R.p(0.35)) return;
  body.stream = true;
  if (R.p(0.3)) body.stream_options = { include_usage: true };
  if (R.p(0.3)) spec.abortAfter = R.int(1, 4);
}
function completion(R, vocab, anyId) {
  const body = { prompt: promptOf(R, vocab, anyId), max_tokens: R.int(1, 48) };
  const greedy = sampling(R, body);
  if (R.p(0.4)) body.logit_bias = logitBias(R, anyId);
  if (R.p(0.15)) body.echo = true;
  if (body.echo && R.p(0.3)) body.max_tokens = 0;
  if (R.p(0.6)) body.logprobs = R.int(0, 5);
  if (R.p(0.3)) body.stop = stopOf(R);
  if (R.p(0.2)) body.n = 1;
  const spec = { kind: 'gen', path: '/v1/completions', body, expect: 200, greedy };
  streamOpts(R, body, spec);
  if (R.p(0.08)) { spoil(R, body, vocab, false); spec.expect = 400; }
  spec.pair = !greedy && !body.stream && body.logprobs === undefined && body.seed !== undefined && spec.expect === 200;
  return spec;
}
function chat(R, vocab, anyId, noChat) {
  const messages = [{ role: 'user', content: R.pick(PROMPTS) }];
  if (R.p(0.3)) messages.unshift({ role: 'system', content: 'Tell a story.' });
  const body = { messages, max_tokens: R.int(1, 32) };
  const greedy = sampling(R, body);
  if (R.p(0.3)) body.logit_bias = logitBias(R, anyId);
  if (R.p(0.4)) { body.logprobs = true; if (R.p(0.7)) body.top_logprobs = R.int(0, 20); }
  if (R.p(0.3)) body.stop = stopOf(R);
  const spec = { kind: 'gen', path: '/v1/chat/completions', body, expect: noChat ? 400 : 200, greedy };
  streamOpts(R, body, spec);
  if (R.p(0.08)) { spoil(R, body, vocab, true); spec.expect = 400; }
  return spec;
}
function tokenize(R, vocab) {
  let content = R.pick(PROMPTS);
  if (R.p(0.4)) content += String.fromCodePoint(R.pick([0xe9, 0x20ac, 0x1f600, 0xfffd, 0x7f, 0x1, R.int(0x20, 0x2fff)]));
  const body = { content };
  if (R.p(0.5)) body.add_special = R.p(0.5);
  const pieces = R.p(0.4);
  if (pieces) body.with_pieces = true;
  const check = (j, fail) => {
    const ids = (j.tokens ?? []).map((t) => (pieces ? t.id : t));
    if (!Array.isArray(j.tokens) || j.count !== ids.length || ids.some((id) => !Number.isInteger(id) || id < 0 || id >= vocab.size))
      fail('malformed /tokenize answer', JSON.stringify(j).slice(0, 300));
  };
  return { kind: 'tok', path: '/tokenize', body, expect: 200, check };
}
function detokenize(R, vocab, anyId) {
  const tokens = Array.from({ length: R.int(0, 16) }, anyId);
  const bad = R.p(0.1);
  if (bad) tokens.push(R.p(0.5) ? vocab.size + R.int(0, 1000) : -R.int(1, 100));
  const body = { tokens };
  if (R.p(0.5)) body.skip_special_tokens = R.p(0.5);
  const check = (j, fail) => { if (typeof j.content !== 'string') fail('malformed /detokenize answer', JSON.stringify(j)); };
  return { kind: 'detok', path: '/detokenize', body, expect: bad ? 400 : 200, check };
}
