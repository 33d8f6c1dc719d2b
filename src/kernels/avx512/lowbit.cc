// The 2-bit and 1-bit int8 tiles of the AVX-512 tier: q2tp (2-bit codes, ladder group scales),
// q1 / q1s's base (sign bits) and q1t's base (base-3 ternary digits, AVX512-VBMI). The q1s outliers
// and the q1t overlay are added by the driver (simd_common.h).
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx512/matvec_internal.h"

namespace cortiq::kernels::avx512_detail {

namespace {

template <int R, int T>
CQ_AVX512 void tile_q2(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                       const QAct* a, float* out) {
  const uint64_t gpr = pl.gpr, nsb = (gpr + 7) / 8;
  const __m512i m6 = _mm512_set1_epi8(6);
  const uint64_t pfd = prefetch_distance(pl, R);
  const __m512i expand2 = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const uint8_t* w[R];
  const float* gs[R];
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    w[k] = pl.tp.row_weights(rows[k]);
    gs[k] = st.row_scales(li[k]);
  }
  __m512 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm512_setzero_ps();
  for (uint64_t s = 0; s < nsb; ++s) {
    const uint64_t g0 = 8 * s, ng = std::min<uint64_t>(8, gpr - g0);
    __m512i p[R][4];
    __m512 sw[R];
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      prefetch(w[k] + 8 * g0 + pfd);
      const __m512i v = ng == 8 ? _mm512_loadu_si512(w[k] + 8 * g0)
                                : _mm512_maskz_loadu_epi8(mask64(8 * ng), w[k] + 8 * g0);
      p[k][0] = _mm512_and_si512(_mm512_slli_epi16(v, 1), m6);
      p[k][1] = _mm512_and_si512(_mm512_srli_epi16(v, 1), m6);
      p[k][2] = _mm512_and_si512(_mm512_srli_epi16(v, 3), m6);
      p[k][3] = _mm512_and_si512(_mm512_srli_epi16(v, 5), m6);
      sw[k] = _mm512_permutexvar_ps(expand2, _mm512_castps256_ps512(_mm256_loadu_ps(gs[k] + g0)));
    }
    for (int t = 0; t < T; ++t) {
      const int8_t* xq = a[t].xq + 256 * s;
      const __m512i x0 = _mm512_loadu_si512(xq), x1 = _mm512_loadu_si512(xq + 64);
      const __m512i x2 = _mm512_loadu_si512(xq + 128), x3 = _mm512_loadu_si512(xq + 192);
      const __m512i bias = _mm512_loadu_si512(a[t].bias + 16 * s);
      const __m512 d = _mm512_loadu_ps(a[t].d + 16 * s);
      CQ_UNROLL
      for (int k = 0; k < R; ++k) {
        __m512i acc = _mm512_dpbusd_epi32(bias, p[k][0], x0);
        acc = _mm512_dpbusd_epi32(acc, p[k][1], x1);
        acc = _mm512_dpbusd_epi32(acc, p[k][2], x2);
        acc = _mm512_dpbusd_epi32(acc, p[k][3], x3);
        f[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(d, sw[k]), f[k][t]);
      }
    }
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = _mm512_reduce_add_ps(f[k][t]);
}

[[noreturn]] void fail_q1t_tile(const Plan& pl, uint64_t r, uint64_t g) {
  fail(ErrorKind::Parse, "tensor '{}': q1t tile (row {}, group {}) has a non-base-3 code byte", pl.name, r,
       g);
}

/// Byte permutations of 8 consecutive q1t tiles (72 bytes, split over two registers lo/hi):
/// kQ1tCodeIdx puts group g's 7 code bytes at 8g..8g+6 (byte 8g+7 is zeroed by a mask),
/// kQ1tScaleIdx its f16 scale at 2g, 2g+1.
constexpr std::array<uint8_t, 64> kQ1tCodeIdx = [] {
  std::array<uint8_t, 64> a{};
  for (uint32_t g = 0; g < 8; ++g)
    for (uint32_t j = 0; j < 8; ++j) a[8 * g + j] = static_cast<uint8_t>(9 * g + 2 + std::min(j, 6u));
  return a;
}();
constexpr std::array<uint8_t, 64> kQ1tScaleIdx = [] {
  std::array<uint8_t, 64> a{};
  for (uint32_t g = 0; g < 8; ++g) {
    a[2 * g] = static_cast<uint8_t>(9 * g);
    a[2 * g + 1] = static_cast<uint8_t>(9 * g + 1);
  }
  return a;
}();

/// u = value + 1 ∈ {0, 1, 2} of the base-3 digits 0..3 of a code byte b < 243, packed 2 bits
/// each (digit p in bits 2p..2p+1); digit 4 is taken by comparison (b ≥ 81, b ≥ 162).
/// Code → value: 0 → 0, 1 → +1, 2 → −1 (quant/layout.h), so u = (digit + 1) mod 3.
constexpr std::array<uint8_t, 256> kQ1tLowDigits = [] {
  std::array<uint8_t, 256> a{};
  for (uint32_t b = 0; b < 243; ++b) {
    uint32_t v = b, packed = 0;
    for (uint32_t p = 0; p < 4; ++p, v /= 3) packed |= ((v % 3 + 1) % 3) << (2 * p);
    a[b] = static_cast<uint8_t>(packed);
  }
  return a;
}();

/// One q1t superblock s (8 groups) of R rows × T tokens (see tile_q1t). Full: all 8 groups exist.
template <bool Full, int R, int T>
CQ_AVX512_VBMI inline void q1t_step(const Plan& pl, const uint64_t* rows, const QAct* a, uint64_t s,
                                    uint64_t pfd, __m512 (&f)[R][T]) {
  const uint64_t gpr = pl.gpr, g0 = 8 * s;
  const uint64_t nb =
      Full ? 8 * quant::kQ1tTileBytes : quant::kQ1tTileBytes * std::min<uint64_t>(8, gpr - g0);
  const __m512i cidx = _mm512_loadu_si512(kQ1tCodeIdx.data()), sidx = _mm512_loadu_si512(kQ1tScaleIdx.data());
  // per group: 243 for code bytes 0..5, 9 for byte 6, 1 for the zeroed pad byte 7
  const __m512i limit = _mm512_set1_epi64(static_cast<long long>(0x0109F3F3F3F3F3F3ull));
  const __m512i expand = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi8(1), two = _mm512_set1_epi8(2);
  const __m512i three = _mm512_set1_epi8(3), c81 = _mm512_set1_epi8(81),
                c162 = _mm512_set1_epi8(static_cast<char>(162));
  const __m512i lut0 = _mm512_loadu_si512(kQ1tLowDigits.data()),
                lut1 = _mm512_loadu_si512(kQ1tLowDigits.data() + 64),
                lut2 = _mm512_loadu_si512(kQ1tLowDigits.data() + 128),
                lut3 = _mm512_loadu_si512(kQ1tLowDigits.data() + 192);
  const __mmask64 code_bytes = 0x7F7F7F7F7F7F7F7Full;
  __m512i u[R][5];
  __m512 sw[R];
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    const uint8_t* tp = pl.q1t.base + (rows[k] * gpr + g0) * quant::kQ1tTileBytes;
    prefetch(tp + pfd);
    prefetch(tp + 64 + pfd);
    const __m512i lo = Full || nb >= 64 ? _mm512_loadu_si512(tp) : _mm512_maskz_loadu_epi8(mask64(nb), tp);
    const __m512i hi = Full || nb > 64 ? _mm512_maskz_loadu_epi8(mask64(nb - 64), tp + 64) : zero;
    const __m512i b = _mm512_maskz_permutex2var_epi8(code_bytes, lo, cidx, hi);
    if (const __mmask64 bad = _mm512_cmpge_epu8_mask(b, limit))
      fail_q1t_tile(pl, rows[k], g0 + static_cast<uint64_t>(__builtin_ctzll(bad)) / 8);
    const __m128i hs = _mm512_castsi512_si128(_mm512_permutex2var_epi8(lo, sidx, hi));
    sw[k] = _mm512_permutexvar_ps(expand, _mm512_castps256_ps512(_mm256_cvtph_ps(hs)));
    const __m512i lowd =
        _mm512_mask_blend_epi8(_mm512_movepi8_mask(b), _mm512_permutex2var_epi8(lut0, b, lut1),
                               _mm512_permutex2var_epi8(lut2, b, lut3));
    u[k][0] = _mm512_and_si512(lowd, three);
    u[k][1] = _mm512_and_si512(_mm512_srli_epi16(lowd, 2), three);
    u[k][2] = _mm512_and_si512(_mm512_srli_epi16(lowd, 4), three);
    u[k][3] = _mm512_and_si512(_mm512_srli_epi16(lowd, 6), three);
    const __mmask64 k1 = _mm512_cmpge_epu8_mask(b, c81), k2 = _mm512_cmpge_epu8_mask(b, c162);
    u[k][4] = _mm512_mask_mov_epi8(_mm512_mask_blend_epi8(k1, one, two), k2, zero);
  }
  for (int t = 0; t < T; ++t) {
    const int8_t* xq = a[t].xq + 320 * s;
    const __m512i bias = _mm512_loadu_si512(a[t].bias + 16 * s);
    const __m512 d = _mm512_loadu_ps(a[t].d + 16 * s);
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      __m512i acc = _mm512_dpbusd_epi32(bias, u[k][0], _mm512_loadu_si512(xq));
      for (int p = 1; p < 5; ++p) acc = _mm512_dpbusd_epi32(acc, u[k][p], _mm512_loadu_si512(xq + 64 * p));
      f[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(d, sw[k]), f[k][t]);
    }
  }
}

