// The 2-bit and 1-bit int8 tiles of the AVX2 tier: q2tp (four bit planes against Fam::Q2), q1 /
// q1s's base and q1t's base (one tile of 32 weights at a time against Fam::Q1).
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx2/matvec_internal.h"

namespace cortiq::kernels::avx2_detail {

namespace {

/// Superblock s of R q2tp rows (bytes v[k], group scales from gs[k]) × T tokens, added to f (see tile_q2).
template <int R, int T>
CQ_AVX2 inline void q2_step(const __m256i (&v)[R], const float* const (&gs)[R], const QAct* a, uint64_t s,
                            __m256 (&f)[R][T]) {
  const __m256i m6 = _mm256_set1_epi8(6), ones = _mm256_set1_epi16(1);
  const __m256i expand2 = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  // each row's planes are formed once and applied to the T tokens in turn (the activation planes
  // are re-read from L1 per row: 4 + 4 registers per row would spill the R×T accumulators)
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    // 2·field j: byte bits 2j, 2j+1 moved to bits 1, 2 (16-bit shifts; the bits crossing bytes are masked)
    const __m256i p0 = _mm256_and_si256(_mm256_slli_epi16(v[k], 1), m6);
    const __m256i p1 = _mm256_and_si256(_mm256_srli_epi16(v[k], 1), m6);
    const __m256i p2 = _mm256_and_si256(_mm256_srli_epi16(v[k], 3), m6);
    const __m256i p3 = _mm256_and_si256(_mm256_srli_epi16(v[k], 5), m6);
    const __m256 sw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(gs[k] + 4 * s)), expand2);
    CQ_UNROLL
    for (int t = 0; t < T; ++t) {
      const __m256i* xq = reinterpret_cast<const __m256i*>(a[t].xq + 128 * s);
      const __m256i s01 = _mm256_add_epi16(_mm256_maddubs_epi16(p0, _mm256_loadu_si256(xq)),
                                           _mm256_maddubs_epi16(p1, _mm256_loadu_si256(xq + 1)));
      const __m256i s23 = _mm256_add_epi16(_mm256_maddubs_epi16(p2, _mm256_loadu_si256(xq + 2)),
                                           _mm256_maddubs_epi16(p3, _mm256_loadu_si256(xq + 3)));
      const __m256i bias = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].bias + 8 * s));
      const __m256i iv = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(s01, s23), ones), bias);
      f[k][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iv), _mm256_mul_ps(_mm256_loadu_ps(a[t].d + 8 * s), sw),
                                f[k][t]);
    }
  }
}

