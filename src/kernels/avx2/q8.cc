// The q8_row / q8_2f int8 tiles of the AVX2 tier: R rows × T tokens of maddubs/madd over the
// natural-order activation (Fam::Q8), int32 sums per chunk of kQ8Chunk blocks.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx2/matvec_internal.h"

namespace cortiq::kernels::avx2_detail {

namespace {

/// One 32-column block b of R q8 rows (signed bytes) × T tokens, its exact integer lane sums added
/// to acc (see tile_q8).
template <int R, int T>
CQ_AVX2 inline void q8_step(const __m256i* wv, const QAct* a, uint64_t b, __m256i (&acc)[R][T]) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int t = 0; t < T; ++t) {
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].xq + 32 * b));
    for (int k = 0; k < R; ++k) {
      // |w| (u8, 128 for −128) × (q with w's sign) — pairs ≤ 2·128·127 < 2^15, no saturation.
      const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(wv[k]), _mm256_sign_epi8(xq, wv[k]));
      acc[k][t] = _mm256_add_epi32(acc[k][t], _mm256_madd_epi16(p, ones));
    }
  }
}

/// q8_row / q8_2f: R rows × T tokens. Each chunk of kQ8Chunk blocks sums into int32 lanes (≤ 8·2·32512
/// in magnitude), then gets one convert and one FMA with the chunk's lane scales (quantize_act_q8);
/// the row's f16 scale multiplies the reduced sum.
template <int R, int T>
CQ_AVX2 void tile_q8(const Plan& pl, const uint64_t* rows, const QAct* a, float* out) {
  const uint64_t cols = pl.cols, nfull = cols / 32, nb = (cols + 31) / 32;
  const int8_t* w[R];
  for (int k = 0; k < R; ++k) w[k] = reinterpret_cast<const int8_t*>(pl.p + rows[k] * cols);
  const uint64_t pfd = prefetch_distance(pl.row_bytes, R);
  // ragged last block: zero-padded copies (the activation padding is 0 too), made before the loop so
  // that no call sits in it (a memcpy there made GCC keep the accumulators and constants on the stack)
  alignas(32) int8_t tail[R][32] = {};
  if (nb > nfull)
    for (int k = 0; k < R; ++k) std::memcpy(tail[k], w[k] + 32 * nfull, cols - 32 * nfull);
  __m256 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm256_setzero_ps();
  for (uint64_t b0 = 0; b0 < nb; b0 += kQ8Chunk) {
    const uint64_t b1 = std::min(b0 + kQ8Chunk, nb);
    __m256i acc[R][T];
    for (int k = 0; k < R; ++k)
      for (int t = 0; t < T; ++t) acc[k][t] = _mm256_setzero_si256();
    for (uint64_t b = b0; b < b1; ++b) {
      __m256i wv[R];
      if (b < nfull) {
        for (int k = 0; k < R; ++k) {
          prefetch(w[k] + 32 * b + pfd);
          wv[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[k] + 32 * b));
        }
      } else {
        for (int k = 0; k < R; ++k) wv[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail[k]));
      }
      q8_step<R, T>(wv, a, b, acc);
    }
    for (int t = 0; t < T; ++t) {
      const __m256 d = _mm256_loadu_ps(a[t].d + 8 * (b0 / kQ8Chunk));  // the chunk's 8 lane scales
      for (int k = 0; k < R; ++k) f[k][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[k][t]), d, f[k][t]);
    }
  }
  for (int k = 0; k < R; ++k) {
    const float sc = _cvtsh_ss(load_le<uint16_t>(pl.scales + 2 * rows[k]));
    for (int t = 0; t < T; ++t) out[k * T + t] = hsum(f[k][t]) * sc;
  }
}

/// The tile block_tiles runs.
struct Q8Tile {
  template <int R, int T>
  CQ_AVX2 static void run(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                          const QAct* a, float* out) {
    (void)st, (void)li, tile_q8<R, T>(pl, rows, a, out);
  }
};

}  // namespace

template <int R, int T>
CQ_AVX2 void block_q8(CQ_AVX2_BLOCK_ARGS) {
  block_rows<R, T, OpaqueActsTile<Q8Tile>>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

// Every tile shape block_int8 uses (CQ_AVX2_TILE_SHAPES).
#define CQ_INSTANTIATE(R, T) template void block_q8<R, T>(CQ_AVX2_BLOCK_ARGS);
CQ_AVX2_TILE_SHAPES(CQ_INSTANTIATE)
#undef CQ_INSTANTIATE

}  // namespace cortiq::kernels::avx2_detail

#endif  // x86