/// q1t: R rows × T tokens over superblocks of 8 groups (Fam::Q1T). Per row and superblock the 8
/// tiles are gathered with vpermi2b, the code bytes checked (bytes 0..5 < 243, byte 6 < 9: the
/// exact path's q1t_tile_ok), and the five base-3 digits turned into u = value + 1 ∈ {0, 1, 2}
/// (digits 0..3 from a 256-entry table, digit 4 by comparison); each digit plane is one vpdpbusd
/// against the matching activation plane. The overlay is added by the caller
/// (add_q1t_overlay). Same per-output operation sequence for every R, T (see tile_q8).
template <int R, int T>
CQ_AVX512_VBMI void tile_q1t(const Plan& pl, const uint64_t* rows, const QAct* a, float* out) {
  const uint64_t nsb = (pl.gpr + 7) / 8, nfull = pl.gpr / 8;
  const uint64_t pfd = prefetch_distance(pl, R);
  __m512 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm512_setzero_ps();
  for (uint64_t s = 0; s < nfull; ++s) q1t_step<true, R, T>(pl, rows, a, s, pfd, f);
  if (nfull < nsb) q1t_step<false, R, T>(pl, rows, a, nfull, pfd, f);
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = _mm512_reduce_add_ps(f[k][t]);
}

