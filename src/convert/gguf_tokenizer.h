// GGUF tokenizer metadata (tokenizer.ggml.*) → a Hugging Face tokenizer.json.
//
// A CMF file keeps its tokenizer as a tokenizer.json; a GGUF keeps llama.cpp's flat arrays
// (tokens, scores, token_type, merges) plus a few flags. This module rebuilds the tokenizer.json
// that gives, through cortiq::Tokenizer, the ids llama.cpp's llama-vocab.cpp gives:
//
// - tokenizer.ggml.model "llama" (SentencePiece BPE): what transformers' LlamaConverter
//   (convert_slow_tokenizer.py, legacy Llama-2 behaviour) builds from the .model file: BPE over the
//   pieces with byte_fallback and fuse_unk, merges recovered from the scores (generate_merges:
//   every split of a piece into two vocabulary pieces, ordered by the merged piece's score, longer
//   left part, longer right part, all descending; within one piece by the parts' ids), normalizer
//   Prepend("▁") + Replace(" ", "▁"), decoder Replace/ByteFallback/Fuse/Strip.
// - tokenizer.ggml.model "gpt2" (byte-level BPE): the GGUF's merges, the pre-tokenizer regex of
//   tokenizer.ggml.pre ("gpt-2"/"default"/"phi-2": GPT-2's built-in ByteLevel regex; "llama-bpe"/
//   "llama3"/"llama-v3": Llama 3's Split regex and ignore_merges; "qwen2"/"deepseek-r1-qwen":
//   Qwen2's Split regex), ByteLevel decoder.
//
// Control (type 3), unknown (2) and user-defined (4) tokens become added tokens matched on the raw
// text (normalized false); control/unknown ones are special. As llama.cpp does (llama-vocab.cpp,
// keyed on general.name containing "phi-3"/"phi3"), Phi-3's added tokens strip the whitespace to
// their right, except <unk>, <s> and <|endoftext|>.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace cortiq::convert {

/// What a GGUF's tokenizer metadata (tokenizer.ggml.*, tokenizer.chat_template) gives a CMF file.
struct GgufTokenizer {
  std::string tokenizer_json;                ///< HF tokenizer.json text
  std::optional<std::string> chat_template;  ///< tokenizer.chat_template
  /// tokenizer.ggml.bos_token_id / padding_token_id (for "llama": llama.cpp's default BOS 1 when
  /// the key is absent). Ids outside the vocabulary are dropped, as llama.cpp does.
  std::optional<uint32_t> bos_id, pad_id;
  std::vector<uint32_t> eos_ids;  ///< eos_token_id, then eot/eom ids if present, no duplicates
  /// tokenizer.ggml.add_bos_token / add_eos_token (llama.cpp's defaults per model type when
  /// absent: llama/SPM and Llama-3 BPE add BOS, nothing adds EOS).
  bool add_bos = false, add_eos = false;
};

/// Builds the HF tokenizer.json (and the special-token facts) of a GGUF's tokenizer.
///
/// `metadata`: every GGUF key → value as nlohmann::json (arrays as arrays), e.g.
/// GgufFile::metadata(). Reads tokenizer.ggml.{model, pre, tokens, scores, token_type, merges,
/// bos/eos/eot/eom/unknown/padding_token_id, add_bos_token, add_eos_token, add_space_prefix},
/// tokenizer.chat_template and general.name.
///
/// Throws Error(Unsupported) naming tokenizer.ggml.model (or tokenizer.ggml.pre) and its value for
/// kinds it cannot convert (e.g. "bert", "t5", a "gpt2" with pre "deepseek-coder"); Error(Parse)
/// naming the key for a missing or mis-typed key, arrays whose length differs from
/// tokenizer.ggml.tokens, duplicate tokens, a merge that is not two vocabulary tokens, add_bos
/// without a BOS id, or strings that are not UTF-8.
GgufTokenizer tokenizer_from_gguf(const nlohmann::json& metadata);

}  // namespace cortiq::convert

#include "cmf/header.h"
#include "convert/gguf_writer.h"

namespace cortiq::convert {

/// The tokenizer.ggml.* keys llama.cpp's convert_hf_to_gguf.py writes for a model whose
/// tokenizer is `tokenizer_json` (a CMF vocab section) with the chat facts of `bundle` (may be
/// null), padded to `vocab_size` tokens with `[PAD{id}]` (token type unused) as that converter pads,
/// or cut to `vocab_size` (the embedding's rows, which llama.cpp requires the token list to match)
/// when the tokenizer has more ids: the ids past it are dropped with the merges that use or make
/// them, and `*dropped` (when not null) gets how many real tokens that removed (`vocab_size` 0:
/// neither, the tokenizer's own ids):
/// - a byte-level BPE (ByteLevel pre-tokenizer/decoder): model "gpt2", `pre` named from the
///   pre-tokenizer (GPT-2's ByteLevel regex "gpt-2", Llama 3's Split regex "llama-bpe", Qwen2's
///   "qwen2"), tokens, token_type, merges;
/// - a SentencePiece BPE as LlamaConverter builds it (byte_fallback): model "llama", tokens, scores,
///   token_type (byte pieces 6, unk 2), pre "default", add_space_prefix only when false. The tokenizer.json
///   keeps no scores, so each piece made by a merge scores −(rank of its first merge) and the others −(merges
///   + id): the order LlamaConverter recovered its merges from, which is all llama.cpp's SPM tokenizer and
///   tokenizer_from_gguf read of them;
/// then bos/eos/eot/unknown/padding ids, add_bos_token/add_eos_token (from the post-processor's
/// template), and tokenizer.chat_template. Added tokens are control (3) when special, else
/// user-defined (4). Throws Error(Unsupported) naming the model type (WordPiece, Unigram, …) or the
/// pre-tokenizer for a tokenizer llama.cpp has no name for, Error(Parse) for malformed JSON.
std::vector<GgufKv> tokenizer_to_gguf(const std::string& tokenizer_json, const cmf::TokenizerBundle* bundle,
                                      uint32_t vocab_size, uint32_t* dropped = nullptr);

}  // namespace cortiq::convert
