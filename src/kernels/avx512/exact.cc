// The exact (f32 activation) path of the AVX-512 tier: every weight decoded to exactly its
// reference value (quant::decode_rows) — in registers for f32/f16/bf16 and q8, into a row buffer for
// the other codecs — and dotted with 4×16-lane f32 FMA accumulators in a fixed order, so that matvec
// and matmul give the same bits; many tokens go to the register-tiled GEMM (simd_gemm_exact.h).
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx512/matvec_internal.h"
#include "kernels/simd_gemm_exact.h"

namespace cortiq::kernels::avx512_detail {

namespace {

/// Row r of a vbit tensor decoded to f32: (u − L)·scale with L = 2^(b−1) − 1, the same single
/// product quant::decode_rows computes.
CQ_AVX512_VBMI void decode_row_vbit(const Plan& pl, uint64_t r, float* out) {
  const uint32_t b = pl.vb->width(r);
  const __m512i L = _mm512_set1_epi32((1 << (b - 1)) - 1);
  const uint8_t* row = pl.vb->row(r);
  for (uint64_t s = 0; s * 64 < pl.cols; ++s) {
    const __m512i u = vb_codes(row, s, pl.cols, b);
    const __m128i part[4] = {_mm512_extracti32x4_epi32(u, 0), _mm512_extracti32x4_epi32(u, 1),
                             _mm512_extracti32x4_epi32(u, 2), _mm512_extracti32x4_epi32(u, 3)};
    const uint64_t nq = std::min<uint64_t>(4, (pl.cols - 64 * s) / 16);
    for (uint64_t q = 0; q < nq; ++q) {
      const __m512i c = _mm512_sub_epi32(_mm512_cvtepu8_epi32(part[q]), L);
      const __m512 sc = _mm512_set1_ps(pl.vb->scale(r, (64 * s + 16 * q) / 32));
      _mm512_storeu_ps(out + 64 * s + 16 * q, _mm512_mul_ps(_mm512_cvtepi32_ps(c), sc));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Exact path: f32 dot with 4×16-lane accumulators (chunk k → accumulator k mod 4)

/// q8_row / q8_2f rows decoded in registers: ŵ_c = f32(q_c)·s (times col_c for q8_2f), the same
/// products as decode_row (and quant::decode_rows), so the exact dot is bit-identical to decoding the
/// row into a buffer first, without that second pass over it.
struct LdQ8 {
  const uint8_t* p;            ///< the row's int8 codes
  float s;                     ///< the row's f16 scale, widened
  const float* col = nullptr;  ///< q8_2f: the decoded column field; null for q8_row
  /// Prefetches the 64 columns at c of the row `dist` bytes ahead.
  void pf(uint64_t c, uint64_t dist) const { prefetch(p + c + dist); }
  CQ_AVX512 __m512 ld(uint64_t c) const {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + c));
    const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(s));
    return col ? _mm512_mul_ps(v, _mm512_loadu_ps(col + c)) : v;
  }
  CQ_AVX512 __m512 ldm(uint64_t c, __mmask16 m) const {
    const __m128i q = _mm_maskz_loadu_epi8(m, p + c);
    const __m512 v = _mm512_maskz_mul_ps(m, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(s));
    return col ? _mm512_maskz_mul_ps(m, v, _mm512_maskz_loadu_ps(m, col + c)) : v;
  }
};

/// R weight rows × T activation rows of exact dots: out[k·T + t] = Σ_c w[k](c)·x[t][c]. Per output
/// the arithmetic is fixed whatever R and T are: 16-column chunk j accumulates with FMA into
/// accumulator j mod 4 (a masked FMA for the tail chunk), then (a0+a1)+(a2+a3) and
/// _mm512_reduce_add_ps — so matvec (R = T = 1) and batched results are bit-identical.
template <int R, int T, class L>
CQ_AVX512 void dot_exact_tile(const L* w, const float* const* x, uint64_t n, float* out, uint64_t pfd = 0) {
  __m512 a[R][T][4];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t)
      for (int q = 0; q < 4; ++q) a[k][t][q] = _mm512_setzero_ps();
  uint64_t c = 0;
  for (; c + 64 <= n; c += 64) {
    if (pfd)
      for (int k = 0; k < R; ++k) w[k].pf(c, pfd);
    for (int q = 0; q < 4; ++q) {
      __m512 wv[R];
      for (int k = 0; k < R; ++k) wv[k] = w[k].ld(c + 16 * q);
      for (int t = 0; t < T; ++t) {
        const __m512 xv = _mm512_loadu_ps(x[t] + c + 16 * q);
        for (int k = 0; k < R; ++k) a[k][t][q] = _mm512_fmadd_ps(wv[k], xv, a[k][t][q]);
      }
    }
  }
  // Up to three more full chunks (indices 0, 1, 2 mod 4), then a masked tail chunk.
  for (int q = 0; q < 3; ++q)
    if (c + 16 <= n) {
      __m512 wv[R];
      for (int k = 0; k < R; ++k) wv[k] = w[k].ld(c);
      for (int t = 0; t < T; ++t) {
        const __m512 xv = _mm512_loadu_ps(x[t] + c);
        for (int k = 0; k < R; ++k) a[k][t][q] = _mm512_fmadd_ps(wv[k], xv, a[k][t][q]);
      }
      c += 16;
    }
  if (c < n) {
    const __mmask16 m = mask16(n - c);
    const int qt = static_cast<int>((c / 16) & 3);
    for (int q = 0; q < 4; ++q)
      if (q == qt) {
        __m512 wv[R];
        for (int k = 0; k < R; ++k) wv[k] = w[k].ldm(c, m);
        for (int t = 0; t < T; ++t) {
          const __m512 xv = _mm512_maskz_loadu_ps(m, x[t] + c);
          for (int k = 0; k < R; ++k) a[k][t][q] = _mm512_fmadd_ps(wv[k], xv, a[k][t][q]);
        }
      }
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t)
      out[k * T + t] = _mm512_reduce_add_ps(
          _mm512_add_ps(_mm512_add_ps(a[k][t][0], a[k][t][1]), _mm512_add_ps(a[k][t][2], a[k][t][3])));
}

template <class L>
CQ_AVX512 float dot_exact(const L& w, const float* x, uint64_t n, uint64_t pfd = 0) {
  float out;
  dot_exact_tile<1, 1>(&w, &x, n, &out, pfd);
  return out;
}

/// Y[i·y_stride + j0 + k] for k < rc, i < n from rc row loaders, in R×T tiles; tails padded by
/// repeating the last row/token and dropping those outputs.
template <int R, int T, class L, class MakeL>
CQ_AVX512 void block_exact_rt(MakeL make, uint64_t rc, const float* x, uint64_t cols, size_t n, float* y,
                              size_t y_stride, uint64_t j0) {
  for (uint64_t k0 = 0; k0 < rc; k0 += R) {
    L w[R];
    for (int k = 0; k < R; ++k) w[k] = make(std::min<uint64_t>(k0 + k, rc - 1));
    const uint64_t kn = std::min<uint64_t>(R, rc - k0);
    for (size_t i0 = 0; i0 < n; i0 += T) {
      const float* xs[T];
      for (int t = 0; t < T; ++t) xs[t] = x + std::min<size_t>(i0 + t, n - 1) * cols;
      float out[R * T];
      dot_exact_tile<R, T>(w, xs, cols, out);
      const size_t tn = std::min<size_t>(T, n - i0);
      for (uint64_t k = 0; k < kn; ++k)
        for (size_t t = 0; t < tn; ++t) y[(i0 + t) * y_stride + j0 + k0 + k] = out[k * T + t];
    }
  }
}

/// 32 weights (nibbles 0..15 in 16 bytes, element 2k low / 2k+1 high) → (nib − 8)·s as f32.
CQ_AVX512 inline void dec_nib32(const uint8_t* b16, float s, float* out) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b16));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
  const __m512i k8 = _mm512_set1_epi32(8);
  const __m512 sv = _mm512_set1_ps(s);
  const __m512i e0 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)), k8);
  const __m512i e1 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi)), k8);
  _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_cvtepi32_ps(e0), sv));
  _mm512_storeu_ps(out + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(e1), sv));
}

