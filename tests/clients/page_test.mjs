// The chat page of `cortiq serve` in a real browser (issue 33 §1): headless chromium driven by
// playwright-core. Started by tests/serve_api_test.cc (ChatPageInChromium), which passes:
//   CORTIQ_BASE    http://127.0.0.1:PORT of a server started with --api-key CORTIQ_KEY
//   CORTIQ_KEY     the key
//   CORTIQ_CHROME  the chromium executable
//   CORTIQ_OUT     folder for the screenshots
// The page must ask for the key (a 401 message, not a blank page), stream a chat answer equal to the
// server's own non-stream greedy answer, switch to completion mode and continue a text, keep the
// conversation over a reload, regenerate in place, and open a model without a chat template in
// completion mode. Exits non-zero with a message on the first failed check.
import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import path from 'node:path';

const BASE = process.env.CORTIQ_BASE;
const KEY = process.env.CORTIQ_KEY;
const OUT = process.env.CORTIQ_OUT;
const N = 16;

async function post(p, body) {
  const r = await fetch(`${BASE}${p}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  return JSON.parse(text);
}

const browser = await chromium.launch({
  executablePath: process.env.CORTIQ_CHROME,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  timeout: 20000,
});
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 700 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.setDefaultTimeout(8000);
  const visible = (sel) => page.locator(sel).isVisible();

  // 1. No key yet: the key dialog says 401; a wrong key says 401 again; the right one connects.
  await page.goto(`${BASE}/`);
  await page.locator('#keydlg').waitFor({ state: 'visible' });
  assert.match(await page.textContent('#keymsg'), /401/);
  assert.match(await page.textContent('#error'), /401: missing API key/);
  await page.fill('#apikey', 'wrong-key');
  await page.click('#keysave');
  await page.waitForFunction(() => /invalid API key/.test(document.getElementById('keymsg').textContent));
  assert.ok(await visible('#keydlg'));
  await page.fill('#apikey', KEY);
  await page.click('#keysave');
  await page.locator('#keydlg').waitFor({ state: 'hidden' });
  // the last list the page loads: the task masks (then "off")
  await page.waitForFunction(() => [...document.getElementById('task').options].some((o) => o.value === 'off'));
  const info = await page.textContent('#info');
  const models = await page.$$eval('#model option', (os) => os.map((o) => o.value));
  assert.ok(models.length >= 1 && info.startsWith(models[0]), `${info} / ${models}`);
  const skills = await page.$$eval('#skill option', (os) => os.map((o) => o.value));
  assert.deepEqual(skills.slice(0, 3), ['', 'auto', 'none']);
  const tasks = await page.$$eval('#task option', (os) => os.map((o) => o.value));
  assert.ok(tasks.includes('off'), String(tasks));
  assert.equal(await page.textContent('#error'), '');

  // 2. Chat (the model has a template, so the page opens in chat mode): greedy, streamed.
  assert.ok(await visible('#prompt'));
  await page.fill('#temperature', '0');
  await page.fill('#max_tokens', String(N));
  await page.evaluate(() => {
    window.__updates = 0;
    new MutationObserver((ms) => { window.__updates += ms.length; })
      .observe(document.getElementById('messages'), { subtree: true, childList: true, characterData: true });
  });
  const prompt = 'Tell me a story';
  await page.fill('#prompt', prompt);
  await page.click('#send');
  await page.waitForFunction(() => /tokens\/s/.test(document.getElementById('stats').textContent) &&
    !document.getElementById('send').disabled);
  const answer = await page.$$eval('.msg.assistant', (ds) => ds.at(-1).lastChild.textContent);
  const want = await post('/v1/chat/completions', {
    messages: [{ role: 'user', content: prompt }], temperature: 0, max_tokens: N,
  });
  assert.equal(answer, want.choices[0].message.content);
  assert.ok(answer.length > 0);
  const updates = await page.evaluate(() => window.__updates);
  assert.ok(updates >= 3, `the answer arrived in ${updates} updates (not streamed)`);
  const stats = await page.textContent('#stats');
  assert.match(stats, new RegExp(`^${want.usage.completion_tokens} tokens, [0-9.]+ tokens/s`));
  await page.screenshot({ path: path.join(OUT, 'chat_page_chat.png') });

  // Regenerate replaces the answer (greedy: the same text), not appends a second one.
  await page.click('#regen');
  await page.waitForFunction(() => /tokens\/s/.test(document.getElementById('stats').textContent) &&
    !document.getElementById('send').disabled);
  assert.equal(await page.locator('.msg').count(), 2);
  assert.equal(await page.$$eval('.msg.assistant', (ds) => ds.at(-1).lastChild.textContent), answer);

  // 3. The conversation survives a reload (localStorage), key included.
  await page.reload();
  await page.waitForFunction(() => document.querySelectorAll('.msg').length === 2);
  assert.equal(await page.$$eval('.msg.assistant', (ds) => ds.at(-1).lastChild.textContent), answer);
  assert.ok(!(await visible('#keydlg')));

  // 4. Completion mode: the text is continued in place, as /v1/completions continues it.
  await page.click('#mode-completion');
  assert.ok(await visible('#completion'));
  assert.ok(!(await visible('#prompt')));
  const text = 'Once upon a time';
  await page.fill('#completion', text);
  await page.click('#send');
  await page.waitForFunction(() => /tokens\/s/.test(document.getElementById('stats').textContent) &&
    !document.getElementById('send').disabled);
  const got = await page.inputValue('#completion');
  const wantC = await post('/v1/completions', { prompt: text, temperature: 0, max_tokens: N });
  assert.equal(got, text + wantC.choices[0].text);
  await page.screenshot({ path: path.join(OUT, 'chat_page_completion.png') });

  // 5. A model without a chat template opens in completion mode (until the user picks a mode).
  await page.evaluate(() => localStorage.removeItem('cortiq.mode'));
  await page.route('**/props', async (route) => {
    const r = await route.fetch();
    const j = await r.json();
    assert.equal(j.has_chat_template, true);
    await route.fulfill({ response: r, json: { ...j, has_chat_template: false, chat_template: null } });
  });
  await page.reload();
  await page.waitForFunction(() => /no chat template/.test(document.getElementById('info').textContent));
  assert.ok(await visible('#completion'));
  assert.ok(!(await visible('#prompt')));
  await page.unroute('**/props');
  assert.deepEqual(errors, []);
  console.log('ok   chat page: 401 dialog, streamed chat, regenerate, reload, completion mode, no-template default');
} catch (e) {
  failed = true;
  console.log(`FAIL chat page: ${e && e.stack ? e.stack : e}`);
} finally {
  await browser.close();
}
process.exitCode = failed ? 1 : 0;
