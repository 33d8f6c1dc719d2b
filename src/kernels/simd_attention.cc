// AVX-512 attention (contract and error bound in simd_attention.h).
//
// Every function that uses AVX-512 intrinsics carries CQ_AVX512 (a `target` attribute) and is only
// reached after the caller checked simd_cpu_ok() (simd_matvec.h).
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/simd_attention.h"

// GCC 12 reports its own _mm512_undefined_* placeholders inside the intrinsic headers as
// uninitialized (a known false positive); silence that for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/simd_common.h"
#include "kernels/simd_exp.h"

namespace cortiq::kernels {

namespace {

using simd_detail::exp_ps;

constexpr size_t kKeyBlock = 16;  // keys per score vector
constexpr size_t kHeadTile = 8;   // query heads sharing one pass over V

/// Lane mask selecting the first min(n, 16) lanes.
inline __mmask16 lanes(size_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

/// Sum of all 16 lanes in a fixed order.
CQ_AVX512 inline float hsum(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  const __m128 d = _mm_add_ss(c, _mm_movehdup_ps(c));
  return _mm_cvtss_f32(d);
}

/// Level 1+2 of the transpose-add: 4 accumulators → per 128-bit lane [Σa, Σb, Σc, Σd] partials.
CQ_AVX512 inline __m512 tsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512d abd = _mm512_castps_pd(ab), cdd = _mm512_castps_pd(cd);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(abd, cdd)),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(abd, cdd)));
}

/// Folds the 128-bit lanes: x, y (per-lane partials of 4 sources each) → [x(L0+L1), x(L2+L3),
/// y(L0+L1), y(L2+L3)].
CQ_AVX512 inline __m512 fold(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}

/// Dot products of one query head (zero-padded to 16·nch) with 16 keys (rows at k + i·stride,
/// 16·nch readable floats each): lane i = Σ_d q_d·k_id.
CQ_AVX512 inline __m512 dot16(const float* q, const float* k, size_t stride, size_t nch) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  __m512 a8 = a0, a9 = a0, a10 = a0, a11 = a0, a12 = a0, a13 = a0, a14 = a0, a15 = a0;
  for (size_t c = 0; c < nch; ++c) {
    const __m512 qc = _mm512_loadu_ps(q + 16 * c);
    const float* kc = k + 16 * c;
    a0 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 0 * stride), a0);
    a1 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 1 * stride), a1);
    a2 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 2 * stride), a2);
    a3 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 3 * stride), a3);
    a4 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 4 * stride), a4);
    a5 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 5 * stride), a5);
    a6 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 6 * stride), a6);
    a7 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 7 * stride), a7);
    a8 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 8 * stride), a8);
    a9 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 9 * stride), a9);
    a10 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 10 * stride), a10);
    a11 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 11 * stride), a11);
    a12 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 12 * stride), a12);
    a13 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 13 * stride), a13);
    a14 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 14 * stride), a14);
    a15 = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kc + 15 * stride), a15);
  }
  const __m512 s0 = tsum4(a0, a1, a2, a3), s1 = tsum4(a4, a5, a6, a7);
  const __m512 s2 = tsum4(a8, a9, a10, a11), s3 = tsum4(a12, a13, a14, a15);
  return fold(fold(s0, s1), fold(s2, s3));
}

/// Loads 16 dims of a V/K row (f32 or f16), lanes outside `m` zero.
template <bool F16>
CQ_AVX512 inline __m512 load_row(const void* base, size_t idx, __mmask16 m) {
  if constexpr (F16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(base) + idx));
  } else {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(base) + idx);
  }
}

