#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
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

uint32_t argmax_last(std::span<const float> v) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < v.size(); ++i)
    if (v[i] >= v[best]) best = i;
  return best;
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
  apply_penalties(logits, history, p_.repeat_penalty, p_.presence_penalty);
  if (p_.temperature < 1e-6f) return argmax_last(logits);
  std::vector<double> pr(V);
  double mx = -INFINITY;
  for (size_t i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(logits[i]) / p_.temperature);
  double sum = 0.0;
  for (size_t i = 0; i < V; ++i)
    sum += (pr[i] = std::exp(static_cast<double>(logits[i]) / p_.temperature - mx));
  double pmax = 0.0;
  for (auto& x : pr) pmax = std::max(pmax, x /= sum);
  if (p_.min_p > 0.0f)
    for (auto& x : pr)
      if (x < pmax * p_.min_p) x = 0.0;
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
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    for (size_t i = keep; i < V; ++i) pr[idx[i]] = 0.0;
  }
  double tot = 0.0;
  for (double x : pr) tot += x;
  if (!(tot > 0.0)) return argmax_last(logits);
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

}  // namespace cortiq::runtime
