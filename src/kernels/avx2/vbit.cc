// The vbit / vbit_ro int8 tiles of the AVX2 tier: each row's codes of width 3..8 unpacked 32 at a
// time (pshufb + mulhi spreads) into signed bytes and multiplied as q8 is against Fam::Q1.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx2/matvec_internal.h"

namespace cortiq::kernels::avx2_detail {

namespace {

/// vbit unpacking tables for widths b < 8, one 128-bit lane = 8 codes = b whole bytes of the MSB-first
/// stream. Code p (bit offset bp = o + 8i in the lane's bytes) is gathered by pshufb into a 16-bit
/// word (byte i high, byte i + 1 low, or zero when the code ends in byte i: o + b ≤ 8), then
/// word·2^(o+b) >> 16 (mulhi_epu16, o + b ≤ 13) right-aligns it; masking keeps its b bits. The high
/// 128-bit lane holds the next 8 codes, whose bytes start b bytes further.
struct VbTables {
  std::array<std::array<uint8_t, 32>, 9> shuf{};
  std::array<std::array<uint16_t, 16>, 9> mul{};
};
constexpr VbTables kVbTab = [] {
  VbTables t;
  for (uint32_t b = 3; b < 8; ++b)
    for (uint32_t h = 0; h < 2; ++h)
      for (uint32_t p = 0; p < 8; ++p) {
        const uint32_t bit = b * p, i = bit / 8, o = bit % 8, base = h * b;
        t.shuf[b][16 * h + 2 * p] = static_cast<uint8_t>(o + b > 8 ? base + i + 1 : 0x80);
        t.shuf[b][16 * h + 2 * p + 1] = static_cast<uint8_t>(base + i);
        t.mul[b][8 * h + p] = static_cast<uint16_t>(1u << (o + b));
      }
  return t;
}();

/// Per-row constants of the vbit int8 tile: width b, packed row, the unpacking tables (b < 8), the
/// signed-weight offset Lp (L = 2^(b−1) − 1 for b < 8; 128 for b = 8) and `fix` (all ones for b = 8).
struct VbRow {
  uint32_t b;
  const uint8_t* row;
  __m256i shuf, mul, mask, lp, fix;
};

/// The 32 codes u (u8, natural order) of group g of a vbit row (VbRow), exact for every width 3..8:
/// b = 8 is a plain 32-byte load; b < 8 two 16-byte loads (bytes 0.., 2b..) spread by kVbTab, through
/// a zero-padded copy when those loads would pass `end` (the payload's end: its last row).
CQ_AVX2 inline __m256i vb_group_codes(const VbRow& v, uint64_t g, const uint8_t* end) {
  const uint8_t* src = v.row + 4 * v.b * g;
  if (v.b == 8) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  alignas(16) uint8_t buf[48];
  if (static_cast<uint64_t>(end - src) < 2 * v.b + 16) {
    std::memset(buf, 0, sizeof buf);
    std::memcpy(buf, src, 4 * v.b);
    src = buf;
  }
  const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  const __m256i c =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * v.b)));
  const __m256i wa = _mm256_and_si256(_mm256_mulhi_epu16(_mm256_shuffle_epi8(a, v.shuf), v.mul), v.mask);
  const __m256i wc = _mm256_and_si256(_mm256_mulhi_epu16(_mm256_shuffle_epi8(c, v.shuf), v.mul), v.mask);
  // packus per 128-bit lane gives [codes 0–7, 16–23 | 8–15, 24–31]; the qword permutation restores order
  return _mm256_permute4x64_epi64(_mm256_packus_epi16(wa, wc), 0xD8);
}

/// The VbRow of row r: its width, packed bytes, kVbTab tables, Lp and fix.
CQ_AVX2 inline VbRow vb_row(const quant::VBitView& vb, uint64_t r) {
  VbRow v;
  const uint32_t b = vb.width(r);
  v.b = b;
  v.row = vb.row(r);
  v.shuf = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kVbTab.shuf[b].data()));
  v.mul = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kVbTab.mul[b].data()));
  v.mask = _mm256_set1_epi16(static_cast<int16_t>((1u << b) - 1u));
  v.lp = _mm256_set1_epi8(static_cast<char>(b == 8 ? 128u : (1u << (b - 1)) - 1u));
  v.fix = _mm256_set1_epi32(b == 8 ? -1 : 0);
  return v;
}

