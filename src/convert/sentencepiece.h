// A SentencePiece `tokenizer.model` (a serialized sentencepiece.ModelProto, sentencepiece_model.proto)
// read without protobuf: the pieces (piece, score, type), the trainer spec's model type and special
// ids, the normalizer's add_dummy_prefix. A BPE model becomes the tokenizer.json transformers'
// LlamaConverter (convert_slow_tokenizer.py) builds from it, through the same construction as a
// GGUF "llama" vocabulary (gguf_tokenizer.h): the old Llama-2 / Mistral checkpoint layout with a
// tokenizer.model and no tokenizer.json.
//
// Wire format read (protobuf encoding): each field is a varint key (field number << 3 | wire
// type); wire type 0 varint, 1 fixed 64-bit, 2 length-delimited, 5 fixed 32-bit; unknown fields are
// skipped. ModelProto: 1 pieces (repeated message: 1 piece string, 2 score float, 3 type enum
// NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6), 2 trainer_spec (3 model_type
// enum UNIGRAM 1, BPE 2, WORD 3, CHAR 4; 35 byte_fallback; 40 unk_id, 41 bos_id, 42 eos_id, 43
// pad_id int32, -1 = none), 3 normalizer_spec (3 add_dummy_prefix bool, default true).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>

namespace cortiq::convert {

/// The GGUF tokenizer metadata (tokenizer.ggml.model "llama", tokens, scores, token_type, bos/eos/
/// unknown/padding ids, add_space_prefix) a SentencePiece ModelProto stands for, as
/// llama.cpp's converter writes it from the same file. `path` names the file in errors. Throws
/// Error(Parse) naming the offset for a truncated or malformed proto, a model without pieces, or a
/// piece that is not UTF-8; Error(Unsupported) naming the model type for a non-BPE model (Unigram,
/// word, char: LlamaConverter handles BPE only).
nlohmann::json sentencepiece_metadata(std::span<const uint8_t> proto, const std::string& path);

/// The HF tokenizer.json of a SentencePiece BPE model (tokenizer_from_gguf of
/// sentencepiece_metadata). `add_bos` / `add_eos` override the defaults (BOS yes, EOS no) when the
/// folder's tokenizer_config.json states them. Throws what those two throw.
std::string tokenizer_json_from_sentencepiece(std::span<const uint8_t> proto, const std::string& path,
                                              std::optional<bool> add_bos = std::nullopt,
                                              std::optional<bool> add_eos = std::nullopt);

}  // namespace cortiq::convert
