// Tokenizer: tokenizer.json loading, added-token extraction (AddedVocabulary of `tokenizers`),
// the encode/decode pipeline and the streaming decoder.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "tokenizer/tok_internal.h"
#include "util/error.h"
#include "util/utf8.h"

namespace cortiq {
namespace tok_detail {

struct AddedToken {
  std::string content;
  uint32_t id;
  bool special, lstrip, rstrip, single_word, normalized;
};

/// Byte trie over added-token contents; leftmost-longest, non-overlapping matching (the
/// aho-corasick MatchKind::LeftmostLongest that `tokenizers` uses).
class Trie {
 public:
  void add(std::string_view s, int tok) {
    if (s.empty()) return;
    int node = 0;
    for (unsigned char c : s) {
      uint64_t k = (static_cast<uint64_t>(node) << 8) | c;
      auto it = next_.find(k);
      if (it == next_.end()) {
        term_.push_back(-1);
        int n = static_cast<int>(term_.size()) - 1;
        next_.emplace(k, n);
        node = n;
      } else {
        node = it->second;
      }
    }
    if (term_[static_cast<size_t>(node)] < 0) term_[static_cast<size_t>(node)] = tok;
    first_[static_cast<unsigned char>(s[0])] = true;
  }
  bool empty() const { return term_.size() == 1; }
  /// Longest token starting at s[pos]: (length, token index) or (0, -1).
  std::pair<size_t, int> longest_at(std::string_view s, size_t pos) const {
    if (!first_[static_cast<unsigned char>(s[pos])]) return {0, -1};
    int node = 0;
    std::pair<size_t, int> best{0, -1};
    for (size_t i = pos; i < s.size(); ++i) {
      auto it = next_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(s[i]));
      if (it == next_.end()) break;
      node = it->second;
      int t = term_[static_cast<size_t>(node)];
      if (t >= 0) best = {i + 1 - pos, t};
    }
    return best;
  }

 private:
  std::unordered_map<uint64_t, int> next_;
  std::vector<int> term_{-1};
  bool first_[256] = {};
};

struct Split {
  std::string text;
  bool at_start;
  int token;  // index into added, or -1
};

struct Impl {
  std::unique_ptr<Model> model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre;
  std::unique_ptr<Decoder> decoder;
  PostProcessor post;
  std::vector<AddedToken> added;
  std::unordered_map<uint32_t, size_t> added_by_id;
  Vocab added_by_content;
  Trie raw_trie, norm_trie;

  static bool word_char(uint32_t c) { return c == '_' || is_alphanumeric(c); }

  void extract(const std::string& s, bool at_start, const Trie& trie, std::vector<Split>& out) const {
    if (trie.empty() || s.empty()) {
      if (!s.empty()) out.push_back({s, at_start, -1});
      return;
    }
    size_t start_offset = 0;
    auto push_text = [&](size_t b, size_t e) {
      if (e > b) out.push_back({s.substr(b, e - b), at_start && b == 0, -1});
    };
    for (size_t pos = 0; pos < s.size();) {
      auto [len, t] = trie.longest_at(s, pos);
      if (t < 0) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + len;
      pos = stop;
      const AddedToken& tok = added[static_cast<size_t>(t)];
      if (tok.single_word) {
        bool start_ok = true, stop_ok = true;
        if (start > 0) {
          size_t k = start - 1;
          while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
          size_t i = k;
          start_ok = !word_char(next_cp(s, i));
        }
        if (stop < s.size()) {
          size_t i = stop;
          stop_ok = !word_char(next_cp(s, i));
        }
        if (!start_ok || !stop_ok) continue;
      }
      if (tok.lstrip) {
        size_t ns = start;
        while (ns > 0) {
          size_t k = ns - 1;
          while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
          size_t i = k;
          if (!is_whitespace(next_cp(s, i))) break;
          ns = k;
        }
        start = std::max(ns, start_offset);
      }
      if (tok.rstrip) {
        while (stop < s.size()) {
          size_t i = stop;
          if (!is_whitespace(next_cp(s, i))) break;
          stop = i;
        }
        pos = stop;
      }
      push_text(start_offset, start);
      out.push_back({s.substr(start, stop - start), at_start && start == 0, t});
      start_offset = stop;
    }
    push_text(start_offset, s.size());
  }

  void encode(std::string_view input, bool add_special, std::vector<uint32_t>& ids) const {
    std::string text = is_valid_utf8(input) ? std::string(input) : to_valid_utf8(input);
    std::vector<Split> first, second;
    extract(text, true, raw_trie, first);
    for (auto& sp : first) {
      if (sp.token >= 0) {
        second.push_back(std::move(sp));
        continue;
      }
      if (normalizer) normalizer->apply(sp.text);
      extract(sp.text, sp.at_start, norm_trie, second);
    }
    if (add_special) ids.insert(ids.end(), post.prefix.begin(), post.prefix.end());
    PieceSink to_model = [&](Piece&& p) { model->tokenize(p.text, ids); };
    for (auto& sp : second) {
      if (sp.token >= 0) {
        ids.push_back(added[static_cast<size_t>(sp.token)].id);
        continue;
      }
      if (pre)
        pre->split(Piece{std::move(sp.text), sp.at_start}, to_model);
      else
        model->tokenize(sp.text, ids);
    }
    if (add_special) ids.insert(ids.end(), post.suffix.begin(), post.suffix.end());
  }

