// Perplexity over a token sequence (llama.cpp `llama-perplexity` chunked procedure, and the
// reference's prefix procedure; CLI-NOTES `ppl`): a client of the generation engine, whose
// prompt-scoring jobs (runtime::Job::on_prompt_logits) run the chunks, several at once in parallel
// slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "runtime/session.h"

namespace cortiq::runtime {

/// exp(mean NLL) with llama.cpp's uncertainty estimate: stderr = ppl·sqrt((E[nll²] − E[nll]²)/(n−1)).
struct PplResult {
  double ppl = 0.0;
  double ppl_stderr = 0.0;
  double mean_nll = 0.0;
  size_t tokens_scored = 0;
  size_t chunks = 0;
};

/// How the sequences run.
struct PplOptions {
  size_t batch = 0;     ///< positions per forward call (0 = the whole sequence)
  size_t parallel = 1;  ///< engine slots: sequences (chunks) scored together in one batched step
  /// Called (on the engine's thread) after each forward call with the positions it ran.
  std::function<void(size_t)> progress;
  /// Called (on the engine's thread, one call at a time) with each scored position's logits
  /// [vocab]: the sequence's index (the chunk), the position j in it (the logits predict token
  /// j+1) and the logits. Chunks run in parallel slots may interleave; positions of one chunk
  /// come in order. For `ppl --kl-divergence-base` / `--kl-divergence`.
  std::function<void(size_t seq, size_t pos, std::span<const float> logits)> on_logits = {};
  /// Chunked mode: called (on the engine's thread) once chunks 0..k−1 are all scored, in chunk
  /// order, with k and the running result over them — llama-perplexity's `[k]ppl` estimates.
  std::function<void(size_t k, const PplResult& running)> on_chunk = {};
};

/// Natural-log NLL of `target` under `logits` [vocab] (log-softmax in double). Error(NonFinite)
/// naming the logit when one is NaN or infinite and the NLL is not finite.
double token_nll(std::span<const float> logits, uint32_t target);

/// llama.cpp chunked perplexity: the ids (already tokenized with BOS when the model wants one)
/// are cut into floor(n / n_ctx) non-overlapping chunks of n_ctx tokens; when `bos` is given the
/// first token of every chunk is replaced by it; each chunk runs from an empty KV cache and
/// positions j in [n_ctx/2, n_ctx−2] score ids[j+1]. The chunks run as engine jobs under the
/// model's task mask (LoadedModel::mask) with lm's KV precision, `opt.parallel` at a time; the
/// NLLs are summed in chunk and position order, so the result does not depend on `parallel` or
/// `batch` (the forward contract makes a position's logits the same in any step shape). Throws
/// Error(InvalidArgument) if there are fewer than n_ctx ids, n_ctx < 4 or parallel == 0, and what
/// ended a failed chunk (e.g. Error(NonFinite)).
PplResult perplexity_chunked(LoadedModel& lm, std::span<const uint32_t> ids, size_t n_ctx,
                             std::optional<uint32_t> bos, const PplOptions& opt = {});

/// Prefix mode (reference `ppl`): one sequence ids[0..n), PPL = exp(mean NLL of ids[t+1] given
/// ids[..=t]) over t < n−1 (n−1 scored tokens), one engine slot. Throws Error(InvalidArgument) for
/// fewer than 2 ids.
PplResult perplexity_prefix(LoadedModel& lm, std::span<const uint32_t> ids, const PplOptions& opt = {});

}  // namespace cortiq::runtime
