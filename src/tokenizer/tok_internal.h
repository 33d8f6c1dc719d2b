// Internal building blocks of the tokenizer pipeline (not a public API; see tokenizer.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "util/utf8.h"

namespace cortiq::tok_detail {

using json = nlohmann::json;

// ---- UTF-8 / Unicode helpers (tok_unicode.cc) -----------------------------------------------

/// Decodes the code point at s[i] (s must be valid UTF-8) and advances i.
uint32_t next_cp(std::string_view s, size_t& i);
/// Byte length of the UTF-8 sequence starting with lead byte b (1 for invalid leads).
inline size_t cp_len(unsigned char b) {
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}
void append_cp(std::string& out, uint32_t cp);
/// Replaces invalid UTF-8 by U+FFFD, one per maximal invalid subpart (WHATWG decoder rule;
/// utf8_sequence, util/utf8.h). Validity itself: is_valid_utf8 (util/utf8.h).
std::string to_valid_utf8(std::string_view s);

/// Rust `char::is_whitespace` (Unicode White_Space).
bool is_whitespace(uint32_t cp);
/// Rust `char::is_alphabetic`-like (letters, Nl, marks Mn/Mc with Other_Alphabetic approximated).
bool is_alphabetic(uint32_t cp);
/// Rust `char::is_numeric` (Nd, Nl, No).
bool is_numeric(uint32_t cp);
bool is_alphanumeric(uint32_t cp);
/// `tokenizers` is_punc: ASCII punctuation or Unicode P* category.
bool is_punctuation(uint32_t cp);
/// Unicode general category Cc/Cf/Cn/Co (what BertNormalizer calls control), excluding \t\n\r.
bool is_bert_control(uint32_t cp);
bool is_mark_nonspacing(uint32_t cp);
/// CJK ideograph ranges as BertNormalizer defines them.
bool is_chinese_char(uint32_t cp);
/// Rust str::to_lowercase (full mapping; the special cases that matter: U+0130).
std::string to_lower(std::string_view s);
enum class NormForm { NFC, NFD, NFKC, NFKD };
std::string unicode_normalize(std::string_view s, NormForm f);

/// Oniguruma regex (Ruby syntax, UTF-8) — the engine `tokenizers` uses.
class Regex {
 public:
  /// Throws Error(Parse) naming `field` when the pattern does not compile.
  Regex(std::string_view pattern, std::string_view field);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  /// All non-overlapping matches [begin, end) left to right (onig crate find_iter semantics for
  /// empty matches).
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  void* re_ = nullptr;
};

/// A literal-or-regex pattern ({"String": s} or {"Regex": r} in tokenizer.json).
class Pattern {
 public:
  Pattern(const json& j, std::string_view field);
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  std::string literal_;
  std::shared_ptr<Regex> regex_;
};

// ---- pipeline pieces --------------------------------------------------------------------------

/// A pre-token: its text and whether it starts at offset 0 of the original input.
struct Piece {
  std::string text;
  bool at_start = false;
};

struct Normalizer {
  virtual ~Normalizer() = default;
  virtual void apply(std::string& s) const = 0;
};
/// Receives the pieces a pre-tokenizer produces (depth-first: no whole-text piece vectors).
using PieceSink = std::function<void(Piece&&)>;
struct PreTokenizer {
  virtual ~PreTokenizer() = default;
  /// Splits one piece, handing every resulting non-empty piece to `sink` in order.
  virtual void split(Piece&& piece, const PieceSink& sink) const = 0;
};
struct Decoder {
  virtual ~Decoder() = default;
  /// Decodes the token strings in place. `raw`: byte sequences that are not valid UTF-8 stay as
  /// they are (Tokenizer::token_bytes) instead of becoming U+FFFD as in HF's decode.
  virtual void apply(std::vector<std::string>& tokens, bool raw) const = 0;
  /// True when the decoder joins runs of byte-fallback pieces ("<0x41>") and validates each run as
  /// a whole (HF ByteFallback): a later byte piece can rewrite the text of the earlier ones in its
  /// run, so a streaming decoder must hold a run back until a text piece closes it.
  virtual bool merges_byte_runs() const { return false; }
};
struct Model {
  virtual ~Model() = default;
  /// Appends the ids of one pre-token.
  virtual void tokenize(std::string_view word, std::vector<uint32_t>& out) const = 0;
  virtual std::optional<uint32_t> token_to_id(std::string_view tok) const = 0;
  virtual const std::string* id_to_token(uint32_t id) const = 0;
  virtual size_t size() const = 0;
  virtual std::string_view type() const = 0;
};

/// Vocabulary map with heterogeneous string_view lookup.
struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, uint32_t, SvHash, std::equal_to<>>;

/// Lookup for special tokens named by post-processors ("<s>" -> id).
using TokenLookup = std::function<std::optional<uint32_t>(std::string_view)>;

/// Post-processor reduced to what single-sequence encode needs: ids before and after.
struct PostProcessor {
  std::vector<uint32_t> prefix, suffix;
};

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& field);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& field);
std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& field);
/// The byte a byte-fallback piece stands for ("<0x0A>" → 10; hex digits of either case), or -1
/// for any other piece.
int byte_fallback_value(std::string_view piece);
void parse_post_processor(const json& j, const std::string& field, const TokenLookup& lookup,
                          PostProcessor& out);
/// model.vocab / model.merges captured by the SAX loader (tok_sax.cc) instead of the DOM.
struct RawModel {
  bool has_vocab = false, vocab_is_array = false, has_merges = false;
  std::vector<std::pair<std::string, uint32_t>> vocab;  ///< BPE/WordPiece/WordLevel {token: id}
  std::vector<std::pair<std::string, double>> uvocab;   ///< Unigram [[piece, score]]
  std::vector<std::pair<std::string, std::string>> merges;
};
/// Parses tokenizer.json; the returned DOM holds null placeholders for model.vocab/merges.
/// Throws Error(Parse) for malformed JSON or a malformed vocab/merges entry (naming it).
json parse_tokenizer_json(std::string_view text, RawModel& raw);
std::unique_ptr<Model> make_model(const json& j, RawModel& raw, const std::string& field);

/// GPT-2 byte -> code point table used by ByteLevel components.
const std::string& byte_to_unicode(unsigned char b);
/// Inverse: code point -> byte, or -1.
int unicode_to_byte(uint32_t cp);

/// Field access helpers that throw Error(Parse) naming `field`.
const json& req(const json& j, const char* key, const std::string& field);
std::string req_str(const json& j, const char* key, const std::string& field);
bool opt_bool(const json& j, const char* key, bool dflt, const std::string& field);

}  // namespace cortiq::tok_detail
