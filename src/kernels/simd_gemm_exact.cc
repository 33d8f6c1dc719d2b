// The batched exact product of the AVX-512 tier (simd_gemm_exact.h).
#include "kernels/simd_gemm_exact.h"

#if defined(__x86_64__) || defined(__i386__)

// GCC 12 warns that its own _mm512_undefined_* placeholders (inside _mm512_permutexvar_ps and the
// shuffles) are used uninitialized, a known false positive (as in avx512/matvec_internal.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "kernels/simd_avx512_rows.h"
#include "kernels/simd_common.h"
#include "util/error.h"

namespace cortiq::kernels::simd_detail {

namespace {

/// Rows per block (one reduction vector: the block's outputs of one activation row).
constexpr uint64_t kBlock = 16;

CQ_AVX512 inline __mmask16 tail_mask(uint64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

/// Continues the FMA chains of phases q0 … q0+P−1 of an R × T tile over the columns [c0, c1):
/// acc[p][k][t] += the chain over the chunks j ≡ q0+p (mod 4) in that range, in ascending order,
/// of w[k] and x[t] — full 64-column blocks first, then, when c1 = cols, the full chunks left and
/// the masked tail chunk (lanes past the row 0), exactly as the exact dot walks them. c0 is a
/// multiple of 64, and so is c1 unless c1 = cols: a chain split at such a boundary runs the same
/// FMAs in the same order as one unsplit.
template <int R, int T, int P, class L>
CQ_AVX512 inline void run_phases(const L* w, const float* const* x, uint64_t c0, uint64_t c1, uint64_t cols,
                                 int q0, __m512 (&acc)[P][R][T]) {
  uint64_t c = c0;
  for (; c + 64 <= c1; c += 64) CQ_UNROLL for (int p = 0; p < P; ++p) {
      const uint64_t cc = c + 16 * static_cast<uint64_t>(q0 + p);
      __m512 wv[R];
      CQ_UNROLL for (int k = 0; k < R; ++k) wv[k] = w[k].ld(cc);
      CQ_UNROLL for (int t = 0; t < T; ++t) {
        const __m512 xv = _mm512_loadu_ps(x[t] + cc);
        CQ_UNROLL for (int k = 0; k < R; ++k) acc[p][k][t] = _mm512_fmadd_ps(wv[k], xv, acc[p][k][t]);
      }
    }
  if (c1 != cols) return;
  for (int p = 0; p < P; ++p) {
    const uint64_t cc = c + 16 * static_cast<uint64_t>(q0 + p);
    if (cc >= cols) break;
    const __mmask16 m = tail_mask(cols - cc);
    __m512 wv[R];
    CQ_UNROLL for (int k = 0; k < R; ++k) wv[k] = w[k].ldm(cc, m);
    CQ_UNROLL for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x[t] + cc);
      CQ_UNROLL for (int k = 0; k < R; ++k) acc[p][k][t] = _mm512_fmadd_ps(wv[k], xv, acc[p][k][t]);
    }
  }
}

/// The FMA chains of phases q0 … q0+P−1 of an R × T tile over the whole row, from zero.
template <int R, int T, int P, class L>
CQ_AVX512 inline void tile_phases(const L* w, const float* const* x, uint64_t cols, int q0,
                                  __m512 (&acc)[P][R][T]) {
  CQ_UNROLL for (int p = 0; p < P; ++p) CQ_UNROLL for (int k = 0; k < R; ++k)
      CQ_UNROLL for (int t = 0; t < T; ++t) acc[p][k][t] = _mm512_setzero_ps();
  run_phases<R, T, P>(w, x, 0, cols, cols, q0, acc);
}

/// comb[t·kBlock + k] = (a0+a1)+(a2+a3) of output (w[k], x[t]) for an R × T tile, running P of the
/// four phases at a time (R·T·P accumulators).
template <int R, int T, int P, class L>
CQ_AVX512 void tile_exact(const L* w, const float* const* x, uint64_t cols, __m512* comb) {
  static_assert(P == 1 || P == 2 || P == 4);
  __m512 acc[P][R][T];
  if constexpr (P == 4) {
    tile_phases<R, T, 4>(w, x, cols, 0, acc);
    CQ_UNROLL for (int k = 0; k < R; ++k) CQ_UNROLL for (int t = 0; t < T; ++t) comb[t * kBlock + k] =
        _mm512_add_ps(_mm512_add_ps(acc[0][k][t], acc[1][k][t]), _mm512_add_ps(acc[2][k][t], acc[3][k][t]));
  } else if constexpr (P == 2) {
    alignas(64) __m512 s01[R][T];
    tile_phases<R, T, 2>(w, x, cols, 0, acc);
    CQ_UNROLL for (int k = 0; k < R; ++k) CQ_UNROLL for (int t = 0; t < T; ++t) s01[k][t] =
        _mm512_add_ps(acc[0][k][t], acc[1][k][t]);
    tile_phases<R, T, 2>(w, x, cols, 2, acc);
    CQ_UNROLL for (int k = 0; k < R; ++k) CQ_UNROLL for (int t = 0; t < T; ++t) comb[t * kBlock + k] =
        _mm512_add_ps(s01[k][t], _mm512_add_ps(acc[0][k][t], acc[1][k][t]));
  } else {
    alignas(64) __m512 s01[R][T], a2[R][T];
    tile_phases<R, T, 1>(w, x, cols, 0, acc);
    CQ_UNROLL for (int k = 0; k < R; ++k) CQ_UNROLL for (int t = 0; t < T; ++t) s01[k][t] = acc[0][k][t];
    tile_phases<R, T, 1>(w, x, cols, 1, acc);
    CQ_UNROLL for (int k = 0; k < R; ++k) CQ_UNROLL for (int t = 0; t < T; ++t) s01[k][t] =
        _mm512_add_ps(s01[k][t], acc[0][k][t]);
    tile_phases<R, T, 1>(w, x, cols, 2, acc);
    CQ_UNROLL for (int k = 0; k < R; ++k) CQ_UNROLL for (int t = 0; t < T; ++t) a2[k][t] = acc[0][k][t];
    tile_phases<R, T, 1>(w, x, cols, 3, acc);
    CQ_UNROLL for (int k = 0; k < R; ++k) CQ_UNROLL for (int t = 0; t < T; ++t) comb[t * kBlock + k] =
        _mm512_add_ps(s01[k][t], _mm512_add_ps(a2[k][t], acc[0][k][t]));
  }
}

/// r[o] = _mm512_reduce_add_ps(v[o]) for o < 16, by a transposing tree with the same pairs:
/// lanes i + (i+8), then + (i+4), then {0,1} + {2,3}, then 0 + 1 (GCC's avx512fintrin.h
/// __MM512_REDUCE_OP; floating addition is commutative, so only the pairing matters).
CQ_AVX512 inline __m512 reduce16(const __m512* v) {
  __m512 a[8], b[4], c[2];
  CQ_UNROLL for (int p = 0; p < 8; ++p) {  // a[p]: 128-bit lanes 0,1 = output 2p's 8 sums, 2,3 = 2p+1's
    const __m512 lo = _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi = _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2));
    a[p] = _mm512_add_ps(hi, lo);
  }
  CQ_UNROLL for (int q = 0; q < 4; ++q) {  // b[q]: 128-bit lane k = output 4q+k's 4 sums
    const __m512 lo = _mm512_shuffle_f32x4(a[2 * q], a[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 hi = _mm512_shuffle_f32x4(a[2 * q], a[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1));
    b[q] = _mm512_add_ps(hi, lo);
  }
  CQ_UNROLL for (int r = 0; r < 2; ++r) {  // c[r]: lane k = [8r+k: u0+u2, u1+u3, 8r+4+k: u0+u2, u1+u3]
    const __m512 lo = _mm512_shuffle_ps(b[2 * r], b[2 * r + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi = _mm512_shuffle_ps(b[2 * r], b[2 * r + 1], _MM_SHUFFLE(3, 2, 3, 2));
    c[r] = _mm512_add_ps(lo, hi);
  }
  const __m512 lo = _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0));
  const __m512 hi = _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1));
  const __m512 d = _mm512_add_ps(lo, hi);  // d[4k+m] = output 4m+k
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, d);
}

