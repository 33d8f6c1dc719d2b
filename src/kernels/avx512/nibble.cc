// The nibble-codec int8 tiles of the AVX-512 tier (q4_tiled, q4_block, q4tp): 4-bit codes against
// the NIB activation layout, q4_block and q4tp by NIBQ chunks of 8 or 16 groups with one int32
// accumulator per group, and block_nibq_few for 2–8 tokens (each row chunk unpacked once).
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx512/matvec_internal.h"

namespace cortiq::kernels::avx512_detail {

namespace {

/// Weight bytes and per-lane group scales of superblock s of NIB-family row r (block-local index
/// i): q4_tiled / q4_block take the f16 group scales, q4tp the row's ladder.
/// D: the codec (a template parameter so the per-superblock dispatch compiles away); Full: all 4
/// groups of the superblock exist (every superblock but possibly the last).
template <DType D, bool Full>
CQ_AVX512 inline void nib_load(const Plan& pl, const BlockState& st, uint64_t r, uint64_t i, uint64_t s,
                               uint64_t pfd, __m512i& v, __m512& sw) {
  const uint64_t gpr = pl.gpr, g0 = 4 * s, ng = Full ? 4 : std::min<uint64_t>(4, gpr - g0);
  const __m512i expand = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  if constexpr (D == DType::Q4Tiled) {
    const uint8_t* t = pl.p + 18 * (r * gpr + g0);
    prefetch(t + pfd);
    prefetch(t + 64 + pfd);
    uint16_t h[4] = {0, 0, 0, 0};
    __m128i b[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
    for (uint64_t k = 0; k < ng; ++k) {
      h[k] = load_le<uint16_t>(t + 18 * k);
      b[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 18 * k + 2));
    }
    v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(b[1], b[0])), _mm256_set_m128i(b[3], b[2]),
                           1);
    uint64_t hv;
    std::memcpy(&hv, h, 8);
    sw = _mm512_permutexvar_ps(
        expand, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(hv)))));
  } else if constexpr (D == DType::Q4Block) {
    const uint64_t fg = r * gpr + g0;
    prefetch(pl.p + 16 * fg + pfd);
    prefetch(pl.scales + 2 * fg + pfd / 8);
    v = ng == 4 ? _mm512_loadu_si512(pl.p + 16 * fg)
                : _mm512_maskz_loadu_epi8(mask64(16 * ng), pl.p + 16 * fg);
    const __m128i hs = _mm_maskz_loadu_epi16(static_cast<__mmask8>((1u << ng) - 1u), pl.scales + 2 * fg);
    sw = _mm512_permutexvar_ps(expand, _mm512_castps128_ps512(_mm_cvtph_ps(hs)));
  } else {  // Q4TP
    const uint8_t* wp = pl.tp.row_weights(r) + 16 * g0;
    prefetch(wp + pfd);
    v = ng == 4 ? _mm512_loadu_si512(wp) : _mm512_maskz_loadu_epi8(mask64(16 * ng), wp);
    // group scales from prep_tp (zero-padded to a multiple of 16, so the 4 floats always exist)
    sw = _mm512_permutexvar_ps(expand, _mm512_castps128_ps512(_mm_loadu_ps(st.row_scales(i) + g0)));
  }
}

/// One NIB-family superblock s of R rows × T tokens (see tile_nib).
template <DType D, bool Full, int R, int T>
CQ_AVX512 inline void nib_step(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                               const QAct* a, uint64_t s, uint64_t pfd, __m512 (&f)[R][T]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512i lo[R], hi[R];
  __m512 sw[R];
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    __m512i v;
    nib_load<D, Full>(pl, st, rows[k], li[k], s, pfd, v, sw[k]);
    lo[k] = _mm512_and_si512(v, m4);
    hi[k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  }
  for (int t = 0; t < T; ++t) {
    const __m512i x0 = _mm512_loadu_si512(a[t].xq + 128 * s), x1 = _mm512_loadu_si512(a[t].xq + 128 * s + 64);
    const __m512i bias = _mm512_loadu_si512(a[t].bias + 16 * s);
    const __m512 d = _mm512_loadu_ps(a[t].d + 16 * s);
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      const __m512i acc = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(bias, lo[k], x0), hi[k], x1);
      f[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(d, sw[k]), f[k][t]);
    }
  }
}

