// The q8_row / q8_2f int8 tiles of the AVX-512 tier: R rows × T tokens of vpdpbusd over the
// natural-order activation (Fam::Q8), int32 sums per chunk of kQ8Chunk superblocks.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx512/matvec_internal.h"

namespace cortiq::kernels::avx512_detail {

namespace {

/// One Q8-family superblock s (64 columns) of R rows × T tokens: acc[k][t] += the int32 lane sums
/// (see tile_q8). Full: all 64 columns exist (the hot loop: plain loads, no mask). Pf: prefetch the
/// rows pfd bytes ahead.
template <bool Full, bool Pf, int R, int T>
CQ_AVX512 inline void q8_step(const int8_t* const* w, const QAct* a, uint64_t s, uint64_t cols, uint64_t pfd,
                              __m512i (&acc)[R][T]) {
  const __m512i x80 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i wv[R];
  if constexpr (Pf)
    for (int k = 0; k < R; ++k) prefetch(w[k] + 64 * s + pfd);
  for (int k = 0; k < R; ++k)
    wv[k] = _mm512_xor_si512(Full ? _mm512_loadu_si512(w[k] + 64 * s)
                                  : _mm512_maskz_loadu_epi8(mask64(cols - 64 * s), w[k] + 64 * s),
                             x80);
  for (int t = 0; t < T; ++t) {
    const __m512i xq = _mm512_loadu_si512(a[t].xq + 64 * s);
    for (int k = 0; k < R; ++k) acc[k][t] = _mm512_dpbusd_epi32(acc[k][t], wv[k], xq);
  }
}

/// q8_row / q8_2f: R rows × T tokens. Each chunk of kQ8Chunk superblocks sums into int32 lanes
/// (starting from the activation's bias), then gets one convert and one FMA with the lane scales
/// (quantize_act_q8); the row's f16 scale multiplies the reduced sum. Pf: software prefetch of the
/// weight rows (block_q8_reuse leaves it out).
template <bool Pf, int R, int T>
CQ_AVX512 void tile_q8(const Plan& pl, const uint64_t* rows, const QAct* a, float* out) {
  const uint64_t cols = pl.cols, nsb = (cols + 63) / 64, nfull = cols / 64;
  const int8_t* w[R];
  for (int k = 0; k < R; ++k) w[k] = reinterpret_cast<const int8_t*>(pl.p + rows[k] * cols);
  const uint64_t pfd = prefetch_distance(pl, R);
  __m512 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm512_setzero_ps();
  for (uint64_t s0 = 0; s0 < nsb; s0 += kQ8Chunk) {
    const uint64_t l = 16 * (s0 / kQ8Chunk), s1 = std::min(s0 + kQ8Chunk, nsb);
    __m512i acc[R][T];
    for (int t = 0; t < T; ++t) {
      const __m512i bias = _mm512_loadu_si512(a[t].bias + l);
      for (int k = 0; k < R; ++k) acc[k][t] = bias;
    }
    if (s1 <= nfull && s1 - s0 == kQ8Chunk) {
      if constexpr (T > 1) {
        // unrolled, the chunk's superblocks keep acc in registers; rolled, GCC copied every
        // accumulator between registers once per superblock (q8_row matmul_n64, 4 × 2, 1 thread:
        // 0.80–0.86× the time). The matvec tile (T = 1) measured 1.03–1.07× slower unrolled.
        CQ_UNROLL
        for (uint64_t s = s0; s < s0 + kQ8Chunk; ++s) q8_step<true, Pf, R, T>(w, a, s, cols, pfd, acc);
      } else {
        for (uint64_t s = s0; s < s0 + kQ8Chunk; ++s) q8_step<true, Pf, R, T>(w, a, s, cols, pfd, acc);
      }
    } else {
      for (uint64_t s = s0; s < std::min(s1, nfull); ++s) q8_step<true, Pf, R, T>(w, a, s, cols, pfd, acc);
      if (nfull < s1) q8_step<false, Pf, R, T>(w, a, nfull, cols, pfd, acc);
    }
    for (int t = 0; t < T; ++t) {
      const __m512 d = _mm512_loadu_ps(a[t].d + l);
      for (int k = 0; k < R; ++k) f[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[k][t]), d, f[k][t]);
    }
  }
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    const float sc = f16_to_f32(load_le<uint16_t>(pl.scales + 2 * rows[k]));
    for (int t = 0; t < T; ++t) out[k * T + t] = _mm512_reduce_add_ps(f[k][t]) * sc;
  }
}

/// The tile of q8 for block_tiles.
template <bool Pf>
struct Q8Tile {
  template <int R, int T>
  CQ_AVX512 static void run(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                            const QAct* a, float* out) {
    (void)st, (void)li, tile_q8<Pf, R, T>(pl, rows, a, out);
  }
};

}  // namespace

template <int R, int T>
CQ_AVX512 void block_q8(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc, const ActSet& acts,
                        size_t n, float* y, size_t y_stride, uint64_t j0) {
  block_tiles<R, T, Q8Tile<true>>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

template <int R, int T>
CQ_AVX512 void block_q8_reuse(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,
                              const ActSet& acts, size_t n, float* y, size_t y_stride, uint64_t j0) {
  block_tiles<R, T, Q8Tile<false>>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}
template void block_q8_reuse<4, 2>(const Plan&, const BlockState&, uint64_t, uint64_t, const ActSet&, size_t,
                                   float*, size_t, uint64_t);

// Every tile shape block_int8 uses (CQ_AVX512_TILE_SHAPES).
#define CQ_INSTANTIATE(R, T)                                                                              \
  template void block_q8<R, T>(const Plan&, const BlockState&, uint64_t, uint64_t, const ActSet&, size_t, \
                               float*, size_t, uint64_t);
CQ_AVX512_TILE_SHAPES(CQ_INSTANTIATE)
#undef CQ_INSTANTIATE

}  // namespace cortiq::kernels::avx512_detail

#endif  // x86
