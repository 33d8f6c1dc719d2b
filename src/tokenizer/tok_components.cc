// Normalizers, pre-tokenizers, decoders and post-processors of the `tokenizers` pipeline.
// Semantics follow the Rust `tokenizers` crate (normalizers/*, pre_tokenizers/*, decoders/*,
// processors/*), including the split-behaviour rules of NormalizedString::split.
#include <algorithm>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

namespace cortiq::tok_detail {

namespace {

std::string type_of(const json& j, const std::string& field) {
  if (!j.is_object()) fail(ErrorKind::Parse, "{}: expected an object", field);
  return req_str(j, "type", field);
}

// ---- splitting ---------------------------------------------------------------------------------

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const json& j, const std::string& field, Behavior dflt) {
  auto it = j.find("behavior");
  if (it == j.end() || it->is_null()) return dflt;
  std::string b = it->is_string() ? it->get<std::string>() : "";
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  fail(ErrorKind::Parse, "{}.behavior: unknown value {}", field, it->dump());
}

struct Seg {
  size_t b, e;
  bool m;
};

// NormalizedString::split: matches -> (offsets, is_match) covering the string -> behaviour.
void split_piece(const Piece& p, const std::vector<std::pair<size_t, size_t>>& matches, Behavior beh,
                 bool invert, const PieceSink& out) {
  const std::string& s = p.text;
  std::vector<Seg> segs;
  if (s.empty()) {
    segs.push_back({0, 0, false});
  } else {
    size_t prev = 0;
    for (auto [b, e] : matches) {
      if (prev != b) segs.push_back({prev, b, false});
      segs.push_back({b, e, true});
      prev = e;
    }
    if (prev != s.size()) segs.push_back({prev, s.size(), false});
  }
  if (invert)
    for (auto& g : segs) g.m = !g.m;
  std::vector<Seg> res;
  switch (beh) {
    case Behavior::Isolated:
      res = segs;
      break;
    case Behavior::Removed:
      for (auto& g : segs)
        if (!g.m) res.push_back(g);
      break;
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (auto& g : segs) {
        if (g.m && !prev_match && !res.empty())
          res.back().e = g.e;
        else
          res.push_back({g.b, g.e, false});
        prev_match = g.m;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (size_t k = segs.size(); k-- > 0;) {
        auto& g = segs[k];
        if (g.m && !prev_match && !res.empty())
          res.back().b = g.b;
        else
          res.push_back({g.b, g.e, false});
        prev_match = g.m;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
    case Behavior::Contiguous: {
      bool prev_match = false;
      bool first = true;
      for (auto& g : segs) {
        if (!first && g.m == prev_match)
          res.back().e = g.e;
        else
          res.push_back({g.b, g.e, false});
        prev_match = g.m;
        first = false;
      }
      break;
    }
  }
  for (auto& g : res) {
    if (g.e == g.b) continue;
    out(Piece{s.substr(g.b, g.e - g.b), p.at_start && g.b == 0});
  }
}

// Every char matching `pred` is one match (the Fn(char)->bool pattern of `tokenizers`).
template <typename Pred>
void char_matches(std::string_view s, Pred pred, std::vector<std::pair<size_t, size_t>>& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    size_t b = i;
    uint32_t cp = next_cp(s, i);
    if (pred(cp)) out.emplace_back(b, i);
  }
}

template <typename Fn>
void split_one(Piece&& p, const PieceSink& sink, Fn matcher, Behavior beh, bool invert) {
  std::vector<std::pair<size_t, size_t>> m;
  matcher(p.text, m);
  split_piece(p, m, beh, invert, sink);
}

// a + b without std::string::insert (GCC 12 -Wrestrict false positive).
std::string prepend_str(std::string_view a, std::string_view b) {
  std::string out;
  out.reserve(a.size() + b.size());
  out.append(a);
  out.append(b);
  return out;
}

// ---- normalizers ---------------------------------------------------------------------------------

struct NormSeq : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> items;
  void apply(std::string& s) const override {
    for (auto& n : items) n->apply(s);
  }
};
struct NormUnicode : Normalizer {
  NormForm f;
  explicit NormUnicode(NormForm f_) : f(f_) {}
  void apply(std::string& s) const override { s = unicode_normalize(s, f); }
};
struct NormLower : Normalizer {
  void apply(std::string& s) const override { s = to_lower(s); }
};
struct NormStrip : Normalizer {
  bool left, right;
  NormStrip(bool l, bool r) : left(l), right(r) {}
  void apply(std::string& s) const override {
    size_t b = 0, e = s.size();
    if (left) {
      while (b < e) {
        size_t i = b;
        if (!is_whitespace(next_cp(s, i))) break;
        b = i;
      }
    }
    if (right) {
      while (e > b) {
        size_t k = e - 1;
        while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        size_t i = k;
        if (!is_whitespace(next_cp(s, i))) break;
        e = k;
      }
    }
    s = s.substr(b, e - b);
  }
};
struct NormStripAccents : Normalizer {
  void apply(std::string& s) const override {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      size_t b = i;
      if (!is_mark_nonspacing(next_cp(s, i))) out.append(s, b, i - b);
    }
    s = std::move(out);
  }
};
struct NormPrepend : Normalizer {
  std::string prepend;
  void apply(std::string& s) const override {
    if (!s.empty()) s = prepend_str(prepend, s);
  }
};
std::string replace_all(std::string_view s, const Pattern& pat, std::string_view content) {
  std::vector<std::pair<size_t, size_t>> m;
  pat.find_all(s, m);
  if (m.empty()) return std::string(s);
  std::string out;
  size_t prev = 0;
  for (auto [b, e] : m) {
    out.append(s.substr(prev, b - prev));
    out.append(content);
    prev = e;
  }
  out.append(s.substr(prev));
  return out;
}
struct NormReplace : Normalizer {
  Pattern pat;
  std::string content;
  NormReplace(const json& j, const std::string& f)
      : pat(req(j, "pattern", f), f + ".pattern"), content(req_str(j, "content", f)) {}
  void apply(std::string& s) const override { s = replace_all(s, pat, content); }
};
struct NormBert : Normalizer {
  bool clean_text, chinese, strip_accents, lowercase;
  void apply(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      uint32_t cp = next_cp(s, i);
      if (clean_text) {
        if (cp == 0 || cp == 0xFFFD || is_bert_control(cp)) continue;
        if (is_whitespace(cp)) cp = ' ';
      }
      if (chinese && is_chinese_char(cp)) {
        out.push_back(' ');
        append_cp(out, cp);
        out.push_back(' ');
      } else {
        append_cp(out, cp);
      }
    }
    if (strip_accents) {
      out = unicode_normalize(out, NormForm::NFD);
      NormStripAccents{}.apply(out);
    }
    if (lowercase) out = to_lower(out);
    s = std::move(out);
  }
};
struct NormByteLevel : Normalizer {
  void apply(std::string& s) const override {
    std::string out;
    out.reserve(s.size() * 2);
    for (unsigned char c : s) out += byte_to_unicode(c);
    s = std::move(out);
  }
};

