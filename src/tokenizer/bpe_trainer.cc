// Byte-level BPE training: pre-token counting, then greedy pair merges with incremental pair
// counts (each merge touches only the words that hold its pair) and a lazily updated max-heap.
#include "tokenizer/bpe_trainer.h"

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "tokenizer/tok_internal.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/utf8.h"

namespace cortiq {

namespace {

// The Llama-3 pre-tokenizer split (contractions, letters with one leading non-letter, digits in
// threes, punctuation runs, newlines, whitespace), then GPT-2's byte-to-symbol map.
const char* kSplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

nlohmann::ordered_json pre_tokenizer_json() {
  using oj = nlohmann::ordered_json;
  oj split = {
      {"type", "Split"}, {"pattern", {{"Regex", kSplitRegex}}}, {"behavior", "Isolated"}, {"invert", false}};
  oj bytes = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  return {{"type", "Sequence"}, {"pretokenizers", oj::array({split, bytes})}};
}

struct Word {
  std::vector<uint32_t> sym;
  uint64_t count;
};

uint64_t pair_key(uint32_t a, uint32_t b) {
  return (static_cast<uint64_t>(a) << 32) | b;
}

/// A heap entry: the count a pair had when pushed. Top = highest count, ties to the lower pair.
struct Candidate {
  uint64_t count;
  uint64_t pair;
  bool operator<(const Candidate& o) const { return count < o.count || (count == o.count && pair > o.pair); }
};

}  // namespace

struct BpeTrainer::State {
  std::unique_ptr<tok_detail::PreTokenizer> pre;
  std::unordered_map<std::string, uint64_t> words;
  uint64_t bytes = 0;
};

BpeTrainer::BpeTrainer(BpeTrainerOptions opt) : opt_(std::move(opt)), s_(new State) {
  std::unique_ptr<State> guard(s_);
  const size_t base = opt_.special_tokens.size() + 256;
  if (opt_.vocab_size < base)
    fail(ErrorKind::InvalidArgument,
         "train-tokenizer: vocab_size {} cannot hold {} special tokens and 256 bytes", opt_.vocab_size,
         opt_.special_tokens.size());
  for (size_t i = 0; i < opt_.special_tokens.size(); ++i) {
    const std::string& t = opt_.special_tokens[i];
    if (t.empty()) fail(ErrorKind::InvalidArgument, "train-tokenizer: special token {} is empty", i);
    if (std::find(opt_.special_tokens.begin(), opt_.special_tokens.begin() + static_cast<std::ptrdiff_t>(i),
                  t) != opt_.special_tokens.begin() + static_cast<std::ptrdiff_t>(i))
      fail(ErrorKind::InvalidArgument, "train-tokenizer: special token '{}' given twice", t);
  }
  s_->pre =
      tok_detail::make_pre_tokenizer(nlohmann::json::parse(pre_tokenizer_json().dump()), "pre_tokenizer");
  guard.release();
}

BpeTrainer::~BpeTrainer() {
  delete s_;
}

uint64_t BpeTrainer::bytes_added() const noexcept {
  return s_->bytes;
}

void BpeTrainer::add_text(std::string_view text, std::string_view source) {
  if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)
    fail(ErrorKind::InvalidArgument, "{}: not UTF-8 at byte offset {}", source, bad);
  s_->bytes += text.size();
  auto count = [&](std::string_view chunk) {
    if (chunk.empty()) return;
    s_->pre->split(tok_detail::Piece{std::string(chunk), true},
                   [&](tok_detail::Piece&& p) { ++s_->words[p.text]; });
  };
  // Cut out every special token (earliest match first, the longest one at a position).
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best = std::string_view::npos, best_len = 0;
    for (const std::string& t : opt_.special_tokens) {
      const size_t at = text.find(t, pos);
      if (at < best || (at == best && t.size() > best_len)) best = at, best_len = t.size();
    }
    if (best == std::string_view::npos) break;
    count(text.substr(pos, best - pos));
    pos = best + best_len;
  }
  count(text.substr(pos));
}