/// q1 / q1s's base: R rows × T tokens over superblocks of 2 tiles (64 weights): u8 = 2·bit against
/// the natural-order activation (Fam::Q1, bias −Σq), so every int32 lane is Σ (2·bit − 1)·q.
template <int R, int T>
CQ_AVX512 void tile_q1(const Plan& pl, const uint64_t* rows, const QAct* a, float* out) {
  const uint64_t gpr = pl.gpr, nsb = (gpr + 1) / 2, pfd = prefetch_distance(pl, R);
  const __m512i two = _mm512_set1_epi8(2);
  const __m512i expand = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  __m512 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm512_setzero_ps();
  for (uint64_t s = 0; s < nsb; ++s) {
    const bool both = 2 * s + 1 < gpr;
    __m512i u[R];
    __m512 sw[R];
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      const uint8_t* ta = pl.p + quant::kQ1TileBytes * (rows[k] * gpr + 2 * s);
      prefetch(ta + pfd);
      const uint64_t mb =
          uint64_t{load_le<uint32_t>(ta + 2)} | (both ? uint64_t{load_le<uint32_t>(ta + 8)} << 32 : 0);
      const uint32_t hs =
          uint32_t{load_le<uint16_t>(ta)} | (both ? uint32_t{load_le<uint16_t>(ta + 6)} << 16 : 0);
      u[k] = _mm512_maskz_mov_epi8(mb, two);
      sw[k] = _mm512_permutexvar_ps(
          expand, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(hs)))));
    }
    for (int t = 0; t < T; ++t) {
      const __m512i xq = _mm512_loadu_si512(a[t].xq + 64 * s), bias = _mm512_loadu_si512(a[t].bias + 16 * s);
      const __m512 d = _mm512_loadu_ps(a[t].d + 16 * s);
      for (int k = 0; k < R; ++k)
        f[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, u[k], xq)),
                                  _mm512_mul_ps(d, sw[k]), f[k][t]);
    }
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = _mm512_reduce_add_ps(f[k][t]);
}

