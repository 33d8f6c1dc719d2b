// Named elementwise ops (elementwise.h): plain loops with the arithmetic the model used inline.
#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>

namespace cortiq::kernels {

void add_bias_rows(float* x, const float* b, size_t rows, size_t cols) {
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) x[r * cols + c] += b[c];
}

void add_inplace(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void scale_inplace(float* x, size_t n, float c) {
  for (size_t i = 0; i < n; ++i) x[i] *= c;
}

void split_q_gate(const float* qraw, size_t n_heads, size_t hd, float* q, float* gate) {
  for (size_t h = 0; h < n_heads; ++h) {
    std::copy(qraw + h * 2 * hd, qraw + h * 2 * hd + hd, q + h * hd);
    std::copy(qraw + h * 2 * hd + hd, qraw + h * 2 * hd + 2 * hd, gate + h * hd);
  }
}

void sigmoid_gate_inplace(float* x, const float* g, size_t n) {
  for (size_t i = 0; i < n; ++i)
    x[i] *= static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(g[i]))));
}

void axpy_inplace(float* y, float w, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += w * x[i];
}

void zero_dead(float* x, const uint8_t* alive, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!alive[i]) x[i] = 0.0f;
}

size_t first_non_finite(const float* x, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return i;
  return npos;
}

void gather_rows_f32(const float* x, std::span<const size_t> rows, size_t cols, float* out) {
  for (size_t j = 0; j < rows.size(); ++j) std::copy_n(x + rows[j] * cols, cols, out + j * cols);
}

void scatter_rows_f32(const float* x, std::span<const size_t> rows, size_t cols, float* y) {
  for (size_t j = 0; j < rows.size(); ++j) std::copy_n(x + j * cols, cols, y + rows[j] * cols);
}

void moe_route(const float* logits, std::vector<size_t>& cand, const MoeRouting& r, double* p, float* pf,
               std::vector<std::pair<size_t, float>>& out) {
  out.clear();
  if (cand.empty()) return;
  double mx = -INFINITY;
  for (size_t e : cand) mx = std::max(mx, static_cast<double>(logits[e]));
  double sum = 0.0;
  for (size_t e : cand) sum += (p[e] = std::exp(static_cast<double>(logits[e]) - mx));
  for (size_t e : cand) pf[e] = static_cast<float>(p[e] / sum);
  const size_t k = std::min(r.top_k, cand.size());
  // cand is ascending, so this total order gives the first k of a stable sort by probability.
  std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(k), cand.end(),
                    [&](size_t i, size_t j) { return pf[i] > pf[j] || (pf[i] == pf[j] && i < j); });
  double ksum = 0.0;
  for (size_t i = 0; i < k; ++i) ksum += pf[cand[i]];
  for (size_t i = 0; i < k; ++i) {
    double w = pf[cand[i]];
    if (r.norm_topk_prob) w /= ksum;
    out.emplace_back(cand[i], static_cast<float>(w * r.routed_scaling_factor));
  }
}

float sigmoid_dot(const float* w, const float* x, size_t n) {
  double s = 0.0;
  for (size_t d = 0; d < n; ++d) s += static_cast<double>(w[d]) * x[d];
  return static_cast<float>(1.0 / (1.0 + std::exp(-s)));
}

void expand_cols(const float* x, std::span<const uint32_t> idx, size_t width, float* y) {
  std::fill(y, y + width, 0.0f);
  for (size_t j = 0; j < idx.size(); ++j) y[idx[j]] = x[j];
}

void mul_inplace(float* x, const float* s, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] *= s[i];
}

}  // namespace cortiq::kernels
