// AVX-512 attention kernel for one query position (issue 6; ENGINE-NOTES §3.6). Same contract as
// kernels::attention_ref (kernels.h), f32 arithmetic instead of double. The algorithm is written once
// for both SIMD tiers in attention/attention_tiles.h; attention/attention_avx512.cc instantiates it for
// 16 f32 lanes (keys per score vector) and 8 query heads per pass over V.
//
// Work order: for each requested kv head, all of its query heads are processed together, so every
// K and V row is read from memory once per group:
//  1. scores: keys in blocks of 16 (f16 or odd-head_dim blocks are first widened into a zero-padded
//     f32 scratch block, which stays in L1 for all query heads of the group); per query head, 16
//     f32 FMA accumulators (one per key, 16 dims per step) are reduced by a transpose-add tree
//     into one vector of 16 scores; s = scale·(q·k); optional softcap s ← c·tanh(s/c) (scalar,
//     double tanh, as the reference);
//  2. softmax: m = max s, e_j = exp_ps(s_j − m) (below), Σe in 16 f32 lanes (fixed lane tree);
//  3. out = (Σ_j e_j·v_j)·(1/Σe): V rows streamed once per tile of ≤ 8 query heads, 32 dims at a
//     time, f32 FMA; masked tails for head_dim % 16 != 0.
// Every head's arithmetic depends only on that head's q, the keys and the values, never on which
// other heads share the call, so results are bit-identical for any kv-head split (and thread).
//
// Error vs attention_ref (double accumulation), first order, u = 2^-24:
//  * score j: |δs_j| ≤ E_j = (head_dim + 4)·u·scale·Σ_d |q_d·k_jd|  (f32 FMA chain + tree);
//  * weights: |δ log w_j| ≤ E_j + Σ_i w_i·E_i + 2u (exp_ps < 1 ulp) + (nk/16 + 5)·u (Σe);
//  * output: |δo_d| ≤ Σ_j w_j·|v_jd|·(E_j + Σ_i w_i·E_i + (nk/16 + nk + 12)·u); the nk·u term is
//    the sequential f32 accumulation over keys (worst case; uncorrelated roundings typically give
//    ~√nk·u). For nk ≤ 4096 and modest scores this is ≈ 1e-5 relative to Σ_j w_j·|v_jd|.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace cortiq::kernels {

/// SIMD `attention` (same parameters, shapes and semantics as attention_ref in kernels.h):
/// q: [n_heads·head_dim], KV element (kv head g, position pos, dim d) at (g·capacity + pos)·head_dim
/// + d (f32 or f16 per kv.f16), out: [n_heads·head_dim], rows of kv heads [kv_head_begin,
/// min(kv_head_end, n_kv_heads)) written; dead heads and nk == 0 give zeros. Precondition:
/// simd_cpu_ok() (simd_matvec.h); calling it on another CPU is undefined. Scratch is thread_local
/// and only grows. Error bound: file comment.
void attention_simd(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
                    const AttentionParams& p, const uint8_t* head_alive, float* out, size_t kv_head_begin = 0,
                    size_t kv_head_end = SIZE_MAX);

/// Vectorized e^x used by attention_simd, exposed for tests: out[i] = exp(x[i]) for i < n
/// (requires simd_cpu_ok()). Cody–Waite reduction x = n·ln2 + r (ln2 split hi/lo, FMA),
/// |r| ≤ ln2/2, degree-7 Taylor polynomial in Horner form, result p·2^n via vscalefps.
/// Accuracy: < 1 ulp of the exact e^x on [-87.33, 0] (max 0.88 ulp measured on the dense sweep of
/// [-88, 0] in simd_attention_test, which asserts ≤ 1 ulp); x < -87.3365447 (f32 nearest
/// ln FLT_MIN; e^x below FLT_MIN) gives +0;
/// intended domain x ≤ 0 (softmax arguments), up to 88.7 stays finite. NaN propagates.
void exp_simd(const float* x, size_t n, float* out);

}  // namespace cortiq::kernels
