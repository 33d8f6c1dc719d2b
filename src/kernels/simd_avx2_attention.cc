// AVX2 attention (contract and error bound in simd_avx2_attention.h).
//
// Every function that uses AVX2 intrinsics carries CQ_AVX2 (a `target` attribute) and is only reached after
// the caller checked avx2_cpu_ok() (simd_avx2.h). Partial rows (head_dim % 8 != 0) are read and written
// through small zero-padded copies (memcpy), never with masked vector loads, so no byte outside the caller's
// buffers is touched.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/simd_avx2_attention.h"

// GCC 12 reports its own _mm256_undefined_* placeholders inside the intrinsic headers as uninitialized (a
// known false positive); silence that for this file only.
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

#ifndef CQ_AVX2
#define CQ_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace cortiq::kernels {

namespace {

constexpr size_t kKeyBlock = 8;  // keys per score vector
constexpr size_t kHeadTile = 4;  // query heads sharing one pass over V (4 heads × 2 chunks = 8 accumulators)

/// e^x per lane (contract: exp_avx2 in the header).
CQ_AVX2 inline __m256 exp8(__m256 x0) {
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 ln2_hi = _mm256_set1_ps(0.693147182464599609375f);  // f32(ln 2)
  const __m256 ln2_lo = _mm256_set1_ps(-1.904654299957768e-09f);   // ln 2 − ln2_hi
  // clamp above (e^88.8 overflows anyway); min(c, x) returns x when x is NaN, so NaN survives
  const __m256 x = _mm256_min_ps(_mm256_set1_ps(88.8f), x0);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);  // x − n·ln2_hi, one rounding
  r = _mm256_fnmadd_ps(n, ln2_lo, r);
  __m256 poly = _mm256_set1_ps(1.0f / 5040.0f);
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 720.0f));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 120.0f));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 24.0f));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 6.0f));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(0.5f));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f));
  // 2^n = 2^n1·2^n2, n1 = n >> 1 (floor), n2 = n − n1: for the kept lanes n ∈ [-126, 128], so both factors
  // are normal f32 built exactly by writing k + 127 into the exponent field (lanes flushed below may hold
  // garbage exponents; integer wrap-around in vector lanes is defined)
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  const __m256 y = _mm256_mul_ps(_mm256_mul_ps(poly, s1), s2);  // first product exact, second rounds once
  // keep lanes with !(x < ln FLT_MIN) (NaN stays NaN), flush the rest (incl. −inf) to +0
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3365447f), _CMP_NLT_UQ);
  return _mm256_and_ps(keep, y);
}

/// Lane mask (all-ones int lanes) selecting the first min(n, 8) lanes.
CQ_AVX2 inline __m256 lanes(size_t n) {
  const int k = static_cast<int>(std::min<size_t>(n, 8));
  return _mm256_castsi256_ps(
      _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

/// Sum of all 8 lanes in a fixed order.
CQ_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// Maximum of all 8 lanes (exact; order irrelevant).
CQ_AVX2 inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// Levels 1+2 of the transpose-add: 4 accumulators → per 128-bit lane [Σa, Σb, Σc, Σd] partials.
CQ_AVX2 inline __m256 tsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
  const __m256 cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
  const __m256d abd = _mm256_castps_pd(ab), cdd = _mm256_castps_pd(cd);
  return _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(abd, cdd)),
                       _mm256_castpd_ps(_mm256_unpackhi_pd(abd, cdd)));
}

/// Dot products of one query head (zero-padded to 8·nch) with 8 keys (rows at k + i·stride, 8·nch readable
/// floats each): lane i = Σ_d q_d·k_id.
CQ_AVX2 inline __m256 dot8(const float* q, const float* k, size_t stride, size_t nch) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t c = 0; c < nch; ++c) {
    const __m256 qc = _mm256_loadu_ps(q + 8 * c);
    const float* kc = k + 8 * c;
    a0 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kc + 0 * stride), a0);
    a1 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kc + 1 * stride), a1);
    a2 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kc + 2 * stride), a2);
    a3 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kc + 3 * stride), a3);
    a4 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kc + 4 * stride), a4);
    a5 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kc + 5 * stride), a5);
    a6 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kc + 6 * stride), a6);
    a7 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kc + 7 * stride), a7);
  }
  const __m256 s0 = tsum4(a0, a1, a2, a3), s1 = tsum4(a4, a5, a6, a7);
  // level 3: fold the two 128-bit halves → [Σa0..Σa3, Σa4..Σa7]
  return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
}

