// AVX2 attention kernel for one query position (issue 6; ENGINE-NOTES §3.6), for x86 CPUs with AVX2 + FMA
// + F16C but without the AVX-512 features of simd_attention.h. Same contract as kernels::attention_ref
// (kernels.h), f32 arithmetic instead of double; the design of attention_simd with 256-bit vectors: the
// same template (attention/attention_tiles.h), instantiated in attention/attention_avx2.cc for 8 f32 lanes
// and 4 query heads per pass over V.
//
// Backend: functions compiled with `__attribute__((target("avx2,fma,f16c")))` (the project is built without
// -mavx2), only reached after avx2_cpu_ok() (simd_avx2.h) checked the CPU.
//
// Work order: for each requested kv head, all of its query heads are processed together, so every K and V
// row is read from memory once per group (V once per tile of ≤ 4 query heads):
//  1. scores: keys in blocks of 8 (f16 blocks, odd-head_dim blocks and the ragged last block are first
//     widened into a zero-padded f32 scratch block that stays in L1 for all query heads of the group); per
//     query head, 8 f32 FMA accumulators (one per key, 8 dims per step, ⌈head_dim/8⌉ steps) are reduced by
//     a 3-level transpose-add tree into one vector of 8 scores; s = f32(scale·(q·k)); optional softcap
//     s ← c·tanh(s/c) (scalar, double tanh, as the reference);
//  2. softmax: m = max s, e_j = exp_avx2(s_j − m) (below), Σe in 8 f32 lanes + a fixed 3-level lane tree;
//  3. out = (Σ_j e_j·v_j)·(1/Σe): V rows streamed once per tile of ≤ 4 query heads, 16 dims at a time,
//     f32 FMA, one sequential accumulation over keys per output; the head_dim % 8 tail goes through a
//     zero-padded 8-lane copy.
// Every head's arithmetic depends only on that head's q, the keys and the values, never on which other
// heads share the call (or the tile they land in), so results are bit-identical for any kv-head split,
// dead-head pattern of other heads, and thread.
//
// Error vs attention_ref (double accumulation), first order, u = 2^-24 (the standard FMA dot-product and
// summation analysis, Higham, "Accuracy and Stability of Numerical Algorithms", §3.1; the softmax
// perturbation as in simd_attention.h):
//  * score j: |δs_j| ≤ E_j = (⌈head_dim/8⌉ + 6)·u·scale·Σ_d |q_d·k_jd|  (⌈head_dim/8⌉-step FMA chain,
//    3-level tree, the scale product, and the reference's own two f32 roundings);
//  * weights: |δ log w_j| ≤ E_j + Σ_i w_i·E_i + u·(m − s_j + Σ_i w_i·(m − s_i)) (the f32 subtraction
//    s_j − m; Σ_i w_i·(m − s_i) ≤ ln nk) + 2u (exp_avx2 ≤ 1 ulp, and its renormalization) + (nk/8 + 4)·u
//    (Σe in 8 lanes + tree) + u (1/Σe);
//  * output: |δo_d| ≤ Σ_j w_j·|v_jd|·(δ log w_j + (nk + 1)·u); the nk·u term is the sequential f32
//    accumulation over keys (worst case; independent roundings typically give ~√nk·u). For nk ≤ 4096 and
//    modest scores the terms other than E_j, Σ_i w_i·E_i are typically ≲ 1e-5 relative to Σ_j w_j·|v_jd|
//    (w_j·(m − s_j) ≤ 1/e), which is what simd_avx2_attention_test asserts on top of E_j and Σ_i w_i·E_i.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace cortiq::kernels {

/// AVX2 `attention` (same parameters, shapes and semantics as attention_ref in kernels.h):
/// q: [n_heads·head_dim] f32, KV element (kv head g, position pos, dim d) at (g·capacity + pos)·head_dim + d
/// (f32 or f16 per kv.f16), keys [key_begin, key_end) (positions), out: [n_heads·head_dim] f32; the rows of
/// kv heads [kv_head_begin, min(kv_head_end, n_kv_heads)) are written, others untouched; dead heads
/// (head_alive[h] == 0, head_alive nullable) and nk == 0 give zeros. Throws nothing. Precondition:
/// avx2_cpu_ok() (simd_avx2.h); calling it on another CPU is undefined. Scratch is thread_local and only
/// grows. Error bound vs attention_ref: file comment.
void attention_avx2(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
                    const AttentionParams& p, const uint8_t* head_alive, float* out, size_t kv_head_begin = 0,
                    size_t kv_head_end = SIZE_MAX);

/// Vectorized e^x used by attention_avx2 (8 lanes), exposed for tests: out[i] = exp(x[i]) for i < n
/// (requires avx2_cpu_ok()). Cody–Waite reduction x = n·ln2 + r (ln2 split hi/lo, FMA), |r| ≤ ln2/2,
/// degree-7 Taylor polynomial in Horner form (the same as exp_simd), result p·2^n1·2^n2 with n1 = ⌊n/2⌋,
/// n2 = n − n1, each 2^k built by adding k + 127 into the f32 exponent field (no vscalefps on AVX2; the
/// split keeps both factors normal for every n the clamped input can give, and only the last product
/// rounds). Accuracy: ≤ 1 ulp of the exact e^x on [-87.33, 0] (simd_avx2_attention_test sweeps every 97th
/// f32 in [-88, 0] and asserts it); x < -87.3365447 (f32 nearest ln FLT_MIN) gives +0 (explicit flush);
/// intended domain x ≤ 0 (softmax arguments); up to 88.7 stays finite, larger x (inputs are clamped to
/// 88.8) and +inf give +inf. NaN propagates.
void exp_avx2(const float* x, size_t n, float* out);

}  // namespace cortiq::kernels
