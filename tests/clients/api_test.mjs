// Drives a running `cortiq serve` with the official `openai` npm client (issue 7 §4).
// Started by tests/serve_api_test.cc, which passes:
//   CORTIQ_BASE    http://127.0.0.1:PORT (no trailing slash)
//   CORTIQ_KEY     the server's API key
//   CORTIQ_EXPECT  path of a JSON file: {chat: {prompt, n, text, tokens}, completions: [{prompt, n, text, tokens}],
//                  max_body}
// Exits non-zero with a message on the first failed check.
import OpenAI from 'openai';
import assert from 'node:assert/strict';
import fs from 'node:fs';

const BASE = process.env.CORTIQ_BASE;
const KEY = process.env.CORTIQ_KEY;
const EXPECT = JSON.parse(fs.readFileSync(process.env.CORTIQ_EXPECT, 'utf8'));
const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });

let passed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
    process.exitCode = 1;
  }
  // After every check the server must still serve the next request.
  const h = await fetch(`${BASE}/health`);
  assert.equal(h.status, 200, `server unhealthy after ${name}`);
}

async function rawPost(path, body, headers = {}) {
  const r = await fetch(`${BASE}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}`, ...headers },
    body,
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
}

async function tokenCount(payload) {
  const r = await rawPost('/tokenize', JSON.stringify(payload));
  assert.equal(r.status, 200, r.text);
  return r.json.tokens.length;
}

const chatMessages = [{ role: 'user', content: EXPECT.chat.prompt }];

await check('models.list', async () => {
  const page = await client.models.list();
  assert.equal(page.data.length, 1);
  assert.equal(page.data[0].object, 'model');
  assert.equal(page.data[0].owned_by, 'cortiq');
});

await check('embeddings.create (the SDK asks for base64): unit vectors, one per input, usage', async () => {
  const r = await client.embeddings.create({ model: 'cortiq', input: ['Once upon a time', 'The cat'] });
  assert.equal(r.data.length, 2);
  assert.equal(r.data[1].index, 1);
  for (const d of r.data) {
    assert.ok(d.embedding.length > 0);
    const n2 = d.embedding.reduce((a, x) => a + x * x, 0);
    assert.ok(Math.abs(n2 - 1) < 1e-5, `|v|^2 = ${n2}`);
  }
  assert.notDeepEqual(r.data[0].embedding, r.data[1].embedding);
  assert.equal(r.usage.prompt_tokens, (await tokenCount({ content: 'Once upon a time', add_special: true })) +
    (await tokenCount({ content: 'The cat', add_special: true })));
});

await check('chat non-stream greedy equals cortiq run --greedy; usage = tokenizer counts', async () => {
  const r = await client.chat.completions.create({
    model: 'stories', messages: chatMessages, temperature: 0, max_tokens: EXPECT.chat.n,
  });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, 'stories');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, EXPECT.chat.text);
  assert.equal(r.usage.prompt_tokens, await tokenCount({ messages: chatMessages }));
  assert.equal(r.usage.completion_tokens, EXPECT.chat.tokens);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
});

await check('chat content as typed parts equals string form (SRV-2)', async () => {
  const r = await client.chat.completions.create({
    messages: [{ role: 'user', content: [{ type: 'text', text: EXPECT.chat.prompt }] }],
    temperature: 0, max_tokens: EXPECT.chat.n,
  });
  assert.equal(r.choices[0].message.content, EXPECT.chat.text);
});

await check('chat stream: chunk shapes, include_usage, [DONE] (SRV-5)', async () => {
  for (const includeUsage of [false, true]) {
    const stream = await client.chat.completions.create({
      messages: chatMessages, temperature: 0, max_tokens: EXPECT.chat.n, stream: true,
      ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    assert.ok(chunks.length >= 3);
    for (const c of chunks) {
      assert.equal(c.object, 'chat.completion.chunk');
      if (!includeUsage) assert.ok(!('usage' in c), 'usage must be absent without include_usage');
    }
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    let text = '';
    let finish = null;
    let usage = null;
    chunks.forEach((c, i) => {
      if (c.choices.length === 0) {
        assert.ok(includeUsage && i === chunks.length - 1, 'the usage chunk is the last one');
        usage = c.usage;
        return;
      }
      if (includeUsage) assert.equal(c.usage, null);
      text += c.choices[0].delta.content ?? '';
      if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    });
    assert.equal(text, EXPECT.chat.text);
    assert.ok(['stop', 'length'].includes(finish));
    if (includeUsage) {
      assert.equal(usage.completion_tokens, EXPECT.chat.tokens);
      assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
    } else {
      assert.equal(usage, null);
    }
  }
});

await check('chat logprobs', async () => {
  const r = await client.chat.completions.create({
    messages: chatMessages, temperature: 0, max_tokens: 5, logprobs: true, top_logprobs: 3,
  });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    // greedy: the chosen token is the most likely one
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6);
  }
});

await check('completions greedy equal cortiq run --greedy (string and token-id prompts)', async () => {
  for (const e of EXPECT.completions) {
    const r = await client.completions.create({ model: 'x', prompt: e.prompt, temperature: 0, max_tokens: e.n });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices[0].text, e.text);
    assert.equal(r.usage.completion_tokens, e.tokens);
    assert.equal(r.usage.prompt_tokens, await tokenCount({ content: e.prompt, add_special: true }));
  }
  const e = EXPECT.completions[0];
  const ids = (await rawPost('/tokenize', JSON.stringify({ content: e.prompt, add_special: true }))).json.tokens;
  const r = await client.completions.create({ model: 'x', prompt: ids, temperature: 0, max_tokens: e.n });
  assert.equal(r.choices[0].text, e.text);
  const d = await rawPost('/detokenize', JSON.stringify({ tokens: ids }));
  assert.equal(d.json.content.trim(), e.prompt.trim());
});

