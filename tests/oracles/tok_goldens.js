// Generates tests/golden/tokenizer/<name>.jsonl from the official Hugging Face `tokenizers` npm
// package (see package.json; run `npm ci` here first, then `node tok_goldens.js` from this folder).
//
// Input strings are stored by reference where possible: {"s":"wt"|"ts"|"gv:<file>","o":byte offset,
// "n":byte length} into files under ../shared; adversarial strings are stored inline as hex bytes
// ("x"). Invalid UTF-8 in an input is replaced by U+FFFD (maximal-subpart rule, TextDecoder) before
// HF sees it — JS strings cannot hold invalid UTF-8; the C++ encode applies the same replacement.
//
// Per case: c = token count with special tokens, h = FNV-1a-64 of the ids (u32 LE bytes) with
// special tokens, h0 = same without (add_special_tokens=false), d = FNV-1a-64 of
// decode(ids, skip_special=false) as UTF-8, ds = same with skip_special=true; ids = the id list
// when c <= 64. Also writes bench numbers (encode MB/s of the whole wikitext file) to stdout.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const SHARED = path.resolve(__dirname, '../../../shared');
const OUT = path.resolve(__dirname, '../golden/tokenizer');
const TOKENIZERS = {
  'qwen2.5': 'models/tokenizer-qwen2.5/tokenizer.json',
  qwen3: 'models/tokenizer-qwen3/tokenizer.json',
  'llama3.2': 'models/tokenizer-llama3.2/tokenizer.json',
  gemma3: 'models/tokenizer-gemma3/tokenizer.json',
  'mistral-nemo': 'models/tokenizer-mistral-nemo/tokenizer.json',
  'mistral-7b-v0.1': 'models/tokenizer-mistral-7b-v0.1/tokenizer.json',
  stories260K: 'models/stories260K-hf/tokenizer.json',
};
const SOURCES = {
  wt: 'data/wikitext-2-raw-test/wikitext-test.crlf.txt',
  ts: 'data/tinystories-sample/tinystories_sample.txt',
};

function fnv(bytes) {
  let h = 0xcbf29ce484222325n;
  for (const b of bytes) {
    h ^= BigInt(b);
    h = BigInt.asUintN(64, h * 0x100000001b3n);
  }
  return h.toString(16).padStart(16, '0');
}
function fnvIds(ids) {
  const buf = Buffer.alloc(ids.length * 4);
  ids.forEach((v, i) => buf.writeUInt32LE(v, i * 4));
  return fnv(buf);
}