/// Transposes the NS weight superblocks of a NIBQ chunk (sb[s]: groups 4s…4s+3 of the chunk, 16 code
/// bytes each) as dwords within 128-bit lanes into tr, the layout quantize_act_nibq describes.
template <int NS>
CQ_AVX512 inline void nibq_transpose(const __m512i (&sb)[NS], __m512i (&tr)[NS]) {
  if constexpr (NS == 4) {
    const __m512i a0 = _mm512_unpacklo_epi32(sb[0], sb[1]), a1 = _mm512_unpackhi_epi32(sb[0], sb[1]);
    const __m512i b0 = _mm512_unpacklo_epi32(sb[2], sb[3]), b1 = _mm512_unpackhi_epi32(sb[2], sb[3]);
    tr[0] = _mm512_unpacklo_epi64(a0, b0);
    tr[1] = _mm512_unpackhi_epi64(a0, b0);
    tr[2] = _mm512_unpacklo_epi64(a1, b1);
    tr[3] = _mm512_unpackhi_epi64(a1, b1);
  } else {
    tr[0] = _mm512_unpacklo_epi64(sb[0], sb[1]);
    tr[1] = _mm512_unpackhi_epi64(sb[0], sb[1]);
  }
}

/// One row's transposed NIBQ chunk (tr, chunk at superblock slot s0) with its group scales in lane
/// order (sw) applied to T tokens: the low / high nibbles of each register against activation
/// registers 2j / 2j + 1, one int32 accumulator per token that collects whole groups per lane, then
/// one convert and one FMA with (activation scale × group scale): f[t] += Σ_lanes.
template <int NS, int T>
CQ_AVX512 inline void nibq_apply(const __m512i (&tr)[NS], __m512 sw, const QAct* a, uint64_t s0, __m512* f) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512i w[2 * NS];
  for (int j = 0; j < NS; ++j) {
    w[2 * j] = _mm512_and_si512(tr[j], m4);
    w[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(tr[j], 4), m4);
  }
  for (int t = 0; t < T; ++t) {
    const int8_t* x = a[t].xq + 128 * s0;
    __m512i acc = _mm512_loadu_si512(a[t].bias + 16 * s0);
    for (int j = 0; j < 2 * NS; ++j) acc = _mm512_dpbusd_epi32(acc, w[j], _mm512_loadu_si512(x + 64 * j));
    f[t] =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(_mm512_loadu_ps(a[t].d + 16 * s0), sw), f[t]);
  }
}

/// One row's NIBQ chunk (NS = 4: quad of 16 groups, NS = 2: pair of 8) at superblock slot s0, for
/// the codecs whose code bytes are 16 per group back to back: q4tp (group scales from prep_tp) and
/// q4_block (f16 scales in their own plane). Loads and transposes the code bytes (tr, see
/// nibq_transpose) and returns the group scales in lane order (sw).
template <DType D, int NS>
CQ_AVX512 inline void nibq_load(const Plan& pl, const BlockState& st, uint64_t r, uint64_t i, uint64_t s0,
                                uint64_t pfd, __m512i (&tr)[NS], __m512& sw) {
  const uint64_t g0 = 4 * s0;
  const uint8_t* wp = D == DType::Q4TP ? pl.tp.row_weights(r) + 16 * g0 : pl.p + 16 * (r * pl.gpr + g0);
  __m512i sb[NS];
  for (int j = 0; j < NS; ++j) {
    prefetch(wp + 64 * j + pfd);
    sb[j] = _mm512_loadu_si512(wp + 64 * j);
  }
  __m512 sc;
  if constexpr (D == DType::Q4TP) {
    sc = _mm512_loadu_ps(st.row_scales(i) + g0);
  } else {
    prefetch(pl.scales + 2 * (r * pl.gpr + g0) + pfd / 8);
    const __m256i h = _mm256_maskz_loadu_epi16(NS == 4 ? 0xFFFF : 0x00FF, pl.scales + 2 * (r * pl.gpr + g0));
    sc = _mm512_cvtph_ps(h);
  }
  nibq_transpose<NS>(sb, tr);
  sw = _mm512_permutexvar_ps(_mm512_load_si512(NS == 4 ? kNibqQuadGroup : kNibqPairGroup), sc);
}