/// Decodes row r (block-local index i for ladders) into out[cols], bit-identical to quant::decode_rows.
CQ_AVX512 void decode_row(const Plan& pl, const BlockState& st, uint64_t r, uint64_t i, float* out) {
  const uint64_t cols = pl.cols;
  switch (pl.t) {
    case DType::Q8Row:
    case DType::Q8_2F: {
      const uint8_t* q = pl.p + r * cols;
      const __m512 s = _mm512_set1_ps(f16_to_f32(load_le<uint16_t>(pl.scales + 2 * r)));
      for (uint64_t c = 0; c < cols; c += 16) {
        const __mmask16 m = mask16(cols - c);
        __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, q + c))), s);
        if (pl.t == DType::Q8_2F) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, pl.col + c));
        _mm512_mask_storeu_ps(out + c, m, v);
      }
      return;
    }
    case DType::Q4Tiled:
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const uint8_t* t = pl.p + 18 * (r * pl.gpr + g);
        dec_nib32(t + 2, f16_to_f32(load_le<uint16_t>(t)), out + 32 * g);
      }
      return;
    case DType::Q4Block:
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const uint64_t fg = r * pl.gpr + g;
        dec_nib32(pl.p + 16 * fg, f16_to_f32(load_le<uint16_t>(pl.scales + 2 * fg)), out + 32 * g);
      }
      return;
    case DType::Q4TP: {
      const uint8_t* w = pl.tp.row_weights(r);
      const float* gs = st.row_scales(i);
      for (uint64_t g = 0; g < pl.gpr; ++g) dec_nib32(w + 16 * g, gs[g], out + 32 * g);
      return;
    }
    case DType::Q2TP: {
      const uint8_t* w = pl.tp.row_weights(r);
      const float* gs = st.row_scales(i);
      const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i three = _mm512_set1_epi32(3);
      const __m512 h = _mm512_set1_ps(1.5f);
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const __m512 s = _mm512_set1_ps(gs[g]);
        for (int half = 0; half < 2; ++half) {
          const __m512i v = _mm512_set1_epi32(static_cast<int>(load_le<uint32_t>(w + 8 * g + 4 * half)));
          const __m512i c2 = _mm512_and_si512(_mm512_srlv_epi32(v, sh), three);
          _mm512_storeu_ps(out + 32 * g + 16 * half,
                           _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(c2), h), s));
        }
      }
      return;
    }
    case DType::Q1T: {
      // Base: 7 base-3 code bytes per 32-group (5 codes each, digit k of byte b = b / 3^k mod 3),
      // code 1 → +s, 2 → −s, 0 → 0; then the row's overlay entries overwrite their columns —
      // exactly the values quant::decode_rows produces.
      const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const uint8_t* t = pl.q1t.base + (r * pl.gpr + g) * quant::kQ1tTileBytes;
        if (!quant::q1t_tile_ok(t))
          fail(ErrorKind::Parse, "tensor '{}': q1t tile (row {}, group {}) has a non-base-3 code byte",
               pl.name, r, g);
        alignas(16) uint8_t codes[40];
        for (int b = 0; b < 7; ++b) std::memcpy(codes + 5 * b, quant::kQ1tDigits[t[2 + b]].data(), 5);
        const __m512 ps = _mm512_set1_ps(f16_to_f32(load_le<uint16_t>(t))),
                     ns = _mm512_sub_ps(_mm512_setzero_ps(), ps);
        for (int h = 0; h < 2; ++h) {
          const __m512i c =
              _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(codes + 16 * h)));
          __m512 v = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(c, one), ps);
          v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(c, two), ns);
          _mm512_storeu_ps(out + 32 * g + 16 * h, v);
        }
      }
      quant::q1t_check_row(pl.q1t, r, pl.name);
      for (uint32_t e = pl.q1t.ptr(r); e < pl.q1t.ptr(r + 1); ++e) out[pl.q1t.col(e)] = pl.q1t.value(e);
      return;
    }
    case DType::VBit:
    case DType::VBitRo:
      decode_row_vbit(pl, r, out);
      return;
    case DType::Q1:
    case DType::Q1S:
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const uint8_t* t = pl.p + quant::kQ1TileBytes * (r * pl.gpr + g);
        const float s = f16_to_f32(load_le<uint16_t>(t));
        const uint32_t bits = load_le<uint32_t>(t + 2);
        const __m512 ps = _mm512_set1_ps(s), ns = _mm512_set1_ps(-s);
        _mm512_storeu_ps(out + 32 * g, _mm512_mask_blend_ps(static_cast<__mmask16>(bits & 0xFFFF), ns, ps));
        _mm512_storeu_ps(out + 32 * g + 16, _mm512_mask_blend_ps(static_cast<__mmask16>(bits >> 16), ns, ps));
      }
      // outliers replace the base values; an entry out of order → finish_q1s redoes the call
      if (pl.t == DType::Q1S && !pl.q1s.overwrite_run(r * pl.cols, (r + 1) * pl.cols, out))
        pl.q1s_bad->fetch_or(1, std::memory_order_relaxed);
      return;
    default:
      return;
  }
}

