// AVX-512 SwiGLU (contract and accuracy in simd_activation.h).
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/simd_activation.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/simd_exp.h"

namespace cortiq::kernels {

CQ_AVX512 void swiglu_simd(const float* g, const float* u, float* out, size_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
    const __m512 e = simd_detail::exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), uv));
  }
}

}  // namespace cortiq::kernels

#endif  // x86