/// One NIBQ chunk at superblock slot s0 of R rows × T tokens: each row's chunk is loaded,
/// transposed and applied to every token in turn.
template <DType D, int NS, int R, int T>
CQ_AVX512 inline void nibq_step(const Plan& pl, const BlockState& st, const uint64_t* rows,
                                const uint64_t* li, const QAct* a, uint64_t s0, uint64_t pfd,
                                __m512 (&f)[R][T]) {
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    __m512i tr[NS];
    __m512 sw;
    nibq_load<D, NS>(pl, st, rows[k], li[k], s0, pfd, tr, sw);
    nibq_apply<NS, T>(tr, sw, a, s0, f[k]);
  }
}

/// The nibble codecs: R rows × T tokens. q4tp and q4_block (Fam::NIBQ) take the NIBQ chunks first;
/// the remaining groups (all of q4_tiled's) go as NIB superblocks.
template <DType D, int R, int T>
CQ_AVX512 void tile_nib(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                        const QAct* a, float* out) {
  const uint64_t nsb = (pl.gpr + 3) / 4, nfull = pl.gpr / 4;
  const uint64_t pfd = prefetch_distance(pl, R);
  __m512 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm512_setzero_ps();
  uint64_t s0 = 0;  // first NIB superblock slot
  if constexpr (D == DType::Q4TP || D == DType::Q4Block) {
    const NibqSplit sp = nibq_split(pl.gpr);
    for (uint64_t q = 0; q < sp.nq; ++q) nibq_step<D, 4, R, T>(pl, st, rows, li, a, 4 * q, pfd, f);
    if (sp.np) nibq_step<D, 2, R, T>(pl, st, rows, li, a, 4 * sp.nq, pfd, f);
    s0 = sp.first_nib_slot();
  }
  for (uint64_t s = s0; s < nfull; ++s) nib_step<D, true, R, T>(pl, st, rows, li, a, s, pfd, f);
  if (nfull < nsb) nib_step<D, false, R, T>(pl, st, rows, li, a, nfull, pfd, f);
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = _mm512_reduce_add_ps(f[k][t]);
}

/// One chunk of kFewRows rows, unpacked (w[k][j]: weight register j of row k, u8 codes; sw[k]:
/// the row's group scales in lane order), applied to tokens t … t + T − 1 (activation registers at
/// xq + 128·s0 + 64·j, biases and scales at 16·s0, as nibq_apply and nib_step use them): each
/// activation register loaded serves T·kFewRows vpdpbusd. Per output the operations are those of
/// nibq_apply / nib_step (an exact int32 sum per lane, then one convert and one FMA with d·sw), so
/// the results are bit-identical to theirs. First: f holds nothing yet, and the FMA adds +0 from a
/// register — the same operation as onto a zeroed f, without zeroing kFewRows·kFewTokens vectors in
/// memory per chunk (GCC made that a memset call: 8 % of q4tp matmul_n64's samples).
template <int NW, int T, bool First>
CQ_AVX512 inline void few_tokens(const __m512i (&w)[kFewRows][8], const __m512 (&sw)[kFewRows], const QAct* a,
                                 size_t t, uint64_t s0, __m512 (&f)[kFewRows][kFewTokens]) {
  constexpr int R = kFewRows;
  __m512i acc[R][T];
  for (int u = 0; u < T; ++u) {
    const __m512i b = _mm512_loadu_si512(a[t + u].bias + 16 * s0);
    for (int k = 0; k < R; ++k) acc[k][u] = b;
  }
  CQ_UNROLL
  for (int j = 0; j < NW; ++j) {
    __m512i v[T];
    for (int u = 0; u < T; ++u) v[u] = _mm512_loadu_si512(a[t + u].xq + 128 * s0 + 64 * j);
    for (int k = 0; k < R; ++k)
      for (int u = 0; u < T; ++u) acc[k][u] = _mm512_dpbusd_epi32(acc[k][u], w[k][j], v[u]);
  }
  for (int u = 0; u < T; ++u) {
    const __m512 d = _mm512_loadu_ps(a[t + u].d + 16 * s0);
    for (int k = 0; k < R; ++k)
      f[k][t + u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[k][u]), _mm512_mul_ps(d, sw[k]),
                                    First ? _mm512_setzero_ps() : f[k][t + u]);
  }
}

