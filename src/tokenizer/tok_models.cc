// Tokenization models: BPE (with the priority-queue merge of `tokenizers` models/bpe/word.rs),
// Unigram (Viterbi, SentencePiece unk penalty 10), WordPiece (greedy longest match), WordLevel.
#include <cmath>
#include <limits>
#include <mutex>
#include <queue>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

namespace cortiq::tok_detail {

namespace {

std::string byte_piece(unsigned char b) {
  return fmt::format("<0x{:02X}>", b);
}

// Shared vocabulary storage for models with a string->id map.
struct VocabModel : Model {
  Vocab vocab;
  std::vector<std::string> itos;
  std::vector<bool> has;
  void add(const std::string& tok, uint32_t id, const std::string& f) {
    if (id > (1u << 26)) fail(ErrorKind::Parse, "{}: id {} of \"{}\" is implausibly large", f, id, tok);
    vocab[tok] = id;
    if (itos.size() <= id) {
      itos.resize(id + 1);
      has.resize(id + 1);
    }
    itos[id] = tok;
    has[id] = true;
  }
  void load_map(RawModel& raw, const std::string& f) {
    if (!raw.has_vocab) fail(ErrorKind::Parse, "{}: missing", f);
    if (raw.vocab_is_array) fail(ErrorKind::Parse, "{}: expected an object of token -> id", f);
    vocab.reserve(raw.vocab.size());
    for (auto& [tok, id] : raw.vocab) add(tok, id, f);
    raw.vocab.clear();
    raw.vocab.shrink_to_fit();
  }
  std::optional<uint32_t> token_to_id(std::string_view t) const override {
    auto it = vocab.find(t);
    if (it == vocab.end()) return std::nullopt;
    return it->second;
  }
  const std::string* id_to_token(uint32_t id) const override {
    return id < itos.size() && has[id] ? &itos[id] : nullptr;
  }
  size_t size() const override { return itos.size(); }
  std::optional<uint32_t> opt_token(const json& j, const char* key, const std::string& f) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) fail(ErrorKind::Parse, "{}.{}: expected a string", f, key);
    auto id = token_to_id(it->get<std::string>());
    if (!id)
      fail(ErrorKind::Parse, "{}.{}: token \"{}\" is not in the vocab", f, key, it->get<std::string>());
    return id;
  }
};

// ---- BPE ---------------------------------------------------------------------------------------------

struct BPE : VocabModel {
  struct MergeVal {
    uint32_t rank, id;
  };
  std::unordered_map<uint64_t, MergeVal> merges;
  std::optional<uint32_t> unk;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  std::string prefix, suffix;
  mutable std::mutex mu;
  mutable std::unordered_map<std::string, std::vector<uint32_t>, SvHash, std::equal_to<>> cache;
  static constexpr size_t kCacheMax = 1 << 17;
  static constexpr size_t kCacheWordMax = 256;  // bytes; longer words are not cached

  std::string_view type() const override { return "BPE"; }

  static uint64_t key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

