// The exact (f32 activation) path of the AVX2 tier: f32 / f16 / bf16 rows read natively, the
// quantized codecs' rows decoded per block of 16 to exactly the reference values (native decoders, else
// quant::RowDecoder), dotted with 2×8-lane f32 FMA accumulators in a fixed order (simd_avx2.h).
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx2/matvec_internal.h"

namespace cortiq::kernels::avx2_detail {

namespace {

struct LdF32 {
  const uint8_t* p;
  static constexpr uint64_t kBytes = 4;
  CQ_AVX2 __m256 ld(uint64_t c) const { return _mm256_loadu_ps(reinterpret_cast<const float*>(p + 4 * c)); }
  void tail(uint64_t c, uint64_t m, float* out) const { std::memcpy(out, p + 4 * c, 4 * m); }
};
struct LdF16 {
  const uint8_t* p;
  static constexpr uint64_t kBytes = 2;
  CQ_AVX2 __m256 ld(uint64_t c) const {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * c)));
  }
  void tail(uint64_t c, uint64_t m, float* out) const {
    for (uint64_t j = 0; j < m; ++j) out[j] = f16_to_f32(load_le<uint16_t>(p + 2 * (c + j)));
  }
};
struct LdBF16 {
  const uint8_t* p;
  static constexpr uint64_t kBytes = 2;
  CQ_AVX2 __m256 ld(uint64_t c) const {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * c));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  void tail(uint64_t c, uint64_t m, float* out) const {
    for (uint64_t j = 0; j < m; ++j) out[j] = bf16_to_f32(load_le<uint16_t>(p + 2 * (c + j)));
  }
};

/// R weight rows × T activation rows of exact dots: out[k·T + t] = Σ_c w[k](c)·x[t][c]. Per output the
/// arithmetic is fixed whatever R and T are (8-column chunk j → FMA into accumulator j mod 2, the ragged tail
/// chunk zero padded, then a0 + a1 and hsum), so matvec and matmul results are bit-identical. `pfd` > 0
/// prefetches each row that many bytes ahead.
template <int R, int T, class L>
CQ_AVX2 void dot_exact_tile(const L* w, const float* const* x, uint64_t n, float* out, uint64_t pfd) {
  __m256 a[R][T][2];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) a[k][t][0] = a[k][t][1] = _mm256_setzero_ps();
  uint64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    if (pfd)
      for (int k = 0; k < R; ++k) prefetch(w[k].p + L::kBytes * c + pfd);
    for (int q = 0; q < 2; ++q) {
      __m256 wv[R];
      for (int k = 0; k < R; ++k) wv[k] = w[k].ld(c + 8 * q);
      for (int t = 0; t < T; ++t) {
        const __m256 xv = _mm256_loadu_ps(x[t] + c + 8 * q);
        for (int k = 0; k < R; ++k) a[k][t][q] = _mm256_fmadd_ps(wv[k], xv, a[k][t][q]);
      }
    }
  }
  if (c + 8 <= n) {  // one more full chunk, index even
    __m256 wv[R];
    for (int k = 0; k < R; ++k) wv[k] = w[k].ld(c);
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x[t] + c);
      for (int k = 0; k < R; ++k) a[k][t][0] = _mm256_fmadd_ps(wv[k], xv, a[k][t][0]);
    }
    c += 8;
  }
  if (c < n) {  // ragged tail chunk, zero padded, into accumulator (c/8) mod 2
    const uint64_t m = n - c;
    const int qt = static_cast<int>((c / 8) & 1);
    alignas(32) float buf[8];
    __m256 wv[R];
    for (int k = 0; k < R; ++k) {
      std::memset(buf, 0, sizeof buf);
      w[k].tail(c, m, buf);
      wv[k] = _mm256_load_ps(buf);
    }
    for (int t = 0; t < T; ++t) {
      std::memset(buf, 0, sizeof buf);
      std::memcpy(buf, x[t] + c, 4 * m);
      const __m256 xv = _mm256_load_ps(buf);
      for (int k = 0; k < R; ++k)
        for (int q = 0; q < 2; ++q)
          if (q == qt) a[k][t][q] = _mm256_fmadd_ps(wv[k], xv, a[k][t][q]);
    }
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = hsum(_mm256_add_ps(a[k][t][0], a[k][t][1]));
}

