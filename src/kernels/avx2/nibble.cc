// The 4-bit int8 tiles of the AVX2 tier (q4_tiled, q4_block, q4tp): R rows × T tokens of nibble ×
// q products against the [evens | odds] activation (Fam::NIB), one FMA per 32-column group with its
// f16 (q4_tiled, q4_block) or ladder (q4tp) scale.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx2/matvec_internal.h"

namespace cortiq::kernels::avx2_detail {

namespace {

/// Nibble bytes (16) and f32 group scale of group g of NIB-family row r (block-local index i).
/// Pre (q4_tiled / q4_block): the scale is st.gs's f32 copy of the f16 (set_f16_group_scales).
template <DType D, bool Pre = false>
CQ_AVX2 inline __m256i nib_load(const Plan& pl, const BlockState& st, uint64_t r, uint64_t i, uint64_t g,
                                uint64_t pfd, uint64_t codes, float& scale) {
  const uint8_t* nb;
  if constexpr (D == DType::Q4Tiled) {
    const uint8_t* t = pl.p + 18 * (r * pl.gpr + g);
    scale = Pre ? st.gs[i * st.gs_stride + g] : _cvtsh_ss(load_le<uint16_t>(t));
    nb = t + 2;
  } else if constexpr (D == DType::Q4Block) {
    const uint64_t fg = r * pl.gpr + g;
    scale = Pre ? st.gs[i * st.gs_stride + g] : _cvtsh_ss(load_le<uint16_t>(pl.scales + 2 * fg));
    nb = pl.p + 16 * fg;
  } else {                           // Q4TP
    scale = st.lad[i][codes & 31u];  // codes: the row's code window shifted down to group g's rung
    nb = pl.tp.row_weights(r) + 16 * g;
  }
  prefetch(nb + pfd);
  // the 16 bytes in both halves, the upper half shifted by 4: [low nibbles = elements 0, 2, …, 30 | high
  // nibbles = elements 1, 3, …, 31]
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(nb)));
  return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

/// Group g of R rows (nibbles v, scales sw) × T tokens, added to f (see tile_nib).
template <int R, int T>
CQ_AVX2 inline void nib_fma(const __m256i (&v)[R], const float (&sw)[R], const QAct* a, uint64_t g,
                            __m256 (&f)[R][T]) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int t = 0; t < T; ++t) {
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].xq + 32 * g));
    const __m256i bias = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].bias + 8 * g));
    const float d = a[t].d[g];
    for (int k = 0; k < R; ++k) {
      // nibble (0..15) × q: pairs ≤ 2·15·127, exact; + bias = Σ (nib − 8)·q per lane.
      const __m256i iv = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(v[k], xq), ones), bias);
      f[k][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iv), _mm256_set1_ps(d * sw[k]), f[k][t]);
    }
  }
}

template <DType D, int R, int T>
CQ_AVX2 void tile_nib(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                      const QAct* a, float* out) {
  const uint64_t pfd = prefetch_distance(pl.row_bytes, R), gpr = pl.gpr;
  __m256 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm256_setzero_ps();
  __m256i v[R];
  float sw[R];
  if constexpr (D == DType::Q4TP && T > 1) {
    // runs of 8 groups: one 40-bit code window per row and run, shifted down 5 bits a group (a group
    // loop testing g % 8 for the window load measured 1.23× the one-file tier's instructions in 2×2)
    for (uint64_t g0 = 0; g0 < gpr; g0 += 8) {
      uint64_t win[R];
      for (int k = 0; k < R; ++k) win[k] = code_window(pl, rows[k], g0);
      const uint64_t g1 = std::min(g0 + 8, gpr);
      for (uint64_t g = g0; g < g1; ++g) {
        for (int k = 0; k < R; ++k) {
          v[k] = nib_load<D>(pl, st, rows[k], li[k], g, pfd, win[k], sw[k]);
          win[k] >>= 5;
        }
        nib_fma<R, T>(v, sw, a, g, f);
      }
    }
  } else {
    // matvec (q4tp 4×1): the window loaded at every 8th group of one loop (runs of 8 measured 1.02×
    // the one-file tier's instructions and up to 1.1× its time there)
    uint64_t win[R] = {};
    for (uint64_t g = 0; g < gpr; ++g) {
      if constexpr (D == DType::Q4TP)
        if ((g & 7) == 0)
          for (int k = 0; k < R; ++k) win[k] = code_window(pl, rows[k], g);
      for (int k = 0; k < R; ++k)  // matmul (T > 1): q4_tiled / q4_block scales from st.gs
        v[k] = nib_load<D, (T > 1)>(pl, st, rows[k], li[k], g, pfd, win[k] >> (5 * (g & 7)), sw[k]);
      nib_fma<R, T>(v, sw, a, g, f);
    }
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = hsum(f[k][t]);
}

/// The tile block_tiles runs.
template <DType D>
struct NibTile {
  template <int R, int T>
  CQ_AVX2 static void run(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                          const QAct* a, float* out) {
    tile_nib<D, R, T>(pl, st, rows, li, a, out);
  }
};

}  // namespace

template <DType D, int R, int T>
CQ_AVX2 void block_nib(CQ_AVX2_BLOCK_ARGS) {
  // q4tp: opaque activation bases in every shape (2×2: 1.08× the one-file tier's instructions without,
  // 1.00× with; 4×1: 1.02× without, 0.99× with); q4_tiled / q4_block: none (2×2: 1.05× without, 1.17×
  // with)
  using Tile = std::conditional_t<D == DType::Q4TP, OpaqueActsTile<NibTile<D>, false>, NibTile<D>>;
  block_rows<R, T, Tile>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

// Every tile shape block_int8 uses (CQ_AVX2_TILE_SHAPES), for the three dtypes.
#define CQ_INSTANTIATE(R, T)                                         \
  template void block_nib<DType::Q4Tiled, R, T>(CQ_AVX2_BLOCK_ARGS); \
  template void block_nib<DType::Q4Block, R, T>(CQ_AVX2_BLOCK_ARGS); \
  template void block_nib<DType::Q4TP, R, T>(CQ_AVX2_BLOCK_ARGS);
CQ_AVX2_TILE_SHAPES(CQ_INSTANTIATE)
#undef CQ_INSTANTIATE

}  // namespace cortiq::kernels::avx2_detail

#endif  // x86