/// few_tokens over tokens a[0 … n), two at a time (4 at a time spills: matmul_n4 4864×896 150 →
/// 169 µs on Zen 5).
template <int NW, bool First>
CQ_AVX512 inline void few_apply(const __m512i (&w)[kFewRows][8], const __m512 (&sw)[kFewRows], const QAct* a,
                                size_t n, uint64_t s0, __m512 (&f)[kFewRows][kFewTokens]) {
  size_t t = 0;
  for (; t + 2 <= n; t += 2) few_tokens<NW, 2, First>(w, sw, a, t, s0, f);
  if (t < n) few_tokens<NW, 1, First>(w, sw, a, t, s0, f);
}

/// The NIBQ chunk (NS = 4: quad, 2: pair) at superblock slot s0 of kFewRows rows, unpacked for
/// few_apply: w[k][j] the u8 weight registers of row k (low / high nibbles of each transposed code
/// register, as nibq_apply splits them), sw[k] its group scales in lane order.
template <DType D, int NS>
CQ_AVX512 inline void few_unpack_nibq(const Plan& pl, const BlockState& st, const uint64_t* rows,
                                      const uint64_t* li, uint64_t s0, uint64_t pfd,
                                      __m512i (&w)[kFewRows][8], __m512 (&sw)[kFewRows]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int k = 0; k < kFewRows; ++k) {
    __m512i tr[NS];
    nibq_load<D, NS>(pl, st, rows[k], li[k], s0, pfd, tr, sw[k]);
    for (int j = 0; j < NS; ++j) {
      w[k][2 * j] = _mm512_and_si512(tr[j], m4);
      w[k][2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(tr[j], 4), m4);
    }
  }
}

/// The nibble tile of dtype D for block_tiles.
template <DType D>
struct NibTile {
  template <int R, int T>
  CQ_AVX512 static void run(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                            const QAct* a, float* out) {
    tile_nib<D, R, T>(pl, st, rows, li, a, out);
  }
};

}  // namespace

