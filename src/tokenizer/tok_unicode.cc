// UTF-8, Unicode classification and Oniguruma regex helpers for the tokenizer pipeline.
#include <oniguruma.h>
#include <utf8proc.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

namespace cortiq::tok_detail {

uint32_t next_cp(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  size_t n = cp_len(b);
  if (i + n > s.size()) {  // cannot happen on valid input; be defensive
    ++i;
    return 0xFFFD;
  }
  uint32_t cp = n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append_cp(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string to_valid_utf8(std::string_view s) {
  return replace_invalid_utf8(s, [](std::string_view) { return std::string_view("\xEF\xBF\xBD"); });
}

bool is_whitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

static int cat(uint32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool is_alphabetic(uint32_t cp) {
  int c = cat(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || c == UTF8PROC_CATEGORY_NL;
}
bool is_numeric(uint32_t cp) {
  int c = cat(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}
bool is_alphanumeric(uint32_t cp) {
  return is_alphabetic(cp) || is_numeric(cp);
}
bool is_punctuation(uint32_t cp) {
  if (cp < 0x80) return std::ispunct(static_cast<int>(cp)) != 0;
  int c = cat(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}
bool is_bert_control(uint32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  int c = cat(cp);
  return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CN ||
         c == UTF8PROC_CATEGORY_CO;
}
bool is_mark_nonspacing(uint32_t cp) {
  return cat(cp) == UTF8PROC_CATEGORY_MN;
}
bool is_chinese_char(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = next_cp(s, i);
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    } else if (cp == 0x130) {  // full lowercase mapping: i + combining dot above
      out.append("i\xCC\x87");
    } else {
      append_cp(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
  }
  return out;
}

static std::string normalize_span(std::string_view s, int opts) {
  utf8proc_uint8_t* dst = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &dst, static_cast<utf8proc_option_t>(opts));
  if (n < 0) fail(ErrorKind::InvalidArgument, "unicode normalization failed: {}", utf8proc_errmsg(n));
  std::string out(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  std::free(dst);
  return out;
}

// Code points below `stable` never change under the form and never combine with a preceding
// character (U+0300 for NFC: everything below is a precomposed-stable starter; U+0080 for the
// others). Only spans of other characters, extended back by one character (a starter they may
// compose with), go through utf8proc.
std::string unicode_normalize(std::string_view s, NormForm f) {
  int opts = UTF8PROC_STABLE;
  uint32_t stable = 0x80;
  switch (f) {
    case NormForm::NFC:
      opts |= UTF8PROC_COMPOSE;
      stable = 0x300;
      break;
    case NormForm::NFD:
      opts |= UTF8PROC_DECOMPOSE;
      break;
    case NormForm::NFKC:
      opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormForm::NFKD:
      opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  std::string out;
  size_t copied = 0, prev_start = 0;
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      prev_start = i++;
      continue;
    }
    size_t b = i;
    uint32_t cp = next_cp(s, i);
    if (cp < stable) {
      prev_start = b;
      continue;
    }
    size_t span_b = b > 0 && prev_start < b ? prev_start : b;
    size_t e = i;
    while (e < s.size()) {
      size_t k = e;
      if (static_cast<unsigned char>(s[k]) < 0x80) break;
      if (next_cp(s, k) < stable) break;
      e = k;
    }
    if (out.empty()) out.reserve(s.size() + 16);
    out.append(s.substr(copied, span_b - copied));
    out += normalize_span(s.substr(span_b, e - span_b), opts);
    copied = e;
    i = e;
    prev_start = e;
  }
  if (copied == 0) return std::string(s);
  out.append(s.substr(copied));
  return out;
}

// ---- Oniguruma ----------------------------------------------------------------------------------

static void onig_init_once() {
  static std::once_flag flag;
  std::call_once(flag, [] {
    OnigEncoding enc[1] = {ONIG_ENCODING_UTF8};
    onig_initialize(enc, 1);
  });
}

Regex::Regex(std::string_view pattern, std::string_view field) {
  onig_init_once();
  OnigRegex re = nullptr;
  OnigErrorInfo einfo;
  auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  int r =
      onig_new(&re, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &einfo);
  if (r != ONIG_NORMAL) {
    OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(buf, r, &einfo);
    fail(ErrorKind::Parse, "{}: bad regex /{}/: {}", field, pattern, reinterpret_cast<const char*>(buf));
  }
  re_ = re;
}

Regex::~Regex() {
  if (re_) onig_free(static_cast<OnigRegex>(re_));
}

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  auto* re = static_cast<OnigRegex>(re_);
  OnigRegion* region = onig_region_new();
  auto* str = reinterpret_cast<const OnigUChar*>(s.data());
  const OnigUChar* end = str + s.size();
  size_t last_end = 0;
  std::optional<size_t> last_match_end;
  while (last_end <= s.size()) {
    int r = onig_search(re, str, end, str + last_end, end, region, ONIG_OPTION_NONE);
    if (r < 0) break;
    auto b = static_cast<size_t>(region->beg[0]);
    auto e = static_cast<size_t>(region->end[0]);
    if (b == e && last_match_end && *last_match_end == e) {
      last_end += last_end < s.size() ? cp_len(static_cast<unsigned char>(s[last_end])) : 1;
      continue;
    }
    last_end = e;
    last_match_end = e;
    out.emplace_back(b, e);
  }
  onig_region_free(region, 1);
}

Pattern::Pattern(const json& j, std::string_view field) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    literal_ = j["String"].get<std::string>();
  } else if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    regex_ = std::make_shared<Regex>(j["Regex"].get<std::string>(), field);
  } else {
    fail(ErrorKind::Parse, "{}: pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}", field);
  }
}

void Pattern::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  if (regex_) {
    regex_->find_all(s, out);
    return;
  }
  out.clear();
  if (literal_.empty()) return;
  size_t pos = 0;
  while ((pos = s.find(literal_, pos)) != std::string_view::npos) {
    out.emplace_back(pos, pos + literal_.size());
    pos += literal_.size();
  }
}

// ---- byte-level table ----------------------------------------------------------------------------

namespace {
struct ByteTable {
  std::string b2u[256];
  std::unordered_map<uint32_t, int> u2b;
  ByteTable() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      uint32_t cp = keep ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      append_cp(b2u[b], cp);
      u2b[cp] = b;
    }
  }
};
const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}
}  // namespace

const std::string& byte_to_unicode(unsigned char b) {
  return byte_table().b2u[b];
}
int unicode_to_byte(uint32_t cp) {
  const auto& m = byte_table().u2b;
  auto it = m.find(cp);
  return it == m.end() ? -1 : it->second;
}

// ---- JSON helpers ---------------------------------------------------------------------------------

const json& req(const json& j, const char* key, const std::string& field) {
  if (!j.is_object()) fail(ErrorKind::Parse, "{}: expected an object", field);
  auto it = j.find(key);
  if (it == j.end()) fail(ErrorKind::Parse, "{}.{}: missing", field, key);
  return *it;
}
std::string req_str(const json& j, const char* key, const std::string& field) {
  const json& v = req(j, key, field);
  if (!v.is_string()) fail(ErrorKind::Parse, "{}.{}: expected a string", field, key);
  return v.get<std::string>();
}
bool opt_bool(const json& j, const char* key, bool dflt, const std::string& field) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) fail(ErrorKind::Parse, "{}.{}: expected a boolean", field, key);
  return it->get<bool>();
}

}  // namespace cortiq::tok_detail
