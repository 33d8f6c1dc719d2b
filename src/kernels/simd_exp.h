// Vectorized e^x for the AVX-512 kernels (attention softmax, SwiGLU), header-only so it inlines.
// Include after <immintrin.h>; every user is reached only after simd_cpu_ok() (simd_matvec.h).
#pragma once

#include <immintrin.h>

#ifndef CQ_AVX512
#define CQ_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#endif

namespace cortiq::kernels::simd_detail {

/// e^x per lane: Cody–Waite reduction x = n·ln2 + r (ln2 split hi/lo, FMA), |r| ≤ ln2/2, degree-7
/// Taylor polynomial in Horner form, result p·2^n via vscalefps. < 1 ulp on [-87.33, 0] (exp_simd's
/// test sweeps it); x < -87.3365447 gives +0, x > 88.72 gives +inf, NaN propagates.
CQ_AVX512 inline __m512 exp_ps(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693147182464599609375f);  // f32(ln 2)
  const __m512 ln2_lo = _mm512_set1_ps(-1.904654299957768e-09f);   // ln 2 − ln2_hi
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);  // x − n·ln2_hi, one rounding
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  __m512 poly = _mm512_set1_ps(1.0f / 5040.0f);
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f / 720.0f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f / 120.0f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f / 24.0f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f / 6.0f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(0.5f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f));
  const __m512 y = _mm512_scalef_ps(poly, n);
  // keep lanes with !(x < ln FLT_MIN) (NaN stays NaN), flush the rest to +0
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3365447f), _CMP_NLT_UQ);
  return _mm512_maskz_mov_ps(keep, y);
}

}  // namespace cortiq::kernels::simd_detail
