// AVX2 / FMA / F16C matvec and batched matmul over the CMF codecs (contracts and error bounds in simd_avx2.h;
// payload layouts FORMAT-NOTES §1.8, quant/codec.h, quant/layout.h).
//
// Every function that uses AVX2 intrinsics carries CQ_AVX2 (a `target` attribute) and is only reached after
// avx2_cpu_ok() checked the CPU with __builtin_cpu_supports.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/simd_avx2.h"

// GCC 12 reports its own _mm256_undefined_* placeholders inside the intrinsic headers as uninitialized (a
// known false positive); silence that for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "kernels/simd_common.h"
#include "kernels/tier_caps.h"
#include "kernels/weight_plan.h"
#include "quant/codec.h"
#include "quant/layout.h"
#include "util/error.h"
#include "util/half.h"

#define CQ_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace cortiq::kernels {

using quant::DType;

bool avx2_cpu_ok() noexcept {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && simd_detail::cpu_has_f16c();
  return ok;
}

bool avx2_supported(DType t) noexcept {
  return avx2_cpu_ok() && simd_detail::avx2_has_kernel(t);  // tier_caps.h
}

namespace {

using simd_detail::exp2_f16_table;
using simd_detail::grow;
using simd_detail::kRowBlock;
using simd_detail::LineVec;
using simd_detail::prefetch_distance;

inline void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

/// Fixed-order horizontal sum of 8 lanes: (l_i + l_{i+4}), then (0+2, 1+3), then the last pair.
CQ_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---------------------------------------------------------------------------------------------
// Plan: the parsed tensor

/// Activation layout family of the int8 path (one per weight-code arrangement).
enum class Fam : uint8_t {
  // natural column order; weights are signed bytes (|w| × sign(q, w) trick). The quantization blocks
  // are lane blocks: blocks of 32 columns are taken 8 at a time (a chunk, 256 columns) and lane j's
  // block is the chunk's columns 32b + 4j … 32b + 4j + 3 — what _mm256_madd_epi16 sums into int32
  // lane j — so a chunk gets one convert and FMA (quantize_act_q8, tile_q8).
  Q8,
  NIB,  // per 32-block [x0, x2, …, x30 | x1, x3, …, x31] to match [low nibbles | high nibbles]
  // per 32-block natural order; lane bias −Σq. q1: u8 = 2·bit (a lane is Σ (2·bit − 1)·q); q1t: u8 =
  // value + 1 ∈ {0, 1, 2} (a lane is Σ value·q)
  Q1,
  // superblocks of 4 blocks (128 columns) in 4 planes of 32 bytes: plane j, bytes 8g … 8g + 7 =
  // columns 32g + 4k + j (k = 0 … 7) of block g — the 2-bit field j of q2tp weight byte k of group g.
  // u8 = 2·code, lane bias −3·Σq, 8 lane scales d_b/2 (lanes 2g, 2g + 1 belong to block g).
  Q2,
};

struct Plan {
  const WeightView* w = nullptr;
  DType t = DType::F32;
  uint64_t rows = 0, cols = 0, gpr = 0;
  const uint8_t* p = nullptr;
  const uint8_t* scales = nullptr;      // q8_row/q8_2f: row scales; q4_block: scale plane
  const float* bases = nullptr;         // q4tp/q2tp: prepared ladder bases (tp_bases), or null
  const float* col = nullptr;           // q8_2f: decoded column field (caller scratch)
  quant::TpView tp;                     // q4tp / q2tp
  quant::Q1sView q1s;                   // q1s: q1 base tiles at p, outlier entries
  quant::Q1tView q1t;                   // q1t: rows unchecked (decode_row_native checks each row)
  const quant::VBitView* vb = nullptr;  // vbit / vbit_ro: widths, scales, row offsets (scratch or plan)
  Fam fam = Fam::Q8;
  bool int8 = false;       // int8 path in use
  uint64_t row_bytes = 0;  // stride of one row in the main weight plane (prefetch distance unit)
};

/// Caller-thread scratch: q8_2f column field and quantized activations.
struct CallScratch {
  quant::VBitView vb;
  LineVec<float> col;
  LineVec<int8_t> xq;
  LineVec<float> d;
  LineVec<int32_t> bias;
};
CallScratch& call_scratch() {
  thread_local CallScratch s;
  return s;
}

/// Per-thread state of one block of ≤ kRowBlock rows.
struct BlockState {
  float lad[kRowBlock][32];  // q4tp/q2tp ladders of the block's rows
  LineVec<float> gs;         // q2tp int8: group scales, row i at gs[i·gs_stride + g] (0 past gpr)
  uint64_t gs_stride = 0;    // gpr rounded up to 8
  LineVec<float> rowbuf;     // decoded rows (exact path, quantized codecs)
  LineVec<int8_t> wq;        // vbit int8 matmul: the block's rows as signed bytes w = u − Lp (tile_vbit)
  bool wq_ready = false;     // wq holds the current block's rows (unpack_vbit_rows)
};
BlockState& block_state() {
  thread_local BlockState s;
  return s;
}

/// A prepared view (WeightView::plan, weight_plan.h) takes the parsed pieces from its plan instead:
/// no validation or parsing per call, the same Plan and so the same results.
Plan make_plan(const WeightView& w, bool exact) {
  if (!avx2_supported(w.dtype))
    fail(ErrorKind::Unsupported, "tensor '{}': dtype {} has no AVX2 kernel", w.name,
         quant::dtype_name(w.dtype));
  const WeightPlan* wp = plan_of(w);
  // q1t rows are checked as quant::RowDecoder decodes them: O(1) here, not O(rows + overlay).
  // q1s: q1s_view below is the full check (one pass over the outliers); vbit: vbit_view_into.
  if (!wp && w.dtype != DType::Q1S && w.dtype != DType::VBit && w.dtype != DType::VBitRo)
    quant::validate_payload(w.dtype, w.shape, w.payload, w.name, /*check_rows=*/false);
  Plan pl;
  pl.w = &w;
  pl.t = w.dtype;
  pl.rows = w.rows();
  pl.cols = w.cols();
  pl.p = w.payload.data();
  pl.gpr = pl.cols / 32;
  const uint64_t n = pl.rows * pl.cols;
  switch (pl.t) {
    case DType::F32:
      pl.row_bytes = 4 * pl.cols;
      break;
    case DType::F16:
    case DType::BF16:
      pl.row_bytes = 2 * pl.cols;
      break;
    case DType::Q8Row:
    case DType::Q8_2F:
      pl.scales = pl.p + n;
      pl.row_bytes = pl.cols;
      pl.fam = Fam::Q8;
      break;
    case DType::Q4Block:
      pl.scales = pl.p + 16 * ((n + 31) / 32);
      pl.row_bytes = 16 * pl.gpr;
      pl.fam = Fam::NIB;
      break;
    case DType::Q4Tiled:
      pl.row_bytes = 18 * pl.gpr;
      pl.fam = Fam::NIB;
      break;
    case DType::Q4TP:
      pl.tp = wp ? wp->tp : quant::tp_view(pl.t, w.shape, w.payload, w.name);
      pl.bases = wp ? (wp->bases ? wp->bases->data() : nullptr) : simd_detail::tp_bases(w, pl.rows);
      pl.row_bytes = 16 * pl.gpr;
      pl.fam = Fam::NIB;
      break;
    case DType::Q2TP:
      pl.tp = wp ? wp->tp : quant::tp_view(pl.t, w.shape, w.payload, w.name);
      pl.bases = wp ? (wp->bases ? wp->bases->data() : nullptr) : simd_detail::tp_bases(w, pl.rows);
      pl.row_bytes = 8 * pl.gpr;
      pl.fam = Fam::Q2;
      break;
    case DType::Q1:
      pl.row_bytes = quant::kQ1TileBytes * pl.gpr;
      pl.fam = Fam::Q1;
      break;
    case DType::Q1S:
      pl.q1s = wp ? wp->q1s : quant::q1s_view(w.shape, w.payload, w.name);
      pl.row_bytes = quant::kQ1TileBytes * pl.gpr;
      pl.fam = Fam::Q1;
      break;
    case DType::Q1T:
      pl.q1t = wp ? wp->q1t : quant::q1t_view(w.shape, w.payload, w.name, /*check_rows=*/false);
      pl.row_bytes = quant::kQ1tTileBytes * pl.gpr;
      pl.fam = Fam::Q1;
      break;
    case DType::VBit:
    case DType::VBitRo:
      if (wp) {
        pl.vb = &wp->vb;
      } else {
        quant::vbit_view_into(call_scratch().vb, pl.t, w.shape, w.payload, w.name);
        pl.vb = &call_scratch().vb;
      }
      pl.row_bytes = pl.cols / 2;  // prefetch unit: about 4 bits a weight (widths 3..8 vary by row)
      pl.fam = Fam::Q1;            // int8 path tile_vbit (in % 32 == 0 always)
      break;
    default:
      break;
  }
  const bool q8 = pl.t == DType::Q8Row || pl.t == DType::Q8_2F;
  const bool nib =
      (pl.t == DType::Q4Block || pl.t == DType::Q4Tiled || pl.t == DType::Q4TP) && pl.cols % 32 == 0;
  // q1s: the outliers are added by a binary search per row, which needs ascending indices
  const bool q1 = (pl.t == DType::Q1 || (pl.t == DType::Q1S && pl.q1s.ascending)) && pl.cols % 32 == 0;
  const bool vbit = pl.t == DType::VBit || pl.t == DType::VBitRo;
  pl.int8 = !exact && (q8 || nib || q1 || vbit || pl.t == DType::Q2TP || pl.t == DType::Q1T);
  if (pl.t == DType::Q8_2F && wp) {
    pl.col = wp->col_avx2.data();  // filled: the plan was made on this CPU, which has the tier
  } else if (pl.t == DType::Q8_2F) {
    auto& cs = call_scratch();
    grow(cs.col, pl.cols);
    const uint8_t* cp = pl.p + n + 2 * pl.rows;
    for (uint64_t c = 0; c < pl.cols; ++c) cs.col[c] = f16_to_f32(load_le<uint16_t>(cp + 2 * c));
    pl.col = cs.col.data();
  }
  return pl;
}

// ---------------------------------------------------------------------------------------------
// Exact path: f32 dot with 2×8-lane accumulators (8-column chunk k → accumulator k mod 2)

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
CQ_AVX2 void block_exact(MakeL make, uint64_t rc, const float* x, uint64_t cols, size_t n, float* y,
                         size_t y_stride, uint64_t j0, uint64_t row_bytes) {
  if (n == 1)
    block_exact_rt<4, 1, L>(make, rc, x, cols, n, y, y_stride, j0,
                            row_bytes ? prefetch_distance(row_bytes, 4) : 0);
  else
    block_exact_rt<2, 2, L>(make, rc, x, cols, n, y, y_stride, j0,
                            row_bytes ? prefetch_distance(row_bytes, 2) : 0);
}

// ---------------------------------------------------------------------------------------------
// Exact path: native row decoders, bit-identical to quant::decode_rows (each weight is the same single f32
// product of exactly representable factors that the reference computes)

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

// ---------------------------------------------------------------------------------------------
// int8 path: activation quantization

/// Superblocks of 32 columns per Fam::Q8 chunk (one lane block of 32 columns per int32 lane).
constexpr uint64_t kQ8Chunk = 8;

/// Quantized activations of n tokens, per token xs int8 (family layout), ds f32 scales and bs int32
/// lane biases: NIB, Q1: nb blocks of 32 int8, one scale per block (ds = nb) and 8 lane biases per
/// block (−8·Σq, −Σq); Q8: 8 lane scales per chunk (ds = 8·⌈nb/8⌉), no bias; Q2: ⌈nb/4⌉ superblocks
/// of 128 int8, 8 lane scales and 8 lane biases (−3·Σq) each.
struct ActSet {
  uint64_t xs = 0, ds = 0, bs = 0;
  const int8_t* xq = nullptr;
  const float* d = nullptr;
  const int32_t* bias = nullptr;
};
struct QAct {
  const int8_t* xq;
  const float* d;
  const int32_t* bias;
};
inline QAct act_at(const ActSet& a, size_t i) {
  return {a.xq + i * a.xs, a.d + i * a.ds, a.bias + i * a.bs};
}

/// Block b of x (32 columns, times col when col != nullptr; zero past cols) into v[0..3].
CQ_AVX2 inline void load_block32(const float* x, const float* col, uint64_t cols, uint64_t b,
                                 __m256 (&v)[4]) {
  const uint64_t c0 = 32 * b, m = std::min<uint64_t>(32, cols - c0);
  if (m == 32) {
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(x + c0 + 8 * j);
    if (col)
      for (int j = 0; j < 4; ++j) v[j] = _mm256_mul_ps(v[j], _mm256_loadu_ps(col + c0 + 8 * j));
  } else {
    alignas(32) float tmp[32] = {};
    for (uint64_t j = 0; j < m; ++j) tmp[j] = col ? x[c0 + j] * col[c0 + j] : x[c0 + j];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_load_ps(tmp + 8 * j);
  }
}

/// Fam::Q8 activation of x[cols] (times col[c] when col != nullptr): xq in natural order (zero
/// padding in the ragged last block); chunk k (blocks 8k … 8k + 7, fewer in the last chunk) has 8
/// lane scales at d + 8k. Lane j of a chunk of nb blocks quantizes its 4·nb columns {32b + 4j + i}
/// as one block: d_j = absmax_j/127, q = rne(x·(127/absmax_j)); a lane holding a NaN/±Inf gets
/// d_j = NaN and q = 0.
CQ_AVX2 void quantize_act_q8(const float* x, const float* col, uint64_t cols, int8_t* xq, float* d) {
  const uint64_t nb = (cols + 31) / 32;
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), zero = _mm256_setzero_ps();
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (uint64_t b0 = 0, k = 0; b0 < nb; b0 += kQ8Chunk, ++k) {
    const uint64_t b1 = std::min(b0 + kQ8Chunk, nb);
    // mx: elementwise absmax over the chunk; nf: NaN where a NaN/±Inf occurred (v·0 is NaN exactly then)
    __m256 mx[4] = {zero, zero, zero, zero}, nf[4] = {zero, zero, zero, zero};
    for (uint64_t b = b0; b < b1; ++b) {
      __m256 v[4];
      load_block32(x, col, cols, b, v);
      for (int j = 0; j < 4; ++j) {
        mx[j] = _mm256_max_ps(mx[j], _mm256_and_ps(v[j], absmask));
        nf[j] = _mm256_add_ps(nf[j], _mm256_mul_ps(v[j], zero));
      }
    }
    alignas(32) float m32[32], id[8];
    uint32_t bad = 0;  // bit e: element e of the 32 saw a non-finite value
    for (int j = 0; j < 4; ++j) {
      _mm256_store_ps(m32 + 8 * j, mx[j]);
      bad |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(nf[j], nf[j], _CMP_UNORD_Q))) << (8 * j);
    }
    for (int l = 0; l < 8; ++l) {
      const float amax =
          std::max(std::max(m32[4 * l], m32[4 * l + 1]), std::max(m32[4 * l + 2], m32[4 * l + 3]));
      const bool finite = ((bad >> (4 * l)) & 0xF) == 0;
      d[8 * k + l] = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
      id[l] = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
    }
    // register j holds elements 8j … 8j + 7: lanes 2j (first 4) and 2j + 1
    __m256 idv[4];
    for (int j = 0; j < 4; ++j)
      idv[j] = _mm256_permutevar8x32_ps(
          _mm256_load_ps(id),
          _mm256_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1));
    for (uint64_t b = b0; b < b1; ++b) {
      __m256 v[4];
      load_block32(x, col, cols, b, v);
      __m256i q[4];
      for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], idv[j]));
      const __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + 32 * b),
                          _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order));
    }
  }
}