/// Fam::NIBQ rows [r0, r0+rc) (block-local 0..rc) × tokens [i0, i0 + n), 1 ≤ n ≤ kFewTokens:
/// Y[i·y_stride + j0 + k]. The R × T tiles unpack each row chunk once per token tile and load each
/// activation register once per row; here every chunk of kFewRows rows is unpacked once for all n
/// tokens and each activation register serves 2·kFewRows vpdpbusd (see few_apply). The row tail is
/// padded by repeating the last row and dropping its outputs.
template <DType D>
CQ_AVX512 void block_nibq_few(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,
                              const ActSet& acts, size_t i0, size_t n, float* y, size_t y_stride,
                              uint64_t j0) {
  constexpr int R = kFewRows;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const uint64_t pfd = prefetch_distance(pl, R);
  const NibqSplit sp = nibq_split(pl.gpr);
  const uint64_t nsb = (pl.gpr + 3) / 4, nfull = pl.gpr / 4;
  QAct a[kFewTokens];
  for (size_t t = 0; t < n; ++t) a[t] = acts.at(i0 + t);
  for (uint64_t k0 = 0; k0 < rc; k0 += R) {
    uint64_t rows[R], li[R];
    for (int k = 0; k < R; ++k) {
      li[k] = std::min<uint64_t>(k0 + k, rc - 1);
      rows[k] = r0 + li[k];
    }
    // f is set by the first chunk (few_apply<…, true>): the quad at q = 0, else the pair, else the
    // first NIB superblock (gpr ≥ 1, so one of them exists)
    __m512 f[R][kFewTokens];
    __m512i w[R][8];
    __m512 sw[R];
    for (uint64_t q = 0; q < sp.nq; ++q) {
      few_unpack_nibq<D, 4>(pl, st, rows, li, 4 * q, pfd, w, sw);
      if (q == 0)
        few_apply<8, true>(w, sw, a, n, 0, f);
      else
        few_apply<8, false>(w, sw, a, n, 4 * q, f);
    }
    if (sp.np) {
      few_unpack_nibq<D, 2>(pl, st, rows, li, 4 * sp.nq, pfd, w, sw);
      if (sp.nq == 0)
        few_apply<4, true>(w, sw, a, n, 0, f);
      else
        few_apply<4, false>(w, sw, a, n, 4 * sp.nq, f);
    }
    for (uint64_t s = sp.first_nib_slot(); s < nsb; ++s) {
      for (int k = 0; k < R; ++k) {
        __m512i v;
        if (s < nfull)
          nib_load<D, true>(pl, st, rows[k], li[k], s, pfd, v, sw[k]);
        else
          nib_load<D, false>(pl, st, rows[k], li[k], s, pfd, v, sw[k]);
        w[k][0] = _mm512_and_si512(v, m4);
        w[k][1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      }
      if (s == 0)
        few_apply<2, true>(w, sw, a, n, 0, f);
      else
        few_apply<2, false>(w, sw, a, n, s, f);
    }
    const uint64_t kn = std::min<uint64_t>(R, rc - k0);
    for (uint64_t k = 0; k < kn; ++k)
      for (size_t t = 0; t < n; ++t) y[(i0 + t) * y_stride + j0 + k0 + k] = _mm512_reduce_add_ps(f[k][t]);
  }
}

template <DType D, int R, int T>
CQ_AVX512 void block_nib(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc, const ActSet& acts,
                         size_t n, float* y, size_t y_stride, uint64_t j0) {
  block_tiles<R, T, NibTile<D>>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

// Every tile shape block_int8 uses (CQ_AVX512_TILE_SHAPES).
#define CQ_INSTANTIATE(R, T)                                                                        \
  template void block_nib<DType::Q4Tiled, R, T>(const Plan&, const BlockState&, uint64_t, uint64_t, \
                                                const ActSet&, size_t, float*, size_t, uint64_t);
CQ_AVX512_TILE_SHAPES(CQ_INSTANTIATE)
#undef CQ_INSTANTIATE
#define CQ_INSTANTIATE(R, T)                                                                        \
  template void block_nib<DType::Q4Block, R, T>(const Plan&, const BlockState&, uint64_t, uint64_t, \
                                                const ActSet&, size_t, float*, size_t, uint64_t);
CQ_AVX512_TILE_SHAPES(CQ_INSTANTIATE)
#undef CQ_INSTANTIATE
#define CQ_INSTANTIATE(R, T)                                                                     \
  template void block_nib<DType::Q4TP, R, T>(const Plan&, const BlockState&, uint64_t, uint64_t, \
                                             const ActSet&, size_t, float*, size_t, uint64_t);
CQ_AVX512_TILE_SHAPES(CQ_INSTANTIATE)
#undef CQ_INSTANTIATE
template void block_nibq_few<DType::Q4TP>(const Plan&, const BlockState&, uint64_t, uint64_t, const ActSet&,
                                          size_t, size_t, float*, size_t, uint64_t);
template void block_nibq_few<DType::Q4Block>(const Plan&, const BlockState&, uint64_t, uint64_t,
                                             const ActSet&, size_t, size_t, float*, size_t, uint64_t);

}  // namespace cortiq::kernels::avx512_detail

#endif  // x86
