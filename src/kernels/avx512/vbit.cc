// The vbit / vbit_ro int8 tile of the AVX-512 tier (AVX512-VBMI): per-row code widths of 3–8 bits
// unpacked with vpermb / vpmultishiftqb (vb_codes, matvec_internal.h) into the NIB activation layout.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx512/matvec_internal.h"

namespace cortiq::kernels::avx512_detail {

namespace {

/// vpermi2b indices that split 128 natural-order codes (two registers) into the NIB layout: per
/// 32-code group j, its 16 even codes at 16j.. of the first result and its 16 odd codes at 16j.. of
/// the second.
constexpr std::array<std::array<uint8_t, 64>, 2> kVbSplit = [] {
  std::array<std::array<uint8_t, 64>, 2> a{};
  for (uint32_t h = 0; h < 2; ++h)
    for (uint32_t j = 0; j < 4; ++j)
      for (uint32_t i = 0; i < 16; ++i) a[h][16 * j + i] = static_cast<uint8_t>(32 * j + 2 * i + h);
  return a;
}();

/// vbit / vbit_ro: R rows × T tokens over 128-code superblocks (4 groups): vb_codes twice, then the
/// codes are split into the NIB activation layout (Fam::NIBV, bias −Σq) so both halves accumulate in
/// the same lanes and one scale vector serves 128 weights; each row's offset L = 2^(b−1) − 1 scales
/// the bias, so every int32 lane is Σ (u − L)·q. Same per-output operation sequence for every R, T.
template <int R, int T>
CQ_AVX512_VBMI void tile_vbit(const Plan& pl, const uint64_t* rows, const QAct* a, float* out) {
  const uint64_t cols = pl.cols, nsb = (cols + 127) / 128, pfd = prefetch_distance(pl, R);
  const __m512i expand = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i even = _mm512_loadu_si512(kVbSplit[0].data()), odd = _mm512_loadu_si512(kVbSplit[1].data());
  const uint8_t* rp[R];
  uint32_t b[R];
  __m512i L[R];
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    b[k] = pl.vb->width(rows[k]);
    rp[k] = pl.vb->row(rows[k]);
    L[k] = _mm512_set1_epi32((1 << (b[k] - 1)) - 1);
  }
  __m512 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm512_setzero_ps();
  for (uint64_t s = 0; s < nsb; ++s) {
    const bool second = 128 * s + 64 < cols;  // cols % 32 == 0: the second half may be absent
    const uint64_t ng = std::min<uint64_t>(4, (cols - 128 * s) / 32);
    __m512i ue[R], uo[R];
    __m512 sw[R];
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      prefetch(rp[k] + 16 * b[k] * s + pfd);
      const __m512i u0 = vb_codes(rp[k], 2 * s, cols, b[k]);
      const __m512i u1 = second ? vb_codes(rp[k], 2 * s + 1, cols, b[k]) : _mm512_setzero_si512();
      ue[k] = _mm512_permutex2var_epi8(u0, even, u1);
      uo[k] = _mm512_permutex2var_epi8(u0, odd, u1);
      prefetch(pl.vb->scales + 2 * ((rows[k] + kRowBlock) * pl.gpr + 4 * s));  // the scale plane, a block on
      const __m128i h = _mm_maskz_loadu_epi16(static_cast<__mmask8>((1u << ng) - 1u),
                                              pl.vb->scales + 2 * (rows[k] * pl.gpr + 4 * s));
      sw[k] = _mm512_permutexvar_ps(expand, _mm512_castps128_ps512(_mm_cvtph_ps(h)));
    }
    for (int t = 0; t < T; ++t) {
      const __m512i x0 = _mm512_loadu_si512(a[t].xq + 128 * s),
                    x1 = _mm512_loadu_si512(a[t].xq + 128 * s + 64);
      const __m512i bias = _mm512_loadu_si512(a[t].bias + 16 * s);
      const __m512 d = _mm512_loadu_ps(a[t].d + 16 * s);
      CQ_UNROLL
      for (int k = 0; k < R; ++k) {
        const __m512i acc =
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_mullo_epi32(bias, L[k]), ue[k], x0), uo[k], x1);
        f[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(d, sw[k]), f[k][t]);
      }
    }
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = _mm512_reduce_add_ps(f[k][t]);
}

/// The tile of vbit for block_tiles.
struct VbitTile {
  template <int R, int T>
  CQ_AVX512_VBMI static void run(const Plan& pl, const BlockState& st, const uint64_t* rows,
                                 const uint64_t* li, const QAct* a, float* out) {
    (void)st, (void)li, tile_vbit<R, T>(pl, rows, a, out);
  }
};

}  // namespace

template <int R, int T>
CQ_AVX512_VBMI void block_vbit(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,
                               const ActSet& acts, size_t n, float* y, size_t y_stride, uint64_t j0) {
  block_tiles<R, T, VbitTile>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

// Every tile shape block_int8 uses (CQ_AVX512_TILE_SHAPES).
#define CQ_INSTANTIATE(R, T)                                                                                \
  template void block_vbit<R, T>(const Plan&, const BlockState&, uint64_t, uint64_t, const ActSet&, size_t, \
                                 float*, size_t, uint64_t);
CQ_AVX512_TILE_SHAPES(CQ_INSTANTIATE)
#undef CQ_INSTANTIATE

}  // namespace cortiq::kernels::avx512_detail

#endif  // x86