  const std::string* token_of(uint32_t id) const {
    auto it = added_by_id.find(id);
    if (it != added_by_id.end()) return &added[it->second].content;
    return model->id_to_token(id);
  }

  /// What an id gives the decoder chain: nothing (skipped special, not in the vocabulary), a byte
  /// piece the decoder joins into a run (Decoder::merges_byte_runs), or any other text piece.
  enum class PieceKind { None, Byte, Text };
  PieceKind piece_kind(uint32_t id, bool skip_special) const {
    const std::string* t = nullptr;
    if (auto it = added_by_id.find(id); it != added_by_id.end()) {
      if (skip_special && added[it->second].special) return PieceKind::None;
      t = &added[it->second].content;
    } else {
      t = model->id_to_token(id);
    }
    if (!t) return PieceKind::None;
    return merges_byte_runs && byte_fallback_value(*t) >= 0 ? PieceKind::Byte : PieceKind::Text;
  }
  bool merges_byte_runs = false;  ///< decoder && decoder->merges_byte_runs(), set at load

  std::string decode(std::span<const uint32_t> ids, bool skip_special, bool raw = false) const {
    std::vector<std::string> toks;
    toks.reserve(ids.size());
    for (uint32_t id : ids) {
      auto it = added_by_id.find(id);
      if (it != added_by_id.end()) {
        if (skip_special && added[it->second].special) continue;
        toks.push_back(added[it->second].content);
        continue;
      }
      const std::string* t = model->id_to_token(id);
      if (t) toks.push_back(*t);
    }
    if (decoder) {
      decoder->apply(toks, raw);
      std::string out;
      for (auto& t : toks) out += t;
      return out;
    }
    std::string out;
    for (size_t i = 0; i < toks.size(); ++i) {
      if (i) out.push_back(' ');
      out += toks[i];
    }
    return out;
  }
};

}  // namespace tok_detail

