// Writes tests/golden/bpe/testbed-8192.json: what the official Hugging Face `tokenizers` npm package
// (see package.json; `npm ci` here first) makes of a tokenizer.json that `cortiq train-tokenizer`
// trained, on the four testbed-corpus test splits: per split the token count and the FNV-1a-64 of
// the ids (u32 LE bytes), encoded without post-processing (add_special_tokens=false; the
// "<|endoftext|>" separators are added tokens and still match). Also records the FNV-1a-64 of the
// tokenizer.json bytes, so the C++ test knows the trainer reproduced the very file HF saw.
//
//   build/cortiq train-tokenizer ../shared/data/testbed-corpus/{code,scripture,dictionary,manuals}/train.txt \
//       --vocab-size 8192 -o /tmp/testbed-8192.json
//   node tests/oracles/bpe_goldens.js /tmp/testbed-8192.json
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const CORPUS = path.resolve(__dirname, '../../../shared/data/testbed-corpus');
const OUT = path.resolve(__dirname, '../golden/bpe/testbed-8192.json');

function fnv(bytes) {
  let h = 0xcbf29ce484222325n;
  for (const b of bytes) {
    h ^= BigInt(b);
    h = BigInt.asUintN(64, h * 0x100000001b3n);
  }
  return h.toString(16).padStart(16, '0');
}

(async () => {
  const file = process.argv[2];
  if (!file) throw new Error('usage: node bpe_goldens.js <tokenizer.json>');
  const tok = Tokenizer.fromFile(file);
  const out = { tokenizer_fnv: fnv(fs.readFileSync(file)), vocab_size: tok.getVocabSize(true), splits: {} };
  for (const d of ['code', 'scripture', 'dictionary', 'manuals']) {
    const text = fs.readFileSync(path.join(CORPUS, d, 'test.txt'), 'utf8');
    const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    const buf = Buffer.alloc(ids.length * 4);
    ids.forEach((v, i) => buf.writeUInt32LE(v, i * 4));
    out.splits[d] = { count: ids.length, ids_fnv: fnv(buf) };
  }
  fs.mkdirSync(path.dirname(OUT), { recursive: true });
  fs.writeFileSync(OUT, JSON.stringify(out, null, 2) + '\n');
  console.log(OUT, JSON.stringify(out));
})();