/// tile_vbit's group loop, the signed bytes from wq (Pre: st.wq_ready) or unpacked inline; one loop per
/// case instead of a test per row and group (the test kept vbit's 4×1 matvec at 1.06× the one-file
/// tier's instructions).
template <bool Pre, int R, int T>
CQ_AVX2 inline void vbit_groups(const Plan& pl, const uint64_t* rows, const VbRow (&v)[R],
                                const int8_t* const (&wq)[R], const QAct* a, __m256 (&f)[R][T]) {
  const quant::VBitView& vb = *pl.vb;
  const uint8_t* end = pl.w->payload.data() + pl.w->payload.size();
  const uint64_t gpr = pl.gpr, pfd = prefetch_distance(pl.row_bytes, R);
  const __m256i ones = _mm256_set1_epi16(1);
  for (uint64_t g = 0; g < gpr; ++g) {
    __m256i w[R], aw[R];
    float sw[R];
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      if constexpr (Pre) {
        w[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq[k] + 32 * g));
      } else {
        prefetch(v[k].row + 4 * v[k].b * g + pfd);
        w[k] = _mm256_sub_epi8(vb_group_codes(v[k], g, end), v[k].lp);
      }
      aw[k] = _mm256_abs_epi8(w[k]);
      sw[k] = _cvtsh_ss(load_le<uint16_t>(vb.scales + 2 * (rows[k] * gpr + g)));
    }
    CQ_UNROLL
    for (int t = 0; t < T; ++t) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].xq + 32 * g));
      const __m256i bias = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].bias + 8 * g));
      const float d = a[t].d[g];
      CQ_UNROLL
      for (int k = 0; k < R; ++k) {
        const __m256i p = _mm256_maddubs_epi16(aw[k], _mm256_sign_epi8(xq, w[k]));
        const __m256i iv = _mm256_sub_epi32(_mm256_madd_epi16(p, ones), _mm256_and_si256(bias, v[k].fix));
        f[k][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iv), _mm256_set1_ps(d * sw[k]), f[k][t]);
      }
    }
  }
}

/// vbit / vbit_ro int8 path: R rows × T tokens over groups of 32 columns against the Fam::Q1
/// activation (natural order, one scale d_b per block, lane bias −Σq). Each row's codes u become signed
/// bytes w = u − Lp: for b < 8, Lp = L and w = u − L ∈ [−L, L + 1] is the weight itself; for b = 8,
/// u − L reaches 128, so Lp = 128 (w ∈ [−128, 127]) and the missing +1·Σq is added back by subtracting
/// the lane bias. Products use the q8 sign trick, maddubs(|w|, sign(q, w)): pairs ≤ 2·128·127 < 2^15, so
/// no int16 saturation (a plain maddubs(u, q) of 8-bit codes would: 2·255·127 > 32767) and every int32
/// lane is exactly Σ (u − L)·q over its 4 columns; lane scale d_b·s (the row's f16 group scale). The
/// signed bytes come from st.wq when st.wq_ready (matmul, unpack_vbit_rows), else are unpacked inline
/// (matvec); they are the same bytes, and every output has the same operation sequence for every R, T.
template <int R, int T>
CQ_AVX2 void tile_vbit(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                       const QAct* a, float* out) {
  VbRow v[R];
  const int8_t* wq[R];  // pre-unpacked rows (matmul: unpack_vbit_rows), else nullptr
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    v[k] = vb_row(*pl.vb, rows[k]);
    wq[k] = st.wq_ready ? st.wq.data() + li[k] * pl.cols : nullptr;
  }
  __m256 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm256_setzero_ps();
  if (st.wq_ready)
    vbit_groups<true, R, T>(pl, rows, v, wq, a, f);
  else
    vbit_groups<false, R, T>(pl, rows, v, wq, a, f);
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = hsum(f[k][t]);
}

/// The tile block_tiles runs.
struct VbitTile {
  template <int R, int T>
  CQ_AVX2 static void run(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                          const QAct* a, float* out) {
    tile_vbit<R, T>(pl, st, rows, li, a, out);
  }
};

}  // namespace

/// vbit int8 matmul: rows [r0, r0+rc) unpacked once into st.wq as the signed bytes w = u − Lp that
/// tile_vbit would form (`[rc, cols]` bytes), so T-token tiles
/// reuse them; the values, and so the outputs, are those of the inline unpacking (matvec) bit for bit.
CQ_AVX2 void unpack_vbit_rows(const Plan& pl, BlockState& st, uint64_t r0, uint64_t rc) {
  grow(st.wq, rc * pl.cols);
  const uint8_t* end = pl.w->payload.data() + pl.w->payload.size();
  for (uint64_t i = 0; i < rc; ++i) {
    const VbRow v = vb_row(*pl.vb, r0 + i);
    int8_t* dst = st.wq.data() + i * pl.cols;
    for (uint64_t g = 0; g < pl.gpr; ++g)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * g),
                          _mm256_sub_epi8(vb_group_codes(v, g, end), v.lp));
  }
  st.wq_ready = true;
}

template <int R, int T>
CQ_AVX2 void block_vbit(CQ_AVX2_BLOCK_ARGS) {
  block_rows<R, T, OpaqueActsTile<VbitTile>>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

// Every tile shape block_int8 uses (CQ_AVX2_TILE_SHAPES).
#define CQ_INSTANTIATE(R, T) template void block_vbit<R, T>(CQ_AVX2_BLOCK_ARGS);
CQ_AVX2_TILE_SHAPES(CQ_INSTANTIATE)
#undef CQ_INSTANTIATE

}  // namespace cortiq::kernels::avx2_detail

#endif  // x86
