// Encode throughput of the official HF `tokenizers` npm package over the whole wikitext-2 test file
// (one string, add_special_tokens=false, best of 5), single thread — compare with
// `test_tokenizer --gtest_also_run_disabled_tests --gtest_filter='*EncodeThroughput*'`.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');
const SHARED = path.resolve(__dirname, '../../../shared');
const text = fs.readFileSync(path.join(SHARED, 'data/wikitext-2-raw-test/wikitext-test.crlf.txt'), 'utf8');
const lines = text.split('\n');
(async () => {
  for (const name of ['qwen2.5', 'llama3.2']) {
    const tok = Tokenizer.fromFile(path.join(SHARED, `models/tokenizer-${name}/tokenizer.json`));
    const mb = Buffer.byteLength(text, 'utf8') / 1e6;
    let best = Infinity, bestLines = Infinity;
    for (let r = 0; r < 5; r++) {
      let t0 = process.hrtime.bigint();
      await tok.encode(text, null, { addSpecialTokens: false });
      best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
      t0 = process.hrtime.bigint();
      for (const l of lines) await tok.encode(l, null, { addSpecialTokens: false });
      bestLines = Math.min(bestLines, Number(process.hrtime.bigint() - t0) / 1e9);
    }
    console.log(`${name}: whole file ${(mb / best).toFixed(2)} MB/s; line by line ${(mb / bestLines).toFixed(2)} MB/s`);
  }
})();
