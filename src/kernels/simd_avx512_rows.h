// Exact f32 row loaders of the AVX-512 tier, shared by the exact matvec (avx512/exact.cc) and the
// exact GEMM (simd_gemm_exact.cc): 16 columns of one f32 / f16 / bf16 weight row decoded to f32.
// Every conversion here is exact, so both paths see the same values. Internal to src/kernels;
// include after <immintrin.h>, and reach the users only after simd_cpu_ok() (simd_matvec.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

#ifndef CQ_AVX512
#define CQ_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#endif

namespace cortiq::kernels::simd_detail {

/// Prefetches the cache line at p into all levels (T0).
inline void prefetch_t0(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

/// An f32 row at p: ld(c) = columns [c, c+16), ldm(c, m) the same with lanes outside m zero,
/// pf(c, dist) prefetches the 64 columns at c of the row `dist` bytes ahead.
struct LdF32 {
  const uint8_t* p;
  void pf(uint64_t c, uint64_t dist) const {
    for (int l = 0; l < 4; ++l) prefetch_t0(p + 4 * c + dist + 64 * l);
  }
  CQ_AVX512 __m512 ld(uint64_t c) const { return _mm512_loadu_ps(p + 4 * c); }
  CQ_AVX512 __m512 ldm(uint64_t c, __mmask16 m) const { return _mm512_maskz_loadu_ps(m, p + 4 * c); }
};

/// An IEEE f16 row at p (vcvtph2ps: exact), same members as LdF32.
struct LdF16 {
  const uint8_t* p;
  void pf(uint64_t c, uint64_t dist) const {
    prefetch_t0(p + 2 * c + dist);
    prefetch_t0(p + 2 * c + dist + 64);
  }
  CQ_AVX512 __m512 ld(uint64_t c) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * c)));
  }
  CQ_AVX512 __m512 ldm(uint64_t c, __mmask16 m) const {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * c));
  }
};

/// A bf16 row at p (the 16 bits become the high half of an f32: exact), same members as LdF32.
struct LdBF16 {
  const uint8_t* p;
  void pf(uint64_t c, uint64_t dist) const {
    prefetch_t0(p + 2 * c + dist);
    prefetch_t0(p + 2 * c + dist + 64);
  }
  CQ_AVX512 __m512 ld(uint64_t c) const {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * c));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  CQ_AVX512 __m512 ldm(uint64_t c, __mmask16 m) const {
    const __m256i h = _mm256_maskz_loadu_epi16(m, p + 2 * c);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

}  // namespace cortiq::kernels::simd_detail