std::string BpeTrainer::train() {
  if (s_->words.empty()) fail(ErrorKind::InvalidArgument, "train-tokenizer: no text to train on");
  std::vector<std::string> tokens(opt_.special_tokens);
  std::unordered_map<std::string, uint32_t> ids;
  for (uint32_t i = 0; i < tokens.size(); ++i) ids.emplace(tokens[i], i);
  for (int b = 0; b < 256; ++b) {
    const std::string& sym = tok_detail::byte_to_unicode(static_cast<unsigned char>(b));
    ids.emplace(sym, static_cast<uint32_t>(tokens.size()));
    tokens.push_back(sym);
  }
  const size_t n_special = opt_.special_tokens.size();

  // Words in byte order of their text (the hash map's order must not reach the result).
  std::vector<std::pair<std::string, uint64_t>> sorted(s_->words.begin(), s_->words.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  for (auto& [text, n] : sorted) {
    Word w{{}, n};
    for (size_t i = 0; i < text.size();) {
      const size_t len = tok_detail::cp_len(static_cast<unsigned char>(text[i]));
      w.sym.push_back(ids.at(text.substr(i, len)));  // every byte-level symbol is a base token
      i += len;
    }
    if (w.sym.size() > 1) words.push_back(std::move(w));
  }

  std::unordered_map<uint64_t, uint64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;  // words that held the pair (may repeat)
  for (uint32_t wi = 0; wi < words.size(); ++wi)
    for (size_t i = 0; i + 1 < words[wi].sym.size(); ++i) {
      const uint64_t k = pair_key(words[wi].sym[i], words[wi].sym[i + 1]);
      pair_count[k] += words[wi].count;
      where[k].push_back(wi);
    }
  std::priority_queue<Candidate> heap;
  for (const auto& [k, n] : pair_count) heap.push({n, k});

  std::vector<std::string> merges;
  std::vector<uint64_t> seen(words.size(), 0);
  std::unordered_map<uint64_t, int64_t> delta;
  Progress bar("merges", opt_.vocab_size - tokens.size(), "merge");
  if (!opt_.progress) bar.finish();
  while (tokens.size() < opt_.vocab_size && !heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const auto it = pair_count.find(top.pair);
    const uint64_t now = it == pair_count.end() ? 0 : it->second;
    if (now != top.count) {  // stale: counts only fall between pushes, so re-queue the current one
      if (now > 0) heap.push({now, top.pair});
      continue;
    }
    if (now < opt_.min_frequency) break;
    const auto a = static_cast<uint32_t>(top.pair >> 32), b = static_cast<uint32_t>(top.pair);
    std::string merged = tokens[a] + tokens[b];
    merges.push_back(tokens[a] + " " + tokens[b]);
    uint32_t id;
    if (const auto found = ids.find(merged); found != ids.end()) {
      id = found->second;
    } else {
      id = static_cast<uint32_t>(tokens.size());
      ids.emplace(merged, id);
      tokens.push_back(std::move(merged));
      if (opt_.progress) bar.advance(1);
    }
    const uint64_t stamp = merges.size();
    delta.clear();
    std::vector<uint32_t> holders = std::move(where[top.pair]);
    where[top.pair].clear();
    for (uint32_t wi : holders) {
      if (seen[wi] == stamp) continue;
      seen[wi] = stamp;
      Word& w = words[wi];
      const auto n = static_cast<int64_t>(w.count);
      std::vector<uint32_t> out;
      out.reserve(w.sym.size());
      bool hit = false;
      for (size_t i = 0; i < w.sym.size();) {
        if (i + 1 < w.sym.size() && w.sym[i] == a && w.sym[i + 1] == b) {
          out.push_back(id);
          i += 2;
          hit = true;
        } else {
          out.push_back(w.sym[i++]);
        }
      }
      if (!hit) continue;  // a stale entry: an earlier merge took this word's (a, b)
      for (size_t i = 0; i + 1 < w.sym.size(); ++i) delta[pair_key(w.sym[i], w.sym[i + 1])] -= n;
      for (size_t i = 0; i + 1 < out.size(); ++i) {
        const uint64_t k = pair_key(out[i], out[i + 1]);
        delta[k] += n;
        if (out[i] == id || out[i + 1] == id) where[k].push_back(wi);
      }
      w.sym = std::move(out);
    }
    for (const auto& [k, d] : delta) {
      if (d == 0) continue;
      uint64_t& c = pair_count[k];
      c = static_cast<uint64_t>(static_cast<int64_t>(c) + d);
      if (d > 0) heap.push({c, k});
      if (c == 0) pair_count.erase(k);
    }
  }
  bar.finish();

  using oj = nlohmann::ordered_json;
  oj added = oj::array();
  for (size_t i = 0; i < n_special; ++i)
    added.push_back({{"id", i},
                     {"content", tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  oj vocab = oj::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  oj model = {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"vocab", std::move(vocab)},
              {"merges", merges}};
  oj doc = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", std::move(added)},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer_json()},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", std::move(model)}};
  return doc.dump(2) + "\n";
}

}  // namespace cortiq