// ---- pre-tokenizers ------------------------------------------------------------------------------

struct PreSeq : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> items;
  void run(size_t k, Piece&& p, const PieceSink& sink) const {
    if (k == items.size()) {
      sink(std::move(p));
      return;
    }
    items[k]->split(std::move(p), [&](Piece&& q) { run(k + 1, std::move(q), sink); });
  }
  void split(Piece&& p, const PieceSink& sink) const override { run(0, std::move(p), sink); }
};

const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void byte_level_map(std::string& s) {
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  for (unsigned char c : s) out += byte_to_unicode(c);
  s = std::move(out);
}

struct PreByteLevel : PreTokenizer {
  bool add_prefix_space, use_regex;
  std::unique_ptr<Regex> re;
  void split(Piece&& p, const PieceSink& sink) const override {
    if (add_prefix_space && (p.text.empty() || p.text[0] != ' ')) p.text = prepend_str(" ", p.text);
    auto emit = [&](Piece&& q) {
      byte_level_map(q.text);
      sink(std::move(q));
    };
    if (use_regex) {
      split_one(
          std::move(p), emit, [&](std::string_view s, auto& m) { re->find_all(s, m); }, Behavior::Isolated,
          false);
    } else if (!p.text.empty()) {
      emit(std::move(p));
    }
  }
};
struct PreSplit : PreTokenizer {
  std::unique_ptr<Pattern> pat;
  Behavior beh;
  bool invert;
  void split(Piece&& p, const PieceSink& sink) const override {
    split_one(
        std::move(p), sink, [&](std::string_view s, auto& m) { pat->find_all(s, m); }, beh, invert);
  }
};
enum class Prepend { Always, First, Never };
struct PreMetaspace : PreTokenizer {
  std::string rep;
  Prepend scheme;
  bool split_;
  void split(Piece&& p, const PieceSink& sink) const override {
    std::string t;
    for (char c : p.text) {
      if (c == ' ')
        t += rep;
      else
        t.push_back(c);
    }
    bool starts = t.compare(0, rep.size(), rep) == 0;
    if (!starts && (scheme == Prepend::Always || (scheme == Prepend::First && p.at_start)))
      t = prepend_str(rep, t);
    p.text = std::move(t);
    if (!split_) {
      if (!p.text.empty()) sink(std::move(p));
      return;
    }
    split_one(
        std::move(p), sink,
        [&](std::string_view s, auto& m) {
          m.clear();
          for (size_t pos = 0; (pos = s.find(rep, pos)) != std::string_view::npos; pos += rep.size())
            m.emplace_back(pos, pos + rep.size());
        },
        Behavior::MergedWithNext, false);
  }
};
template <typename Pred>
struct PreCharSplit : PreTokenizer {
  Pred pred;
  Behavior beh;
  PreCharSplit(Pred p, Behavior b) : pred(p), beh(b) {}
  void split(Piece&& p, const PieceSink& sink) const override {
    split_one(
        std::move(p), sink, [&](std::string_view s, auto& m) { char_matches(s, pred, m); }, beh, false);
  }
};
template <typename Pred>
std::unique_ptr<PreTokenizer> char_split(Pred p, Behavior b) {
  return std::make_unique<PreCharSplit<Pred>>(p, b);
}
struct PreWhitespace : PreTokenizer {
  Regex re{R"(\w+|[^\w\s]+)", "pre_tokenizer.Whitespace"};
  void split(Piece&& p, const PieceSink& sink) const override {
    split_one(
        std::move(p), sink, [&](std::string_view s, auto& m) { re.find_all(s, m); }, Behavior::Removed, true);
  }
};

