// Hugging Face `tokenizers` pipeline, loaded from a tokenizer.json.
//
// encode: added tokens are matched first (non-normalized ones on the raw text, normalized ones on
// the normalized remainder), then normalizer -> pre-tokenizer -> model (BPE / Unigram / WordPiece)
// -> post-processor, exactly as the `tokenizers` library (Rust, v0.2x) defines it. decode: ids ->
// token strings (added tokens by content) -> decoder chain -> concatenation. Parity with the
// official npm package is checked by tests/golden/tokenizer/*.jsonl (tests/oracles/tok_goldens.js).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cortiq {

namespace tok_detail {
struct Impl;
}

/// A loaded tokenizer. Immutable after construction; encode/decode are thread-safe (the BPE word
/// cache is guarded internally).
class Tokenizer {
 public:
  /// Parses a tokenizer.json document (the `tokenizers` serialization format).
  /// Throws Error(Parse) naming the JSON field at fault (missing "model", unknown "type", a merge
  /// naming a token not in the vocab, ...) and Error(Unsupported) for a valid component this build
  /// does not implement (e.g. a non-empty Precompiled charsmap).
  static Tokenizer from_json(std::string_view json);
  /// Reads and parses a tokenizer.json file. Throws Error(Io) when it cannot be read.
  static Tokenizer from_file(const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Token ids of `text` (UTF-8). Invalid UTF-8 is first replaced by U+FFFD, one per maximal
  /// invalid subpart (the WHATWG / Rust from_utf8_lossy rule). `add_special_tokens` applies the
  /// post-processor template (BOS/EOS etc.).
  std::vector<uint32_t> encode(std::string_view text, bool add_special_tokens) const;
  /// Text of `ids` through the decoder chain; ids not in the vocabulary are ignored, special
  /// added tokens are dropped when `skip_special_tokens`.
  std::string decode(std::span<const uint32_t> ids, bool skip_special_tokens) const;
  /// The text token `id` adds inside a text, not at its start: decode of [id, id] minus decode of
  /// [id]. It differs from decode of [id] alone where the decoder strips the start of a text:
  /// SentencePiece's "▁there" is " there" here, "there" alone (a logprobs entry must be the former
  /// so that the entries join up to the generated text).
  std::string token_text(uint32_t id) const;
  /// The bytes token `id` adds inside a text: token_text before the decoder's U+FFFD replacement,
  /// so a token holding part of a UTF-8 character gives its own bytes (Qwen's "\xe2\x80" piece →
  /// {0xE2, 0x80}; SentencePiece's "<0xE2>" → {0xE2}) where token_text gives "\uFFFD". Equals
  /// token_text whenever that contains no U+FFFD of the decoder's making. OpenAI's logprobs `bytes`.
  std::string token_bytes(uint32_t id) const;

  /// Id of a token string (added tokens first, then the model vocabulary).
  std::optional<uint32_t> token_to_id(std::string_view token) const;
  /// Token string of an id (the raw vocabulary piece, e.g. "Ġthe"); "" when out of range.
  std::string id_to_token(uint32_t id) const;
  /// Largest id + 1 over the model vocabulary and the added tokens.
  size_t vocab_size() const;
  /// True for added tokens marked "special": true.
  bool is_special(uint32_t id) const;
  /// True for any added token (special or not).
  bool is_added(uint32_t id) const;
  /// True when `id` is a byte-fallback piece ("<0x0A>") and the decoder joins such pieces into
  /// runs that it validates as a whole (HF ByteFallback), so later ids can change its text.
  bool is_byte_piece(uint32_t id) const;
  /// Ids the post-processor puts before / after a single sequence when add_special_tokens
  /// (e.g. {128000} / {} for Llama 3; {} / {} for Qwen).
  const std::vector<uint32_t>& prefix_special_ids() const;
  const std::vector<uint32_t>& suffix_special_ids() const;
  /// "BPE", "Unigram" or "WordPiece".
  std::string_view model_type() const;

 private:
  explicit Tokenizer(std::unique_ptr<tok_detail::Impl> impl);
  std::unique_ptr<tok_detail::Impl> impl_;
  friend class IncrementalDecoder;
};

/// Streaming detokenizer: push ids one at a time, get text back only once no later id can change
/// it. Same idea as `tokenizers`' DecodeStream: decode a short window of recent ids and emit the
/// suffix beyond the text already sent. Two things are held back: text that ends in U+FFFD (maybe
/// a UTF-8 character still incomplete), and a run of byte-fallback pieces until a text piece
/// closes it — HF's ByteFallback validates the run as a whole and turns an invalid one into one
/// U+FFFD per byte, including an ASCII byte that decoded as itself a moment before.
///
/// The rule, tested for every shipped tokenizer (tokenizer_stream_test.cc): without prime(), the
/// pieces returned by push() and flush() concatenate to exactly decode(all ids). After
/// prime(context) they concatenate to decode(K + ids) minus its prefix decode(K), where K is the
/// context prime() keeps (its last ≤ 4 ids up to and including its last text piece): the output
/// reads as the prompt's continuation ("▁time" → " time"), and generated bytes never merge with a
/// byte run the prompt ended in. Text already sent is never taken back: should a decoder rewrite
/// it anyway (none of the `tokenizers` library's does under this hold-back), the stream goes on
/// past the length already sent, and rewrites() counts the event. Never throws.
class IncrementalDecoder {
 public:
  /// `tok` must outlive the decoder.
  IncrementalDecoder(const Tokenizer& tok, bool skip_special_tokens);
  /// Continues a text that ends with `context` (the prompt's ids): the first pushed id then decodes
  /// as it does after the prompt, not as the start of a text (SentencePiece keeps its leading
  /// space, "Once upon a" + "▁time" → " time"), as decoding prompt + output and cutting the prompt
  /// off does (transformers' TextStreamer, llama.cpp). Call before the first push; keeps the last
  /// ≤ 4 ids up to the context's last text piece, and nothing when they end inside a UTF-8
  /// character.
  void prime(std::span<const uint32_t> context);
  /// Adds one id; returns the newly final text (possibly empty).
  std::string push(uint32_t id);
  /// Returns everything still held back (a byte run, an incomplete UTF-8 character as U+FFFD) and
  /// resets the decoder (the next id decodes as the start of a text).
  std::string flush();
  /// Where the text of `id` begins in `out`, what push(id) just returned: a held byte run comes out
  /// in front of the text piece that closes it, so that piece's own text (Tokenizer::token_text) is
  /// last; 0 when `out` does not end with it (the id wrote nothing of its own yet). Bytes.
  size_t own_text_start(std::string_view out, uint32_t id) const;
  /// Times a decoder rewrote text already sent (0 for every decoder of the `tokenizers` library).
  size_t rewrites() const noexcept { return rewrites_; }

 private:
  /// Decodes the window; returns its text past the sent prefix and makes the window's ids the new
  /// context. `final`: also text ending in U+FFFD, and reset afterwards.
  std::string take(bool final);
  const Tokenizer* tok_;
  bool skip_special_;
  std::vector<uint32_t> ids_;  ///< the window: context ids [0, prefix_index_) then pending ones
  std::string prefix_;         ///< decode of the context ids: text already sent
  size_t prefix_index_ = 0;
  size_t rewrites_ = 0;
};

}  // namespace cortiq