/// Block b of x (times col[c] when col != nullptr) quantized: d = absmax/127, q = rne(x·(127/absmax))
/// (cvtps_epi32 in the default rounding mode) in natural order, zero for the padding of a ragged last
/// block. A block with a non-finite value gets q = 0 and d = NaN (the output is NaN).
CQ_AVX2 inline __m256i quantize_block32(const float* x, const float* col, uint64_t cols, uint64_t b,
                                        float& d) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256 v[4];
  load_block32(x, col, cols, b, v);
  const __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absmask), _mm256_and_ps(v[1], absmask)),
                                  _mm256_max_ps(_mm256_and_ps(v[2], absmask), _mm256_and_ps(v[3], absmask)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float amax = _mm_cvtss_f32(h);
  // Σ v·0 is NaN exactly when some v is NaN or ±Inf.
  __m256 probe = _mm256_setzero_ps();
  for (int j = 0; j < 4; ++j) probe = _mm256_add_ps(probe, _mm256_mul_ps(v[j], _mm256_setzero_ps()));
  const bool finite = _mm256_movemask_ps(_mm256_cmp_ps(probe, probe, _CMP_UNORD_Q)) == 0;
  const float id = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
  d = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
  const __m256 idv = _mm256_set1_ps(id);
  __m256i q[4];
  for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], idv));
  const __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
  // packs interleave the 128-bit lanes; the dword permutation restores the natural order
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order);
}