  void tokenize(std::string_view word, std::vector<uint32_t>& out) const override {
    if (word.empty()) return;
    if (ignore_merges) {
      auto it = vocab.find(word);
      if (it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    if (word.size() <= kCacheWordMax) {
      std::lock_guard<std::mutex> lk(mu);
      auto it = cache.find(word);
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<uint32_t> ids = merge_word(word);
    out.insert(out.end(), ids.begin(), ids.end());
    if (word.size() > kCacheWordMax) return;
    std::lock_guard<std::mutex> lk(mu);
    if (cache.size() >= kCacheMax) cache.clear();
    cache.emplace(std::string(word), std::move(ids));
  }

  struct Sym {
    uint32_t id;
    int prev, next;
    bool alive;
  };
  struct Cand {
    uint32_t rank;
    int pos;
    uint32_t id;
    bool operator<(const Cand& o) const {  // max-heap: lowest rank, then leftmost, on top
      if (rank != o.rank) return rank > o.rank;
      return pos > o.pos;
    }
  };

  std::vector<uint32_t> merge_word(std::string_view w) const {
    std::vector<Sym> syms;
    syms.reserve(w.size());
    auto push = [&](uint32_t id) {
      int n = static_cast<int>(syms.size());
      syms.push_back({id, n - 1, n + 1, true});
    };
    bool has_unk = false;  // a pending (possibly fused) unk symbol
    std::string s;
    for (size_t i = 0; i < w.size();) {
      size_t b = i;
      size_t n = cp_len(static_cast<unsigned char>(w[i]));
      i = std::min(w.size(), i + n);
      bool is_last = i >= w.size();
      std::string_view ch = w.substr(b, i - b);
      std::string_view look = ch;
      if ((!prefix.empty() && b > 0) || (!suffix.empty() && is_last)) {
        s.clear();
        if (b > 0) s += prefix;
        s += ch;
        if (is_last) s += suffix;
        look = s;
      }
      auto it = vocab.find(look);
      if (it != vocab.end()) {
        if (has_unk) {
          push(*unk);
          has_unk = false;
        }
        push(it->second);
        continue;
      }
      if (byte_fallback) {
        std::vector<uint32_t> bids;
        for (unsigned char c : look) {
          auto bt = vocab.find(byte_piece(c));
          if (bt == vocab.end()) break;
          bids.push_back(bt->second);
        }
        if (bids.size() == look.size()) {
          for (uint32_t id : bids) push(id);
          continue;
        }
      }
      if (unk) {
        if (has_unk && fuse_unk) continue;
        if (has_unk) push(*unk);
        has_unk = true;
      }
    }
    if (has_unk) push(*unk);
    if (!syms.empty()) syms.back().next = -1;

    std::priority_queue<Cand> q;
    for (size_t k = 0; k + 1 < syms.size(); ++k) {
      auto it = merges.find(key(syms[k].id, syms[k + 1].id));
      if (it != merges.end()) q.push({it->second.rank, static_cast<int>(k), it->second.id});
    }
    while (!q.empty()) {
      Cand top = q.top();
      q.pop();
      Sym& cur = syms[static_cast<size_t>(top.pos)];
      if (!cur.alive || cur.next < 0) continue;
      Sym& right = syms[static_cast<size_t>(cur.next)];
      auto it = merges.find(key(cur.id, right.id));
      if (it == merges.end() || it->second.id != top.id) continue;
      cur.id = top.id;
      right.alive = false;
      cur.next = right.next;
      if (cur.next >= 0) syms[static_cast<size_t>(cur.next)].prev = top.pos;
      if (cur.prev >= 0) {
        auto pm = merges.find(key(syms[static_cast<size_t>(cur.prev)].id, cur.id));
        if (pm != merges.end()) q.push({pm->second.rank, cur.prev, pm->second.id});
      }
      if (cur.next >= 0) {
        auto nm = merges.find(key(cur.id, syms[static_cast<size_t>(cur.next)].id));
        if (nm != merges.end()) q.push({nm->second.rank, top.pos, nm->second.id});
      }
    }
    std::vector<uint32_t> ids;
    ids.reserve(syms.size());
    for (auto& sy : syms)
      if (sy.alive) ids.push_back(sy.id);
    return ids;
  }

  void load(const json& j, RawModel& raw, const std::string& f) {
    load_map(raw, f + ".vocab");
    unk = opt_token(j, "unk_token", f);
    fuse_unk = opt_bool(j, "fuse_unk", false, f);
    byte_fallback = opt_bool(j, "byte_fallback", false, f);
    ignore_merges = opt_bool(j, "ignore_merges", false, f);
    auto str_or_empty = [&](const char* k) {
      auto it = j.find(k);
      if (it == j.end() || it->is_null()) return std::string();
      if (!it->is_string()) fail(ErrorKind::Parse, "{}.{}: expected a string", f, k);
      return it->get<std::string>();
    };
    prefix = str_or_empty("continuing_subword_prefix");
    suffix = str_or_empty("end_of_word_suffix");
    if (!raw.has_merges) fail(ErrorKind::Parse, "{}.merges: missing", f);
    merges.reserve(raw.merges.size() * 2);
    std::string merged;
    for (size_t r = 0; r < raw.merges.size(); ++r) {
      const std::string& a = raw.merges[r].first;
      const std::string& b = raw.merges[r].second;
      auto ia = vocab.find(a);
      if (ia == vocab.end())
        fail(ErrorKind::Parse, "{}.merges[{}]: token \"{}\" is not in the vocab", f, r, a);
      auto ib = vocab.find(b);
      if (ib == vocab.end())
        fail(ErrorKind::Parse, "{}.merges[{}]: token \"{}\" is not in the vocab", f, r, b);
      merged = a;
      if (!prefix.empty() && b.compare(0, prefix.size(), prefix) == 0)
        merged.append(b, prefix.size());
      else
        merged += b;
      auto im = vocab.find(merged);
      if (im == vocab.end())
        fail(ErrorKind::Parse, "{}.merges[{}]: merged token \"{}\" is not in the vocab", f, r, merged);
      merges.try_emplace(key(ia->second, ib->second), MergeVal{static_cast<uint32_t>(r), im->second});
    }
    raw.merges.clear();
    raw.merges.shrink_to_fit();
  }
};

// ---- Unigram -------------------------------------------------------------------------------------------

struct Unigram : VocabModel {
  std::vector<double> scores;
  std::optional<uint32_t> unk;
  bool byte_fallback = false;
  double unk_score = 0;
  size_t max_len = 1;  // bytes

  std::string_view type() const override { return "Unigram"; }

  void load(const json& j, RawModel& raw, const std::string& f) {
    if (!raw.has_vocab || !raw.vocab_is_array)
      fail(ErrorKind::Parse, "{}.vocab: expected [[piece, score], ...]", f);
    double min_score = std::numeric_limits<double>::infinity();
    const auto& v = raw.uvocab;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string& p = v[i].first;
      if (vocab.find(p) == vocab.end()) add(p, static_cast<uint32_t>(i), f + ".vocab");
      if (itos.size() <= i) {
        itos.resize(i + 1);
        has.resize(i + 1);
      }
      double sc = v[i].second;
      scores.push_back(sc);
      min_score = std::min(min_score, sc);
      max_len = std::max(max_len, p.size());
    }
    unk_score = min_score - 10.0;
    auto it = j.find("unk_id");
    if (it != j.end() && !it->is_null()) {
      if (!it->is_number_unsigned() || it->get<size_t>() >= v.size())
        fail(ErrorKind::Parse, "{}.unk_id: out of range", f);
      unk = it->get<uint32_t>();
    }
    byte_fallback = opt_bool(j, "byte_fallback", false, f);
  }

  void tokenize(std::string_view w, std::vector<uint32_t>& out) const override {
    if (w.empty()) return;
    struct Node {
      double score = 0;
      int start = -1;
      int id = -1;  // -2: unk
      bool set = false;
    };
    std::vector<Node> best(w.size() + 1);
    best[0].set = true;
    for (size_t pos = 0; pos < w.size();) {
      size_t clen = std::min(w.size() - pos, cp_len(static_cast<unsigned char>(w[pos])));
      if (!best[pos].set) {
        pos += clen;
        continue;
      }
      bool single = false;
      for (size_t e = pos + 1; e <= w.size() && e - pos <= max_len; ++e) {
        if (e < w.size() && (static_cast<unsigned char>(w[e]) & 0xC0) == 0x80) continue;
        auto it = vocab.find(w.substr(pos, e - pos));
        if (it == vocab.end()) continue;
        if (unk && it->second == *unk) {
          // the unk piece itself is scored like any other piece
        }
        double sc = best[pos].score + scores[it->second];
        Node& t = best[e];
        if (!t.set || sc > t.score) t = {sc, static_cast<int>(pos), static_cast<int>(it->second), true};
        if (e - pos == clen) single = true;
      }
      if (!single) {
        double sc = best[pos].score + unk_score;
        Node& t = best[pos + clen];
        if (!t.set || sc > t.score) t = {sc, static_cast<int>(pos), -2, true};
      }
      pos += clen;
    }
    // backtrack
    std::vector<std::pair<size_t, size_t>> spans;
    std::vector<int> ids;
    for (size_t e = w.size(); e > 0;) {
      const Node& n = best[e];
      spans.emplace_back(static_cast<size_t>(n.start), e);
      ids.push_back(n.id);
      e = static_cast<size_t>(n.start);
    }
    // fuse consecutive unknown pieces (fuse_unk is always on for Unigram)
    std::vector<std::pair<std::string_view, int>> toks;
    for (size_t k = spans.size(); k-- > 0;) {
      std::string_view piece = w.substr(spans[k].first, spans[k].second - spans[k].first);
      bool is_unk = ids[k] == -2 || (unk && ids[k] == static_cast<int>(*unk));
      if (is_unk && !toks.empty() && toks.back().second == -2) {
        toks.back().first =
            std::string_view(toks.back().first.data(), toks.back().first.size() + piece.size());
        continue;
      }
      toks.emplace_back(piece, is_unk ? -2 : ids[k]);
    }
    for (auto& [piece, id] : toks) {
      if (id >= 0) {
        out.push_back(static_cast<uint32_t>(id));
        continue;
      }
      auto it = vocab.find(piece);
      if (it != vocab.end()) {
        out.push_back(it->second);
        continue;
      }
      if (byte_fallback) {
        std::vector<uint32_t> bids;
        for (unsigned char c : piece) {
          auto bt = vocab.find(byte_piece(c));
          if (bt == vocab.end()) break;
          bids.push_back(bt->second);
        }
        if (bids.size() == piece.size()) {
          out.insert(out.end(), bids.begin(), bids.end());
          continue;
        }
      }
      if (!unk)
        fail(ErrorKind::InvalidArgument, "Unigram: piece \"{}\" is unknown and the model has no unk_id",
             piece);
      out.push_back(*unk);
    }
  }
};

// ---- WordPiece / WordLevel ------------------------------------------------------------------------------

struct WordPiece : VocabModel {
  uint32_t unk = 0;
  std::string prefix = "##";
  size_t max_chars = 100;
  std::string_view type() const override { return "WordPiece"; }
  void load(const json& j, RawModel& raw, const std::string& f) {
    load_map(raw, f + ".vocab");
    auto u = opt_token(j, "unk_token", f);
    if (!u) fail(ErrorKind::Parse, "{}.unk_token: missing", f);
    unk = *u;
    auto it = j.find("continuing_subword_prefix");
    if (it != j.end() && it->is_string()) prefix = it->get<std::string>();
    it = j.find("max_input_chars_per_word");
    if (it != j.end() && it->is_number_unsigned()) max_chars = it->get<size_t>();
  }
  void tokenize(std::string_view w, std::vector<uint32_t>& out) const override {
    size_t nchars = 0;
    for (unsigned char c : w) nchars += (c & 0xC0) != 0x80;
    if (nchars > max_chars) {
      out.push_back(unk);
      return;
    }
    std::vector<uint32_t> sub;
    std::string s;
    for (size_t start = 0; start < w.size();) {
      size_t end = w.size();
      bool found = false;
      while (start < end) {
        s.clear();
        if (start > 0) s += prefix;
        s += w.substr(start, end - start);
        auto it = vocab.find(s);
        if (it != vocab.end()) {
          sub.push_back(it->second);
          found = true;
          break;
        }
        --end;
        while (end > start && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80) --end;
      }
      if (!found) {
        out.push_back(unk);
        return;
      }
      start = end;
    }
    out.insert(out.end(), sub.begin(), sub.end());
  }
};

struct WordLevel : VocabModel {
  std::optional<uint32_t> unk;
  std::string_view type() const override { return "WordLevel"; }
  void tokenize(std::string_view w, std::vector<uint32_t>& out) const override {
    auto it = vocab.find(w);
    if (it != vocab.end()) {
      out.push_back(it->second);
    } else {
      if (!unk)
        fail(ErrorKind::InvalidArgument, "WordLevel: \"{}\" is unknown and the model has no unk_token", w);
      out.push_back(*unk);
    }
  }
};

}  // namespace

std::unique_ptr<Model> make_model(const json& j, RawModel& raw, const std::string& f) {
  if (!j.is_object()) fail(ErrorKind::Parse, "{}: expected an object", f);
  std::string t;
  auto it = j.find("type");
  if (it != j.end() && it->is_string()) {
    t = it->get<std::string>();
  } else if (j.contains("merges")) {
    t = "BPE";
  } else if (raw.has_vocab && raw.vocab_is_array) {
    t = "Unigram";
  } else if (j.contains("max_input_chars_per_word")) {
    t = "WordPiece";
  } else {
    fail(ErrorKind::Parse, "{}.type: missing", f);
  }
  if (t == "BPE") {
    auto m = std::make_unique<BPE>();
    m->load(j, raw, f);
    return m;
  }
  if (t == "Unigram") {
    auto m = std::make_unique<Unigram>();
    m->load(j, raw, f);
    return m;
  }
  if (t == "WordPiece") {
    auto m = std::make_unique<WordPiece>();
    m->load(j, raw, f);
    return m;
  }
  if (t == "WordLevel") {
    auto m = std::make_unique<WordLevel>();
    m->load_map(raw, f + ".vocab");
    m->unk = m->opt_token(j, "unk_token", f);
    return m;
  }
  fail(ErrorKind::Parse, "{}.type: unknown model \"{}\"", f, t);
}

}  // namespace cortiq::tok_detail
