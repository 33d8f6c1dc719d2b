// AVX2 attention: the vector traits of attention_tiles.h for 8 f32 lanes (AVX2 + FMA + F16C), and
// attention_avx2 / exp_avx2 (contract and error bound in simd_avx2_attention.h).
//
// Every function carries CQ_AVX2 (a `target` attribute; the project is built without -mavx2) and is only
// reached after the caller checked avx2_cpu_ok() (simd_avx2.h). Partial rows (head_dim % 8 != 0) are read
// and written through small zero-padded copies (memcpy), never with masked vector loads, so no byte
// outside the caller's buffers is touched.
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
#include <cstring>

#ifndef CQ_AVX2
#define CQ_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

#define CQ_ATTN_TARGET CQ_AVX2
#include "kernels/attention/attention_tiles.h"

namespace cortiq::kernels {

namespace {

/// 8 f32 lanes (attention_tiles.h lists the members). head_tile 4: 4 heads × 2 chunks = 8 of the 16 ymm
/// registers hold accumulators.
struct V256 {
  using reg = __m256;
  using mask = __m256;  // all-ones lanes
  static constexpr size_t lanes = 8;
  static constexpr int head_tile = 4;

  CQ_AVX2 static reg zero() { return _mm256_setzero_ps(); }
  CQ_AVX2 static reg set1(float x) { return _mm256_set1_ps(x); }
  CQ_AVX2 static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  CQ_AVX2 static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  CQ_AVX2 static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  CQ_AVX2 static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  CQ_AVX2 static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }

  /// e^x per lane (contract: exp_avx2 in simd_avx2_attention.h).
  CQ_AVX2 static reg exp(reg x0) {
    const reg log2e = _mm256_set1_ps(1.44269504088896341f);
    const reg ln2_hi = _mm256_set1_ps(0.693147182464599609375f);  // f32(ln 2)
    const reg ln2_lo = _mm256_set1_ps(-1.904654299957768e-09f);   // ln 2 − ln2_hi
    // clamp above (e^88.8 overflows anyway); min(c, x) returns x when x is NaN, so NaN survives
    const reg x = _mm256_min_ps(_mm256_set1_ps(88.8f), x0);
    const reg n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    reg r = _mm256_fnmadd_ps(n, ln2_hi, x);  // x − n·ln2_hi, one rounding
    r = _mm256_fnmadd_ps(n, ln2_lo, r);
    reg poly = _mm256_set1_ps(1.0f / 5040.0f);
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 720.0f));
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 120.0f));
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 24.0f));
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 6.0f));
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(0.5f));
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f));
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f));
    // 2^n = 2^n1·2^n2, n1 = n >> 1 (floor), n2 = n − n1: for the kept lanes n ∈ [-126, 128], so both
    // factors are normal f32 built exactly by writing k + 127 into the exponent field (lanes flushed below
    // may hold garbage exponents; integer wrap-around in vector lanes is defined)
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const reg s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const reg s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    const reg y = _mm256_mul_ps(_mm256_mul_ps(poly, s1), s2);  // first product exact, second rounds once
    // keep lanes with !(x < ln FLT_MIN) (NaN stays NaN), flush the rest (incl. −inf) to +0
    const reg keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3365447f), _CMP_NLT_UQ);
    return _mm256_and_ps(keep, y);
  }

  CQ_AVX2 static mask first(size_t n) {
    const int k = static_cast<int>(std::min<size_t>(n, 8));
    return _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  }
  CQ_AVX2 static reg select(mask m, reg a, reg b) { return _mm256_blendv_ps(b, a, m); }

  CQ_AVX2 static reg load(const float* p) { return _mm256_loadu_ps(p); }
  CQ_AVX2 static reg load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  CQ_AVX2 static reg load_part(const float* p, size_t n) {
    float t[8] = {};
    std::memcpy(t, p, n * sizeof(float));
    return _mm256_loadu_ps(t);
  }
  CQ_AVX2 static reg load_part_f16(const uint16_t* p, size_t n) {
    uint16_t t[8] = {};
    std::memcpy(t, p, n * sizeof(uint16_t));
    return load_f16(t);
  }
  CQ_AVX2 static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  CQ_AVX2 static void store_part(float* p, reg v, size_t n) {
    float t[8];
    _mm256_storeu_ps(t, v);
    std::memcpy(p, t, n * sizeof(float));
  }

  /// Sum of all 8 lanes in a fixed order.
  CQ_AVX2 static float hsum(reg v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  /// Maximum of all 8 lanes (exact; order irrelevant).
  CQ_AVX2 static float hmax(reg v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  /// Levels 1+2 of the transpose-add: 4 accumulators → per 128-bit lane [Σa, Σb, Σc, Σd] partials.
  CQ_AVX2 static reg tsum4(reg a, reg b, reg c, reg d) {
    const reg ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
    const reg cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
    const __m256d abd = _mm256_castps_pd(ab), cdd = _mm256_castps_pd(cd);
    return _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(abd, cdd)),
                         _mm256_castpd_ps(_mm256_unpackhi_pd(abd, cdd)));
  }
  /// Lane i = Σ lanes of a[i]: two transpose-add levels, then the two 128-bit halves folded.
  CQ_AVX2 static reg transpose_sum(const reg (&a)[8]) {
    const reg s0 = tsum4(a[0], a[1], a[2], a[3]), s1 = tsum4(a[4], a[5], a[6], a[7]);
    return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
  }
};

}  // namespace

void exp_avx2(const float* x, size_t n, float* out) {
  attention_tiles::exp_rows<V256>(x, n, out);
}

void attention_avx2(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
                    const AttentionParams& p, const uint8_t* head_alive, float* out, size_t kv_head_begin,
                    size_t kv_head_end) {
  attention_tiles::attention<V256>(q, kv, key_begin, key_end, p, head_alive, out, kv_head_begin, kv_head_end);
}

}  // namespace cortiq::kernels

#endif  // x86