/// Per int32 lane l: Σ of the 4 int8 at bytes 4l … 4l + 3 of v (what maddubs + madd fold into lane l).
CQ_AVX2 inline __m256i lane_sums(__m256i v) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), _mm256_set1_epi16(1));
}

/// Fam::Q2 activation of x[cols] (cols % 32 == 0): superblock s (blocks 4s … 4s + 3, zero past the
/// last block) at xq + 128s in 4 planes (Fam::Q2), lane scales d + 8s (lane l: d_(4s + l/2)/2) and
/// lane biases bias + 8s (−3·Σ of the q folded into lane l over the 4 planes).
CQ_AVX2 void quantize_act_q2(const float* x, uint64_t cols, int8_t* xq, float* d, int32_t* bias) {
  const uint64_t nb = cols / 32, ns = (nb + 3) / 4;
  // within each 128-bit lane: bytes 4k + j → 4j + k (dword j = field j of 4 weight bytes), then the
  // dwords (0, 4, 1, 5, …) so qword j = plane j's 8 bytes (k = 0 … 7)
  const __m256i tr = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5,
                                      9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (uint64_t s = 0; s < ns; ++s) {
    alignas(32) int8_t planes[128] = {};
    alignas(32) float ds[8] = {};
    for (uint64_t g = 0; g < 4 && 4 * s + g < nb; ++g) {
      float db;
      const __m256i p8 = quantize_block32(x, nullptr, cols, 4 * s + g, db);
      alignas(32) int8_t t[32];
      _mm256_store_si256(reinterpret_cast<__m256i*>(t),
                         _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(p8, tr), order));
      for (int j = 0; j < 4; ++j) std::memcpy(planes + 32 * j + 8 * g, t + 8 * j, 8);
      ds[2 * g] = ds[2 * g + 1] = db * 0.5f;
    }
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j)
      sum = _mm256_add_epi32(sum,
                             lane_sums(_mm256_load_si256(reinterpret_cast<const __m256i*>(planes + 32 * j))));
    std::memcpy(xq + 128 * s, planes, 128);
    std::memcpy(d + 8 * s, ds, sizeof ds);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bias + 8 * s),
                        _mm256_mullo_epi32(sum, _mm256_set1_epi32(-3)));
  }
}