using namespace tok_detail;

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view text) {
  RawModel raw;
  json j = parse_tokenizer_json(text, raw);
  if (!j.is_object()) fail(ErrorKind::Parse, "tokenizer.json: top level must be an object");
  auto impl = std::make_unique<Impl>();
  auto field = [&](const char* k) -> const json& {
    static const json kNull;
    auto it = j.find(k);
    return it == j.end() ? kNull : *it;
  };
  if (!j.contains("model")) fail(ErrorKind::Parse, "tokenizer.json: field \"model\" is missing");
  impl->model = make_model(j["model"], raw, "model");
  impl->normalizer = make_normalizer(field("normalizer"), "normalizer");
  impl->pre = make_pre_tokenizer(field("pre_tokenizer"), "pre_tokenizer");
  impl->decoder = make_decoder(field("decoder"), "decoder");
  impl->merges_byte_runs = impl->decoder && impl->decoder->merges_byte_runs();

  const json& at = field("added_tokens");
  if (!at.is_null() && !at.is_array()) fail(ErrorKind::Parse, "added_tokens: expected an array");
  if (at.is_array()) {
    for (size_t i = 0; i < at.size(); ++i) {
      std::string f = fmt::format("added_tokens[{}]", i);
      const json& e = at[i];
      const json& id = req(e, "id", f);
      if (!id.is_number_unsigned()) fail(ErrorKind::Parse, "{}.id: expected an unsigned integer", f);
      AddedToken t{req_str(e, "content", f),
                   id.get<uint32_t>(),
                   opt_bool(e, "special", false, f),
                   opt_bool(e, "lstrip", false, f),
                   opt_bool(e, "rstrip", false, f),
                   opt_bool(e, "single_word", false, f),
                   opt_bool(e, "normalized", !opt_bool(e, "special", false, f), f)};
      if (t.content.empty()) fail(ErrorKind::Parse, "{}.content: empty", f);
      impl->added_by_id[t.id] = impl->added.size();
      impl->added_by_content[t.content] = t.id;
      impl->added.push_back(std::move(t));
    }
  }
  for (size_t i = 0; i < impl->added.size(); ++i) {
    const AddedToken& t = impl->added[i];
    if (!t.normalized) {
      impl->raw_trie.add(t.content, static_cast<int>(i));
    } else {
      std::string c = t.content;
      if (impl->normalizer) impl->normalizer->apply(c);
      impl->norm_trie.add(c, static_cast<int>(i));
    }
  }
  Impl* ip = impl.get();
  TokenLookup lookup = [ip](std::string_view s) -> std::optional<uint32_t> {
    auto it = ip->added_by_content.find(s);
    if (it != ip->added_by_content.end()) return it->second;
    return ip->model->token_to_id(s);
  };
  parse_post_processor(field("post_processor"), "post_processor", lookup, impl->post);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "cannot open {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) fail(ErrorKind::Io, "cannot read {}", path);
  return from_json(ss.str());
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  impl_->encode(text, add_special_tokens, ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const uint32_t> ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

namespace {
/// What the second of [id, id] adds to the decoded text of [id] (prefix-stable decoders, all of
/// HF's: decode([id, id]) = decode([id]) + the continuation); otherwise the piece alone.
std::string continuation(const std::string& a, const std::string& b) {
  return b.size() >= a.size() && b.compare(0, a.size(), a) == 0 ? b.substr(a.size()) : a;
}
}  // namespace

std::string Tokenizer::token_text(uint32_t id) const {
  const uint32_t one[1] = {id}, two[2] = {id, id};
  return continuation(decode(one, false), decode(two, false));
}

std::string Tokenizer::token_bytes(uint32_t id) const {
  const uint32_t one[1] = {id}, two[2] = {id, id};
  return continuation(impl_->decode(one, false, true), impl_->decode(two, false, true));
}

std::optional<uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->added_by_content.find(token);
  if (it != impl_->added_by_content.end()) return it->second;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(uint32_t id) const {
  const std::string* t = impl_->token_of(id);
  return t ? *t : std::string();
}

size_t Tokenizer::vocab_size() const {
  size_t n = impl_->model->size();
  for (const auto& t : impl_->added) n = std::max(n, static_cast<size_t>(t.id) + 1);
  return n;
}

bool Tokenizer::is_special(uint32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

bool Tokenizer::is_byte_piece(uint32_t id) const {
  return impl_->piece_kind(id, false) == Impl::PieceKind::Byte;
}

bool Tokenizer::is_added(uint32_t id) const {
  return impl_->added_by_id.count(id) != 0;
}

const std::vector<uint32_t>& Tokenizer::prefix_special_ids() const {
  return impl_->post.prefix;
}
const std::vector<uint32_t>& Tokenizer::suffix_special_ids() const {
  return impl_->post.suffix;
}
std::string_view Tokenizer::model_type() const {
  return impl_->model->type();
}

// ---- IncrementalDecoder -------------------------------------------------------------------------------

static bool ends_with_fffd(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(&tok), skip_special_(skip_special_tokens) {}

void IncrementalDecoder::prime(std::span<const uint32_t> context) {
  const tok_detail::Impl& impl = *tok_->impl_;
  // The kept context ends with a text piece: pieces that write nothing are dropped, and so is a
  // trailing byte run, whose text the generated bytes could rewrite (see the class comment).
  size_t end = context.size();
  while (end > 0 && impl.piece_kind(context[end - 1], skip_special_) != Impl::PieceKind::Text) --end;
  const size_t k = std::min<size_t>(end, 4);
  std::vector<uint32_t> tail(context.begin() + static_cast<std::ptrdiff_t>(end - k),
                             context.begin() + static_cast<std::ptrdiff_t>(end));
  std::string p = tok_->decode(tail, skip_special_);
  if (ends_with_fffd(p)) return;
  ids_ = std::move(tail);
  prefix_ = std::move(p);
  prefix_index_ = ids_.size();
}

std::string IncrementalDecoder::push(uint32_t id) {
  ids_.push_back(id);
  // A piece that writes nothing changes no text; a byte piece waits for the text piece that closes
  // its run (HF's ByteFallback turns the whole run into one U+FFFD per byte when it is not UTF-8).
  if (tok_->impl_->piece_kind(id, skip_special_) != Impl::PieceKind::Text) return {};
  return take(false);
}

std::string IncrementalDecoder::take(bool final) {
  std::string s = tok_->decode(ids_, skip_special_);
  if (!final && ends_with_fffd(s)) return {};  // may be the start of a UTF-8 character
  std::string out;
  if (s.compare(0, prefix_.size(), prefix_) == 0) {
    out = s.substr(prefix_.size());
  } else {
    // The decoder rewrote text already sent (no decoder of the `tokenizers` library does once byte
    // runs are held back). Sent text stands: the stream goes on past its length.
    ++rewrites_;
    out = s.substr(std::min(utf8_char_start(s, prefix_.size()), s.size()));
  }
  if (final) {
    ids_.clear();
    prefix_.clear();
  } else if (!out.empty()) {
    // The ids just written become the context of the next ones.
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
    prefix_ = tok_->decode(ids_, skip_special_);
  } else {
    return out;
  }
  prefix_index_ = ids_.size();
  return out;
}

std::string IncrementalDecoder::flush() {
  return take(true);
}

size_t IncrementalDecoder::own_text_start(std::string_view out, uint32_t id) const {
  const std::string own = tok_->token_text(id);
  if (own.empty() || !out.ends_with(own)) return 0;
  return out.size() - own.size();
}

}  // namespace cortiq