/// Y[i·y_stride + j0 + k] for k < rc, i < n from rc row loaders, in R×T tiles; tails padded by repeating the
/// last row/token and dropping those outputs.
template <int R, int T, class L, class MakeL>
CQ_AVX2 void block_exact_rt(MakeL make, uint64_t rc, const float* x, uint64_t cols, size_t n, float* y,
                            size_t y_stride, uint64_t j0, uint64_t pfd) {
  for (uint64_t k0 = 0; k0 < rc; k0 += R) {
    L w[R];
    for (int k = 0; k < R; ++k) w[k] = make(std::min<uint64_t>(k0 + k, rc - 1));
    const uint64_t kn = std::min<uint64_t>(R, rc - k0);
    for (size_t i0 = 0; i0 < n; i0 += T) {
      const float* xs[T];
      for (int t = 0; t < T; ++t) xs[t] = x + std::min<size_t>(i0 + t, n - 1) * cols;
      float out[R * T];
      dot_exact_tile<R, T>(w, xs, cols, out, pfd);
      const size_t tn = std::min<size_t>(T, n - i0);
      for (uint64_t k = 0; k < kn; ++k)
        for (size_t t = 0; t < tn; ++t) y[(i0 + t) * y_stride + j0 + k0 + k] = out[k * T + t];
    }
  }
}

/// Exact rows [r0, r0+rc) × tokens [0, n) with row loaders from `make` (matvec 4×1 tiles, matmul 2×2).
template <class L, class MakeL>
CQ_AVX2 void block_exact_loaders(MakeL make, uint64_t rc, const float* x, uint64_t cols, size_t n, float* y,
                                 size_t y_stride, uint64_t j0, uint64_t row_bytes) {
  if (n == 1)
    block_exact_rt<4, 1, L>(make, rc, x, cols, n, y, y_stride, j0,
                            row_bytes ? prefetch_distance(row_bytes, 4) : 0);
  else
    block_exact_rt<2, 2, L>(make, rc, x, cols, n, y, y_stride, j0,
                            row_bytes ? prefetch_distance(row_bytes, 2) : 0);
}

/// 32 weights (nibbles, element 2k low / 2k+1 high of byte k) → f32(nib − 8)·s.
CQ_AVX2 inline void dec_nib32(const uint8_t* b16, float s, float* out) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b16));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
  const __m128i e[2] = {_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)};  // elements 0..15, 16..31
  const __m256i k8 = _mm256_set1_epi32(8);
  const __m256 sv = _mm256_set1_ps(s);
  for (int h = 0; h < 2; ++h) {
    const __m256i a = _mm256_sub_epi32(_mm256_cvtepu8_epi32(e[h]), k8);
    const __m256i c = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(e[h], 8)), k8);
    _mm256_storeu_ps(out + 16 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(a), sv));
    _mm256_storeu_ps(out + 16 * h + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(c), sv));
  }
}

