#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "runtime/perplexity.h"
#include "util/error.h"

namespace cortiq::runtime {
namespace {

// PITFALLS SMP-1 (CTRL rule, as HF and llama.cpp): seen {0,1,2}, penalty 1.5.
TEST(Sampler, RepetitionPenaltyOnNegativeLogits) {
  std::vector<float> l{2.0f, -2.0f, 0.5f, -0.5f};
  const std::vector<uint32_t> seen{0, 1, 2, 2, 0};  // distinct ids count once
  apply_penalties(l, seen, 1.5f, 0.0f);
  EXPECT_FLOAT_EQ(l[0], 1.3333334f);
  EXPECT_FLOAT_EQ(l[1], -3.0f);
  EXPECT_FLOAT_EQ(l[2], 0.33333334f);
  EXPECT_FLOAT_EQ(l[3], -0.5f);
  std::vector<float> p{1.0f, 1.0f};
  apply_penalties(p, std::vector<uint32_t>{1, 1, 1}, 1.0f, 0.25f);
  EXPECT_FLOAT_EQ(p[1], 0.75f);
  EXPECT_FLOAT_EQ(p[0], 1.0f);
}

TEST(Sampler, GreedyTiesGoToHighestIndex) {
  Sampler s(SamplerParams::greedy());
  std::vector<float> l{1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(l, {}), 2u);
}

TEST(Sampler, SplitMix64KnownValues) {
  SplitMix64 r(1234567);
  // Reference values of SplitMix64 (Vigna's splitmix64.c) for seed 1234567.
  EXPECT_EQ(r.next(), 6457827717110365317ull);
  EXPECT_EQ(r.next(), 3203168211198807973ull);
}

TEST(Sampler, SeededIsDeterministicAndTopKOneIsArgmax) {
  SamplerParams p;
  p.seed = 42;
  p.repeat_penalty = 1.0f;
  std::vector<uint32_t> a, b;
  for (int run = 0; run < 2; ++run) {
    Sampler s(p);
    for (int i = 0; i < 20; ++i) {
      std::vector<float> l{0.1f, 0.5f, 0.2f, 0.4f, 0.3f};
      (run ? b : a).push_back(s.sample(l, {}));
    }
  }
  EXPECT_EQ(a, b);
  p.top_k = 1;
  Sampler s(p);
  for (int i = 0; i < 10; ++i) {
    std::vector<float> l{0.1f, 0.5f, 0.2f, 0.45f};
    EXPECT_EQ(s.sample(l, {}), 1u);
  }
}

TEST(Sampler, SuppressedIdNeverDrawn) {
  SamplerParams p;
  p.seed = 7;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.suppress = {0};
  Sampler s(p);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l{5.0f, 0.0f, 0.0f};
    EXPECT_NE(s.sample(l, {}), 0u);
  }
}

// ---- Reference: the original (pre-optimization) scalar implementation, kept verbatim in
// behaviour. The optimized Sampler / argmax_last must agree with it exactly (same token, same
// RNG consumption) on every input.

uint32_t ref_argmax_last(std::span<const float> v) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < v.size(); ++i)
    if (v[i] >= v[best]) best = i;
  return best;
}

class RefSampler {
 public:
  RefSampler(const SamplerParams& p, uint64_t seed) : p_(p), rng_(seed) {}