/// Quantizes x[cols] (times col[c] when col != nullptr) per 32-column block (quantize_block32) into
/// the family layout: NIB and Q1 one scale per block at d + b and 8 lane biases per block at bias + 8b
/// (NIB: −8·Σq; Q1: −Σq); Q8 and Q2 have their own layouts (quantize_act_q8, quantize_act_q2).
CQ_AVX2 void quantize_act(Fam f, const float* x, const float* col, uint64_t cols, int8_t* xq, float* d,
                          int32_t* bias) {
  if (f == Fam::Q8) return quantize_act_q8(x, col, cols, xq, d);
  if (f == Fam::Q2) return quantize_act_q2(x, cols, xq, d, bias);
  const uint64_t nb = (cols + 31) / 32;
  const __m256i evod = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8,
                                        10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (uint64_t b = 0; b < nb; ++b) {
    __m256i p8 = quantize_block32(x, col, cols, b, d[b]);
    __m256i lb;
    if (f == Fam::NIB) {
      // [evens | odds]: evens/odds within each 128-bit lane, then the middle qwords swapped
      p8 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(p8, evod), 0xD8);
      lb = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(lane_sums(p8), 3));
    } else {  // Q1
      lb = _mm256_sub_epi32(_mm256_setzero_si256(), lane_sums(p8));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bias + 8 * b), lb);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + 32 * b), p8);
  }
}