/// V pass for NT query heads and NC (1 or 2) chunks of 16 dims starting at dim d0:
/// o_h[d] = inv_h · Σ_j e_h[j]·v_j[d]. `e[t]` points at head t's weights, `o[t]` at its output row.
template <int NT, int NC, bool F16>
CQ_AVX512 void v_tile(const void* vbase, size_t row0, size_t hd, size_t nk, size_t d0, const float* const* e,
                      const float* inv, float* const* o) {
  const __mmask16 m0 = lanes(hd - d0);
  const __mmask16 m1 = NC > 1 ? lanes(hd - d0 - 16) : static_cast<__mmask16>(0);
  // every index into acc is a compile-time constant after unrolling, so GCC keeps it in registers
  __m512 acc[NT][NC];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    acc[t][0] = _mm512_setzero_ps();
    if constexpr (NC > 1) acc[t][1] = _mm512_setzero_ps();
  }
  for (size_t j = 0; j < nk; ++j) {
    const size_t idx = (row0 + j) * hd + d0;
    const __m512 v0 = load_row<F16>(vbase, idx, m0);
    __m512 v1 = v0;
    if constexpr (NC > 1) v1 = load_row<F16>(vbase, idx + 16, m1);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m512 w = _mm512_set1_ps(e[t][j]);
      acc[t][0] = _mm512_fmadd_ps(w, v0, acc[t][0]);
      if constexpr (NC > 1) acc[t][1] = _mm512_fmadd_ps(w, v1, acc[t][1]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    const __m512 s = _mm512_set1_ps(inv[t]);
    _mm512_mask_storeu_ps(o[t] + d0, m0, _mm512_mul_ps(acc[t][0], s));
    if constexpr (NC > 1) _mm512_mask_storeu_ps(o[t] + d0 + 16, m1, _mm512_mul_ps(acc[t][1], s));
  }
}

template <int NT, bool F16>
CQ_AVX512 void v_heads(const void* vbase, size_t row0, size_t hd, size_t nk, const float* const* e,
                       const float* inv, float* const* o) {
  for (size_t d0 = 0; d0 < hd; d0 += 32) {
    if (hd - d0 > 16) {
      v_tile<NT, 2, F16>(vbase, row0, hd, nk, d0, e, inv, o);
    } else {
      v_tile<NT, 1, F16>(vbase, row0, hd, nk, d0, e, inv, o);
    }
  }
}

template <bool F16>
CQ_AVX512 void v_dispatch(size_t nt, const void* vbase, size_t row0, size_t hd, size_t nk,
                          const float* const* e, const float* inv, float* const* o) {
  switch (nt) {
    case 1:
      return v_heads<1, F16>(vbase, row0, hd, nk, e, inv, o);
    case 2:
      return v_heads<2, F16>(vbase, row0, hd, nk, e, inv, o);
    case 3:
      return v_heads<3, F16>(vbase, row0, hd, nk, e, inv, o);
    case 4:
      return v_heads<4, F16>(vbase, row0, hd, nk, e, inv, o);
    case 5:
      return v_heads<5, F16>(vbase, row0, hd, nk, e, inv, o);
    case 6:
      return v_heads<6, F16>(vbase, row0, hd, nk, e, inv, o);
    case 7:
      return v_heads<7, F16>(vbase, row0, hd, nk, e, inv, o);
    default:
      return v_heads<8, F16>(vbase, row0, hd, nk, e, inv, o);
  }
}

/// Widens `nb` K rows (row indices row0.., f32 or f16) into `dst` (16 rows of hdp floats, zero
/// padded: dims ≥ hd and rows ≥ nb are 0).
CQ_AVX512 void stage_keys(const KvLayerView& kv, size_t row0, size_t nb, size_t hd, size_t hdp, float* dst) {
  for (size_t i = 0; i < kKeyBlock; ++i) {
    float* r = dst + i * hdp;
    if (i >= nb) {
      std::fill(r, r + hdp, 0.0f);
      continue;
    }
    const size_t base = (row0 + i) * hd;
    for (size_t d = 0; d < hdp; d += 16) {
      const __mmask16 m = lanes(hd > d ? hd - d : 0);
      const __m512 x = kv.f16 ? load_row<true>(kv.k, base + d, m) : load_row<false>(kv.k, base + d, m);
      _mm512_storeu_ps(r + d, x);
    }
  }
}

struct Scratch {
  simd_detail::LineVec<float> q;     // [group, hdp] zero-padded query heads
  simd_detail::LineVec<float> kblk;  // [16, hdp] staged key block
  simd_detail::LineVec<float> sc;    // [group, nkp] scores, then exp weights
  simd_detail::LineVec<float> inv;   // [group] 1/Σe
  std::vector<size_t> alive;         // query head indices (within group) that are computed
  std::vector<const float*> e;
  std::vector<float*> o;
};

using simd_detail::grow;