/// Loads 8 dims of a V/K row (f32 or f16) at element index idx; the first `n` (1..8) lanes are read, the
/// others are zero. n == 8 is a plain vector load.
template <bool F16>
CQ_AVX2 inline __m256 load_row(const void* base, size_t idx, size_t n) {
  if constexpr (F16) {
    const uint16_t* p = static_cast<const uint16_t*>(base) + idx;
    if (n >= 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    uint16_t t[8] = {};
    std::memcpy(t, p, n * sizeof(uint16_t));
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
  } else {
    const float* p = static_cast<const float*>(base) + idx;
    if (n >= 8) return _mm256_loadu_ps(p);
    float t[8] = {};
    std::memcpy(t, p, n * sizeof(float));
    return _mm256_loadu_ps(t);
  }
}

/// Stores the first n (1..8) lanes of v at p.
CQ_AVX2 inline void store_row(float* p, __m256 v, size_t n) {
  if (n >= 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  float t[8];
  _mm256_storeu_ps(t, v);
  std::memcpy(p, t, n * sizeof(float));
}

/// V pass for NT query heads and NC (1 or 2) chunks of 8 dims starting at dim d0:
/// o_h[d] = inv_h · Σ_j e_h[j]·v_j[d]. `e[t]` points at head t's weights, `o[t]` at its output row.
/// FULL: every chunk is 8 dims wide (no tail copy in the key loop).
template <int NT, int NC, bool F16, bool FULL>
CQ_AVX2 void v_tile(const void* vbase, size_t row0, size_t hd, size_t nk, size_t d0, const float* const* e,
                    const float* inv, float* const* o) {
  const size_t n0 = std::min<size_t>(hd - d0, 8);
  const size_t n1 = NC > 1 ? std::min<size_t>(hd - d0 - 8, 8) : 0;
  // every index into acc is a compile-time constant after unrolling, so GCC keeps it in registers
  __m256 acc[NT][NC];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    acc[t][0] = _mm256_setzero_ps();
    if constexpr (NC > 1) acc[t][1] = _mm256_setzero_ps();
  }
  for (size_t j = 0; j < nk; ++j) {
    const size_t idx = (row0 + j) * hd + d0;
    const __m256 v0 = load_row<F16>(vbase, idx, FULL ? 8 : n0);
    __m256 v1 = v0;
    if constexpr (NC > 1) v1 = load_row<F16>(vbase, idx + 8, FULL ? 8 : n1);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m256 w = _mm256_broadcast_ss(e[t] + j);
      acc[t][0] = _mm256_fmadd_ps(w, v0, acc[t][0]);
      if constexpr (NC > 1) acc[t][1] = _mm256_fmadd_ps(w, v1, acc[t][1]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    const __m256 s = _mm256_set1_ps(inv[t]);
    store_row(o[t] + d0, _mm256_mul_ps(acc[t][0], s), n0);
    if constexpr (NC > 1) store_row(o[t] + d0 + 8, _mm256_mul_ps(acc[t][1], s), n1);
  }
}

template <int NT, bool F16>
CQ_AVX2 void v_heads(const void* vbase, size_t row0, size_t hd, size_t nk, const float* const* e,
                     const float* inv, float* const* o) {
  for (size_t d0 = 0; d0 < hd; d0 += 16) {
    const size_t rest = hd - d0;
    if (rest >= 16) {
      v_tile<NT, 2, F16, true>(vbase, row0, hd, nk, d0, e, inv, o);
    } else if (rest > 8) {
      v_tile<NT, 2, F16, false>(vbase, row0, hd, nk, d0, e, inv, o);
    } else if (rest == 8) {
      v_tile<NT, 1, F16, true>(vbase, row0, hd, nk, d0, e, inv, o);
    } else {
      v_tile<NT, 1, F16, false>(vbase, row0, hd, nk, d0, e, inv, o);
    }
  }
}

template <bool F16>
CQ_AVX2 void v_dispatch(size_t nt, const void* vbase, size_t row0, size_t hd, size_t nk,
                        const float* const* e, const float* inv, float* const* o) {
  switch (nt) {
    case 1:
      return v_heads<1, F16>(vbase, row0, hd, nk, e, inv, o);
    case 2:
      return v_heads<2, F16>(vbase, row0, hd, nk, e, inv, o);
    case 3:
      return v_heads<3, F16>(vbase, row0, hd, nk, e, inv, o);
    default:
      return v_heads<4, F16>(vbase, row0, hd, nk, e, inv, o);
  }
}

/// Widens `nb` K rows (row indices row0.., f32 or f16) into `dst` (8 rows of hdp floats, zero padded: dims
/// ≥ hd and rows ≥ nb are 0).
CQ_AVX2 void stage_keys(const KvLayerView& kv, size_t row0, size_t nb, size_t hd, size_t hdp, float* dst) {
  for (size_t i = 0; i < kKeyBlock; ++i) {
    float* r = dst + i * hdp;
    if (i >= nb) {
      std::fill(r, r + hdp, 0.0f);
      continue;
    }
    const size_t base = (row0 + i) * hd;
    for (size_t d = 0; d < hd; d += 8) {
      const size_t n = hd - d;
      const __m256 x = kv.f16 ? load_row<true>(kv.k, base + d, n) : load_row<false>(kv.k, base + d, n);
      _mm256_storeu_ps(r + d, x);  // r has hdp ≥ d + 8 floats; lanes ≥ hd are zero
    }
  }
}

struct Scratch {
  simd_detail::LineVec<float> q;     // [group, hdp] zero-padded query heads
  simd_detail::LineVec<float> kblk;  // [8, hdp] staged key block
  simd_detail::LineVec<float> sc;    // [group, nkp] scores, then exp weights
  simd_detail::LineVec<float> inv;   // [group] 1/Σe
  std::vector<size_t> alive;         // query head indices (within group) that are computed
  std::vector<const float*> e;
  std::vector<float*> o;
};

using simd_detail::grow;

CQ_AVX2 void attention_group(const float* q, const KvLayerView& kv, size_t key_begin, size_t nk,
                             const AttentionParams& p, const uint8_t* head_alive, float* out, size_t g,
                             size_t group, Scratch& s) {
  const size_t hd = p.head_dim, hdp = (hd + 7) / 8 * 8, nch = hdp / 8;
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
  const __m256 scale = _mm256_set1_ps(p.scale);

  // 1. scores (a ragged last block is staged, so its padded lanes score 0 and are masked out below)
  const bool direct = !kv.f16 && hd % 8 == 0;
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
    for (size_t a = 0; a < na; ++a) {
      const __m256 d = dot8(s.q.data() + a * hdp, kp, stride, nch);
      _mm256_storeu_ps(s.sc.data() + a * nkp + jb, _mm256_mul_ps(d, scale));
    }
  }

  // 2. softcap + softmax numerators
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  for (size_t a = 0; a < na; ++a) {
    float* sr = s.sc.data() + a * nkp;
    if (p.softcap > 0.0f) {
      for (size_t j = 0; j < nk; ++j)
        sr[j] = static_cast<float>(p.softcap * std::tanh(static_cast<double>(sr[j]) / p.softcap));
    }
    __m256 mx = neg_inf;
    for (size_t j = 0; j < nk; j += 8)
      mx = _mm256_max_ps(mx, _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(sr + j), lanes(nk - j)));
    const __m256 mv = _mm256_set1_ps(hmax(mx));
    __m256 sum = _mm256_setzero_ps();
    for (size_t j = 0; j < nk; j += 8) {
      const __m256 e = _mm256_and_ps(lanes(nk - j), exp8(_mm256_sub_ps(_mm256_loadu_ps(sr + j), mv)));
      _mm256_storeu_ps(sr + j, e);  // sr has nkp ≥ j + 8 floats
      sum = _mm256_add_ps(sum, e);
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

CQ_AVX2 void exp_block(const float* x, size_t n, float* out) {
  for (size_t i = 0; i < n; i += 8) {
    const size_t m = std::min<size_t>(n - i, 8);
    store_row(out + i, exp8(load_row<false>(x, i, m)), m);
  }
}

}  // namespace

void exp_avx2(const float* x, size_t n, float* out) {
  exp_block(x, n, out);
}

void attention_avx2(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
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