/// The driver for one block of rc ≤ kBlock weight rows: activation rows in tiles of T (kept in L1)
/// × the block's rows in R-row groups; each activation row's rc outputs are reduced together and
/// stored as one (masked) vector. Tails are padded by repeating the last row / activation row,
/// those outputs dropped.
template <int R, int T, int P, class L>
CQ_AVX512 void gemm_block(const L* rows, uint64_t rc, uint64_t cols, const float* x, size_t n, float* y,
                          size_t y_stride, uint64_t j0) {
  alignas(64) __m512 comb[T * kBlock];
  for (auto& v : comb) v = _mm512_setzero_ps();  // rows past the block's reduce to ignored lanes
  const __mmask16 store = tail_mask(rc);
  for (size_t i0 = 0; i0 < n; i0 += T) {
    const float* xs[T];
    for (int t = 0; t < T; ++t) xs[t] = x + std::min<size_t>(i0 + t, n - 1) * cols;
    for (uint64_t k0 = 0; k0 < rc; k0 += R) {
      L w[R];
      for (int k = 0; k < R; ++k) w[k] = rows[std::min<uint64_t>(k0 + k, rc - 1)];
      tile_exact<R, T, P>(w, xs, cols, comb + k0);
    }
    const size_t tn = std::min<size_t>(T, n - i0);
    for (size_t t = 0; t < tn; ++t)
      _mm512_mask_storeu_ps(y + (i0 + t) * y_stride + j0, store, reduce16(comb + t * kBlock));
  }
}