/// q2tp: R rows × T tokens over superblocks of 4 groups (32 weight bytes, Fam::Q2). The 2-bit field j of
/// every byte, times 2, is plane j (u8 ∈ {0, 2, 4, 6}); the four plane products are summed in int16
/// (|pair| ≤ 2·6·127, four planes ≤ 6096 < 2^15) and folded by _mm256_madd_epi16 into 8 int32 lanes, two
/// per group, so each lane plus its bias is Σ (2·code − 3)·q over its 16 weights. The lane scale is
/// (d_b/2)·s_g (group scales st.gs from the row's ladder, set_group_scales).
template <int R, int T>
CQ_AVX2 void tile_q2(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                     const QAct* a, float* out) {
  const uint64_t gpr = pl.gpr, nfull = gpr / 4;
  const uint64_t pfd = prefetch_distance(pl.row_bytes, R);
  const uint8_t* w[R];
  const float* gs[R];
  for (int k = 0; k < R; ++k) {
    w[k] = pl.tp.row_weights(rows[k]);
    gs[k] = st.gs.data() + li[k] * st.gs_stride;
  }
  __m256 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm256_setzero_ps();
  __m256i v[R];
  // the full superblocks, then the ragged last one after the loop (a test per row in the loop measured
  // q2tp 4×1 matvec at 1.04× the one-file tier's instructions on 896×4864)
  for (uint64_t s = 0; s < nfull; ++s) {
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      prefetch(w[k] + 32 * s + pfd);
      v[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[k] + 32 * s));
    }
    q2_step<R, T>(v, gs, a, s, f);
  }
  if (gpr % 4 != 0) {  // zero-padded copies (scales and activation are 0 there too)
    for (int k = 0; k < R; ++k) {
      alignas(32) uint8_t buf[32] = {};
      std::memcpy(buf, w[k] + 32 * nfull, 8 * (gpr % 4));
      v[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
    }
    q2_step<R, T>(v, gs, a, nfull, f);
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = hsum(f[k][t]);
}

/// u = value + 1 ∈ {0, 1, 2} of the five base-3 digits of a q1t code byte b, digit p in byte p (bytes
/// 5..7 zero). Code → value: 0 → 0, 1 → +1, 2 → −1 (quant/layout.h), so u = (digit + 1) mod 3.
constexpr std::array<uint64_t, 256> kQ1tU = [] {
  std::array<uint64_t, 256> a{};
  for (uint32_t b = 0; b < 256; ++b)
    for (uint32_t p = 0; p < 5; ++p) a[b] |= uint64_t{(quant::kQ1tDigits[b][p] + 1u) % 3u} << (8 * p);
  return a;
}();

/// The 32 u8 u = value + 1 of q1t tile t (9 bytes, accepted by q1t_tile_ok) in natural column order:
/// code byte j's five digits (kQ1tU) are weights 5j … 5j + 4, packed into four qwords with shifts
/// (byte 6 gives weights 30, 31; its digits 2..4, zero, fall off the end).
CQ_AVX2 inline __m256i q1t_u(const uint8_t* t) {
  const uint64_t d0 = kQ1tU[t[2]], d1 = kQ1tU[t[3]], d2 = kQ1tU[t[4]], d3 = kQ1tU[t[5]], d4 = kQ1tU[t[6]],
                 d5 = kQ1tU[t[7]], d6 = kQ1tU[t[8]];
  return _mm256_setr_epi64x(
      static_cast<long long>(d0 | d1 << 40), static_cast<long long>(d1 >> 24 | d2 << 16 | d3 << 56),
      static_cast<long long>(d3 >> 8 | d4 << 32), static_cast<long long>(d4 >> 32 | d5 << 8 | d6 << 48));
}

/// Fam::Q1 tiles, R rows × T tokens over single tiles of 32 weights against the natural-order
/// activation (bias −Σq): `unpack(tile, u, s)` gives a tile's 32 u8 codes u (so that u − 1 is the
/// weight's value in units of s) and its scale s; every int32 lane is then Σ (u − 1)·q (maddubs pairs ≤
/// 2·2·127, exact), times the lane scale d_b·s. Tile g of row r starts at base + tile_bytes·(r·gpr + g).
/// Same per-output operation sequence for every R, T.
template <int R, int T, class Unpack>
CQ_AVX2 inline void tile_q1_family(const Plan& pl, const uint8_t* base, uint64_t tile_bytes,
                                   const uint64_t* rows, const QAct* a, float* out, Unpack unpack) {
  const uint64_t gpr = pl.gpr, pfd = prefetch_distance(pl.row_bytes, R);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm256_setzero_ps();
  for (uint64_t g = 0; g < gpr; ++g) {
    __m256i u[R];
    float sw[R];
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      const uint8_t* tile = base + tile_bytes * (rows[k] * gpr + g);
      prefetch(tile + pfd);
      unpack(tile, rows[k], g, u[k], sw[k]);
    }
    CQ_UNROLL
    for (int t = 0; t < T; ++t) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].xq + 32 * g));
      const __m256i bias = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].bias + 8 * g));
      const float d = a[t].d[g];
      CQ_UNROLL
      for (int k = 0; k < R; ++k) {
        const __m256i iv = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u[k], xq), ones), bias);
        f[k][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iv), _mm256_set1_ps(d * sw[k]), f[k][t]);
      }
    }
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = hsum(f[k][t]);
}