  uint32_t sample(std::span<float> logits, std::span<const uint32_t> history) {
    const size_t V = logits.size();
    for (uint32_t id : p_.suppress)
      if (id < V) logits[id] = -std::numeric_limits<float>::infinity();
    apply_penalties(logits, history, p_.repeat_penalty, p_.presence_penalty);
    if (p_.temperature < 1e-6f) return ref_argmax_last(logits);
    std::vector<double> pr(V);
    double mx = -INFINITY;
    for (size_t i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(logits[i]) / p_.temperature);
    double sum = 0.0;
    for (size_t i = 0; i < V; ++i)
      sum += (pr[i] = std::exp(static_cast<double>(logits[i]) / p_.temperature - mx));
    double pmax = 0.0;
    for (auto& x : pr) pmax = std::max(pmax, x /= sum);
    if (p_.min_p > 0.0f)  // the ratio compared in min_p's precision
      for (auto& x : pr)
        if (static_cast<float>(x / pmax) < p_.min_p) x = 0.0;
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < V) {
      std::vector<double> s(pr);
      std::nth_element(s.begin(), s.begin() + (p_.top_k - 1), s.end(), std::greater<>());
      const double kth = s[p_.top_k - 1];
      for (auto& x : pr)
        if (x < kth) x = 0.0;
    }
    if (p_.top_p < 1.0f) {
      std::vector<uint32_t> idx(V);
      std::iota(idx.begin(), idx.end(), 0u);
      std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) { return pr[a] > pr[b]; });
      double tot = 0.0;
      for (double x : pr) tot += x;
      double cum = 0.0;
      size_t keep = V;
      for (size_t i = 0; i < V; ++i) {
        cum += tot > 0 ? pr[idx[i]] / tot : 0.0;
        if (static_cast<float>(cum) >= p_.top_p) {  // in top_p's precision
          keep = i + 1;
          break;
        }
      }
      for (size_t i = keep; i < V; ++i) pr[idx[i]] = 0.0;
    }
    double tot = 0.0;
    for (double x : pr) tot += x;
    if (!(tot > 0.0)) return ref_argmax_last(logits);
    const double r = static_cast<double>(rng_.uniform()) * tot;
    double cum = 0.0;
    uint32_t last = 0;
    for (uint32_t i = 0; i < V; ++i) {
      if (pr[i] <= 0.0) continue;
      last = i;
      cum += pr[i];
      if (r < cum) return i;
    }
    return last;
  }

 private:
  SamplerParams p_;
  SplitMix64 rng_;
};

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Random logits of one of several shapes: smooth, heavily tied (few distinct levels), a large
/// block of duplicated maxima, sprinkled -inf, all -inf, and (rarely) +inf / NaN.
std::vector<float> random_logits(std::mt19937_64& g, size_t V) {
  std::vector<float> l(V);
  std::normal_distribution<float> nd(0.0f, std::uniform_real_distribution<float>(0.1f, 6.0f)(g));
  const int shape = static_cast<int>(g() % 8);
  const int levels = 1 + static_cast<int>(g() % 6);
  for (auto& x : l) {
    x = nd(g);
    if (shape == 1 || shape == 2) x = std::round(x * static_cast<float>(levels)) / static_cast<float>(levels);
  }
  if (shape == 2 || shape == 3) {  // many exact duplicates of the maximum (or of one value)
    const float top = shape == 2 ? *std::max_element(l.begin(), l.end()) : 3.0f;
    const size_t n = 1 + g() % (V / 2 + 1);
    for (size_t k = 0; k < n; ++k) l[g() % V] = top;
  }
  if (shape == 4 || g() % 4 == 0) {  // -inf entries
    const size_t n = g() % (V + 1);
    for (size_t k = 0; k < n; ++k) l[g() % V] = -kInf;
  }
  if (shape == 5 && g() % 3 == 0) std::fill(l.begin(), l.end(), -kInf);
  if (shape == 6 && g() % 2 == 0) l[g() % V] = (g() % 2) ? kInf : kNaN;
  if (shape == 7) {  // huge magnitudes: exp underflows to exact zeros for most entries
    for (auto& x : l) x *= 1e4f;
  }
  return l;
}

SamplerParams random_params(std::mt19937_64& g, size_t V) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  SamplerParams p;
  switch (g() % 6) {
    case 0:
      p.temperature = 0.0f;
      break;
    case 1:
      p.temperature = (g() % 2) ? 1e-7f : 1e-6f;
      break;
    case 2:
      p.temperature = 50.0f + 100.0f * u(g);
      break;
    default:
      p.temperature = 0.05f + 2.5f * u(g);
  }
  switch (g() % 6) {
    case 0:
      p.top_k = 0;
      break;
    case 1:
      p.top_k = -1;
      break;
    case 2:
      p.top_k = 1;
      break;
    case 3:
      p.top_k = static_cast<int>(V) - static_cast<int>(g() % 2);
      break;
    default:
      p.top_k = 1 + static_cast<int>(g() % (V + 5));
  }
  switch (g() % 7) {
    case 0:
      p.top_p = 1.0f;
      break;
    case 1:
      p.top_p = 0.0f;
      break;
    case 2:
      p.top_p = -0.25f;
      break;
    case 3:
      p.top_p = 0.999999f;
      break;
    case 4:
      p.top_p = 1e-9f;
      break;
    default:
      p.top_p = u(g);
  }
  switch (g() % 5) {
    case 0:
      p.min_p = 0.0f;
      break;
    case 1:
      p.min_p = (g() % 2) ? 1.0f : 1.5f;
      break;
    default:
      p.min_p = 0.5f * u(g);
  }
  p.repeat_penalty = (g() % 2) ? 1.0f : 0.5f + 1.5f * u(g);
  p.presence_penalty = (g() % 2) ? 0.0f : 2.0f * u(g);
  const size_t ns = g() % 4;
  for (size_t k = 0; k < ns; ++k) p.suppress.push_back(static_cast<uint32_t>(g() % (V + 3)));
  p.seed = g();
  return p;
}

uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// The optimized sampler draws the same token as the reference for every case and every one of
// several consecutive draws (so the RNG is consumed identically), and leaves the same penalized
// logits behind.
TEST(Sampler, MatchesReferenceImplementationOnRandomCases) {
  std::mt19937_64 g(20240611);
  size_t draws = 0, non_greedy_draws = 0, non_argmax = 0;
  for (int c = 0; c < 2500; ++c) {
    const size_t V = c < 20 ? 20000 + g() % 20000 : 1 + g() % 3000;
    const SamplerParams p = random_params(g, V);
    Sampler fast(p);
    RefSampler ref(p, *p.seed);
    const int n_draws = 1 + static_cast<int>(g() % 5);
    for (int d = 0; d < n_draws; ++d) {
      const std::vector<float> logits = random_logits(g, V);
      std::vector<uint32_t> hist(g() % 64);
      for (auto& h : hist) h = static_cast<uint32_t>(g() % (V + 8));
      std::vector<float> a = logits, b = logits;
      const uint32_t got = fast.sample(a, hist);
      const uint32_t want = ref.sample(b, hist);
      ASSERT_EQ(got, want) << "case " << c << " draw " << d << " V=" << V << " T=" << p.temperature
                           << " top_k=" << p.top_k << " top_p=" << p.top_p << " min_p=" << p.min_p;
      for (size_t i = 0; i < V; ++i)
        ASSERT_EQ(float_bits(a[i]), float_bits(b[i])) << "case " << c << " i " << i;
      ++draws;
      if (p.temperature >= 1e-6f) {
        ++non_greedy_draws;
        if (got != ref_argmax_last(b)) ++non_argmax;
      }
    }
  }
  // The generator must actually exercise the stochastic path, not only argmax fallbacks.
  EXPECT_GT(draws, 6000u);
  EXPECT_GT(non_greedy_draws, 3000u);
  EXPECT_GT(non_argmax, 1000u);
}

// Equal probabilities straddling the top-p cut: the reference order is probability descending
// with ties by id ascending, so with p = {.25,.25,.25,.25} and top_p 0.5 only ids 0 and 1 survive.
TEST(Sampler, TopPTiesKeepLowestIds) {
  SamplerParams p;
  p.seed = 99;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.min_p = 0.0f;
  p.top_p = 0.5f;
  p.repeat_penalty = 1.0f;
  Sampler s(p);
  int count[4] = {0, 0, 0, 0};
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l{1.0f, 1.0f, 1.0f, 1.0f};
    ++count[s.sample(l, {})];
  }
  EXPECT_GT(count[0], 50);
  EXPECT_GT(count[1], 50);
  EXPECT_EQ(count[2], 0);
  EXPECT_EQ(count[3], 0);
  // Same with the tied mass behind a larger head and after index 64 (beyond the first sorted
  // prefix): V = 300, id 7 has the head, ids 100..299 tie; the cut keeps 7 and the lowest tied ids.
  std::vector<float> l(300, -kInf);
  l[7] = 3.0f;
  for (size_t i = 100; i < 300; ++i) l[i] = 0.0f;
  p.top_p = 0.8f;  // mass(7) = e^3/(e^3+200) ≈ 0.0913; each tie ≈ 0.004543 → ~156 ties kept
  Sampler t(p);
  RefSampler r(p, *p.seed);
  uint32_t hi = 0;
  for (int i = 0; i < 300; ++i) {
    std::vector<float> a = l, b = l;
    const uint32_t got = t.sample(a, {});
    EXPECT_EQ(got, r.sample(b, {}));
    if (got != 7) hi = std::max(hi, got);
  }
  EXPECT_GE(hi, 240u);  // ties up to about id 255 are drawn ...
  EXPECT_LE(hi, 256u);  // ... but never the high tied ids the cut drops
}

