// Named elementwise ops of the forward pass (issue 28, model room deliverable 3): every arithmetic
// loop the blocks of src/model ran inline, with the same arithmetic, so swapping them in is bit for
// bit. Vectors are contiguous f32; matrices [rows, cols] row-major. None allocates except
// moe_route's output vector (reserved by the caller, grown only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace cortiq::kernels {

/// x[r, c] += b[c] for r < rows, c < cols (a bias over rows). x: [rows, cols], b: [cols].
void add_bias_rows(float* x, const float* b, size_t rows, size_t cols);

/// y[i] += x[i] for i < n (the residual add; f32 sums).
void add_inplace(float* y, const float* x, size_t n);

/// x[i] *= c for i < n (f32 products).
void scale_inplace(float* x, size_t n, float c);

/// The out-gate split of q_proj's rows (Qwen3-Next / gated attention): qraw holds per head
/// [q(hd); gate(hd)], [n_heads·2·hd]; writes q [n_heads·hd] and gate [n_heads·hd].
void split_q_gate(const float* qraw, size_t n_heads, size_t hd, float* q, float* gate);

/// x[i] *= f32(1/(1+exp(−double(g[i])))) for i < n (the sigmoid output gate, evaluated in double
/// and rounded once).
void sigmoid_gate_inplace(float* x, const float* g, size_t n);

/// y[i] += w·x[i] for i < n (f32 product and sum: a weighted accumulate).
void axpy_inplace(float* y, float w, const float* x, size_t n);

/// x[i] *= s[i] for i < n (f32 products: per-element gates).
void mul_inplace(float* x, const float* s, size_t n);

/// Zeroes x[i] where alive[i] == 0, i < n (the task-mask zeroing of dead neurons).
void zero_dead(float* x, const uint8_t* alive, size_t n);

/// Index of the first non-finite (NaN, ±Inf) element of x[0, n), or npos when all are finite.
size_t first_non_finite(const float* x, size_t n) noexcept;
inline constexpr size_t npos = static_cast<size_t>(-1);

/// out[j, ·] = x[rows[j], ·] for j < rows.size(): x [·, cols], out [rows.size(), cols].
void gather_rows_f32(const float* x, std::span<const size_t> rows, size_t cols, float* out);
/// y[rows[j], ·] = x[j, ·] for j < rows.size() (the inverse of gather_rows_f32).
void scatter_rows_f32(const float* x, std::span<const size_t> rows, size_t cols, float* y);

/// y[0, width) = 0 except y[idx[j]] = x[j] for j < idx.size() (a compact row of alive neurons
/// spread back to the full width; idx entries < width). x: [idx.size()], y: [width].
void expand_cols(const float* x, std::span<const uint32_t> idx, size_t width, float* y);

/// How MoE routing weighs the kept experts (spec §2.2, ENGINE-NOTES §3.8).
struct MoeRouting {
  size_t top_k = 1;
  bool norm_topk_prob = false;         ///< renormalize the kept k to sum to 1
  double routed_scaling_factor = 1.0;  ///< multiplies every kept weight
};

/// MoE top-k routing of one token over `cand` (ascending expert ids, reordered in place):
/// p_e = exp(logit_e − max) / Σ over cand (double), pf_e = f32(p_e); the k = min(top_k, |cand|)
/// largest pf, ties to the lower id; w_e = pf_e (/ Σ_k pf when norm_topk_prob, in double) ·
/// routed_scaling_factor, rounded to f32. Writes (expert, weight) pairs to `out` (cleared first),
/// highest first. logits: [experts]; p, pf: [experts] scratch. Empty cand → no pairs.
void moe_route(const float* logits, std::vector<size_t>& cand, const MoeRouting& r, double* p, float* pf,
               std::vector<std::pair<size_t, float>>& out);

/// f32(1/(1+exp(−s))) with s = Σ double(w[i])·x[i] (the shared expert's sigmoid gate, double sum).
float sigmoid_dot(const float* w, const float* x, size_t n);

}  // namespace cortiq::kernels
