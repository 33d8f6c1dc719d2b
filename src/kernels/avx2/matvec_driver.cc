// AVX2 / FMA / F16C matvec and batched matmul over the CMF codecs: the driver (contracts and error
// bounds in kernels/simd_avx2.h; payload layouts FORMAT-NOTES §1.8, quant/codec.h, quant/layout.h).
// It parses a tensor into a Plan, quantizes the activations, splits the rows into blocks over the
// thread pool and hands each block to a codec family's int8 tiles (q8.cc, nibble.cc, lowbit.cc,
// vbit.cc) or to the exact path (exact.cc). Internals shared by those files: matvec_internal.h.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx2/matvec_internal.h"
#include "kernels/tier_caps.h"

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

namespace avx2_detail {

BlockState& block_state() {
  thread_local BlockState s;
  return s;
}

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

namespace {

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

/// q4_tiled / q4_block int8 matmul: the f16 group scales of rows [r0, r0+rc) converted once into st.gs
/// (row i at gs[i·gs_stride + g]), so that the T-token tiles of the block load them as f32 (the same
/// values: f16 → f32 is exact). Converted in every 2×2 tile instead, q4_block int8 matmul_n64 ran
/// 1.05–1.06× the one-file tier's instructions (GCC kept five row pointers on the stack); 1.01× with this.
CQ_AVX2 void set_f16_group_scales(const Plan& pl, BlockState& st, uint64_t r0, uint64_t rc) {
  st.gs_stride = pl.gpr;
  grow(st.gs, rc * st.gs_stride);
  for (uint64_t i = 0; i < rc; ++i) {
    float* gs = st.gs.data() + i * st.gs_stride;
    const uint64_t fg = (r0 + i) * pl.gpr;
    for (uint64_t g = 0; g < pl.gpr; ++g)
      gs[g] = _cvtsh_ss(
          load_le<uint16_t>(pl.t == DType::Q4Tiled ? pl.p + 18 * (fg + g) : pl.scales + 2 * (fg + g)));
  }
}

/// The int8 row block [r0, r0+rc) × tokens [0, n) in R×T tiles: the dtype's family's row-block loop.
template <int R, int T>
void block_int8(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc, const ActSet& acts, size_t n,
                float* y, size_t y_stride, uint64_t j0) {
  switch (pl.t) {
    case DType::Q4Tiled:
      return block_nib<DType::Q4Tiled, R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    case DType::Q4Block:
      return block_nib<DType::Q4Block, R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    case DType::Q4TP:
      return block_nib<DType::Q4TP, R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    case DType::Q2TP:
      return block_q2<R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    case DType::Q1:
    case DType::Q1S:
      return block_q1<R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    case DType::Q1T:
      return block_q1t<R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    case DType::VBit:
    case DType::VBitRo:
      return block_vbit<R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    default:
      return block_q8<R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  }
}

/// Y[i·y_stride + j] = row (row_begin + j) · X[i] for j < row_count, i < n.
void run(const Plan& pl, uint64_t row_begin, uint64_t row_count, const float* x, size_t n, float* y,
         size_t y_stride, ThreadPool& pool) {
  if (row_count == 0 || n == 0) return;
  ActSet acts;
  if (pl.int8) acts = quantize_all(pl, x, n);
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
        if ((pl.t == DType::Q4Block || pl.t == DType::Q4Tiled) && n > 1) set_f16_group_scales(pl, st, r0, rc);
        st.wq_ready = false;
        if ((pl.t == DType::VBit || pl.t == DType::VBitRo) && n > 1) unpack_vbit_rows(pl, st, r0, rc);
        // tiles measured on Zen 5 (1 thread, 4864×896, n = 64): q2tp 4×2 3.9 ms against 4.1 for 2×2;
        // q1 2×4 7.0 ms against 7.9 for 2×2 (within noise for the others and for matvec). q8 matvec
        // reads one row at a time, in address order (memory-bound; see block_int8 in avx512/matvec_driver.cc)
        if (n == 1 && pl.fam == Fam::Q8)
          block_int8<1, 1>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        else if (n == 1)
          block_int8<4, 1>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        else if (pl.fam == Fam::Q2)
          block_int8<4, 2>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        else if (pl.fam == Fam::Q1 && n % 4 == 0)
          block_int8<2, 4>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        else
          block_int8<2, 2>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        // q1s takes this path only with ascending outliers (make_plan), so the pass cannot fail
        if (pl.t == DType::Q1S)
          (void)simd_detail::add_q1s_outliers(pl.q1s, pl.p, pl.gpr, pl.cols, r0, rc, x, n, y, y_stride, j0);
        if (pl.t == DType::Q1T)
          simd_detail::add_q1t_overlay(pl.q1t, pl.w->name, pl.cols, r0, rc, x, n, y, y_stride, j0);
        continue;
      }
      block_exact(pl, st, r0, rc, x, n, y, y_stride, j0, dec ? &*dec : nullptr);
    }
  });
}

}  // namespace

}  // namespace avx2_detail

using avx2_detail::make_plan;
using avx2_detail::Plan;
using avx2_detail::run;

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