ActSet quantize_all(const Plan& pl, const float* x, size_t n) {
  auto& cs = call_scratch();
  ActSet a;
  const uint64_t nb = (pl.cols + 31) / 32, ns = (nb + 3) / 4;
  switch (pl.fam) {
    case Fam::Q8:
      a.xs = 32 * nb;
      a.ds = kQ8Chunk * ((nb + kQ8Chunk - 1) / kQ8Chunk);
      a.bs = 0;
      break;
    case Fam::Q2:
      a.xs = 128 * ns;
      a.ds = a.bs = 8 * ns;
      break;
    default:  // NIB, Q1
      a.xs = 32 * nb;
      a.ds = nb;
      a.bs = 8 * nb;
      break;
  }
  grow(cs.xq, n * a.xs);
  grow(cs.d, n * a.ds);
  grow(cs.bias, std::max<uint64_t>(1, n * a.bs));
  for (size_t i = 0; i < n; ++i)
    quantize_act(pl.fam, x + i * pl.cols, pl.col, pl.cols, cs.xq.data() + i * a.xs, cs.d.data() + i * a.ds,
                 cs.bias.data() + i * a.bs);
  a.xq = cs.xq.data();
  a.d = cs.d.data();
  a.bias = cs.bias.data();
  return a;
}