/// Columns per panel of gemm_block_panels (a multiple of 64): the 4 activation rows' panel
/// (16 KB in f32) stays in L1 while the block's 16 weight rows run over it.
constexpr uint64_t kPanelCols = 1024;

/// gemm_block for rows longer than one panel (the FFN down projection's 4864 columns): the
/// activation tile's rows (4 × cols f32 = 78 KB there) no longer fit L1 and were streamed from L2
/// once per weight-row group. Here the columns go in panels of kPanelCols; each of the block's
/// R-row groups continues its four phase chains over the panel from the state kept in `st` (16 KB),
/// so every output runs the same FMAs in the same order as in gemm_block (bit-identical), and the
/// activation panel is read from L2 once per tile instead of once per group.
template <int R, int T, class L>
CQ_AVX512 void gemm_block_panels(const L* rows, uint64_t rc, uint64_t cols, const float* x, size_t n,
                                 float* y, size_t y_stride, uint64_t j0) {
  constexpr int kGroups = static_cast<int>(kBlock) / R;
  alignas(64) __m512 st[kGroups][4][R][T];
  alignas(64) __m512 comb[T * kBlock];
  for (auto& v : comb) v = _mm512_setzero_ps();  // rows past the block's reduce to ignored lanes
  const __mmask16 store = tail_mask(rc);
  const int groups = static_cast<int>((rc + R - 1) / R);
  for (size_t i0 = 0; i0 < n; i0 += T) {
    const float* xs[T];
    for (int t = 0; t < T; ++t) xs[t] = x + std::min<size_t>(i0 + t, n - 1) * cols;
    for (uint64_t c0 = 0; c0 < cols; c0 += kPanelCols) {
      const uint64_t c1 = std::min(cols, c0 + kPanelCols);
      for (int g = 0; g < groups; ++g) {
        L w[R];
        for (int k = 0; k < R; ++k) w[k] = rows[std::min<uint64_t>(g * R + k, rc - 1)];
        for (int q = 0; q < 4; ++q) {
          __m512 acc[1][R][T];
          CQ_UNROLL for (int k = 0; k < R; ++k) CQ_UNROLL for (int t = 0; t < T; ++t) acc[0][k][t] =
              c0 == 0 ? _mm512_setzero_ps() : st[g][q][k][t];
          run_phases<R, T, 1>(w, xs, c0, c1, cols, q, acc);
          CQ_UNROLL for (int k = 0; k < R; ++k) CQ_UNROLL for (int t = 0; t < T; ++t) st[g][q][k][t] =
              acc[0][k][t];
        }
      }
    }
    for (int g = 0; g < groups; ++g)
      CQ_UNROLL for (int k = 0; k < R; ++k) CQ_UNROLL for (int t = 0; t < T; ++t)
          comb[t * kBlock + g * R + k] = _mm512_add_ps(_mm512_add_ps(st[g][0][k][t], st[g][1][k][t]),
                                                       _mm512_add_ps(st[g][2][k][t], st[g][3][k][t]));
    const size_t tn = std::min<size_t>(T, n - i0);
    for (size_t t = 0; t < tn; ++t)
      _mm512_mask_storeu_ps(y + (i0 + t) * y_stride + j0, store, reduce16(comb + t * kBlock));
  }
}

