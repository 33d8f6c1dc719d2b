#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

namespace cortiq::runtime {

uint64_t SplitMix64::next() noexcept {
  uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

SamplerParams SamplerParams::greedy() {
  SamplerParams p;
  p.temperature = 0.0f;
  p.repeat_penalty = 1.0f;
  return p;
}

static uint64_t seed_of(const SamplerParams& p) {
  if (p.seed) return *p.seed;
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(seed_of(p)) {}

namespace {

/// Four SSE-width lanes (GCC/Clang vector extension; lowered to scalar code on targets without
/// SIMD). Elementwise `x > a ? x : a` keeps `a` when `x` is NaN, like the scalar scan.
using F4 = float __attribute__((vector_size(16)));

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr size_t kArgmaxBlock = 512;  // floats per block; multiple of 16

F4 load4(const float* p) {
  F4 r;
  std::memcpy(&r, p, sizeof r);
  return r;
}

/// max over p[0, kArgmaxBlock) ignoring NaN; -inf when every value is NaN or -inf.
float block_max(const float* p) {
  const F4 ninf = {kNegInf, kNegInf, kNegInf, kNegInf};
  F4 a0 = ninf, a1 = ninf, a2 = ninf, a3 = ninf;
  for (size_t j = 0; j < kArgmaxBlock; j += 16) {
    const F4 x0 = load4(p + j), x1 = load4(p + j + 4), x2 = load4(p + j + 8), x3 = load4(p + j + 12);
    a0 = x0 > a0 ? x0 : a0;
    a1 = x1 > a1 ? x1 : a1;
    a2 = x2 > a2 ? x2 : a2;
    a3 = x3 > a3 ? x3 : a3;
  }
  a0 = a1 > a0 ? a1 : a0;
  a2 = a3 > a2 ? a3 : a2;
  a0 = a2 > a0 ? a2 : a0;
  float m = a0[0];
  for (int k = 1; k < 4; ++k) m = a0[k] > m ? a0[k] : m;
  return m;
}

/// IEEE-754 bit pattern of a double; for x >= 0 it orders like x.
uint64_t bits_of(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

/// Biased binary exponent of x in [0, 1] (0 for subnormals and zero, 1023 for 1.0).
size_t exponent_bits(double x) {
  return static_cast<size_t>(bits_of(x) >> 52);
}

}  // namespace

double float_threshold(float m) noexcept {
  if (!(m > 0.0f)) return static_cast<double>(m);
  // Both floats have 24-bit significands: their sum and its half are exact in double.
  return (static_cast<double>(std::nextafter(m, 0.0f)) + static_cast<double>(m)) * 0.5;
}

uint32_t argmax_last(std::span<const float> v) {
  const size_t n = v.size();
  if (n == 0) return 0;
  const float* p = v.data();
  // The scalar scan compares `v[i] >= v[best]`: with v[0] NaN nothing ever replaces index 0;
  // otherwise best only moves to non-NaN values, so the answer is the last index of the non-NaN max.
  if (std::isnan(p[0])) return 0;
  // Pass 1: the last block whose max is >= every earlier block max holds the last maximal element.
  float best = kNegInf;
  size_t best_start = 0, b = 0;
  for (; b + kArgmaxBlock <= n; b += kArgmaxBlock) {
    const float m = block_max(p + b);
    if (m >= best) {
      best = m;
      best_start = b;
    }
  }
  if (b < n) {
    float m = kNegInf;
    for (size_t i = b; i < n; ++i) m = p[i] > m ? p[i] : m;
    if (m >= best) {
      best = m;
      best_start = b;
    }
  }
  // An all-(-inf/NaN) block also reports -inf, so for best == -inf scan everything (v[0] is not
  // NaN, hence some element equals -inf).
  const size_t lo = best == kNegInf ? 0 : best_start;
  for (size_t i = best == kNegInf ? n : std::min(n, best_start + kArgmaxBlock); i-- > lo;)
    if (p[i] == best) return static_cast<uint32_t>(i);
  return 0;  // unreachable: some element of the scanned range equals best
}

void apply_penalties(std::span<float> logits, std::span<const uint32_t> history, float repeat_penalty,
                     float presence_penalty) {
  if (repeat_penalty == 1.0f && presence_penalty == 0.0f) return;
  std::vector<uint32_t> ids(history.begin(), history.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (uint32_t id : ids) {
    if (id >= logits.size()) continue;
    float& l = logits[id];
    if (repeat_penalty != 1.0f) l = l > 0.0f ? l / repeat_penalty : l * repeat_penalty;
    l -= presence_penalty;
  }
}

uint32_t Sampler::sample(std::span<float> logits, std::span<const uint32_t> history) {
  const size_t V = logits.size();
  for (uint32_t id : p_.suppress)
    if (id < V) logits[id] = -std::numeric_limits<float>::infinity();
  // Penalties once per distinct id (same result as apply_penalties, without sorting `history`).
  if (p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f) {
    if (seen_.size() < V) seen_.resize(V, 0);
    for (uint32_t id : history) {
      if (id >= V || seen_[id]) continue;
      seen_[id] = 1;
      float& l = logits[id];
      if (p_.repeat_penalty != 1.0f) l = l > 0.0f ? l / p_.repeat_penalty : l * p_.repeat_penalty;
      l -= p_.presence_penalty;
    }
    for (uint32_t id : history)
      if (id < V) seen_[id] = 0;
  }
  if (p_.temperature < 1e-6f || V == 0) return argmax_last(logits);

  // Softmax in double, with the same operations in the same order as the reference chain.
  if (pr_.size() < V) pr_.resize(V);
  if (nz_.size() < V) nz_.resize(V);
  double* const pr = pr_.data();
  uint32_t* const nz = nz_.data();
  double mx = -INFINITY;
  for (size_t i = 0; i < V; ++i) {
    pr[i] = static_cast<double>(logits[i]) / p_.temperature;
    mx = std::max(mx, pr[i]);
  }
  double sum = 0.0;
  for (size_t i = 0; i < V; ++i) sum += (pr[i] = std::exp(pr[i] - mx));
  // sum is NaN iff some term is (a +inf or NaN logit, all logits -inf, NaN temperature); then every
  // probability is NaN, no filter can leave a positive total and the chain ends in argmax. Else
  // the max term is exp(0) = 1, so sum >= 1 and every probability is finite in [0, 1].
  if (std::isnan(sum)) return argmax_last(logits);
  double pmax = 0.0;
  for (size_t i = 0; i < V; ++i) pmax = std::max(pmax, pr[i] /= sum);

  // min-p; nz[0, P) = the ids still positive, ascending. Zeros never matter below: they add
  // nothing to any sum, are never drawn and sort after every positive candidate.
  size_t P = 0;
  if (p_.min_p > 0.0f) {
    const double cut = pmax * float_threshold(p_.min_p);
    for (size_t i = 0; i < V; ++i) {
      if (pr[i] < cut)
        pr[i] = 0.0;
      else if (pr[i] > 0.0)
        nz[P++] = static_cast<uint32_t>(i);
    }
  } else {
    for (size_t i = 0; i < V; ++i)
      if (pr[i] > 0.0) nz[P++] = static_cast<uint32_t>(i);
  }

  // top-k: the k-th largest of all V values is the k-th largest positive one when k <= P, else 0
  // (which drops nothing).
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < V && static_cast<size_t>(p_.top_k) <= P) {
    const size_t k = static_cast<size_t>(p_.top_k);
    if (kth_.size() < P) kth_.resize(P);
    for (size_t j = 0; j < P; ++j) kth_[j] = pr[nz[j]];
    std::nth_element(kth_.begin(), kth_.begin() + static_cast<ptrdiff_t>(k - 1),
                     kth_.begin() + static_cast<ptrdiff_t>(P), std::greater<>());
    const double kth = kth_[k - 1];
    size_t kept = 0;
    for (size_t j = 0; j < P; ++j) {
      if (pr[nz[j]] < kth)
        pr[nz[j]] = 0.0;
      else
        nz[kept++] = nz[j];
    }
    P = kept;
  }

  // top-p. The reference walks all ids sorted by probability descending, ties by id ascending
  // (stable_sort over the iota), adding pr/tot to a running sum until it reaches top_p, compared
  // in top_p's precision (float(cum) >= top_p: 0.5 + 0.3 reaches 0.8f). That order
  // is a strict total order, so any sort of any set of leading candidates yields the same walk;
  // only the leading part is sorted here:
  //  1. a mass histogram over binary exponents picks the largest power-of-two threshold whose
  //     candidates at or above it hold top_p of the mass (plus a rounding margin); those
  //     candidates precede all others in the order and are gathered into ord;
  //  2. they are sorted lazily, as a growing prefix (64, ×4, ...) by nth_element + sort;
  //  3. should the running sum still fall short, the remaining candidates follow the same way.
  // The running sum adds the same doubles in the same order as the reference, so the cut-off is
  // bit-identical; candidates after it are dropped below, zeros never matter.
  bool cut = false;
  double cut_p = 0.0;  // probability and id of the last kept candidate when cut
  uint32_t cut_id = 0;
  if (p_.top_p < 1.0f && P > 0) {
    constexpr size_t kExps = 1024;  // pr <= 1: biased exponents 0..1023
    if (hist_.size() < kExps) hist_.resize(kExps);
    std::fill(hist_.begin(), hist_.begin() + kExps, 0.0);
    double tot = 0.0;
    for (size_t j = 0; j < P; ++j) {
      const double x = pr[nz[j]];
      tot += x;
      hist_[exponent_bits(x)] += x;
    }
    const double need =
        static_cast<double>(p_.top_p) * tot + 4.0 * static_cast<double>(P + 2) * 0x1p-53 * tot;
    uint64_t lo = 0;  // bit pattern of the threshold; positive doubles order like their bits
    double acc = 0.0;
    for (size_t e = kExps; e-- > 0;) {
      acc += hist_[e];
      if (acc >= need) {
        lo = static_cast<uint64_t>(e) << 52;
        break;
      }
    }
    if (ord_.size() < P) ord_.resize(P);
    uint32_t* const ord = ord_.data();
    size_t m = 0;
    for (size_t j = 0; j < P; ++j)
      if (bits_of(pr[nz[j]]) >= lo) ord[m++] = nz[j];
    const auto before = [pr](uint32_t x, uint32_t y) { return pr[x] > pr[y] || (pr[x] == pr[y] && x < y); };
    double cum = 0.0;
    // Walks ord[from, to) in order (sorting a growing prefix); true when the sum reaches top_p.
    const auto walk = [&](size_t from, size_t to) {
      size_t done = from, lim = std::min(from + 64, to);
      for (;;) {
        if (lim < to) std::nth_element(ord + done, ord + lim, ord + to, before);
        std::sort(ord + done, ord + lim, before);
        for (; done < lim; ++done) {
          cum += pr[ord[done]] / tot;
          if (static_cast<float>(cum) >= p_.top_p) {
            cut = true;
            cut_p = pr[ord[done]];
            cut_id = ord[done];
            return;
          }
        }
        if (lim == to) return;
        lim = lim - from > (to - from) / 4 ? to : from + (lim - from) * 4;
      }
    };
    walk(0, m);
    if (!cut && m < P) {
      size_t rest = m;
      for (size_t j = 0; j < P; ++j)
        if (bits_of(pr[nz[j]]) < lo) ord[rest++] = nz[j];
      walk(m, P);
    }
  }

  // Drop what top-p cut, renormalize (summing in id order like the reference) and draw (inverse
  // CDF over ids ascending).
  double tot = 0.0;
  size_t kept = 0;
  for (size_t j = 0; j < P; ++j) {
    const uint32_t i = nz[j];
    if (cut && (pr[i] < cut_p || (pr[i] == cut_p && i > cut_id))) {
      pr[i] = 0.0;
      continue;
    }
    tot += pr[i];
    nz[kept++] = i;
  }
  if (!(tot > 0.0)) return argmax_last(logits);
  const double r = static_cast<double>(rng_.uniform()) * tot;
  double cum = 0.0;
  for (size_t j = 0; j < kept; ++j) {
    cum += pr[nz[j]];
    if (r < cum) return nz[j];
  }
  return nz[kept - 1];
}

}  // namespace cortiq::runtime
