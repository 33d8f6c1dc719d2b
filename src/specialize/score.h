// Scoring chunks for selection and for the quality contract (SPECIALIZATION-NOTES §1 step 3): each
// chunk runs alone from an empty KV cache and every position but the last predicts the next token
// (T − 1 scored positions per chunk of T); PPL = exp(mean NLL over all scored positions).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/model.h"
#include "specialize/corpus.h"

namespace cortiq::specialize {

struct Score {
  std::vector<double> chunk_nll;  ///< [chunks] summed NLL (nats) of each chunk's scored positions
  uint64_t tokens = 0;            ///< scored positions in all
  double mean() const noexcept;   ///< nats per scored token
  double ppl() const noexcept;    ///< exp(mean())
};

/// Scores `chunks` under `variant` (nullptr = dense), `batch` chunks per forward_batch call (each
/// its own sequence), log-softmax in double (runtime::token_nll). `progress` gets the chunks done
/// after each call. Throws Error(InvalidArgument) for a chunk of fewer than 2 tokens or longer than
/// the model's context, and what forward_batch throws.
Score score_chunks(model::Model& m, std::span<const Chunk> chunks, const model::Variant* variant = nullptr,
                   size_t batch = 4, const std::function<void(size_t)>& progress = {});

/// Paired comparison of two scores of the same chunks (b against a): the mean over chunks of
/// (b − a) per-token NLL and its standard error (sample sd / sqrt(n)); 0 error for one chunk.
struct Paired {
  double mean_delta = 0.0, stderr_delta = 0.0;
};
Paired paired_delta(const Score& a, const Score& b, size_t chunk_tokens);

}  // namespace cortiq::specialize
