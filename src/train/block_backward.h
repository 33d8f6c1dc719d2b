// The backward of each forward block of the llama family, over the activations the forward kept
// (model::KeptLayer): RMSNorm, a linear layer with its bias, RoPE, causal softmax attention with
// GQA, SwiGLU, and the mean next-token cross-entropy. f32 in and out, double accumulation; every
// gradient is ADDED to its output (callers zero them once per step). Matrices are [rows, cols]
// row-major; T = the tokens of one sequence at positions 0..T−1. The formulas are the chain rule on
// the forward's definitions (kernels.h): no second forward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/kernels.h"
#include "kernels/ops.h"

namespace cortiq::train {

/// y = x·r·w with r = 1/sqrt(mean(x²) + eps) (kernels::rmsnorm, Qwen style), for `rows` rows of n:
/// dx += r·(w⊙dy) − x·r³·Σ(w⊙dy⊙x)/n; dw += Σ_rows dy⊙x·r (dw may be null: a weightless norm has
/// w == nullptr, read as 1).
void rmsnorm_backward(const float* x, const float* w, size_t rows, size_t n, double eps, const float* dy,
                      float* dx, float* dw);

/// y = x·Wᵀ + b for T rows, W [out, in]: dx [T, in] += dy·W (dx may be null), dW [out, in] += dyᵀ·x
/// (null: frozen), db [out] += Σ_t dy (null: no bias or frozen). The two products are the
/// forward's kernel (ops.matmul, f32 SIMD under MatmulMode::Exact) on transposed copies
/// (kernels::transpose_f32): dx = matmul(Wᵀ [in, out], dy), dW = matmul(xᵀ [in, T], dyᵀ [out, T]);
/// db sums in double. `xt`, when not null, is xᵀ [in, T] already made by the caller (q/k/v and
/// gate/up share one input), so it is not transposed again; the result is the same.
void linear_backward(const kernels::Ops& ops, kernels::ThreadPool& pool, const float* W, size_t out,
                     size_t in, const float* x, size_t T, const float* dy, float* dx, float* dW, float* db,
                     const float* xt = nullptr);

/// RoPE is a rotation by the angle of `pos` (kernels::rope); its backward rotates the gradient of
/// `n_heads` heads of head_dim back by the same angle, in place: (d_a, d_b) ← (d_a·c + d_b·s,
/// −d_a·s + d_b·c) with c, s the forward's (scale included).
void rope_backward(float* d, size_t n_heads, size_t head_dim, const kernels::RopeTable& t, int64_t pos);

/// Causal softmax attention of one sequence, every query t over keys 0..t, query head h reading kv
/// head h / (n_heads / n_kv_heads): S = scale·q·kᵀ, P = softmax(S), out = P·v. q [T, n_heads·hd],
/// k / v [T, n_kv_heads·hd] (after RoPE, as the forward kept them), dout [T, n_heads·hd]:
/// dv += Pᵀ·dout; dS = P⊙(dout·vᵀ − rowsum(P⊙(dout·vᵀ))); dq += scale·dS·k; dk += scale·dSᵀ·q.
/// P is recomputed from q and k (not kept: [heads, T, T]); the five products per head are
/// ops.matmul calls on transposed per-head copies.
void attention_backward(const kernels::Ops& ops, kernels::ThreadPool& pool, const float* q, const float* k,
                        const float* v, size_t T, size_t n_heads, size_t n_kv_heads, size_t head_dim,
                        float scale, const float* dout, float* dq, float* dk, float* dv);

/// a = silu(g)·u (kernels::swiglu) over n values: dg += da·u·σ(g)·(1 + g·(1 − σ(g))), du += da·silu(g).
void swiglu_backward(const float* g, const float* u, size_t n, const float* da, float* dg, float* du);

/// Mean cross-entropy of logits [T, vocab] against targets (row t predicts targets[t]; a row whose
/// target is `ignore` counts for nothing), log-softmax in double. Writes dlogits [T, vocab] =
/// (softmax − onehot)/N (overwritten, N = the counted rows) and returns the loss in nats per counted
/// row (0 when none count).
double cross_entropy(const float* logits, size_t T, size_t vocab, std::span<const uint32_t> targets,
                     uint32_t ignore, float* dlogits);

/// weight · mean over the counted rows of KL(p ‖ q) = Σ_j p_j (log p_j − log q_j), p = softmax of
/// teacher [T, vocab], q = softmax of logits [T, vocab] (double); ADDS weight·(q − p)/N to dlogits
/// and returns the weighted value (0 when no row counts).
double kl_to_teacher(const float* logits, const float* teacher, size_t T, size_t vocab,
                     std::span<const uint32_t> targets, uint32_t ignore, double weight, float* dlogits);

}  // namespace cortiq::train