/// Decodes row r (block-local index i, whose ladder st.lad[i] is set for q4tp/q2tp) into out[cols].
CQ_AVX2 void decode_row_native(const Plan& pl, const BlockState& st, uint64_t r, uint64_t i, float* out) {
  const uint64_t cols = pl.cols;
  switch (pl.t) {
    case DType::Q8Row:
    case DType::Q8_2F: {
      const uint8_t* q = pl.p + r * cols;
      const float s = _cvtsh_ss(load_le<uint16_t>(pl.scales + 2 * r));
      const __m256 sv = _mm256_set1_ps(s);
      const bool q82f = pl.t == DType::Q8_2F;
      uint64_t c = 0;
      for (; c + 8 <= cols; c += 8) {
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + c));
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), sv);
        if (q82f) v = _mm256_mul_ps(v, _mm256_loadu_ps(pl.col + c));
        _mm256_storeu_ps(out + c, v);
      }
      for (; c < cols; ++c) {
        const float v = static_cast<float>(static_cast<int8_t>(q[c])) * s;
        out[c] = q82f ? v * pl.col[c] : v;
      }
      return;
    }
    case DType::Q4Tiled:
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const uint8_t* t = pl.p + 18 * (r * pl.gpr + g);
        dec_nib32(t + 2, _cvtsh_ss(load_le<uint16_t>(t)), out + 32 * g);
      }
      return;
    case DType::Q4Block:
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const uint64_t fg = r * pl.gpr + g;
        dec_nib32(pl.p + 16 * fg, _cvtsh_ss(load_le<uint16_t>(pl.scales + 2 * fg)), out + 32 * g);
      }
      return;
    case DType::Q4TP: {
      const uint8_t* w = pl.tp.row_weights(r);
      const uint8_t* cr = pl.tp.row_codes(r);
      for (uint64_t g = 0; g < pl.gpr; ++g)
        dec_nib32(w + 16 * g, st.lad[i][quant::q4tp_code(cr, g)], out + 32 * g);
      return;
    }
    case DType::Q2TP: {
      // weight 4k+j in bits 2j..2j+1 of byte k: 8 weights from 2 bytes; w = (code − 1.5)·s
      const uint8_t* w = pl.tp.row_weights(r);
      const uint8_t* cr = pl.tp.row_codes(r);
      const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
      const __m256i three = _mm256_set1_epi32(3);
      const __m256 h = _mm256_set1_ps(1.5f);
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const __m256 s = _mm256_set1_ps(st.lad[i][quant::q4tp_code(cr, g)]);
        for (int k = 0; k < 4; ++k) {
          const __m256i v = _mm256_set1_epi32(load_le<uint16_t>(w + 8 * g + 2 * k));
          const __m256i c2 = _mm256_and_si256(_mm256_srlv_epi32(v, sh), three);
          _mm256_storeu_ps(out + 32 * g + 8 * k, _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(c2), h), s));
        }
      }
      return;
    }
    case DType::Q1:
    case DType::Q1S: {
      // bit k of byte j (LSB-first) is weight 8j+k: +s if set else −s
      const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const uint8_t* t = pl.p + quant::kQ1TileBytes * (r * pl.gpr + g);
        const float s = _cvtsh_ss(load_le<uint16_t>(t));
        const __m256 ps = _mm256_set1_ps(s), ns = _mm256_set1_ps(-s);
        for (int j = 0; j < 4; ++j) {
          const __m256i b = _mm256_and_si256(_mm256_set1_epi32(t[2 + j]), bit);
          const __m256 set = _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, bit));
          _mm256_storeu_ps(out + 32 * g + 8 * j, _mm256_blendv_ps(ns, ps, set));
        }
      }
      if (pl.t == DType::Q1S)  // outliers replace the base values (order checked by q1s_view)
        pl.q1s.overwrite_run(r * pl.cols, (r + 1) * pl.cols, out);
      return;
    }
    case DType::Q1T: {
      // Base: 7 base-3 code bytes per 32-group (5 codes each, quant::kQ1tDigits), code 1 → +s,
      // 2 → −s, 0 → 0; then the row's overlay entries overwrite their columns — the values
      // quant::decode_rows produces (and the AVX-512 decoder, 16 lanes at a time).
      const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const uint8_t* t = pl.q1t.base + (r * pl.gpr + g) * quant::kQ1tTileBytes;
        if (!quant::q1t_tile_ok(t))
          fail(ErrorKind::Parse, "tensor '{}': q1t tile (row {}, group {}) has a non-base-3 code byte",
               pl.w->name, r, g);
        alignas(16) uint8_t codes[40];
        for (int b = 0; b < 7; ++b) std::memcpy(codes + 5 * b, quant::kQ1tDigits[t[2 + b]].data(), 5);
        const __m256 ps = _mm256_set1_ps(_cvtsh_ss(load_le<uint16_t>(t))),
                     ns = _mm256_sub_ps(_mm256_setzero_ps(), ps);
        for (int h = 0; h < 4; ++h) {
          const __m256i c =
              _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * h)));
          const __m256 v = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(c, one)), ps);
          _mm256_storeu_ps(out + 32 * g + 8 * h,
                           _mm256_blendv_ps(v, ns, _mm256_castsi256_ps(_mm256_cmpeq_epi32(c, two))));
        }
      }
      quant::q1t_check_row(pl.q1t, r, pl.w->name);
      for (uint32_t e = pl.q1t.ptr(r); e < pl.q1t.ptr(r + 1); ++e) out[pl.q1t.col(e)] = pl.q1t.value(e);
      return;
    }
    case DType::VBit:
    case DType::VBitRo: {
      // 8 codes of width b are b whole bytes of the MSB-first stream (rows start on a byte: in % 32
      // == 0); read as one big-endian qword, code p sits at bits 64 − b(p+1) .. 64 − bp.
      const quant::VBitView& v = *pl.vb;
      const uint32_t b = v.width(r);
      const int L = (1 << (b - 1)) - 1;
      const uint8_t* row = v.row(r);
      const uint8_t* end = pl.w->payload.data() + pl.w->payload.size();
      const long long bb = b;
      const __m256i sh_lo = _mm256_setr_epi64x(64 - bb, 64 - 2 * bb, 64 - 3 * bb, 64 - 4 * bb);
      const __m256i sh_hi = _mm256_setr_epi64x(64 - 5 * bb, 64 - 6 * bb, 64 - 7 * bb, 64 - 8 * bb);
      const __m256i mask = _mm256_set1_epi64x((1LL << b) - 1), lv = _mm256_set1_epi32(L);
      const __m256i low_dwords = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const float sc = v.scale(r, g);
        const __m256 s = _mm256_set1_ps(sc);
        for (uint64_t j = 4 * g; j < 4 * g + 4; ++j) {  // chunk j: codes 8j..8j+7 at byte j·b
          const uint8_t* src = row + j * b;
          if (end - src < 8) {  // the 8-byte read would pass the payload's end (its last row)
            for (uint32_t q = 0; q < 8; ++q)
              out[8 * j + q] =
                  static_cast<float>(static_cast<int>(quant::vbit_code(row, 8 * j + q, b)) - L) * sc;
            continue;
          }
          uint64_t x;
          std::memcpy(&x, src, 8);
          const __m256i xv = _mm256_set1_epi64x(static_cast<long long>(__builtin_bswap64(x)));
          const __m256i lo = _mm256_and_si256(_mm256_srlv_epi64(xv, sh_lo), mask);  // codes 0..3 (qwords)
          const __m256i hi = _mm256_and_si256(_mm256_srlv_epi64(xv, sh_hi), mask);  // codes 4..7
          const __m256i codes = _mm256_blend_epi32(_mm256_permutevar8x32_epi32(lo, low_dwords),
                                                   _mm256_permutevar8x32_epi32(hi, low_dwords), 0xF0);
          _mm256_storeu_ps(out + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(codes, lv)), s));
        }
      }
      return;
    }
    default:
      return;
  }
}

}  // namespace

