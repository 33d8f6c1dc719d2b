// The one definition of "the embedding of a token sequence" (shared by `cortiq serve`'s
// POST /v1/embeddings and the C API's cortiq_embed).
//
// Definition: run the tokens through the model as one prefill; take the final hidden state of each
// position AFTER the final norm (what the lm_head reads; HF's `last_hidden_state` for Llama-type
// models): y_t = RMSNorm(h_L[t]) * final_norm, [T, hidden_size]. Pool it: "mean" = (1/T) sum_t y_t
// over every position (a BOS the model added included), "last" = y_{T-1}. Optionally L2-normalize
// the pooled vector to unit length. Pooling and normalization accumulate in double.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"

namespace cortiq::runtime {

/// How one sequence's per-position hidden states become one vector.
enum class Pooling { Mean, Last };

/// Why `m` has no hidden state an embedding can use ("" when it has one): a missing or mis-sized
/// final norm.
std::string embedding_unusable(const model::Model& m);

/// The pooled final hidden state (after the final norm) of `tokens` [T ids, 1 <= T, each below the
/// vocabulary] through `m` under `variant` (nullptr = dense): [hidden_size] floats, unit L2 length
/// when `normalize`. Runs one prefill into a fresh KV cache of T positions on `m` (the caller owns
/// the thread-safety of `m`). Throws Error(InvalidArgument) for no tokens or an unusable model
/// (embedding_unusable), Error(NonFinite) when the pooled state is not finite or, with `normalize`,
/// has zero length; model errors pass through.
std::vector<float> embed_sequence(model::Model& m, std::span<const uint32_t> tokens, Pooling pooling,
                                  bool normalize, const model::Variant* variant = nullptr);

}  // namespace cortiq::runtime
