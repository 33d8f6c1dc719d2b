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

/// Sampler settings. Defaults are `cortiq run`'s without flags (repetition penalty 1 = off, as
/// llama.cpp's and our server's).
struct SamplerParams {
  float temperature = 0.7f;        ///< < 1e-6 → greedy argmax of the penalized logits
  float top_p = 0.9f;              ///< >= 1 disables
  int top_k = 40;                  ///< <= 0 disables
  float min_p = 0.05f;             ///< <= 0 disables
  float repeat_penalty = 1.0f;     ///< CTRL rule: l > 0 ? l/r : l·r, once per distinct past id; 1 disables
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
///
/// The thresholds are floats and are compared in float precision, so that the decimal a user
/// wrote means what it says (0.8f is 0.8000000119; a double sum 0.5 + 0.3 must reach it): top-p
/// stops at the first index with float(cumulative sum) ≥ top_p, min-p keeps p ≥ max ·
/// float_threshold(min_p). Probabilities, sums and everything else are double.
///
/// Not thread-safe: one Sampler per sequence. The scratch buffers below grow to the largest
/// vocabulary seen and are then reused, so the steady decode loop does not allocate.
class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  /// Samples one id from `logits` [vocab] (modified in place: suppress and penalties applied);
  /// `history` holds the past ids (prompt + generated; ids ≥ vocab are ignored). Draws exactly one
  /// uniform() when the filtered distribution is non-empty, none on the greedy/argmax paths. An
  /// empty `logits` returns 0. The result depends only on the inputs and the RNG state: the top-p
  /// cut-off sorts candidates by probability descending, ties by id ascending.
  uint32_t sample(std::span<float> logits, std::span<const uint32_t> history);
  const SamplerParams& params() const noexcept { return p_; }

 private:
  SamplerParams p_;
  SplitMix64 rng_;
  std::vector<double> pr_;     ///< [vocab] probabilities of the current call
  std::vector<double> kth_;    ///< [candidates] values for top-k's nth_element
  std::vector<uint32_t> nz_;   ///< [candidates] ids with pr_ > 0, ascending
  std::vector<uint32_t> ord_;  ///< [candidates] ids in top-p order (sorted prefix only)
  std::vector<double> hist_;   ///< [1024] top-p mass per binary exponent
  std::vector<uint8_t> seen_;  ///< [vocab] all-zero between calls; marks distinct history ids
};

/// The smallest double that rounds to a float ≥ `m` (for m > 0: the midpoint between m and the
/// float below it; m itself for m <= 0 or NaN): `x >= float_threshold(m)` is `float(x) >= m`
/// except for x exactly on that midpoint. Used for min-p.
double float_threshold(float m) noexcept;

/// Applies the repetition and presence penalties of the chain to `logits` in place (exposed for
/// tests; PITFALLS SMP-1).
void apply_penalties(std::span<float> logits, std::span<const uint32_t> history, float repeat_penalty,
                     float presence_penalty);

/// Index of the largest value of `v`; ties → the highest index (ENGINE-NOTES §3.13; -0.0 and
/// +0.0 tie). NaN: if v[0] is NaN the result is 0, otherwise NaNs are never chosen (the result is
/// the last index of the maximum of the non-NaN values). An empty span returns 0. Exactly the
/// result of the scalar scan `best = 0; for i ≥ 1: if (v[i] >= v[best]) best = i`, computed with a
/// vectorized block-max pass plus a backward scan of one block.
uint32_t argmax_last(std::span<const float> v);

}  // namespace cortiq::runtime
