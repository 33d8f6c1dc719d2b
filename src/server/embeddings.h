// `cortiq serve` POST /v1/embeddings (issue 33 §3), OpenAI's shape:
//   request  {model, input, encoding_format?, dimensions?, pooling?}
//            input: a string, an array of strings, an array of token ids, or an array of such
//            arrays (a batch: one embedding per entry, in order).
//            encoding_format: "float" (default) or "base64" (little-endian float32, what the
//            openai npm client asks for by default).
//            pooling (extension): "mean" (default) or "last".
//   response {object:"list", data:[{object:"embedding", index, embedding}], model,
//             usage:{prompt_tokens, total_tokens}}
// The vector is the model's final hidden state after the final norm (what the lm_head reads,
// HF's last_hidden_state), [hidden_size] per token: "mean" averages it over every token of the
// input (a BOS the model adds included), "last" takes the last token's (the choice for causal
// models trained for it); the result is L2-normalized (unit length). Strings are tokenized as a
// raw completion prompt is (BOS when the model adds one).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "server/api.h"

namespace cortiq::server {

/// How one input's per-token hidden states become one vector.
enum class Pooling { Mean, Last };

/// A parsed /v1/embeddings request: each input either text or token ids.
struct EmbeddingRequest {
  struct Input {
    bool is_text = true;
    std::string text;
    std::vector<uint32_t> ids;
  };
  std::string model;
  std::vector<Input> inputs;  ///< at least one
  bool base64 = false;
  Pooling pooling = Pooling::Mean;
  std::optional<size_t> dimensions;  ///< must equal the hidden size when given
};

/// Parses the body. Throws ApiError(400) naming the field for a missing or malformed `input`
/// (empty string, empty array, non-integer or negative ids), an unknown encoding_format or
/// pooling, a non-positive `dimensions`.
EmbeddingRequest parse_embedding_request(const ojson& body);

/// Why `m` has no hidden state this endpoint can use ("" when it has one): a missing or
/// mis-sized final norm.
std::string embedding_unusable(const model::Model& m);

/// The pooled, L2-normalized final hidden state of `tokens` (non-empty, fewer than `ctx`) through
/// `m` under `variant` (nullptr = dense): [hidden_size]. Runs one prefill into a fresh KV cache of
/// tokens.size() positions. Throws ApiError(400) when the state is not finite or has zero length
/// (it cannot be normalized); model errors (cortiq::Error) pass through.
std::vector<float> embed_tokens(model::Model& m, std::span<const uint32_t> tokens, Pooling pooling,
                                const model::Variant* variant = nullptr);

/// `v` as base64 of its little-endian float32 bytes (OpenAI's encoding_format "base64").
std::string floats_base64(std::span<const float> v);

}  // namespace cortiq::server