/// The tile of q2 for block_tiles.
struct Q2Tile {
  template <int R, int T>
  CQ_AVX512 static void run(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                            const QAct* a, float* out) {
    tile_q2<R, T>(pl, st, rows, li, a, out);
  }
};

/// The tile of q1 for block_tiles.
struct Q1Tile {
  template <int R, int T>
  CQ_AVX512 static void run(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                            const QAct* a, float* out) {
    (void)st, (void)li, tile_q1<R, T>(pl, rows, a, out);
  }
};

/// The tile of q1t for block_tiles.
struct Q1tTile {
  template <int R, int T>
  CQ_AVX512_VBMI static void run(const Plan& pl, const BlockState& st, const uint64_t* rows,
                                 const uint64_t* li, const QAct* a, float* out) {
    (void)st, (void)li, tile_q1t<R, T>(pl, rows, a, out);
  }
};

}  // namespace

template <int R, int T>
CQ_AVX512 void block_q2(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc, const ActSet& acts,
                        size_t n, float* y, size_t y_stride, uint64_t j0) {
  block_tiles<R, T, Q2Tile>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

template <int R, int T>
CQ_AVX512 void block_q1(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc, const ActSet& acts,
                        size_t n, float* y, size_t y_stride, uint64_t j0) {
  block_tiles<R, T, Q1Tile>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

template <int R, int T>
CQ_AVX512_VBMI void block_q1t(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,
                              const ActSet& acts, size_t n, float* y, size_t y_stride, uint64_t j0) {
  block_tiles<R, T, Q1tTile>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

// Every tile shape block_int8 uses (CQ_AVX512_TILE_SHAPES).
#define CQ_INSTANTIATE(R, T)                                                                              \
  template void block_q2<R, T>(const Plan&, const BlockState&, uint64_t, uint64_t, const ActSet&, size_t, \
                               float*, size_t, uint64_t);
CQ_AVX512_TILE_SHAPES(CQ_INSTANTIATE)
#undef CQ_INSTANTIATE
#define CQ_INSTANTIATE(R, T)                                                                              \
  template void block_q1<R, T>(const Plan&, const BlockState&, uint64_t, uint64_t, const ActSet&, size_t, \
                               float*, size_t, uint64_t);
CQ_AVX512_TILE_SHAPES(CQ_INSTANTIATE)
#undef CQ_INSTANTIATE
#define CQ_INSTANTIATE(R, T)                                                                               \
  template void block_q1t<R, T>(const Plan&, const BlockState&, uint64_t, uint64_t, const ActSet&, size_t, \
                                float*, size_t, uint64_t);
CQ_AVX512_TILE_SHAPES(CQ_INSTANTIATE)
#undef CQ_INSTANTIATE

}  // namespace cortiq::kernels::avx512_detail

#endif  // x86
