// The f32 transpose (transpose.h).
#include "kernels/transpose.h"

#include <algorithm>

#include "kernels/simd_matvec.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12 false positive on its own _mm512_undefined_* placeholders (see avx512/matvec_internal.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

namespace cortiq::kernels {

namespace {

/// Scalar copies of the block rows [r0, r1) × cols [c0, c1), in 32×32 cache blocks.
void transpose_scalar(const float* a, size_t rows, size_t cols, float* out, size_t r0, size_t r1, size_t c0,
                      size_t c1) {
  constexpr size_t B = 32;
  for (size_t rb = r0; rb < r1; rb += B)
    for (size_t cb = c0; cb < c1; cb += B)
      for (size_t r = rb; r < std::min(r1, rb + B); ++r)
        for (size_t c = cb; c < std::min(c1, cb + B); ++c) out[c * rows + r] = a[r * cols + c];
}

#if defined(__x86_64__) || defined(__i386__)
/// The 16×16 block at (r0, c0): 16 row loads, 64 shuffles (unpack pairs, 4-float groups, then
/// 128-bit lanes twice), 16 column stores.
__attribute__((target("avx512f"))) void block16(const float* a, size_t rows, size_t cols, float* out,
                                                size_t r0, size_t c0) {
  __m512 r[16], t[16], u[16], v[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(a + (r0 + i) * cols + c0);
  for (int i = 0; i < 16; i += 2) {  // lane k: [r_i[4k], r_i+1[4k], r_i[4k+1], r_i+1[4k+1]] / +2, +3
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // u[i + j], lane k: column 4k + j of rows i … i+3
    u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int h = 0; h < 16; h += 8)  // v[h + j]: columns j, j+8 (j < 4) or j, j+8 with 4 added, rows h … h+7
    for (int j = 0; j < 4; ++j) {
      v[h + j] = _mm512_shuffle_f32x4(u[h + j], u[h + 4 + j], 0x88);
      v[h + 4 + j] = _mm512_shuffle_f32x4(u[h + j], u[h + 4 + j], 0xDD);
    }
  for (int j = 0; j < 8; ++j) {  // column j and column j + 8, all 16 rows
    _mm512_storeu_ps(out + (c0 + j) * rows + r0, _mm512_shuffle_f32x4(v[j], v[8 + j], 0x88));
    _mm512_storeu_ps(out + (c0 + j + 8) * rows + r0, _mm512_shuffle_f32x4(v[j], v[8 + j], 0xDD));
  }
}
#endif

}  // namespace

void transpose_f32(const float* a, size_t rows, size_t cols, float* out) noexcept {
  size_t r16 = 0, c16 = 0;
#if defined(__x86_64__) || defined(__i386__)
  if (simd_cpu_ok()) {
    r16 = rows / 16 * 16;
    c16 = cols / 16 * 16;
    constexpr size_t B = 64;  // 64×64 cache blocks of 16×16 register blocks
    for (size_t rb = 0; rb < r16; rb += B)
      for (size_t cb = 0; cb < c16; cb += B)
        for (size_t r = rb; r < std::min(r16, rb + B); r += 16)
          for (size_t c = cb; c < std::min(c16, cb + B); c += 16) block16(a, rows, cols, out, r, c);
  }
#endif
  transpose_scalar(a, rows, cols, out, 0, r16, c16, cols);   // right edge of the blocked rows
  transpose_scalar(a, rows, cols, out, r16, rows, 0, cols);  // bottom rows
}

}  // namespace cortiq::kernels
