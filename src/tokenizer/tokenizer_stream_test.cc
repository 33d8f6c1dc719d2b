// Property test of the streaming detokenizer (IncrementalDecoder) against the whole-text decode:
// for every tokenizer shipped with the project, random id sequences — byte-fallback pieces, byte-level
// pieces holding part of a character, special tokens, ids out of the vocabulary, ordinary pieces —
// pushed one by one never throw and concatenate to exactly the text the class comment's rule names
// (decode(all ids), or after prime() the continuation of the kept context).
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/utf8.h"

namespace cortiq {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string name, path;
};

std::vector<Case> tokenizers() {
  const std::string src = CORTIQ_SOURCE_DIR;
  std::vector<Case> out = {{"stories260K (repo)", src + "/models/stories260K/tokenizer.json"}};
  for (const char* n : {"qwen2.5", "qwen3", "llama3.2", "gemma3", "mistral-nemo", "mistral-7b-v0.1"})
    out.push_back({n, src + "/../shared/models/tokenizer-" + std::string(n) + "/tokenizer.json"});
  return out;
}

/// Ids to draw from, by kind.
struct Pools {
  std::vector<uint32_t> bytes, partial, special, plain;
  uint32_t vocab = 0;
};

Pools pools_of(const Tokenizer& t, std::mt19937& rng) {
  Pools p;
  p.vocab = static_cast<uint32_t>(t.vocab_size());
  for (uint32_t id = 0; id < p.vocab; ++id) {
    if (t.is_byte_piece(id)) p.bytes.push_back(id);
    if (t.is_added(id)) p.special.push_back(id);
  }
  std::uniform_int_distribution<uint32_t> any(0, p.vocab - 1);
  for (int i = 0; i < 4000 && p.partial.size() < 200; ++i) {
    const uint32_t id = any(rng);
    if (t.is_added(id)) continue;
    (is_valid_utf8(t.token_bytes(id)) ? p.plain : p.partial).push_back(id);
  }
  return p;
}

uint32_t draw(const Pools& p, std::mt19937& rng) {
  auto pick = [&](const std::vector<uint32_t>& v) {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
  };
  const int r = std::uniform_int_distribution<int>(0, 99)(rng);
  if (r < 30 && !p.bytes.empty()) return pick(p.bytes);
  if (r < 45 && !p.partial.empty()) return pick(p.partial);
  if (r < 55 && !p.special.empty()) return pick(p.special);
  if (r < 58) return p.vocab + std::uniform_int_distribution<uint32_t>(0, 9)(rng);  // not in the vocab
  return p.plain.empty() ? 0 : pick(p.plain);
}

/// The context IncrementalDecoder::prime keeps, restated from its documented rule: the last ≤ 4 ids
/// up to and including the last text piece (one that writes something and is no byte-fallback
/// piece), or nothing when that decodes to text ending inside a character.
std::vector<uint32_t> kept_context(const Tokenizer& t, const std::vector<uint32_t>& ctx, bool skip) {
  size_t end = ctx.size();
  auto text_piece = [&](uint32_t id) {
    if (id >= t.vocab_size() || t.is_byte_piece(id)) return false;
    if (skip && t.is_special(id)) return false;
    return !t.id_to_token(id).empty();
  };
  while (end > 0 && !text_piece(ctx[end - 1])) --end;
  std::vector<uint32_t> k(ctx.begin() + static_cast<std::ptrdiff_t>(end - std::min<size_t>(end, 4)),
                          ctx.begin() + static_cast<std::ptrdiff_t>(end));
  const std::string d = t.decode(k, skip);
  if (d.size() >= 3 && d.compare(d.size() - 3, 3, "\xEF\xBF\xBD") == 0) k.clear();
  return k;
}