/// The register decoder of q8_row / q8_2f row r.
inline LdQ8 q8_loader(const Plan& pl, uint64_t r) {
  return LdQ8{pl.p + r * pl.cols, f16_to_f32(load_le<uint16_t>(pl.scales + 2 * r)),
              pl.t == DType::Q8_2F ? pl.col : nullptr};
}

/// Exact dot of row r (block-local index i) with x; `buf` holds ≥ cols floats of scratch.
CQ_AVX512 float row_exact(const Plan& pl, const BlockState& st, uint64_t r, uint64_t i, const float* x,
                          float* buf) {
  switch (pl.t) {
    case DType::F32:
      return dot_exact(LdF32{pl.p + 4 * r * pl.cols}, x, pl.cols, prefetch_distance(pl, 1));
    case DType::F16:
      return dot_exact(LdF16{pl.p + 2 * r * pl.cols}, x, pl.cols, prefetch_distance(pl, 1));
    case DType::BF16:
      return dot_exact(LdBF16{pl.p + 2 * r * pl.cols}, x, pl.cols, prefetch_distance(pl, 1));
    case DType::Q8Row:
    case DType::Q8_2F:
      return dot_exact(q8_loader(pl, r), x, pl.cols, prefetch_distance(pl, 1));
    default:
      decode_row(pl, st, r, i, buf);
      return dot_exact(LdF32{reinterpret_cast<const uint8_t*>(buf)}, x, pl.cols);
  }
}

}  // namespace