// ---------------------------------------------------------------------------------------------
// int8 path: register tiles of R weight rows × T tokens. Each weight block is loaded once and applied to T
// tokens; every output is computed with the same sequence of operations whatever R and T are (one 8-lane f32
// accumulator per output, one FMA per 32-column block, then hsum), so matvec (T = 1) and matmul (T > 1)
// results are bit-identical. rows[k]: tensor row, li[k]: block-local index, out[k·T + t]: Σ for row k and
// token t.

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
      } else {  // ragged last block: zero-padded copy (the activation padding is 0 too)
        for (int k = 0; k < R; ++k) {
          alignas(32) int8_t buf[32] = {};
          std::memcpy(buf, w[k] + 32 * b, cols - 32 * b);
          wv[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
        }
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

/// q4tp: the 40 code bits of groups g..g+7 (g % 8 == 0) of row r, LSB-first (fewer at the row end).
inline uint64_t code_window(const Plan& pl, uint64_t r, uint64_t g) {
  const uint64_t off = 5 * (g / 8);
  const uint8_t* c = pl.tp.row_codes(r) + off;
  if (off + 5 <= pl.tp.code_row_bytes) return load_le<uint32_t>(c) | uint64_t{c[4]} << 32;
  uint64_t v = 0;
  for (uint64_t k = 0; off + k < pl.tp.code_row_bytes; ++k) v |= uint64_t{c[k]} << (8 * k);
  return v;
}

/// Nibble bytes (16) and f32 group scale of group g of NIB-family row r (block-local index i).
template <DType D>
CQ_AVX2 inline __m256i nib_load(const Plan& pl, const BlockState& st, uint64_t r, uint64_t i, uint64_t g,
                                uint64_t pfd, uint64_t codes, float& scale) {
  const uint8_t* nb;
  if constexpr (D == DType::Q4Tiled) {
    const uint8_t* t = pl.p + 18 * (r * pl.gpr + g);
    scale = _cvtsh_ss(load_le<uint16_t>(t));
    nb = t + 2;
  } else if constexpr (D == DType::Q4Block) {
    const uint64_t fg = r * pl.gpr + g;
    scale = _cvtsh_ss(load_le<uint16_t>(pl.scales + 2 * fg));
    nb = pl.p + 16 * fg;
  } else {  // Q4TP
    scale = st.lad[i][(codes >> (5 * (g & 7))) & 31u];
    nb = pl.tp.row_weights(r) + 16 * g;
  }
  prefetch(nb + pfd);
  // the 16 bytes in both halves, the upper half shifted by 4: [low nibbles = elements 0, 2, …, 30 | high
  // nibbles = elements 1, 3, …, 31]
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(nb)));
  return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

template <DType D, int R, int T>
CQ_AVX2 void tile_nib(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                      const QAct* a, float* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  const uint64_t pfd = prefetch_distance(pl.row_bytes, R);
  __m256 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm256_setzero_ps();
  uint64_t win[R] = {};  // q4tp: 5-bit rungs of groups g & ~7 .. +7
  for (uint64_t g = 0; g < pl.gpr; ++g) {
    __m256i v[R];
    float sw[R];
    if constexpr (D == DType::Q4TP)
      if ((g & 7) == 0)
        for (int k = 0; k < R; ++k) win[k] = code_window(pl, rows[k], g);
    for (int k = 0; k < R; ++k) v[k] = nib_load<D>(pl, st, rows[k], li[k], g, pfd, win[k], sw[k]);
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
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = hsum(f[k][t]);
}

/// q2tp: R rows × T tokens over superblocks of 4 groups (32 weight bytes, Fam::Q2). The 2-bit field j of
/// every byte, times 2, is plane j (u8 ∈ {0, 2, 4, 6}); the four plane products are summed in int16
/// (|pair| ≤ 2·6·127, four planes ≤ 6096 < 2^15) and folded by _mm256_madd_epi16 into 8 int32 lanes, two
/// per group, so each lane plus its bias is Σ (2·code − 3)·q over its 16 weights. The lane scale is
/// (d_b/2)·s_g (group scales st.gs from the row's ladder, set_group_scales).
template <int R, int T>
CQ_AVX2 void tile_q2(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                     const QAct* a, float* out) {
  const uint64_t gpr = pl.gpr, nsb = (gpr + 3) / 4;
  const __m256i m6 = _mm256_set1_epi8(6), ones = _mm256_set1_epi16(1);
  const __m256i expand2 = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
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
  for (uint64_t s = 0; s < nsb; ++s) {
    const uint64_t g0 = 4 * s;
    // each row's planes are formed once and applied to the T tokens in turn (the activation planes
    // are re-read from L1 per row: 4 + 4 registers per row would spill the R×T accumulators)
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      __m256i v;
      if (g0 + 4 <= gpr) {
        prefetch(w[k] + 8 * g0 + pfd);
        v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[k] + 8 * g0));
      } else {  // ragged last superblock: zero-padded copy (scales and activation are 0 there too)
        alignas(32) uint8_t buf[32] = {};
        std::memcpy(buf, w[k] + 8 * g0, 8 * (gpr - g0));
        v = _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
      }
      // 2·field j: byte bits 2j, 2j+1 moved to bits 1, 2 (16-bit shifts; the bits crossing bytes are masked)
      const __m256i p0 = _mm256_and_si256(_mm256_slli_epi16(v, 1), m6);
      const __m256i p1 = _mm256_and_si256(_mm256_srli_epi16(v, 1), m6);
      const __m256i p2 = _mm256_and_si256(_mm256_srli_epi16(v, 3), m6);
      const __m256i p3 = _mm256_and_si256(_mm256_srli_epi16(v, 5), m6);
      const __m256 sw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(gs[k] + g0)), expand2);
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
  const quant::VBitView& vb = *pl.vb;
  const uint8_t* end = pl.w->payload.data() + pl.w->payload.size();
  const uint64_t gpr = pl.gpr, pfd = prefetch_distance(pl.row_bytes, R);
  const __m256i ones = _mm256_set1_epi16(1);
  VbRow v[R];
  const int8_t* wq[R];  // pre-unpacked rows (matmul: unpack_vbit_rows), else nullptr
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    v[k] = vb_row(vb, rows[k]);
    wq[k] = st.wq_ready ? st.wq.data() + li[k] * pl.cols : nullptr;
  }
  __m256 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm256_setzero_ps();
  for (uint64_t g = 0; g < gpr; ++g) {
    __m256i w[R], aw[R];
    float sw[R];
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      if (wq[k]) {
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
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = hsum(f[k][t]);
}

template <int R, int T>
CQ_AVX2 void tile_int8(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                       const QAct* a, float* out) {
  switch (pl.t) {
    case DType::Q4Tiled:
      tile_nib<DType::Q4Tiled, R, T>(pl, st, rows, li, a, out);
      break;
    case DType::Q4Block:
      tile_nib<DType::Q4Block, R, T>(pl, st, rows, li, a, out);
      break;
    case DType::Q4TP:
      tile_nib<DType::Q4TP, R, T>(pl, st, rows, li, a, out);
      break;
    case DType::Q2TP:
      tile_q2<R, T>(pl, st, rows, li, a, out);
      break;
    case DType::Q1:
    case DType::Q1S:
      tile_q1<R, T>(pl, rows, a, out);
      break;
    case DType::Q1T:
      tile_q1t<R, T>(pl, rows, a, out);
      break;
    case DType::VBit:
    case DType::VBitRo:
      tile_vbit<R, T>(pl, st, rows, li, a, out);
      break;
    default:
      tile_q8<R, T>(pl, rows, a, out);
      break;
  }
}

/// Rows [r0, r0+rc) (block-local 0..rc) × tokens [0, n): Y[i·y_stride + j0 + k], in R×T tiles. Row/token
/// tails are padded by repeating the last row/token and dropping those outputs.
template <int R, int T>
CQ_AVX2 void block_int8_rt(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc, const ActSet& acts,
                           size_t n, float* y, size_t y_stride, uint64_t j0) {
  for (uint64_t k0 = 0; k0 < rc; k0 += R) {
    uint64_t rows[R], li[R];
    for (int k = 0; k < R; ++k) {
      li[k] = std::min<uint64_t>(k0 + k, rc - 1);
      rows[k] = r0 + li[k];
    }
    const uint64_t kn = std::min<uint64_t>(R, rc - k0);
    for (size_t i0 = 0; i0 < n; i0 += T) {
      QAct a[T];
      for (int t = 0; t < T; ++t) a[t] = act_at(acts, std::min<size_t>(i0 + t, n - 1));
      float out[R * T];
      tile_int8<R, T>(pl, st, rows, li, a, out);
      const size_t tn = std::min<size_t>(T, n - i0);
      for (uint64_t k = 0; k < kn; ++k)
        for (size_t t = 0; t < tn; ++t) y[(i0 + t) * y_stride + j0 + k0 + k] = out[k * T + t];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Driver

/// Ladders of rows [r0, r0+rc) (q4tp/q2tp; no-op otherwise), bit-identical to quant::q4tp_ladder /
/// q2tp_ladder: t0 = exp2f(lo), ratio = exp2f(step), t[c] = t[c−1]·ratio in f32 (q2tp: 0, t0, …). Eight
/// rows at a time, one per lane (the chains are serial in c; the lanes keep 8 of them in flight).
CQ_AVX2 void set_ladders(const Plan& pl, BlockState& st, uint64_t r0, uint64_t rc) {
  if (pl.t != DType::Q4TP && pl.t != DType::Q2TP) return;
  const float* e2 = exp2_f16_table();
  const int first = pl.t == DType::Q2TP ? 1 : 0;
  for (uint64_t i0 = 0; i0 < rc; i0 += 8) {
    alignas(32) float t0[8], ra[8], tmp[32][8];
    for (uint64_t l = 0; l < 8; ++l) {
      const uint64_t r = r0 + std::min(i0 + l, rc - 1);
      t0[l] = pl.bases ? pl.bases[r] : e2[pl.tp.lo_f16(r)];
      ra[l] = pl.bases ? pl.bases[pl.rows + r] : e2[pl.tp.step_f16(r)];
    }
    __m256 cur = _mm256_load_ps(t0);
    const __m256 ratio = _mm256_load_ps(ra);
    _mm256_store_ps(tmp[0], _mm256_setzero_ps());
    _mm256_store_ps(tmp[first], cur);
    for (int c = first + 1; c < 32; ++c) {
      cur = _mm256_mul_ps(cur, ratio);
      _mm256_store_ps(tmp[c], cur);
    }
    for (uint64_t l = 0; l < 8 && i0 + l < rc; ++l)
      for (int c = 0; c < 32; ++c) st.lad[i0 + l][c] = tmp[c][l];
  }
}

/// q2tp int8 path: the group scales of rows [r0, r0+rc) from their ladders (set_ladders first) into
/// st.gs, 8 groups per 40-bit code window looked up with one gather; 0 past gpr (the ladder's rung 0).
CQ_AVX2 void set_group_scales(const Plan& pl, BlockState& st, uint64_t r0, uint64_t rc) {
  st.gs_stride = (pl.gpr + 7) / 8 * 8;
  grow(st.gs, rc * st.gs_stride);
  const __m256i sh = _mm256_setr_epi32(0, 5, 10, 15, 0, 5, 10, 15), m31 = _mm256_set1_epi32(31);
  for (uint64_t i = 0; i < rc; ++i) {
    float* gs = st.gs.data() + i * st.gs_stride;
    for (uint64_t g = 0; g < pl.gpr; g += 8) {
      const uint64_t win = code_window(pl, r0 + i, g);  // zero bits past the row's codes → rung 0
      const __m256i v = _mm256_set_m128i(_mm_set1_epi32(static_cast<int>(win >> 20)),
                                         _mm_set1_epi32(static_cast<int>(win & 0xFFFFF)));
      const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(v, sh), m31);
      _mm256_storeu_ps(gs + g, _mm256_i32gather_ps(st.lad[i], idx, 4));
    }
  }
}

/// Y[i·y_stride + j] = row (row_begin + j) · X[i] for j < row_count, i < n.
void run(const Plan& pl, uint64_t row_begin, uint64_t row_count, const float* x, size_t n, float* y,
         size_t y_stride, ThreadPool& pool) {
  if (row_count == 0 || n == 0) return;
  ActSet acts;
  if (pl.int8) acts = quantize_all(pl, x, n);
  const uint64_t cols = pl.cols;
  const uint64_t nblocks = (row_count + kRowBlock - 1) / kRowBlock;
  std::optional<quant::RowDecoder> dec;  // blocks without a native decoder: the payload parsed once
  if (!pl.int8 && !quant::is_float_dtype(pl.t) && !native_decode(pl))
    dec.emplace(pl.t, pl.w->shape, pl.w->payload, pl.w->name);
  pool.parallel_for(nblocks, [&](size_t b0, size_t b1) {
    BlockState& st = block_state();
    for (size_t b = b0; b < b1; ++b) {
      const uint64_t j0 = b * kRowBlock, rc = std::min<uint64_t>(kRowBlock, row_count - j0);
      const uint64_t r0 = row_begin + j0;
      if (pl.int8) {
        set_ladders(pl, st, r0, rc);
        if (pl.t == DType::Q2TP) set_group_scales(pl, st, r0, rc);
        st.wq_ready = false;
        if ((pl.t == DType::VBit || pl.t == DType::VBitRo) && n > 1) unpack_vbit_rows(pl, st, r0, rc);
        // tiles measured on Zen 5 (1 thread, 4864×896, n = 64): q2tp 4×2 3.9 ms against 4.1 for 2×2;
        // q1 2×4 7.0 ms against 7.9 for 2×2 (within noise for the others and for matvec). q8 matvec
        // reads one row at a time, in address order (memory-bound; see block_int8 in avx512/matvec_driver.cc)
        if (n == 1 && pl.fam == Fam::Q8)
          block_int8_rt<1, 1>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        else if (n == 1)
          block_int8_rt<4, 1>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        else if (pl.fam == Fam::Q2)
          block_int8_rt<4, 2>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        else if (pl.fam == Fam::Q1 && n % 4 == 0)
          block_int8_rt<2, 4>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        else
          block_int8_rt<2, 2>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        // q1s takes this path only with ascending outliers (make_plan), so the pass cannot fail
        if (pl.t == DType::Q1S)
          (void)simd_detail::add_q1s_outliers(pl.q1s, pl.p, pl.gpr, pl.cols, r0, rc, x, n, y, y_stride, j0);
        if (pl.t == DType::Q1T)
          simd_detail::add_q1t_overlay(pl.q1t, pl.w->name, pl.cols, r0, rc, x, n, y, y_stride, j0);
        continue;
      }
      switch (pl.t) {
        case DType::F32:
          block_exact<LdF32>([&](uint64_t k) { return LdF32{pl.p + 4 * (r0 + k) * cols}; }, rc, x, cols, n, y,
                             y_stride, j0, pl.row_bytes);
          break;
        case DType::F16:
          block_exact<LdF16>([&](uint64_t k) { return LdF16{pl.p + 2 * (r0 + k) * cols}; }, rc, x, cols, n, y,
                             y_stride, j0, pl.row_bytes);
          break;
        case DType::BF16:
          block_exact<LdBF16>([&](uint64_t k) { return LdBF16{pl.p + 2 * (r0 + k) * cols}; }, rc, x, cols, n,
                              y, y_stride, j0, pl.row_bytes);
          break;
        default: {
          // Decode the block's rows once (native decoders, else the reference decoder), then apply them
          // to every token.
          grow(st.rowbuf, rc * cols);
          if (native_decode(pl)) {
            set_ladders(pl, st, r0, rc);
            for (uint64_t k = 0; k < rc; ++k)
              decode_row_native(pl, st, r0 + k, k, st.rowbuf.data() + k * cols);
          } else {
            dec->decode(r0, rc, std::span<float>(st.rowbuf.data(), rc * cols));
          }
          const float* rb = st.rowbuf.data();
          block_exact<LdF32>(
              [&](uint64_t k) { return LdF32{reinterpret_cast<const uint8_t*>(rb + k * cols)}; }, rc, x, cols,
              n, y, y_stride, j0, 0);
          break;
        }
      }
    }
  });
}

}  // namespace

void matvec_rows_avx2(const WeightView& w, uint64_t row_begin, uint64_t row_count, const float* x, float* y,
                      ThreadPool& pool, bool exact) {
  const Plan pl = make_plan(w, exact);
  if (row_begin > pl.rows || row_count > pl.rows - row_begin)
    fail(ErrorKind::Bounds, "tensor '{}': rows [{}, {}) outside [0, {})", w.name, row_begin,
         row_begin + row_count, pl.rows);
  run(pl, row_begin, row_count, x, 1, y, row_count, pool);
}

void matmul_avx2(const WeightView& w, const float* x, size_t n, float* y, ThreadPool& pool, bool exact) {
  const Plan pl = make_plan(w, exact);
  run(pl, 0, pl.rows, x, n, y, pl.rows, pool);
}

}  // namespace cortiq::kernels

#endif  // x86