// ---- cases --------------------------------------------------------------------------------
const cases = [];
function addRef(s, file, o, n) {
  cases.push({ ref: { s, o, n }, bytes: file.subarray(o, o + n) });
}
{
  const wt = fs.readFileSync(path.join(SHARED, SOURCES.wt));
  // every non-blank line (split on \n, the \r kept), plus 40-line chunks
  let start = 0;
  const lineStarts = [];
  for (let i = 0; i <= wt.length; i++) {
    if (i === wt.length || wt[i] === 0x0a) {
      lineStarts.push(start);
      const line = wt.subarray(start, i);
      if (line.toString('utf8').trim().length > 0) addRef('wt', wt, start, i - start);
      start = i + 1;
    }
  }
  for (let k = 0; k + 40 < lineStarts.length; k += 400) {
    addRef('wt', wt, lineStarts[k], lineStarts[k + 40] - lineStarts[k]);
  }
  const ts = fs.readFileSync(path.join(SHARED, SOURCES.ts));
  addRef('ts', ts, 0, ts.length);
  start = 0;
  for (let i = 0; i <= ts.length; i++) {
    if (i === ts.length || ts[i] === 0x0a) {
      if (i > start) addRef('ts', ts, start, i - start);
      start = i + 1;
    }
  }
  const gvDir = path.join(SHARED, 'models/ggml-vocab');
  const seen = new Set();
  for (const f of fs.readdirSync(gvDir).filter((f) => f.endsWith('.inp')).sort()) {
    const buf = fs.readFileSync(path.join(gvDir, f));
    const sep = Buffer.from('\n__ggml_vocab_test__\n');
    let pos = 0;
    while (pos < buf.length) {
      const j = buf.indexOf(sep, pos);
      if (j < 0) break;
      const key = buf.subarray(pos, j).toString('hex');
      if (!seen.has(key)) {
        seen.add(key);
        addRef('gv:' + f, buf, pos, j - pos);
      }
      pos = j + sep.length;
    }
  }
}
const adversarial = [
  '你好，世界！这是一个测试。', '日本語のテキストとカタカナ、ひらがな。', '한국어 텍스트 테스트',
  'Привет, мир! Съешь же ещё этих мягких французских булок.', 'مرحبا بالعالم، هذا اختبار.',
  'नमस्ते दुनिया, यह एक परीक्षण है।', 'Γειά σου Κόσμε', 'שלום עולם', 'ภาษาไทยไม่มีช่องว่าง',
  '👨‍👩‍👧‍👦 family', '👍🏽👍🏿 thumbs', '🏳️‍🌈 flag', '🦙.cpp and 🤗 hugging', 'e\u0301 vs \u00e9',
  'cafe\u0301', 'caf\u00e9', 'Å\u030a A\u030a \u212b', 'ﬁ ligature ﬀ ① ² ｆｕｌｌｗｉｄｔｈ', 'a\u0300\u0301\u0302\u0303 zalgo',
  '\tdef f(x):\n\t\treturn x  # tab\n', 'int main() {\r\n    return 0;\r\n}\r\n', 'line1\r\nline2\rline3\n',
  '   leading spaces', 'trailing spaces   ', 'a  b   c    d     e', '\n\n\n\nx', '\n\nYou', 'a\n\nb',
  ' \n \n  \n', '\t\t\t', '    ', ' ', '\n', '12345678901234567890123456789', 'What is 3333+777?',
  '3.14159 1,000,000 -42 1e10 0x1F', '->', '(x):\n', "I'm you're he'll they'd IT'S WE'VE",
  '<|endoftext|>', 'hello<|endoftext|>world', '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
  '<|endoftext |>', '<|im_start|', '|im_start|>', '<s>hello</s>', '< s>', '<s >', '<bos>text<eos>',
  '<start_of_turn>user\nHi<end_of_turn>', '<|begin_of_text|>Hi<|eot_id|>', '<|begin_of_text |>',
  '[INST] hi [/INST]', '<unk>', '<pad><mask>', 'x<tool_call>{"a":1}</tool_call>y', '<think>\n\n</think>',
  'Ġhello Ċ', '▁hello ▁▁world', '<0x41><0xFF>', 'ÃĦ byte chars', '\u2581\u2581', '  \u2581 ',
  'https://example.com/path?q=1&r=2#frag', 'user@example.com', '/usr/bin/env python3', 'C:\\Windows\\System32',
  '{"key": [1, 2, {"nested": null}]}', '<html><body class="x">Hi</body></html>', 'SELECT * FROM t WHERE a>=1;',
  '$$\\frac{a}{b}$$', '∀x∈ℝ: x²≥0', '½ ⅓ ¼ ⅕', '٣٤٥ ۱۲۳ १२३', 'ＡＢＣ１２３', '\u00a0nbsp\u2009thin\u3000ideo',
  '\u200bzero\u200cwidth\u200d', '\ufeffBOM', 'soft\u00adhyphen', 'İstanbul ß ẞ ǅ', 'ΣΑΣ σας', 'x\u0000y', '\u0007bell',
  '\u{10FFFF} \u{E000} private', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
  '!!!!!!!!!!????????........', '--------------------', '============', '____', '...', 'Hello world', ' Hello world',
  'Hello World', 'HELLO WORLD', 'hello\u3002world', 'mixed English и русский 和中文 123', '',
];
const advBytes = adversarial.map((s) => Buffer.from(s, 'utf8'));
advBytes.push(Buffer.from([0x66, 0x6f, 0x80, 0x6f])); // stray continuation
advBytes.push(Buffer.from([0xe2, 0x82])); // truncated 3-byte sequence
advBytes.push(Buffer.from([0xc0, 0xaf, 0x41])); // overlong
advBytes.push(Buffer.from([0xed, 0xa0, 0x80, 0x42])); // encoded surrogate
advBytes.push(Buffer.from([0xf0, 0x9f, 0xa6, 0x41, 0xff, 0xfe])); // truncated 4-byte + bad bytes
advBytes.push(Buffer.concat([Buffer.from('long '), Buffer.alloc(3000, 0x61)]));
advBytes.push(Buffer.from(' '.repeat(300) + '\n'.repeat(100) + '\r\n'.repeat(50)));
advBytes.push(Buffer.from('9'.repeat(500)));
for (const b of advBytes) cases.push({ x: b.toString('hex'), bytes: b });

// ---- run ----------------------------------------------------------------------------------
const td = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
async function run() {
  fs.mkdirSync(OUT, { recursive: true });
  const wt = fs.readFileSync(path.join(SHARED, SOURCES.wt)).toString('utf8');
  for (const [name, rel] of Object.entries(TOKENIZERS)) {
    const file = path.join(SHARED, rel);
    if (!fs.existsSync(file)) continue;
    const tok = Tokenizer.fromFile(file);
    const lines = [];
    for (const c of cases) {
      const text = td.decode(c.bytes);
      const e1 = await tok.encode(text, null, { addSpecialTokens: true });
      const e0 = await tok.encode(text, null, { addSpecialTokens: false });
      const ids = e1.getIds();
      const d = await tok.decode(ids, false);
      const ds = await tok.decode(ids, true);
      const rec = c.ref ? { ...c.ref } : { x: c.x };
      rec.c = ids.length;
      rec.h = fnvIds(ids);
      rec.h0 = fnvIds(e0.getIds());
      rec.d = fnv(Buffer.from(d, 'utf8'));
      rec.ds = fnv(Buffer.from(ds, 'utf8'));
      if (ids.length <= 64) rec.ids = ids;
      lines.push(JSON.stringify(rec));
    }
    fs.writeFileSync(path.join(OUT, name + '.jsonl'), lines.join('\n') + '\n');
    // throughput: the whole wikitext file as one string, single call, best of 3
    let best = Infinity;
    for (let r = 0; r < 3; r++) {
      const t0 = process.hrtime.bigint();
      await tok.encode(wt, null, { addSpecialTokens: false });
      const dt = Number(process.hrtime.bigint() - t0) / 1e9;
      best = Math.min(best, dt);
    }
    const mb = Buffer.byteLength(wt, 'utf8') / 1e6;
    console.log(`${name}: ${lines.length} cases; encode wikitext ${mb.toFixed(2)} MB in ${best.toFixed(3)} s = ${(mb / best).toFixed(2)} MB/s`);
  }
}
run().catch((e) => {
  console.error(e);
  process.exit(1);
});