TEST(TokenizerStream, RandomIdsStreamToTheWholeDecode) {
  size_t ran = 0;
  for (const Case& c : tokenizers()) {
    if (!fs::exists(c.path)) continue;
    const Tokenizer t = Tokenizer::from_file(c.path);
    std::mt19937 rng(20261204);
    const Pools p = pools_of(t, rng);
    const std::vector<std::string> prompts = {"Once upon a time", "Hello wörld 🦙\n", "x = 1\n\n", "你好",
                                              "<s> [INST] hi"};
    size_t byte_runs = 0;
    for (int seq = 0; seq < 300; ++seq) {
      const bool skip = seq % 2 == 0, primed = seq % 3 != 0;
      std::vector<uint32_t> ctx;
      if (primed) {
        ctx = t.encode(prompts[static_cast<size_t>(seq) % prompts.size()], seq % 4 == 1);
        for (int k = seq % 5; k > 0; --k) ctx.push_back(draw(p, rng));  // a context ending anyhow
      }
      const size_t n = std::uniform_int_distribution<size_t>(1, 40)(rng);
      std::vector<uint32_t> ids;
      for (size_t i = 0; i < n; ++i) ids.push_back(draw(p, rng));
      for (size_t i = 1; i < ids.size(); ++i)
        byte_runs += t.is_byte_piece(ids[i - 1]) && t.is_byte_piece(ids[i]);

      IncrementalDecoder dec(t, skip);
      if (primed) dec.prime(ctx);
      std::string streamed;
      for (uint32_t id : ids) {
        ASSERT_NO_THROW(streamed += dec.push(id)) << c.name;
      }
      ASSERT_NO_THROW(streamed += dec.flush()) << c.name;

      const std::vector<uint32_t> k = primed ? kept_context(t, ctx, skip) : std::vector<uint32_t>{};
      std::vector<uint32_t> all = k;
      all.insert(all.end(), ids.begin(), ids.end());
      const std::string whole = t.decode(all, skip), head = t.decode(k, skip);
      ASSERT_EQ(whole.compare(0, head.size(), head), 0) << c.name << " seq " << seq;
      EXPECT_EQ(streamed, whole.substr(head.size())) << c.name << " seq " << seq << " skip " << skip;
      EXPECT_EQ(dec.rewrites(), 0u) << c.name << " seq " << seq;
    }
    if (!p.bytes.empty()) {
      EXPECT_GT(byte_runs, 100u) << c.name << ": the draw must exercise byte runs";
    }
    ++ran;
  }
  EXPECT_GE(ran, 1u) << "the repo's own stories260K tokenizer is always there";
}

// The case the issue found: an ASCII byte piece already decoded as itself ("<0x41>" → "A") joins an
// invalid run and becomes U+FFFD in the whole decode, so the stream holds the run until a text piece
// closes it, then sends what decode() gives. flush() sends a run still open at the end.
TEST(TokenizerStream, ByteRunIsHeldUntilClosed) {
  const Tokenizer t =
      Tokenizer::from_file(std::string(CORTIQ_SOURCE_DIR) + "/models/stories260K/tokenizer.json");
  const uint32_t a = *t.token_to_id("<0x41>"), e2 = *t.token_to_id("<0xE2>"), once = *t.token_to_id("▁Once");
  ASSERT_TRUE(t.is_byte_piece(a));
  ASSERT_FALSE(t.is_byte_piece(once));
  IncrementalDecoder dec(t, true);
  EXPECT_EQ(dec.push(a), "");
  EXPECT_EQ(dec.push(e2), "");
  const std::vector<uint32_t> ids = {a, e2, once};
  EXPECT_EQ(t.decode(ids, true), "\xEF\xBF\xBD\xEF\xBF\xBD Once");
  const std::string closed = dec.push(once);
  EXPECT_EQ(closed, "\xEF\xBF\xBD\xEF\xBF\xBD Once");
  EXPECT_EQ(dec.own_text_start(closed, once), 6u);  // " Once" follows the run's two U+FFFD
  EXPECT_EQ(dec.own_text_start("", a), 0u);
  EXPECT_EQ(dec.push(a), "");
  EXPECT_EQ(dec.flush(), "A");
  EXPECT_EQ(dec.rewrites(), 0u);
}

}  // namespace
}  // namespace cortiq
