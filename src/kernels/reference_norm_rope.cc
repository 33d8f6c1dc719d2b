// Norms, softmax, activations and RoPE (kernels.h): scalar code, accumulating in double where a sum
// is taken. rmsnorm, softmax, geglu, softcap and rope are the only implementations; swiglu_ref is
// the reference of the dispatched swiglu (simd_activation.h in the AVX-512 tier).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <span>
#include <vector>

#include "kernels/kernels.h"
#include "util/error.h"

namespace cortiq::kernels {

void rmsnorm(const float* x, const float* w, size_t n, double eps, NormStyle style, float* out) {
  double ss = 0.0;
  for (size_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (size_t i = 0; i < n; ++i) {
    const float xn = x[i] * inv;
    if (!w)
      out[i] = xn;
    else if (style == NormStyle::Gemma)
      out[i] = xn * (1.0f + w[i]);
    else
      out[i] = xn * w[i];
  }
}

void softmax(float* x, size_t n) {
  if (n == 0) return;
  float mx = x[0];
  for (size_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx) / sum);
}

float silu(float x) {
  return static_cast<float>(static_cast<double>(x) / (1.0 + std::exp(-static_cast<double>(x))));
}

float gelu_tanh(float x) {
  const double d = x;
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return static_cast<float>(0.5 * d * (1.0 + std::tanh(k * (d + 0.044715 * d * d * d))));
}

void swiglu_ref(const float* g, const float* u, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = silu(g[i]) * u[i];
}
void geglu(const float* g, const float* u, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gelu_tanh(g[i]) * u[i];
}
void softcap(float* x, size_t n, float c) {
  if (!(c > 0.0f)) return;
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(c * std::tanh(static_cast<double>(x[i]) / c));
}

// ---------------------------------------------------------------------------------------------

RopeTable make_rope(uint32_t head_dim, double theta, double partial_rotary_factor,
                    const std::optional<YarnParams>& yarn, std::span<const double> freq_factors) {
  RopeTable t;
  uint32_t rot = static_cast<uint32_t>(static_cast<double>(head_dim) * partial_rotary_factor);
  rot = std::max<uint32_t>(2, rot);
  rot = std::min<uint32_t>(rot & ~1u, head_dim & ~1u);
  t.rotary_dim = rot;
  const uint32_t half = rot / 2;
  std::vector<double> inv(half);
  for (uint32_t i = 0; i < half; ++i) inv[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / rot);
  if (yarn && yarn->factor > 0) {
    // HF _compute_yarn_parameters (truncate=True): correction range over the rotary dims.
    auto corr = [&](double n_rot) {
      return rot * std::log(yarn->original_max_position_embeddings / (n_rot * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(theta));
    };
    double low = std::max(0.0, std::floor(corr(yarn->beta_fast)));
    double high = std::min(static_cast<double>(rot - 1), std::ceil(corr(yarn->beta_slow)));
    if (low == high) high += 0.001;
    for (uint32_t i = 0; i < half; ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      inv[i] = (inv[i] / yarn->factor) * ramp + inv[i] * (1.0 - ramp);
    }
    t.scale = static_cast<float>(yarn->attention_factor);
  }
  if (!freq_factors.empty()) {
    if (freq_factors.size() != half)
      fail(ErrorKind::InvalidArgument, "rope_freq_factors has {} entries, rotary_dim/2 is {}",
           freq_factors.size(), half);
    for (uint32_t i = 0; i < half; ++i) inv[i] /= freq_factors[i];
  }
  t.inv_freq.resize(half);
  for (uint32_t i = 0; i < half; ++i) t.inv_freq[i] = static_cast<float>(inv[i]);
  return t;
}

std::vector<double> llama3_freq_factors(uint32_t rotary_dim, double theta, double factor,
                                        double low_freq_factor, double high_freq_factor,
                                        double original_max_position_embeddings) {
  const uint32_t half = rotary_dim / 2;
  std::vector<double> out(half, 1.0);
  const double low_wl = original_max_position_embeddings / low_freq_factor;
  const double high_wl = original_max_position_embeddings / high_freq_factor;
  for (uint32_t i = 0; i < half; ++i) {
    // HF computes inv_freq in f32; keep that rounding so the band decisions match.
    const double inv = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(2 * i) / rotary_dim));
    const double wl = 2.0 * std::numbers::pi / inv;
    if (wl < high_wl) {
      out[i] = 1.0;
    } else if (wl > low_wl) {
      out[i] = factor;
    } else {
      const double s =
          (original_max_position_embeddings / wl - low_freq_factor) / (high_freq_factor - low_freq_factor);
      out[i] = 1.0 / ((1.0 - s) / factor + s);
    }
  }
  return out;
}

void rope(float* x, size_t n_heads, size_t head_dim, const RopeTable& t, int64_t pos) {
  const size_t half = t.rotary_dim / 2;
  const float fpos = static_cast<float>(pos);
  for (size_t i = 0; i < half; ++i) {
    const float ang = fpos * t.inv_freq[i];
    const float c = static_cast<float>(std::cos(static_cast<double>(ang))) * t.scale;
    const float s = static_cast<float>(std::sin(static_cast<double>(ang))) * t.scale;
    for (size_t h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      const float a = v[i], b = v[i + half];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }
}

}  // namespace cortiq::kernels