/// Whether decode_row_native handles this plan (else the block goes through quant::RowDecoder).
bool native_decode(const Plan& pl) {
  switch (pl.t) {
    case DType::Q8Row:
    case DType::Q8_2F:
    case DType::Q4TP:
    case DType::Q2TP:
      return true;
    case DType::Q4Block:
    case DType::Q4Tiled:
    case DType::Q1:
      return pl.cols % 32 == 0;  // flat groups aligned with the rows
    case DType::Q1S:
      return pl.q1s.ascending;  // one run of outliers per row (else quant::RowDecoder, by index)
    case DType::VBit:
    case DType::VBitRo:
    case DType::Q1T:
      return true;
    default:
      return false;
  }
}

CQ_AVX2 void block_exact(const Plan& pl, BlockState& st, uint64_t r0, uint64_t rc, const float* x, size_t n,
                         float* y, size_t y_stride, uint64_t j0, const quant::RowDecoder* dec) {
  const uint64_t cols = pl.cols;
  switch (pl.t) {
    case DType::F32:
      block_exact_loaders<LdF32>([&](uint64_t k) { return LdF32{pl.p + 4 * (r0 + k) * cols}; }, rc, x, cols,
                                 n, y, y_stride, j0, pl.row_bytes);
      break;
    case DType::F16:
      block_exact_loaders<LdF16>([&](uint64_t k) { return LdF16{pl.p + 2 * (r0 + k) * cols}; }, rc, x, cols,
                                 n, y, y_stride, j0, pl.row_bytes);
      break;
    case DType::BF16:
      block_exact_loaders<LdBF16>([&](uint64_t k) { return LdBF16{pl.p + 2 * (r0 + k) * cols}; }, rc, x, cols,
                                  n, y, y_stride, j0, pl.row_bytes);
      break;
    default: {
      // Decode the block's rows once (native decoders, else the reference decoder), then apply them
      // to every token.
      grow(st.rowbuf, rc * cols);
      if (native_decode(pl)) {
        set_ladders(pl, st, r0, rc);
        for (uint64_t k = 0; k < rc; ++k) decode_row_native(pl, st, r0 + k, k, st.rowbuf.data() + k * cols);
      } else {
        dec->decode(r0, rc, std::span<float>(st.rowbuf.data(), rc * cols));
      }
      const float* rb = st.rowbuf.data();
      block_exact_loaders<LdF32>(
          [&](uint64_t k) { return LdF32{reinterpret_cast<const uint8_t*>(rb + k * cols)}; }, rc, x, cols, n,
          y, y_stride, j0, 0);
      break;
    }
  }
}

}  // namespace cortiq::kernels::avx2_detail

#endif  // x86