CQ_AVX512 void attention_group(const float* q, const KvLayerView& kv, size_t key_begin, size_t nk,
                               const AttentionParams& p, const uint8_t* head_alive, float* out, size_t g,
                               size_t group, Scratch& s) {
  const size_t hd = p.head_dim, hdp = (hd + 15) / 16 * 16, nch = hdp / 16;
  const size_t nkp = (nk + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  s.alive.clear();
  for (size_t i = 0; i < group; ++i) {
    const size_t h = g * group + i;
    if ((head_alive && !head_alive[h]) || nk == 0) {
      std::fill(out + h * hd, out + (h + 1) * hd, 0.0f);
    } else {
      s.alive.push_back(i);
    }
  }
  const size_t na = s.alive.size();
  if (na == 0) return;
  grow(s.q, na * hdp);
  grow(s.kblk, kKeyBlock * hdp);
  grow(s.sc, na * nkp);
  grow(s.inv, na);
  grow(s.e, na);
  grow(s.o, na);
  for (size_t a = 0; a < na; ++a) {
    const float* qh = q + (g * group + s.alive[a]) * hd;
    std::copy(qh, qh + hd, s.q.data() + a * hdp);
    std::fill(s.q.data() + a * hdp + hd, s.q.data() + (a + 1) * hdp, 0.0f);
  }
  const size_t row0 = g * kv.capacity + key_begin;  // K/V row of key 0
  const __m512 scale = _mm512_set1_ps(p.scale);

  // 1. scores
  const bool direct = !kv.f16 && hd % 16 == 0;
  for (size_t jb = 0; jb < nk; jb += kKeyBlock) {
    const size_t nb = std::min(kKeyBlock, nk - jb);
    const float* kp;
    size_t stride;
    if (direct && nb == kKeyBlock) {
      kp = static_cast<const float*>(kv.k) + (row0 + jb) * hd;
      stride = hd;
    } else {
      stage_keys(kv, row0 + jb, nb, hd, hdp, s.kblk.data());
      kp = s.kblk.data();
      stride = hdp;
    }
    const __mmask16 m = lanes(nb);
    for (size_t a = 0; a < na; ++a) {
      const __m512 d = dot16(s.q.data() + a * hdp, kp, stride, nch);
      _mm512_mask_storeu_ps(s.sc.data() + a * nkp + jb, m, _mm512_mul_ps(d, scale));
    }
  }

  // 2. softcap + softmax numerators
  for (size_t a = 0; a < na; ++a) {
    float* sr = s.sc.data() + a * nkp;
    if (p.softcap > 0.0f) {
      for (size_t j = 0; j < nk; ++j)
        sr[j] = static_cast<float>(p.softcap * std::tanh(static_cast<double>(sr[j]) / p.softcap));
    }
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (size_t j = 0; j < nk; j += 16)
      mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, lanes(nk - j), sr + j));
    const __m512 mv = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (size_t j = 0; j < nk; j += 16) {
      const __mmask16 m = lanes(nk - j);
      const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sr + j), mv));
      _mm512_mask_storeu_ps(sr + j, m, e);
      sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
    }
    s.inv[a] = 1.0f / hsum(sum);
    s.e[a] = sr;
    s.o[a] = out + (g * group + s.alive[a]) * hd;
  }

  // 3. weighted V
  for (size_t t0 = 0; t0 < na; t0 += kHeadTile) {
    const size_t nt = std::min(kHeadTile, na - t0);
    if (kv.f16) {
      v_dispatch<true>(nt, kv.v, row0, hd, nk, s.e.data() + t0, s.inv.data() + t0, s.o.data() + t0);
    } else {
      v_dispatch<false>(nt, kv.v, row0, hd, nk, s.e.data() + t0, s.inv.data() + t0, s.o.data() + t0);
    }
  }
}

CQ_AVX512 void exp_block(const float* x, size_t n, float* out) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_storeu_ps(out + i, m, exp_ps(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace

void exp_simd(const float* x, size_t n, float* out) {
  exp_block(x, n, out);
}

void attention_simd(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
                    const AttentionParams& p, const uint8_t* head_alive, float* out, size_t kv_head_begin,
                    size_t kv_head_end) {
  if (p.n_kv_heads == 0 || p.head_dim == 0) return;
  const size_t group = p.n_heads / p.n_kv_heads;
  const size_t nk = key_end > key_begin ? key_end - key_begin : 0;
  thread_local Scratch s;
  const size_t g_end = std::min(kv_head_end, p.n_kv_heads);
  for (size_t g = kv_head_begin; g < g_end; ++g)
    attention_group(q, kv, key_begin, nk, p, head_alive, out, g, group, s);
}

}  // namespace cortiq::kernels

#endif  // x86
