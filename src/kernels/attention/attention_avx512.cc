// AVX-512 attention: the vector traits of attention_tiles.h for 16 f32 lanes, and attention_simd /
// exp_simd (contract and error bound in simd_attention.h).
//
// Every function carries CQ_AVX512 (a `target` attribute) and is only reached after the caller checked
// simd_cpu_ok() (simd_matvec.h). Partial rows are read and written with masked loads and stores.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/simd_attention.h"

// GCC 12 reports its own _mm512_undefined_* placeholders inside the intrinsic headers as
// uninitialized (a known false positive); silence that for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/simd_exp.h"

#define CQ_ATTN_TARGET CQ_AVX512
#include "kernels/attention/attention_tiles.h"

namespace cortiq::kernels {

namespace {

/// 16 f32 lanes (attention_tiles.h lists the members). head_tile 8: 8 heads × 2 chunks = 16 of the 32
/// zmm registers hold accumulators.
struct V512 {
  using reg = __m512;
  using mask = __mmask16;
  static constexpr size_t lanes = 16;
  static constexpr int head_tile = 8;

  CQ_AVX512 static reg zero() { return _mm512_setzero_ps(); }
  CQ_AVX512 static reg set1(float x) { return _mm512_set1_ps(x); }
  CQ_AVX512 static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  CQ_AVX512 static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  CQ_AVX512 static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  CQ_AVX512 static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  CQ_AVX512 static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  CQ_AVX512 static reg exp(reg x) { return simd_detail::exp_ps(x); }

  static mask first(size_t n) {
    return n >= 16 ? static_cast<mask>(0xFFFF) : static_cast<mask>((1u << n) - 1u);
  }
  CQ_AVX512 static reg select(mask m, reg a, reg b) { return _mm512_mask_mov_ps(b, m, a); }

  CQ_AVX512 static reg load(const float* p) { return _mm512_loadu_ps(p); }
  CQ_AVX512 static reg load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  CQ_AVX512 static reg load_part(const float* p, size_t n) { return _mm512_maskz_loadu_ps(first(n), p); }
  CQ_AVX512 static reg load_part_f16(const uint16_t* p, size_t n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first(n), p));
  }
  CQ_AVX512 static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  CQ_AVX512 static void store_part(float* p, reg v, size_t n) { _mm512_mask_storeu_ps(p, first(n), v); }

  /// Sum of all 16 lanes in a fixed order.
  CQ_AVX512 static float hsum(reg v) {
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    const __m128 d = _mm_add_ss(c, _mm_movehdup_ps(c));
    return _mm_cvtss_f32(d);
  }
  CQ_AVX512 static float hmax(reg v) { return _mm512_reduce_max_ps(v); }

  /// Level 1+2 of the transpose-add: 4 accumulators → per 128-bit lane [Σa, Σb, Σc, Σd] partials.
  CQ_AVX512 static reg tsum4(reg a, reg b, reg c, reg d) {
    const reg ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const reg cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    const __m512d abd = _mm512_castps_pd(ab), cdd = _mm512_castps_pd(cd);
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(abd, cdd)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(abd, cdd)));
  }
  /// Folds the 128-bit lanes: x, y (per-lane partials of 4 sources each) → [x(L0+L1), x(L2+L3),
  /// y(L0+L1), y(L2+L3)].
  CQ_AVX512 static reg fold(reg x, reg y) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  /// Lane i = Σ lanes of a[i]: two transpose-add levels, then two 128-bit folds.
  CQ_AVX512 static reg transpose_sum(const reg (&a)[16]) {
    const reg s0 = tsum4(a[0], a[1], a[2], a[3]), s1 = tsum4(a[4], a[5], a[6], a[7]);
    const reg s2 = tsum4(a[8], a[9], a[10], a[11]), s3 = tsum4(a[12], a[13], a[14], a[15]);
    return fold(fold(s0, s1), fold(s2, s3));
  }
};

}  // namespace

void exp_simd(const float* x, size_t n, float* out) {
  attention_tiles::exp_rows<V512>(x, n, out);
}

void attention_simd(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
                    const AttentionParams& p, const uint8_t* head_alive, float* out, size_t kv_head_begin,
                    size_t kv_head_end) {
  attention_tiles::attention<V512>(q, kv, key_begin, key_end, p, head_alive, out, kv_head_begin, kv_head_end);
}

}  // namespace cortiq::kernels

#endif  // x86