// ---- decoders --------------------------------------------------------------------------------------

struct DecSeq : Decoder {
  std::vector<std::unique_ptr<Decoder>> items;
  void apply(std::vector<std::string>& t, bool raw) const override {
    for (auto& d : items) d->apply(t, raw);
  }
  bool merges_byte_runs() const override {
    return std::any_of(items.begin(), items.end(), [](const auto& d) { return d->merges_byte_runs(); });
  }
};
struct DecByteLevel : Decoder {
  void apply(std::vector<std::string>& tokens, bool raw) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      size_t start = bytes.size();
      bool ok = true;
      for (size_t i = 0; i < t.size();) {
        int b = unicode_to_byte(next_cp(t, i));
        if (b < 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!ok) {
        bytes.resize(start);
        bytes += t;
      }
    }
    tokens.assign(1, raw ? std::move(bytes) : to_valid_utf8(bytes));
  }
};
struct DecMetaspace : Decoder {
  std::string rep;
  Prepend scheme;
  void apply(std::vector<std::string>& tokens, bool /*raw*/) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, rep.size(), rep) == 0) {
          if (!(i == 0 && k == 0 && scheme != Prepend::Never)) out.push_back(' ');
          k += rep.size();
        } else {
          out.push_back(t[k++]);
        }
      }
      tokens[i] = std::move(out);
    }
  }
};
int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