/// The register tile: 4 weight rows × 4 activation rows, one phase at a time (16 accumulators).
/// Measured against 4×6 and 4×5 (one phase), 8×3 (one), 2×4 (two phases at a time) and 2×3 (all
/// four) on the trainer's shapes: 4×4 and 4×5 fastest, within noise of each other (bench/README.md).
/// Rows longer than a panel take the column-panelled driver.
template <class L>
CQ_AVX512 void gemm_rows(const L* rows, uint64_t rc, uint64_t cols, const float* x, size_t n, float* y,
                         size_t y_stride, uint64_t j0) {
  if (cols > kPanelCols) return gemm_block_panels<4, 4>(rows, rc, cols, x, n, y, y_stride, j0);
  gemm_block<4, 4, 1>(rows, rc, cols, x, n, y, y_stride, j0);
}

}  // namespace

CQ_AVX512 void gemm_exact_avx512(quant::DType t, const uint8_t* w, uint64_t rc, uint64_t cols, const float* x,
                                 size_t n, float* y, size_t y_stride, uint64_t j0) {
  if (rc == 0 || n == 0) return;
  constexpr uint64_t kMaxRows = kBlock;  // callers pass one row block
  if (rc > kMaxRows) {
    for (uint64_t r = 0; r < rc; r += kMaxRows)
      gemm_exact_avx512(t, w + r * cols * (t == quant::DType::F32 ? 4 : 2), std::min(kMaxRows, rc - r), cols,
                        x, n, y, y_stride, j0 + r);
    return;
  }
  switch (t) {
    case quant::DType::F32: {
      LdF32 rows[kMaxRows];
      for (uint64_t k = 0; k < rc; ++k) rows[k] = LdF32{w + 4 * k * cols};
      return gemm_rows(rows, rc, cols, x, n, y, y_stride, j0);
    }
    case quant::DType::F16: {
      LdF16 rows[kMaxRows];
      for (uint64_t k = 0; k < rc; ++k) rows[k] = LdF16{w + 2 * k * cols};
      return gemm_rows(rows, rc, cols, x, n, y, y_stride, j0);
    }
    case quant::DType::BF16: {
      LdBF16 rows[kMaxRows];
      for (uint64_t k = 0; k < rc; ++k) rows[k] = LdBF16{w + 2 * k * cols};
      return gemm_rows(rows, rc, cols, x, n, y, y_stride, j0);
    }
    default:
      fail(ErrorKind::Unsupported, "gemm_exact_avx512: dtype {} is not f32/f16/bf16", quant::dtype_name(t));
  }
}

CQ_AVX512 void reduce16_avx512(const float* v, float* out) {
  __m512 r[16];
  for (int o = 0; o < 16; ++o) r[o] = _mm512_loadu_ps(v + 16 * o);
  _mm512_storeu_ps(out, reduce16(r));
}

}  // namespace cortiq::kernels::simd_detail

#endif  // x86