/// q1 / q1s's base (tile_q1_family): u8 = 2·bit (bit k of code byte j is weight 8j + k), so every lane
/// is Σ (2·bit − 1)·q; lane scale d_b·s (the tile's f16 scale).
template <int R, int T>
CQ_AVX2 void tile_q1(const Plan& pl, const uint64_t* rows, const QAct* a, float* out) {
  const __m256i two = _mm256_set1_epi8(2);
  // the 4 code bytes broadcast, byte j to bytes 8j … 8j + 7 (128-bit lane 0: j = 0, 1; lane 1: 2, 3)
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2,
                                          2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bitm = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  tile_q1_family<R, T>(pl, pl.p, quant::kQ1TileBytes, rows, a, out,
                       [&](const uint8_t* tile, uint64_t, uint64_t, __m256i& u, float& s) CQ_AVX2 {
                         s = _cvtsh_ss(load_le<uint16_t>(tile));
                         const __m256i b = _mm256_shuffle_epi8(
                             _mm256_set1_epi32(static_cast<int>(load_le<uint32_t>(tile + 2))), spread);
                         u = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(b, bitm), bitm), two);
                       });
}

/// q1t's base (tile_q1_family): each tile's code bytes are checked as the exact path does
/// (quant::q1t_tile_ok → Error(Parse) naming row and group) and turned into u = value + 1 ∈ {0, 1, 2}
/// (q1t_u), so every lane is Σ value·q; lane scale d_b·s. The overlay is added by the caller
/// (simd_detail::add_q1t_overlay).
template <int R, int T>
CQ_AVX2 void tile_q1t(const Plan& pl, const uint64_t* rows, const QAct* a, float* out) {
  tile_q1_family<R, T>(pl, pl.q1t.base, quant::kQ1tTileBytes, rows, a, out,
                       [&](const uint8_t* tile, uint64_t r, uint64_t g, __m256i& u, float& s) CQ_AVX2 {
                         if (!quant::q1t_tile_ok(tile))
                           fail(ErrorKind::Parse,
                                "tensor '{}': q1t tile (row {}, group {}) has a non-base-3 code byte",
                                pl.w->name, r, g);
                         s = _cvtsh_ss(load_le<uint16_t>(tile));
                         u = q1t_u(tile);
                       });
}

/// The tile block_tiles runs.
struct Q2Tile {
  template <int R, int T>
  CQ_AVX2 static void run(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                          const QAct* a, float* out) {
    tile_q2<R, T>(pl, st, rows, li, a, out);
  }
};

/// The tile block_tiles runs.
struct Q1Tile {
  template <int R, int T>
  CQ_AVX2 static void run(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                          const QAct* a, float* out) {
    (void)st, (void)li, tile_q1<R, T>(pl, rows, a, out);
  }
};

/// The tile block_tiles runs.
struct Q1tTile {
  template <int R, int T>
  CQ_AVX2 static void run(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                          const QAct* a, float* out) {
    (void)st, (void)li, tile_q1t<R, T>(pl, rows, a, out);
  }
};

}  // namespace

template <int R, int T>
CQ_AVX2 void block_q2(CQ_AVX2_BLOCK_ARGS) {
  block_rows<R, T, OpaqueActsTile<Q2Tile>>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

template <int R, int T>
CQ_AVX2 void block_q1(CQ_AVX2_BLOCK_ARGS) {
  block_rows<R, T, OpaqueActsTile<Q1Tile, false>>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

template <int R, int T>
CQ_AVX2 void block_q1t(CQ_AVX2_BLOCK_ARGS) {
  block_rows<R, T, OpaqueActsTile<Q1tTile>>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

// Every tile shape block_int8 uses (CQ_AVX2_TILE_SHAPES).
#define CQ_INSTANTIATE(R, T)                        \
  template void block_q2<R, T>(CQ_AVX2_BLOCK_ARGS); \
  template void block_q1<R, T>(CQ_AVX2_BLOCK_ARGS); \
  template void block_q1t<R, T>(CQ_AVX2_BLOCK_ARGS);
CQ_AVX2_TILE_SHAPES(CQ_INSTANTIATE)
#undef CQ_INSTANTIATE

}  // namespace cortiq::kernels::avx2_detail

#endif  // x86