/// The exact path of one row block (matvec_internal.h).
void block_exact(const Plan& pl, BlockState& st, uint64_t r0, uint64_t rc, const float* x, size_t n, float* y,
                 size_t y_stride, uint64_t j0) {
  const bool floatw = quant::is_float_dtype(pl.t);
  if (floatw && n >= simd_detail::kGemmExactMinRows) {  // many tokens: the register-tiled GEMM
    const uint64_t esz = pl.t == DType::F32 ? 4 : 2;
    simd_detail::gemm_exact_avx512(pl.t, pl.p + esz * r0 * pl.cols, rc, pl.cols, x, n, y, y_stride, j0);
  } else if (floatw && n > 1) {
    constexpr int ER = 2, ET = 2;
    switch (pl.t) {
      case DType::F32:
        block_exact_rt<ER, ET, LdF32>([&](uint64_t k) { return LdF32{pl.p + 4 * (r0 + k) * pl.cols}; }, rc, x,
                                      pl.cols, n, y, y_stride, j0);
        break;
      case DType::F16:
        block_exact_rt<ER, ET, LdF16>([&](uint64_t k) { return LdF16{pl.p + 2 * (r0 + k) * pl.cols}; }, rc, x,
                                      pl.cols, n, y, y_stride, j0);
        break;
      default:
        block_exact_rt<ER, ET, LdBF16>([&](uint64_t k) { return LdBF16{pl.p + 2 * (r0 + k) * pl.cols}; }, rc,
                                       x, pl.cols, n, y, y_stride, j0);
        break;
    }
  } else if ((pl.t == DType::Q8Row || pl.t == DType::Q8_2F) && n > 1 &&
             n < simd_detail::kGemmExactMinRows) {  // q8 rows decoded in registers
    block_exact_rt<2, 2, LdQ8>([&](uint64_t k) { return q8_loader(pl, r0 + k); }, rc, x, pl.cols, n, y,
                               y_stride, j0);
  } else if (floatw || n == 1) {
    grow(st.rowbuf, pl.cols);
    for (uint64_t k = 0; k < rc; ++k)
      for (size_t i = 0; i < n; ++i)
        y[i * y_stride + j0 + k] = row_exact(pl, st, r0 + k, k, x + i * pl.cols, st.rowbuf.data());
  } else {
    // Batched exact: decode the block's rows once, then apply them to every token.
    grow(st.rowbuf, rc * pl.cols);
    for (uint64_t k = 0; k < rc; ++k) decode_row(pl, st, r0 + k, k, st.rowbuf.data() + k * pl.cols);
    const float* rb = st.rowbuf.data();
    if (n >= simd_detail::kGemmExactMinRows)  // decode_row gives the values the q8 register decoder does
      return simd_detail::gemm_exact_avx512(DType::F32, reinterpret_cast<const uint8_t*>(rb), rc, pl.cols, x,
                                            n, y, y_stride, j0);
    block_exact_rt<2, 2, LdF32>(
        [&](uint64_t k) { return LdF32{reinterpret_cast<const uint8_t*>(rb + k * pl.cols)}; }, rc, x, pl.cols,
        n, y, y_stride, j0);
  }
}

}  // namespace cortiq::kernels::avx512_detail

#endif  // x86
