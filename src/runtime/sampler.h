// Token sampling chain (ENGINE-NOTES §3.13; PITFALLS SMP-1).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace cortiq::runtime {

/// SplitMix64 (Steele et al. 2014): the sampler's PRNG. uniform() = (next() >> 40) / 2^24.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next() noexcept;
  /// Uniform in [0, 1) with 24 bits.
  float uniform() noexcept { return static_cast<float>(next() >> 40) / 16777216.0f; }

 private:
  uint64_t s_;
};

/// Sampler settings. Defaults are the reference's (`cortiq run` without flags).
struct SamplerParams {
  float temperature = 0.7f;        ///< < 1e-6 → greedy argmax of the penalized logits
  float top_p = 0.9f;              ///< >= 1 disables
  int top_k = 40;                  ///< <= 0 disables
  float min_p = 0.05f;             ///< <= 0 disables
  float repeat_penalty = 1.1f;     ///< CTRL rule: l > 0 ? l/r : l·r, once per distinct past id; 1 disables
  float presence_penalty = 0.0f;   ///< subtracted once per distinct past id
  std::optional<uint64_t> seed;    ///< none → std::random_device
  std::vector<uint32_t> suppress;  ///< ids forced to −inf

  /// `--greedy`: temperature 0 and repetition penalty 1.
  static SamplerParams greedy();
};

/// The chain, in order: suppress → repetition penalty over the distinct ids of `history` (prompt
/// + generated) → presence penalty → temperature → (greedy: argmax, ties → highest index) →
/// softmax → min-p (drop p < max·min_p) → top-k (keep values ≥ the k-th largest) → top-p (sorted
/// descending, keep through the first index whose cumulative sum ≥ p) → renormalize →
/// inverse-CDF draw with one uniform(). Every filter leaving nothing → argmax.
class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  /// Samples one id; `logits` [vocab] is modified in place (penalties applied).
  uint32_t sample(std::span<float> logits, std::span<const uint32_t> history);
  const SamplerParams& params() const noexcept { return p_; }

 private:
  SamplerParams p_;
  SplitMix64 rng_;
};

/// Applies the repetition and presence penalties of the chain to `logits` in place (exposed for
/// tests; PITFALLS SMP-1).
void apply_penalties(std::span<float> logits, std::span<const uint32_t> history, float repeat_penalty,
                     float presence_penalty);

/// Index of the largest value; ties → the highest index (ENGINE-NOTES §3.13).
uint32_t argmax_last(std::span<const float> v);

}  // namespace cortiq::runtime