/// Counts of each id over `seeds` samplers drawing `draws` times from `logits`.
std::vector<int> draw_counts(SamplerParams p, const std::vector<float>& logits, int seeds, int draws) {
  std::vector<int> count(logits.size(), 0);
  for (int s = 0; s < seeds; ++s) {
    p.seed = 1000 + s;
    Sampler smp(p);
    for (int i = 0; i < draws; ++i) {
      std::vector<float> l = logits;
      ++count[smp.sample(l, {})];
    }
  }
  return count;
}

SamplerParams plain_params() {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  return p;
}

// Issue 27: top_p 0.8 is the float 0.8000000119; compared with the double running sum, 0.5 + 0.3
// fell short of it and a third token was drawn (16 times in 150). In float precision the kept set
// is exactly {0.5, 0.3}, drawn 5:3. The logits are log(p) in float, also shifted (softmax is
// shift-invariant, the rounding is not) and from double logs.
TEST(Sampler, TopPPointEightKeepsExactlyTwoOfPointThreePointOnePointOnePointFive) {
  const double probs[] = {0.3, 0.1, 0.1, 0.5};
  SamplerParams p = plain_params();
  p.top_p = 0.8f;
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<float> l(4);
    for (size_t i = 0; i < 4; ++i) {
      l[i] = variant == 2 ? static_cast<float>(std::log(probs[i])) : std::log(static_cast<float>(probs[i]));
      if (variant == 1) l[i] += 7.25f;
    }
    const std::vector<int> c = draw_counts(p, l, 200, 20);
    EXPECT_EQ(c[1], 0) << "variant " << variant;
    EXPECT_EQ(c[2], 0) << "variant " << variant;
    // 4000 draws of {0.3, 0.5} renormalized: id 3 has 0.625 (sd 0.0077).
    EXPECT_NEAR(c[3] / 4000.0, 0.625, 0.04) << "variant " << variant;
    EXPECT_EQ(c[0] + c[3], 4000);
  }
  // Just above 0.8 the third token (one of the 0.1s, the lower id first) joins.
  p.top_p = 0.81f;
  std::vector<float> l(4);
  for (size_t i = 0; i < 4; ++i) l[i] = std::log(static_cast<float>(probs[i]));
  const std::vector<int> c = draw_counts(p, l, 100, 20);
  EXPECT_GT(c[1], 100);  // 0.1 / 0.9 of 2000 ≈ 222
  EXPECT_EQ(c[2], 0);
}

// float_threshold(m) is where rounding to float reaches m.
TEST(Sampler, FloatThresholdIsWhereRoundingReachesTheFloat) {
  std::mt19937_64 g(5);
  for (float m : {0.05f, 0.8f, 0.1f, 1.0f, 1e-9f, 0.999999f, 0.3f}) {
    const double t = float_threshold(m);
    EXPECT_LT(t, static_cast<double>(m));
    EXPECT_EQ(static_cast<float>(std::nextafter(t, 2.0)), m) << m;  // just above: rounds to m
    EXPECT_LT(static_cast<float>(std::nextafter(t, 0.0)), m) << m;  // just below: the float below
    const double ulp = static_cast<double>(m) - static_cast<double>(std::nextafter(m, 0.0f));
    for (int i = 0; i < 1000; ++i) {
      const double x = static_cast<double>(m) + (std::uniform_real_distribution<double>(-2, 2)(g)) * ulp;
      if (x != t) {
        EXPECT_EQ(x >= t, static_cast<float>(x) >= m) << m << " " << x;
      }
    }
  }
  EXPECT_EQ(float_threshold(0.0f), 0.0);
  EXPECT_EQ(float_threshold(-0.5f), -0.5);
}