await check('completions stream', async () => {
  const e = EXPECT.completions[1];
  const stream = await client.completions.create({
    prompt: e.prompt, temperature: 0, max_tokens: e.n, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  for await (const c of stream) {
    if (c.choices.length) text += c.choices[0].text;
    else usage = c.usage;
  }
  assert.equal(text, e.text);
  assert.equal(usage.completion_tokens, e.tokens);
});

await check('4 concurrent greedy requests equal cortiq run --greedy', async () => {
  const rs = await Promise.all(EXPECT.completions.map((e, i) =>
    i % 2 === 0
      ? client.completions.create({ prompt: e.prompt, temperature: 0, max_tokens: e.n })
          .then((r) => r.choices[0].text)
      : (async () => {
          const s = await client.completions.create({ prompt: e.prompt, temperature: 0, max_tokens: e.n, stream: true });
          let t = '';
          for await (const c of s) t += c.choices[0]?.text ?? '';
          return t;
        })()));
  rs.forEach((t, i) => assert.equal(t, EXPECT.completions[i].text, `request ${i}`));
});

await check('tool-call round trip: assistant tool_calls (content null) -> tool -> answer (SRV-3)', async () => {
  const tools = [{ type: 'function', function: { name: 'get_secret_number', description: 'the secret',
    parameters: { type: 'object', properties: {} } } }];
  const messages = [
    { role: 'user', content: 'Get the secret number' },
    { role: 'assistant', content: null,
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_secret_number', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: '42.69' },
  ];
  const r = await client.chat.completions.create({ messages, tools, temperature: 0, max_tokens: 8 });
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  // The replayed call reached the template.
  const ids = (await rawPost('/tokenize', JSON.stringify({ messages, tools }))).json.tokens;
  const text = (await rawPost('/detokenize', JSON.stringify({ tokens: ids }))).json.content;
  assert.ok(text.startsWith('tools: get_secret_number'), text);  // the tools reached the template
  assert.ok(text.includes('call get_secret_number'), text);
  assert.ok(text.includes('42.69'), text);
  assert.equal(r.usage.prompt_tokens, ids.length);
});

await check('auth: wrong key and missing key rejected (401), right key accepted', async () => {
  const bad = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  const r = await fetch(`${BASE}/v1/models`);
  assert.equal(r.status, 401);
  const j = await r.json();
  assert.equal(j.error.type, 'authentication_error');
  assert.equal((await fetch(`${BASE}/health`)).status, 200);  // health needs no key
  assert.equal((await client.models.list()).data.length, 1);
});

await check('malformed JSON -> 400 error JSON', async () => {
  const r = await rawPost('/v1/chat/completions', '{"messages": [');
  assert.equal(r.status, 400);
  assert.equal(r.json.error.type, 'invalid_request_error');
  assert.equal(typeof r.json.error.message, 'string');
});

await check('wrong field types -> 400 BadRequestError naming the field', async () => {
  await assert.rejects(
    client.chat.completions.create({ messages: chatMessages, temperature: 'hot' }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature');
  await assert.rejects(
    client.chat.completions.create({ messages: 'hello' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages');
  await assert.rejects(
    client.completions.create({ prompt: 'x', max_tokens: -3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens');
});

await check('unknown route and unknown task -> 404', async () => {
  const r = await rawPost('/v1/nothing', '{}');
  assert.equal(r.status, 404);
  assert.equal(r.json.error.type, 'not_found_error');
  await assert.rejects(
    client.chat.completions.create({ messages: chatMessages, max_tokens: 2, cortiq: { task: 'no-such-task' } }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  const m = await fetch(`${BASE}/v1/cortiq/masks`, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(m.status, 200);
  assert.ok(Array.isArray((await m.json()).masks));
});

await check('oversize body -> 413', async () => {
  const big = JSON.stringify({ prompt: 'x'.repeat(EXPECT.max_body + 1000) });
  const r = await rawPost('/v1/completions', big);
  assert.equal(r.status, 413);
  assert.equal(r.json.error.type, 'invalid_request_error');
});

await check('context overflow -> 400 context_length_exceeded; max_tokens capped by the context', async () => {
  const r = await rawPost('/v1/completions', JSON.stringify({ prompt: 'Once upon a time '.repeat(200), max_tokens: 4 }));
  assert.equal(r.status, 400);
  assert.equal(r.json.error.code, 'context_length_exceeded');
  const c = await client.completions.create({ prompt: 'Once', temperature: 0, max_tokens: 100000 });
  assert.ok(c.usage.prompt_tokens + c.usage.completion_tokens <= EXPECT.ctx);
});

await check('client disconnect mid-stream cancels; the next request is served', async () => {
  const ac = new AbortController();
  const stream = await client.completions.create(
    { prompt: 'Once upon a time', temperature: 1.0, seed: 1, max_tokens: 100000, stream: true },
    { signal: ac.signal });
  let n = 0;
  try {
    for await (const c of stream) {
      if (c.choices[0]?.text) n++;
      if (n === 2) ac.abort();
    }
  } catch (e) {
    // the client surfaces the abort as an error (APIUserAbortError) or ends the iteration
  }
  assert.ok(n >= 2);
  // The slot frees up.
  let active = -1;
  for (let i = 0; i < 100 && active !== 0; i++) {
    active = (await (await fetch(`${BASE}/health`)).json()).active;
    if (active !== 0) await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(active, 0);
  const e = EXPECT.completions[0];
  const r = await client.completions.create({ prompt: e.prompt, temperature: 0, max_tokens: e.n });
  assert.equal(r.choices[0].text, e.text);
});

console.log(`${passed} checks passed${process.exitCode ? ' (with failures)' : ''}`);
