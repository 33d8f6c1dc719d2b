// `cortiq serve` POST /v1/embeddings (issue 33 §3), OpenAI's shape:
//   request  {model, input, encoding_format?, dimensions?, pooling?}
//            input: a string, an array of strings, an array of token ids, or an array of such
//            arrays (a batch: one embedding per entry, in order).
//            encoding_format: "float" (default) or "base64" (little-endian float32, what the
//            openai npm client asks for by default).
//            pooling (extension): "mean" (default) or "last".
//   response {object:"list", data:[{object:"embedding", index, embedding}], model,
//             usage:{prompt_tokens, total_tokens}}
// The vector is runtime::embed_sequence (runtime/embeddings.h, the definition shared with the C
// API's cortiq_embed) with normalize = true: the final hidden state after the final norm (HF's
// last_hidden_state), mean- or last-pooled, L2-normalized. Strings are tokenized as a raw
// completion prompt is (BOS when the model adds one).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/embeddings.h"
#include "server/api.h"

namespace cortiq::server {

/// How one input's per-token hidden states become one vector (runtime/embeddings.h).
using Pooling = runtime::Pooling;

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

/// `v` as base64 of its little-endian float32 bytes (OpenAI's encoding_format "base64").
std::string floats_base64(std::span<const float> v);

}  // namespace cortiq::server