// min-p compares p / max in min_p's precision: a ratio r that rounds to the float m survives
// min_p = m even when r < m as doubles (the old double comparison dropped it); the next float up
// drops it.
TEST(Sampler, MinPComparesInFloatPrecision) {
  // Find a logit d whose ratio r = exp(d) lies in the upper half of [float_threshold(m), m) for
  // m = float(r): r rounds up to m.
  float d = -3.0f;
  float m = 0.0f;
  for (int i = 0; i < 100000; ++i, d = std::nextafter(d, 0.0f)) {
    const double r = std::exp(static_cast<double>(d));
    m = static_cast<float>(r);
    const double t = float_threshold(m);
    if (r < static_cast<double>(m) && r - t > 0.5 * (static_cast<double>(m) - t)) break;
    m = 0.0f;
  }
  ASSERT_GT(m, 0.0f) << "no logit found";
  SamplerParams p = plain_params();
  p.min_p = m;
  const std::vector<float> l{0.0f, d};
  const std::vector<int> kept = draw_counts(p, l, 50, 40);  // p(1) = r / (1 + r) ≈ 0.047
  EXPECT_GT(kept[1], 40);
  p.min_p = std::nextafter(m, 1.0f);
  const std::vector<int> dropped = draw_counts(p, l, 50, 40);
  EXPECT_EQ(dropped[1], 0);
  EXPECT_EQ(dropped[0], 2000);
}

// argmax_last agrees with the scalar reference scan on random inputs, including ties, ±0, -inf,
// NaN at 0 / elsewhere / everywhere, and lengths around the internal block size.
TEST(Sampler, ArgmaxLastMatchesReferenceScan) {
  std::mt19937_64 g(7);
  const size_t special[] = {0, 1, 2, 15, 16, 17, 511, 512, 513, 1023, 1024, 1025, 1536, 4099};
  for (int c = 0; c < 4000; ++c) {
    const size_t n = c < 14 * 8 ? special[c % 14] : g() % 3000;
    std::vector<float> v(n);
    const int shape = static_cast<int>(g() % 6);
    for (auto& x : v) {
      switch (shape) {
        case 0:
          x = std::normal_distribution<float>(0.0f, 3.0f)(g);
          break;
        case 1:
          x = static_cast<float>(g() % 4);
          break;  // heavy ties
        case 2:
          x = (g() % 2) ? 0.0f : -0.0f;
          break;  // signed zeros tie
        case 3:
          x = (g() % 3) ? -kInf : -1.0f;
          break;
        case 4:
          x = -kInf;
          break;
        default:
          x = static_cast<float>(g() % 50) - 25.0f;
      }
    }
    if (n > 0) {
      const int nan_mode = static_cast<int>(g() % 5);
      if (nan_mode == 1) v[0] = kNaN;
      if (nan_mode == 2)
        for (size_t k = 0; k < 1 + n / 10; ++k) v[g() % n] = kNaN;
      if (nan_mode == 3) std::fill(v.begin() + static_cast<ptrdiff_t>(g() % n), v.end(), kNaN);
      if (nan_mode == 4) v[n - 1] = kNaN;
    }
    ASSERT_EQ(argmax_last(v), ref_argmax_last(v)) << "case " << c << " n " << n << " shape " << shape;
  }
  // Hand cases.
  EXPECT_EQ(argmax_last(std::vector<float>{}), 0u);
  EXPECT_EQ(argmax_last(std::vector<float>{kNaN, 5.0f, 7.0f}), 0u);
  EXPECT_EQ(argmax_last(std::vector<float>{1.0f, kNaN, 0.5f}), 0u);
  EXPECT_EQ(argmax_last(std::vector<float>{0.0f, -0.0f}), 1u);
  EXPECT_EQ(argmax_last(std::vector<float>{-kInf, kNaN, -kInf, kNaN}), 2u);
  std::vector<float> big(151936, 1.0f);
  big[1000] = 2.0f;
  big[150000] = 2.0f;
  EXPECT_EQ(argmax_last(big), 150000u);
  big[150000] = kNaN;
  EXPECT_EQ(argmax_last(big), 1000u);
}

TEST(Perplexity, TokenNll) {
  const std::vector<float> l{0.0f, std::log(3.0f)};  // p = {0.25, 0.75}
  EXPECT_NEAR(token_nll(l, 0), std::log(4.0), 1e-6);
  EXPECT_NEAR(token_nll(l, 1), -std::log(0.75), 1e-6);
  // A NaN logit (a damaged lm_head row) is an error naming it, not a NaN perplexity.
  const std::vector<float> bad{0.0f, std::nanf(""), 1.0f};
  try {
    (void)token_nll(bad, 2);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NonFinite);
    EXPECT_NE(e.message().find("logit 1 is"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cortiq::runtime
