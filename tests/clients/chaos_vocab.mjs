// The vocabulary side of tests/clients/chaos.mjs: reads a SentencePiece-style tokenizer.json (BPE with
// byte fallback, decoder Replace ▁ → space, ByteFallback, Fuse, Strip one leading space), maps the
// logprobs `tokens` of a completion back to candidate ids, and decodes ids as the `tokenizers`
// library does (an invalid run of byte tokens becomes one U+FFFD per byte) to pick the candidates
// that explain a text. The server's /detokenize stays the judge; this only recovers the ids.
const utf8 = new TextEncoder();
const strict = new TextDecoder('utf-8', { fatal: true });
const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');

export class Vocab {
  /** `tj`: the parsed tokenizer.json. */
  constructor(tj) {
    this.piece = [];
    for (const [p, id] of Object.entries(tj.model.vocab)) this.piece[id] = p;
    this.special = new Set();
    for (const t of tj.added_tokens ?? []) {
      this.piece[t.id] = t.content;
      if (t.special) this.special.add(t.id);
    }
    this.size = this.piece.length;
    this.byteOf = new Map();  // id of a <0xNN> token → NN
    this.byKey = new Map();   // hex of the bytes a token adds inside a text → ids
    for (let id = 0; id < this.size; ++id) {
      const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(this.piece[id] ?? '');
      if (m && !this.special.has(id)) this.byteOf.set(id, parseInt(m[1], 16));
      const key = this.special.has(id) ? 'special' : hex(this.bytesOf(id));
      if (!this.byKey.has(key)) this.byKey.set(key, []);
      this.byKey.get(key).push(id);
    }
    const d = JSON.stringify(tj.decoder ?? null);
    this.known = ['Replace', 'ByteFallback', 'Fuse', 'Strip'].every((t) => d.includes(`"${t}"`));
    this.bytes = [...this.byteOf.keys()];
    this.specials = [...this.special];
  }
  bytesOf(id) {
    if (this.byteOf.has(id)) return Uint8Array.of(this.byteOf.get(id));
    return utf8.encode((this.piece[id] ?? '').replaceAll('▁', ' '));
  }
  /** Ids whose text is a logprobs `token` (its bytes, or OpenAI's "bytes:\xNN…" spelling). */
  candidates(tok) {
    const m = /^bytes:((?:\\x[0-9a-f]{2})+)$/.exec(tok);
    const key = m ? m[1].replaceAll('\\x', '') : hex(utf8.encode(tok));
    const ids = this.byKey.get(key) ?? [];
    // a special token's entry spells its content or nothing
    const sp = this.specials.filter((id) => this.piece[id] === tok);
    return tok === '' ? [...ids, ...this.specials] : [...ids, ...sp];
  }
  /** Whether `ids` ends outside a run of byte tokens (text after it decodes independently). */
  endsClean(ids) {
    const last = ids.filter((id) => !this.special.has(id)).at(-1);
    return last === undefined || !this.byteOf.has(last);
  }
  /** decode(ids, skip_special_tokens = true) as the `tokenizers` decoder chain does. */
  decode(ids) {
    let out = '';
    let run = [];
    const flush = () => {
      if (!run.length) return;
      try { out += strict.decode(Uint8Array.from(run)); } catch { out += '\uFFFD'.repeat(run.length); }
      run = [];
    };
    for (const id of ids) {
      if (this.special.has(id)) continue;
      if (this.byteOf.has(id)) { run.push(this.byteOf.get(id)); continue; }
      flush();
      out += (this.piece[id] ?? '').replaceAll('▁', ' ');
    }
    flush();
    return out.startsWith(' ') ? out.slice(1) : out;
  }
  /**
   * One id per position (`cands`: the candidates of each) such that decode(prompt ++ ids) ==
   * decode(prompt) + text, or the preferred ids (plain tokens first) when none does; null when a
   * token has no candidate, the decoder is not the SentencePiece chain, or too many choices matter.
   * A choice matters only inside a stretch of byte / special candidates holding a non-ASCII byte
   * (elsewhere a byte token and the plain token of the same character decode alike).
   */
  resolve(prompt, cands, text) {
    if (!this.known || cands.some((c) => c.length === 0)) return null;
    const runny = (c) => c.some((id) => this.byteOf.has(id) || this.special.has(id));
    const pick = cands.map((c) => [...c].sort((a, b) => runny([a]) - runny([b]))[0]);
    const open = [];
    for (let i = 0; i < cands.length;) {
      let j = i;
      while (j < cands.length && runny(cands[j])) ++j;
      const stretch = cands.slice(i, j);
      if (stretch.some((c) => c.every((id) => (this.byteOf.get(id) ?? 0) >= 0x80)))
        for (let k = i; k < j; ++k) if (cands[k].length > 1) open.push(k);
      i = j > i ? j : i + 1;
    }
    const combos = open.reduce((n, k) => n * cands[k].length, 1);
    if (combos > 4096) return null;
    const want = this.decode(prompt) + text;
    for (let c = 0; c < combos; ++c) {
      const ids = [...pick];
      let r = c;
      for (const k of open) { ids[k] = cands[k][r % cands[k].length]; r = Math.floor(r / cands[k].length); }
      if (this.decode([...prompt, ...ids]) === want) return ids;
    }
    return pick;
  }
}