int byte_fallback_value(std::string_view t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const int hi = hexval(t[3]), lo = hexval(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

namespace {
struct DecByteFallback : Decoder {
  bool merges_byte_runs() const override { return true; }
  void apply(std::vector<std::string>& tokens, bool raw) const override {
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (raw || is_valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < bytes.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
    };
    for (auto& t : tokens) {
      if (const int b = byte_fallback_value(t); b >= 0) {
        bytes.push_back(static_cast<char>(b));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};
struct DecFuse : Decoder {
  void apply(std::vector<std::string>& tokens, bool /*raw*/) const override {
    std::string all;
    for (auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};
struct DecStrip : Decoder {
  uint32_t content;
  size_t start, stop;
  /// Cuts up to `start` leading and `stop` trailing code points equal to `content`; the bytes in
  /// between are kept as they are (raw mode keeps a partial UTF-8 character; otherwise the input is
  /// valid UTF-8 already, or made so).
  void apply(std::vector<std::string>& tokens, bool raw) const override {
    for (auto& t : tokens) {
      std::vector<uint32_t> cps;
      std::vector<size_t> at;  // byte offset of each code point, then t.size()
      for (size_t i = 0; i < t.size();) {
        at.push_back(i);
        cps.push_back(next_cp(t, i));
      }
      at.push_back(t.size());
      size_t b = 0, e = cps.size();
      for (size_t k = 0; k < start && k < cps.size(); ++k) {
        if (cps[k] != content) break;
        b = k + 1;
      }
      for (size_t k = 0; k < stop && k < cps.size(); ++k) {
        size_t idx = cps.size() - k - 1;
        if (cps[idx] != content || idx < b) break;
        e = idx;
      }
      std::string out = t.substr(at[b], at[std::max(b, e)] - at[b]);
      t = raw || is_valid_utf8(out) ? std::move(out) : to_valid_utf8(out);
    }
  }
};
struct DecReplace : Decoder {
  Pattern pat;
  std::string content;
  DecReplace(const json& j, const std::string& f)
      : pat(req(j, "pattern", f), f + ".pattern"), content(req_str(j, "content", f)) {}
  void apply(std::vector<std::string>& tokens, bool /*raw*/) const override {
    for (auto& t : tokens) t = replace_all(t, pat, content);
  }
};
void replace_str(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t prev = 0, pos;
  while ((pos = s.find(from, prev)) != std::string::npos) {
    out.append(s, prev, pos - prev);
    out.append(to);
    prev = pos + from.size();
  }
  out.append(s, prev);
  s = std::move(out);
}
struct DecWordPiece : Decoder {
  std::string prefix;
  bool cleanup;
  void apply(std::vector<std::string>& tokens, bool /*raw*/) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix.size(), prefix) == 0)
          t.erase(0, prefix.size());
        else
          t = prepend_str(" ", t);
      }
      if (cleanup) {
        static const std::pair<const char*, const char*> kRules[] = {
            {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
            {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
            {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
        for (auto [a, b] : kRules) replace_str(t, a, b);
      }
    }
  }
};
struct DecBPE : Decoder {
  std::string suffix;
  void apply(std::vector<std::string>& tokens, bool /*raw*/) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      replace_str(tokens[i], suffix, i + 1 == tokens.size() ? "" : " ");
  }
};

Prepend parse_prepend(const json& j, const std::string& f) {
  auto it = j.find("prepend_scheme");
  if (it != j.end() && !it->is_null()) {
    std::string s = it->is_string() ? it->get<std::string>() : "";
    if (s == "always") return Prepend::Always;
    if (s == "first") return Prepend::First;
    if (s == "never") return Prepend::Never;
    fail(ErrorKind::Parse, "{}.prepend_scheme: unknown value {}", f, it->dump());
  }
  return opt_bool(j, "add_prefix_space", true, f) ? Prepend::Always : Prepend::Never;
}

std::string metaspace_rep(const json& j, const std::string& f) {
  auto it = j.find("replacement");
  if (it == j.end() || it->is_null()) return "\xE2\x96\x81";
  if (!it->is_string()) fail(ErrorKind::Parse, "{}.replacement: expected a string", f);
  return it->get<std::string>();
}

template <typename T>
const json& req_array(const json& j, const char* key, const std::string& f) {
  const json& a = req(j, key, f);
  if (!a.is_array()) fail(ErrorKind::Parse, "{}.{}: expected an array", f, key);
  return a;
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& f) {
  if (j.is_null()) return nullptr;
  std::string t = type_of(j, f);
  if (t == "Sequence") {
    auto s = std::make_unique<NormSeq>();
    const json& a = req_array<int>(j, "normalizers", f);
    for (size_t i = 0; i < a.size(); ++i) {
      auto n = make_normalizer(a[i], fmt::format("{}.normalizers[{}]", f, i));
      if (n) s->items.push_back(std::move(n));
    }
    return s;
  }
  if (t == "NFC") return std::make_unique<NormUnicode>(NormForm::NFC);
  if (t == "NFD") return std::make_unique<NormUnicode>(NormForm::NFD);
  if (t == "NFKC") return std::make_unique<NormUnicode>(NormForm::NFKC);
  if (t == "NFKD") return std::make_unique<NormUnicode>(NormForm::NFKD);
  if (t == "Lowercase") return std::make_unique<NormLower>();
  if (t == "Strip")
    return std::make_unique<NormStrip>(opt_bool(j, "strip_left", true, f),
                                       opt_bool(j, "strip_right", true, f));
  if (t == "StripAccents") return std::make_unique<NormStripAccents>();
  if (t == "Prepend") {
    auto n = std::make_unique<NormPrepend>();
    n->prepend = req_str(j, "prepend", f);
    return n;
  }
  if (t == "Replace") return std::make_unique<NormReplace>(j, f);
  if (t == "ByteLevel") return std::make_unique<NormByteLevel>();
  if (t == "BertNormalizer") {
    auto n = std::make_unique<NormBert>();
    n->clean_text = opt_bool(j, "clean_text", true, f);
    n->chinese = opt_bool(j, "handle_chinese_chars", true, f);
    n->lowercase = opt_bool(j, "lowercase", true, f);
    n->strip_accents = opt_bool(j, "strip_accents", n->lowercase, f);
    return n;
  }
  if (t == "Precompiled") {
    auto it = j.find("precompiled_charsmap");
    if (it == j.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty())) return nullptr;
    fail(ErrorKind::Unsupported, "{}: Precompiled normalizer with a SentencePiece charsmap is not supported",
         f);
  }
  fail(ErrorKind::Parse, "{}.type: unknown normalizer \"{}\"", f, t);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& f) {
  if (j.is_null()) return nullptr;
  std::string t = type_of(j, f);
  if (t == "Sequence") {
    auto s = std::make_unique<PreSeq>();
    const json& a = req_array<int>(j, "pretokenizers", f);
    for (size_t i = 0; i < a.size(); ++i) {
      auto p = make_pre_tokenizer(a[i], fmt::format("{}.pretokenizers[{}]", f, i));
      if (p) s->items.push_back(std::move(p));
    }
    return s;
  }
  if (t == "ByteLevel") {
    auto p = std::make_unique<PreByteLevel>();
    p->add_prefix_space = opt_bool(j, "add_prefix_space", true, f);
    p->use_regex = opt_bool(j, "use_regex", true, f);
    if (p->use_regex) p->re = std::make_unique<Regex>(kGpt2Regex, f);
    return p;
  }
  if (t == "Split") {
    auto p = std::make_unique<PreSplit>();
    p->pat = std::make_unique<Pattern>(req(j, "pattern", f), f + ".pattern");
    p->beh = parse_behavior(j, f, Behavior::Isolated);
    if (j.find("behavior") == j.end()) fail(ErrorKind::Parse, "{}.behavior: missing", f);
    p->invert = opt_bool(j, "invert", false, f);
    return p;
  }
  if (t == "Metaspace") {
    auto p = std::make_unique<PreMetaspace>();
    p->rep = metaspace_rep(j, f);
    p->scheme = parse_prepend(j, f);
    p->split_ = opt_bool(j, "split", true, f);
    return p;
  }
  if (t == "Digits") {
    bool ind = opt_bool(j, "individual_digits", false, f);
    return char_split([](uint32_t c) { return c >= '0' && c <= '9'; },
                      ind ? Behavior::Isolated : Behavior::Contiguous);
  }
  if (t == "Punctuation") return char_split(is_punctuation, parse_behavior(j, f, Behavior::Isolated));
  if (t == "Whitespace") return std::make_unique<PreWhitespace>();
  if (t == "WhitespaceSplit") return char_split(is_whitespace, Behavior::Removed);
  if (t == "BertPreTokenizer") {
    auto s = std::make_unique<PreSeq>();
    s->items.push_back(char_split(is_whitespace, Behavior::Removed));
    s->items.push_back(char_split(is_punctuation, Behavior::Isolated));
    return s;
  }
  if (t == "CharDelimiterSplit") {
    std::string d = req_str(j, "delimiter", f);
    size_t i = 0;
    if (d.empty()) fail(ErrorKind::Parse, "{}.delimiter: empty", f);
    uint32_t cp = next_cp(d, i);
    return char_split([cp](uint32_t c) { return c == cp; }, Behavior::Removed);
  }
  fail(ErrorKind::Parse, "{}.type: unknown pre-tokenizer \"{}\"", f, t);
}

std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& f) {
  if (j.is_null()) return nullptr;
  std::string t = type_of(j, f);
  if (t == "Sequence") {
    auto s = std::make_unique<DecSeq>();
    const json& a = req_array<int>(j, "decoders", f);
    for (size_t i = 0; i < a.size(); ++i) {
      auto d = make_decoder(a[i], fmt::format("{}.decoders[{}]", f, i));
      if (d) s->items.push_back(std::move(d));
    }
    return s;
  }
  if (t == "ByteLevel") return std::make_unique<DecByteLevel>();
  if (t == "Metaspace") {
    auto d = std::make_unique<DecMetaspace>();
    d->rep = metaspace_rep(j, f);
    d->scheme = parse_prepend(j, f);
    return d;
  }
  if (t == "ByteFallback") return std::make_unique<DecByteFallback>();
  if (t == "Fuse") return std::make_unique<DecFuse>();
  if (t == "Strip") {
    auto d = std::make_unique<DecStrip>();
    std::string c = req_str(j, "content", f);
    size_t i = 0;
    if (c.empty()) fail(ErrorKind::Parse, "{}.content: empty", f);
    d->content = next_cp(c, i);
    const json& a = req(j, "start", f);
    const json& b = req(j, "stop", f);
    if (!a.is_number_unsigned() || !b.is_number_unsigned())
      fail(ErrorKind::Parse, "{}: start/stop must be unsigned", f);
    d->start = a.get<size_t>();
    d->stop = b.get<size_t>();
    return d;
  }
  if (t == "Replace") return std::make_unique<DecReplace>(j, f);
  if (t == "WordPiece") {
    auto d = std::make_unique<DecWordPiece>();
    auto it = j.find("prefix");
    d->prefix = it != j.end() && it->is_string() ? it->get<std::string>() : "##";
    d->cleanup = opt_bool(j, "cleanup", true, f);
    return d;
  }
  if (t == "BPEDecoder") {
    auto d = std::make_unique<DecBPE>();
    auto it = j.find("suffix");
    d->suffix = it != j.end() && it->is_string() ? it->get<std::string>() : "</w>";
    return d;
  }
  fail(ErrorKind::Parse, "{}.type: unknown decoder \"{}\"", f, t);
}

void parse_post_processor(const json& j, const std::string& f, const TokenLookup& lookup,
                          PostProcessor& out) {
  if (j.is_null()) return;
  std::string t = type_of(j, f);
  auto pair_id = [&](const char* key) -> uint32_t {
    const json& p = req(j, key, f);
    if (!p.is_array() || p.size() != 2 || !p[1].is_number_unsigned())
      fail(ErrorKind::Parse, "{}.{}: expected [token, id]", f, key);
    return p[1].get<uint32_t>();
  };
  if (t == "ByteLevel") return;
  if (t == "Sequence") {
    const json& a = req_array<int>(j, "processors", f);
    for (size_t i = 0; i < a.size(); ++i) {
      PostProcessor inner;
      parse_post_processor(a[i], fmt::format("{}.processors[{}]", f, i), lookup, inner);
      out.prefix.insert(out.prefix.begin(), inner.prefix.begin(), inner.prefix.end());
      out.suffix.insert(out.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return;
  }
  if (t == "BertProcessing" || t == "RobertaProcessing") {
    uint32_t cls = pair_id("cls"), sep = pair_id("sep");
    out.prefix.insert(out.prefix.begin(), cls);
    out.suffix.push_back(sep);
    return;
  }
  if (t == "TemplateProcessing") {
    const json& single = req_array<int>(j, "single", f);
    const json& specials = req(j, "special_tokens", f);
    std::vector<uint32_t> pre, post;
    bool seen_seq = false;
    for (size_t i = 0; i < single.size(); ++i) {
      std::string fi = fmt::format("{}.single[{}]", f, i);
      const json& item = single[i];
      if (item.contains("Sequence")) {
        seen_seq = true;
        continue;
      }
      if (!item.contains("SpecialToken")) fail(ErrorKind::Parse, "{}: expected SpecialToken or Sequence", fi);
      std::string name = req_str(item["SpecialToken"], "id", fi + ".SpecialToken");
      auto it = specials.find(name);
      if (it == specials.end())
        fail(ErrorKind::Parse, "{}: special token \"{}\" not in {}.special_tokens", fi, name, f);
      const json& ids = req(*it, "ids", f + ".special_tokens." + name);
      if (!ids.is_array()) fail(ErrorKind::Parse, "{}.special_tokens.{}.ids: expected an array", f, name);
      for (const auto& id : ids) {
        if (!id.is_number_unsigned())
          fail(ErrorKind::Parse, "{}.special_tokens.{}.ids: expected ids", f, name);
        (seen_seq ? post : pre).push_back(id.get<uint32_t>());
      }
    }
    out.prefix.insert(out.prefix.begin(), pre.begin(), pre.end());
    out.suffix.insert(out.suffix.end(), post.begin(), post.end());
    return;
  }
  (void)lookup;
  fail(ErrorKind::Parse, "{}.type: unknown post-processor \"{}\"", f, t);
}

}  // namespace cortiq::tok_detail
