// Perplexity over a token sequence (llama.cpp `llama-perplexity` chunked procedure, and the
// reference's prefix procedure; CLI-NOTES `ppl`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "model/model.h"

namespace cortiq::runtime {

/// exp(mean NLL) with llama.cpp's uncertainty estimate: stderr = ppl·sqrt((E[nll²] − E[nll]²)/(n−1)).
struct PplResult {
  double ppl = 0.0;
  double ppl_stderr = 0.0;
  double mean_nll = 0.0;
  size_t tokens_scored = 0;
  size_t chunks = 0;
};

/// Natural-log NLL of `target` under `logits` [vocab] (log-softmax in double).
double token_nll(std::span<const float> logits, uint32_t target);

/// llama.cpp chunked perplexity: the ids (already tokenized with BOS when the model wants one)
/// are cut into floor(n / n_ctx) non-overlapping chunks of n_ctx tokens; when `bos` is given the
/// first token of every chunk is replaced by it; each chunk runs from an empty KV cache and
/// positions j in [n_ctx/2, n_ctx−2] score ids[j+1]. `batch` = positions per forward call (0 = whole
/// chunk). `progress`, when set, is called after each forward call with the positions it ran
/// (n_chunks·n_ctx in all). Throws Error(InvalidArgument) if there are fewer than n_ctx ids or
/// n_ctx < 4. `variant`: the task mask the sequences run under (nullptr = dense).
PplResult perplexity_chunked(model::Model& m, std::span<const uint32_t> ids, size_t n_ctx,
                             std::optional<uint32_t> bos, size_t batch = 0, bool kv_f16 = false,
                             const std::function<void(size_t)>& progress = {},
                             const model::Variant* variant = nullptr);

/// Prefix mode (reference `ppl`): one sequence ids[0..n), PPL = exp(mean NLL of ids[t+1] given
/// ids[..=t]) over t < n−1 (n−1 scored tokens). `progress` as for perplexity_chunked (n in all).
/// Throws Error(InvalidArgument) for fewer than 2 ids.
PplResult perplexity_prefix(model::Model& m, std::span<const uint32_t> ids, size_t batch = 0,
                            bool kv_f16 = false, const std::function<void(size_t)>& progress = {},
                            const model::Variant* variant = nullptr);

}  // namespace cortiq::runtime
