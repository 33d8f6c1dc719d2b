// AVX-512 / VNNI matvec and batched matmul over the CMF codecs: the driver (contracts in
// kernels/simd_matvec.h; payload layouts FORMAT-NOTES §1.8, quant/codec.h, quant/layout.h). It
// parses a tensor into a Plan, quantizes the activations, splits the rows into blocks over the
// thread pool and hands each block to a codec family's int8 tile (q8.cc, nibble.cc, lowbit.cc,
// vbit.cc) or to the exact path (exact.cc). Internals shared by those files: matvec_internal.h.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx512/matvec_internal.h"
#include "kernels/avx512/tp_ladders.h"
#include "kernels/tier_caps.h"

namespace cortiq::kernels {

using quant::DType;

bool simd_cpu_ok() noexcept {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") &&
                         simd_detail::cpu_has_f16c();
  return ok;
}

bool simd_vbmi_ok() noexcept {
  static const bool ok = simd_cpu_ok() && __builtin_cpu_supports("avx512vbmi");
  return ok;
}

bool simd_supported(DType t) noexcept {
  return simd_cpu_ok() && simd_detail::avx512_has_kernel(t, simd_vbmi_ok());  // tier_caps.h
}

namespace avx512_detail {

BlockState& block_state() {
  thread_local BlockState s;
  return s;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Driver

/// Caller-thread scratch: q8_2f column field and quantized activations.
struct CallScratch {
  std::atomic<int> q1s_bad{0};  // Plan::q1s_bad
  quant::VBitView vb;           // vbit / vbit_ro view (row offsets reused between calls)
  LineVec<float> col;
  LineVec<int8_t> xq;
  LineVec<float> d;
  LineVec<int32_t> bias;
};
/// Most weights one matmul_multi_simd call takes (each needs its own call scratch).
constexpr size_t kMaxMulti = 4;

/// Caller-thread scratch of one product; `slot` < kMaxMulti separates the products of one
/// matmul_multi_simd call.
CallScratch& call_scratch(size_t slot = 0) {
  thread_local std::array<CallScratch, kMaxMulti> s;
  return s[slot];
}

/// out[i] = f16 → f32 of n little-endian halves at p (exact conversion, as f16_to_f32).
CQ_AVX512 void f16_row_to_f32(const uint8_t* p, uint64_t n, float* out) {
  for (uint64_t c = 0; c < n; c += 16) {
    const __mmask16 m = mask16(n - c);
    _mm512_mask_storeu_ps(out + c, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * c)));
  }
}

/// Parses and validates the tensor; returns false when the shape is one the SIMD kernels do not
/// cover (flat-group codecs with cols % 32 != 0), in which case the caller uses the reference.
/// A prepared view (WeightView::plan, weight_plan.h) takes the parsed pieces from its plan instead:
/// no validation or parsing per call, the same Plan and so the same results.
bool make_plan(const WeightView& w, bool exact, Plan& pl, size_t slot = 0) {
  if (!simd_supported(w.dtype))
    fail(ErrorKind::Unsupported, "tensor '{}': dtype {} has no SIMD kernel", w.name,
         quant::dtype_name(w.dtype));
  const WeightPlan* wp = plan_of(w);
  // q1t: O(1) here; each row's overlay is checked when the row is decoded (decode_row), so a call
  // costs O(rows read), not O(rows + overlay) of the tensor. q1s: the row blocks check the entries
  // (check_q1s_slice; one pass over the outliers per call, which also tells whether they are
  // ascending), a plan's were checked when it was made. vbit: vbit_view_into below is the full check.
  if (!wp && w.dtype != DType::Q1S && w.dtype != DType::VBit && w.dtype != DType::VBitRo)
    quant::validate_payload(w.dtype, w.shape, w.payload, w.name, /*check_rows=*/false);
  pl.name = w.name;
  pl.w = &w;
  pl.t = w.dtype;
  pl.rows = w.rows();
  pl.cols = w.cols();
  pl.p = w.payload.data();
  pl.gpr = pl.cols / 32;
  const uint64_t n = pl.rows * pl.cols;
  switch (pl.t) {
    case DType::Q8Row:
    case DType::Q8_2F:
      pl.scales = pl.p + n;
      pl.fam = Fam::Q8;
      break;
    case DType::Q4Block:
      pl.scales = pl.p + 16 * ((n + 31) / 32);
      pl.fam = Fam::NIBQ;
      break;
    case DType::Q4Tiled:
      // NIB: a NIBQ version that picked the 18-byte tiles apart with vpermt2b / vpermb measured
      // 1.3–1.5× slower on Zen 5 (the shuffles, and the 8-row tile's accumulators spilled)
      pl.fam = Fam::NIB;
      break;
    case DType::Q4TP:
    case DType::Q2TP:
      pl.tp = wp ? wp->tp : quant::tp_view(pl.t, w.shape, w.payload, w.name);
      pl.bases = wp ? (wp->bases ? wp->bases->data() : nullptr) : simd_detail::tp_bases(w, pl.rows);
      pl.fam = pl.t == DType::Q2TP ? Fam::Q2 : Fam::NIBQ;
      break;
    case DType::Q1:
      pl.fam = Fam::Q1;
      break;
    case DType::Q1S: {
      // O(1) here; the row blocks check the entries, a slice each (check_q1s_slice). A plan's entries
      // were checked in full when it was made: unordered ones go to the reference right away (what
      // finish_q1s would redo the call with), ordered ones skip the per-block check.
      if (wp && !wp->q1s.ascending) return false;
      pl.q1s = wp ? wp->q1s : quant::q1s_view(w.shape, w.payload, w.name, /*check_entries=*/false);
      pl.q1s_checked = wp != nullptr;
      auto& cs = call_scratch(slot);
      cs.q1s_bad.store(0);
      pl.q1s_bad = &cs.q1s_bad;
      pl.fam = Fam::Q1;
      break;
    }
    case DType::VBit:
    case DType::VBitRo: {
      if (wp) {
        pl.vb = &wp->vb;
      } else {
        auto& cs = call_scratch(slot);
        quant::vbit_view_into(cs.vb, pl.t, w.shape, w.payload, w.name);
        pl.vb = &cs.vb;
      }
      pl.fam = Fam::NIBV;  // bias −Σq, scaled by each row's L in tile_vbit
      pl.row_bytes = pl.rows ? pl.vb->row_off[pl.rows] / pl.rows : 0;  // mean row (prefetch unit)
      break;
    }
    default:
      break;
  }
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
      pl.row_bytes = pl.cols;
      break;
    case DType::Q4Tiled:
      pl.row_bytes = 18 * pl.gpr;
      break;
    case DType::Q1:
    case DType::Q1S:
      pl.row_bytes = quant::kQ1TileBytes * pl.gpr;
      break;
    case DType::Q4Block:
    case DType::Q4TP:
      pl.row_bytes = 16 * pl.gpr;
      break;
    case DType::Q2TP:
      pl.row_bytes = 8 * pl.gpr;
      break;
    case DType::Q1T:
      pl.q1t = wp ? wp->q1t : quant::q1t_view(w.shape, w.payload, w.name, /*check_rows=*/false);
      pl.row_bytes = quant::kQ1tTileBytes * pl.gpr;
      pl.fam = Fam::Q1T;
      break;
    default:
      break;
  }
  const bool flat = pl.t == DType::Q4Block || pl.t == DType::Q4Tiled || pl.t == DType::Q1;
  if (flat && pl.cols % 32 != 0) return false;
  pl.int8 = !exact && !quant::is_float_dtype(pl.t) && (pl.t != DType::Q1T || simd_vbmi_ok());
  if (pl.t == DType::Q8_2F && wp) {
    pl.col = wp->col_avx512.data();  // filled: the plan was made on this CPU, which has the tier
  } else if (pl.t == DType::Q8_2F) {
    auto& cs = call_scratch(slot);
    grow(cs.col, pl.cols);
    const uint8_t* cp = pl.p + n + 2 * pl.rows;
    f16_row_to_f32(cp, pl.cols, cs.col.data());
    pl.col = cs.col.data();
  }
  return true;
}
ActSet quantize_all(const Plan& pl, const float* x, size_t n, ThreadPool& pool, size_t slot = 0) {
  auto& cs = call_scratch(slot);
  ActSet a;
  a.sz = qact_size(pl.fam, pl.cols);
  grow(cs.xq, n * a.sz.xq_bytes);
  grow(cs.d, n * a.sz.lanes);
  grow(cs.bias, n * a.sz.lanes);
  a.xq = cs.xq.data();
  a.d = cs.d.data();
  a.bias = cs.bias.data();
  const auto rows = [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i)
      quantize_act(pl.fam, x + i * pl.cols, pl.t == DType::Q8_2F ? pl.col : nullptr, pl.cols,
                   cs.xq.data() + i * a.sz.xq_bytes, cs.d.data() + i * a.sz.lanes,
                   cs.bias.data() + i * a.sz.lanes);
  };
  // Tokens are quantized independently (same values for any split); a batch is split over the pool
  // (pp512 prefill: 512 rows per product, serial on the caller before).
  if (n >= 2)
    pool.parallel_for(n, rows);
  else
    rows(0, n);
  return a;
}

/// Rows [r0, r0+rc) × tokens [0, n) of any int8 codec in R×T tiles: the codec family's row-block
/// loop (block_q8, block_nib, …; block_tiles in matvec_internal.h).
template <int R, int T>
CQ_AVX512 void block_int8_rt(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,
                             const ActSet& acts, size_t n, float* y, size_t y_stride, uint64_t j0) {
  if (pl.fam == Fam::Q8)
    block_q8<R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else if (pl.fam == Fam::Q1T)
    block_q1t<R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else if (pl.t == DType::VBit || pl.t == DType::VBitRo)
    block_vbit<R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else if (pl.fam == Fam::Q1)
    block_q1<R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else if (pl.fam == Fam::Q2)
    block_q2<R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else
    switch (pl.t) {
      case DType::Q4Tiled:
        block_nib<DType::Q4Tiled, R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        break;
      case DType::Q4Block:
        block_nib<DType::Q4Block, R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        break;
      default:
        block_nib<DType::Q4TP, R, T>(pl, st, r0, rc, acts, n, y, y_stride, j0);
        break;
    }
}

/// Tile shapes (measured with bench/kernels_bench on Zen 4, 1 thread, 4864×896): q8 1 row (matvec) /
/// 4 rows × 2 tokens (matmul: since the chunked int32 sums, 4 × 4 spills; on Zen 5 matmul_n64 3.0 →
/// 1.9 ms against 2.3 ms for 4 × 4 and 2.5 ms for 2 × 4); the nibble and 2-bit codecs 4 rows × 3 tokens / 4
/// rows (with the codec a template parameter nothing spills; 2-row tiles were 15–40% slower); q1 as the
/// nibble codecs and vbit; q1t 4 rows (matvec) / 2 rows × 2–4 tokens. q4tp (NIBQ, Zen 5, 2 threads): 8 rows
/// (matvec, 12% faster than 4) / 4 rows × 2 tokens (6% faster than 4 × 4).
/// Two tokens or more take block_nibq_few instead (each 4-row chunk unpacked once per 8 tokens):
/// Zen 5, 1 thread, interleaved A/B, matmul_n4 4864×896 166–175 → 148–160 µs, matmul_n64 2.18 →
/// 1.63 ms; the 0.5B q4tp `cortiq bench --parallel 4` aggregate 224–227 → 255–263 tok/s (2
/// threads), 137 → 157 (1); pp512 (1 thread) 290–312 → 322–351 tok/s.
///
/// q8 matvec reads one row at a time: it is memory-bound, and a DRAM stream read in address order
/// runs faster than R rows read side by side a superblock at a time (R streams one row apart).
/// Zen 5, 1 thread, kernels_bench A/B in one run: matvec_cold 4864×896 170 → 130 µs, 896×4864
/// 155 → 125 µs, 151936×896 (the lm_head) 5.2 → 3.6 ms against 8-row tiles; the 0.5B q8 decode
/// 48–49 → 50–53 tok/s (1 thread), 90 → 98 (2). The nibble codecs keep their row tiles: they are
/// compute-bound at T = 1, and one row at a time costs them 30–40% (each activation load then
/// serves one row).
CQ_AVX512 void block_int8(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc, const ActSet& acts,
                          size_t n, float* y, size_t y_stride, uint64_t j0) {
  // Small batches (continuous-batching decode steps of 2–8 sequences) get a token tile that
  // divides them, so no padded token is computed.
  if (pl.fam == Fam::Q1T) {  // 5 digit planes per row: 2-row tiles keep the accumulators in registers
    if (n == 1)
      block_int8_rt<4, 1>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    else if (n == 2)
      block_int8_rt<2, 2>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    else if (n % 4 == 0)
      block_int8_rt<2, 4>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    else
      block_int8_rt<2, 3>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  } else if (pl.fam == Fam::NIBQ) {
    if (n == 1)  // each row's chunk is applied to the token in turn (nibq_step)
      block_int8_rt<8, 1>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    else  // 4-row chunks unpacked once per kFewTokens tokens
      for (size_t i0 = 0; i0 < n; i0 += kFewTokens) {
        const size_t m = std::min(kFewTokens, n - i0);
        if (pl.t == DType::Q4TP)
          block_nibq_few<DType::Q4TP>(pl, st, r0, rc, acts, i0, m, y, y_stride, j0);
        else
          block_nibq_few<DType::Q4Block>(pl, st, r0, rc, acts, i0, m, y, y_stride, j0);
      }
  } else if (n == 2 || (n > 1 && pl.fam == Fam::Q8))  // q8: an odd n pads one token
    block_int8_rt<4, 2>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else if (n > 1 && n % 4 == 0)
    block_int8_rt<4, 4>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else if (n > 1)
    block_int8_rt<4, 3>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else if (pl.fam == Fam::Q8)
    block_int8_rt<1, 1>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else
    block_int8_rt<4, 1>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

/// One product of a run: Y[i·y_stride + j] = row (row_begin + j) · X[i] for j < row_count, i < n,
/// with its quantized activations (int8 path).
struct Job {
  const Plan* pl;
  uint64_t row_begin, row_count;
  const float* x;
  size_t n;
  float* y;
  size_t y_stride;
  ActSet acts;
  uint64_t nblocks() const { return (row_count + kRowBlock - 1) / kRowBlock; }
};

/// q1s: block b of nb checks entries [b·per, (b+1)·per] (each slice overlaps the next by one, so
/// every adjacent pair is compared once): index < rows·cols and strictly ascending; problems go to
/// pl.q1s_bad. O(count / nb) per block — the tensor's entries are read once per call in all.
void check_q1s_slice(const Plan& pl, uint64_t b, uint64_t nb) {
  const quant::Q1sView& v = pl.q1s;
  const uint64_t per = (uint64_t{v.count} + nb - 1) / nb, n = pl.rows * pl.cols;
  const uint64_t lo = std::min<uint64_t>(v.count, b * per), hi = std::min<uint64_t>(v.count, lo + per + 1);
  int bad = 0;
  for (uint64_t e = lo; e < hi; ++e) {
    const uint32_t idx = v.index(static_cast<uint32_t>(e));
    if (idx >= n) bad |= 2;
    if (e > lo && idx <= v.index(static_cast<uint32_t>(e - 1))) bad |= 1;
  }
  if (bad) pl.q1s_bad->fetch_or(bad, std::memory_order_relaxed);
}

/// Block b (rows row_begin + 16b …) of job j, on the calling thread, which runs the job's blocks
/// b … b + ahead − 1 next (ahead ≥ 1; prep_tp computes their ladders together).
void run_block(const Job& j, size_t b, size_t ahead, BlockState& st) {
  const Plan& pl = *j.pl;
  if (pl.t == DType::Q1S && !pl.q1s_checked) check_q1s_slice(pl, b, j.nblocks());
  const ActSet& acts = j.acts;
  const float* x = j.x;
  const size_t n = j.n, y_stride = j.y_stride;
  float* y = j.y;
  const bool is_tp = pl.t == DType::Q4TP || pl.t == DType::Q2TP;
  const uint64_t j0 = b * kRowBlock, rc = std::min<uint64_t>(kRowBlock, j.row_count - j0);
  const uint64_t r0 = j.row_begin + j0;
  if (is_tp) prep_tp(pl, r0, rc, std::min<uint64_t>(ahead * kRowBlock, j.row_count - j0), st);
  if (pl.int8) {
    block_int8(pl, st, r0, rc, acts, n, y, y_stride, j0);
    if (pl.t == DType::Q1T)
      simd_detail::add_q1t_overlay(pl.q1t, pl.name, pl.cols, r0, rc, x, n, y, y_stride, j0);
    // an entry out of order → finish_q1s redoes the call
    if (pl.t == DType::Q1S &&
        !simd_detail::add_q1s_outliers(pl.q1s, pl.p, pl.gpr, pl.cols, r0, rc, x, n, y, y_stride, j0))
      pl.q1s_bad->fetch_or(1, std::memory_order_relaxed);
  } else {
    block_exact(pl, st, r0, rc, x, n, y, y_stride, j0);
  }
}

/// Runs the jobs' row blocks as one parallel_for (one hand-off to the pool for all of them).
void run(std::span<const Job> jobs, ThreadPool& pool) {
  uint64_t total = 0;
  for (const Job& j : jobs) total += j.nblocks();
  pool.parallel_for(total, [&](size_t b0, size_t b1) {
    BlockState& st = block_state();
    st.lad_pl = nullptr;  // ladders kept from another run may be of another tensor at the same address
    size_t ji = 0;
    uint64_t base = 0;  // first global block of jobs[ji]
    for (size_t b = b0; b < b1; ++b) {
      while (b >= base + jobs[ji].nblocks()) base += jobs[ji++].nblocks();
      run_block(jobs[ji], b - base, std::min<uint64_t>(b1, base + jobs[ji].nblocks()) - b, st);
    }
  });
}

/// After a run: a q1s job whose blocks found an index ≥ rows·cols throws the layout's Parse error
/// (quant::q1s_view with the full check names the entry); one whose indices are not strictly
/// ascending (legal: later duplicates win) is recomputed by the reference, which applies the
/// overwrite semantics — the kernels' binary search needs the order.
void finish_q1s(const Job& j, ThreadPool& pool) {
  const Plan& pl = *j.pl;
  if (pl.t != DType::Q1S) return;
  const int bad = pl.q1s_bad->load();
  if (bad & 2) (void)quant::q1s_view(pl.w->shape, pl.w->payload, pl.name);
  if (bad == 0) return;
  if (j.n == 1)
    matvec_rows_ref(*pl.w, j.row_begin, j.row_count, j.x, j.y, pool);
  else
    matmul_ref(*pl.w, j.x, j.n, j.y, pool);  // batched jobs cover every row (y_stride = rows)
}

/// Y[i·y_stride + j] = row (row_begin + j) · X[i] for j < row_count, i < n.
void run(const Plan& pl, uint64_t row_begin, uint64_t row_count, const float* x, size_t n, float* y,
         size_t y_stride, ThreadPool& pool) {
  Job j{&pl, row_begin, row_count, x, n, y, y_stride, {}};
  if (pl.int8) j.acts = quantize_all(pl, x, n, pool);
  run(std::span<const Job>(&j, 1), pool);
  finish_q1s(j, pool);
}

}  // namespace

}  // namespace avx512_detail

using namespace avx512_detail;

void simd_detail::q8_2f_columns_avx512(const uint8_t* p, uint64_t n, float* out) {
  f16_row_to_f32(p, n, out);
}

void matvec_rows_simd(const WeightView& w, uint64_t row_begin, uint64_t row_count, const float* x, float* y,
                      ThreadPool& pool, bool exact) {
  Plan pl;
  const bool ok = make_plan(w, exact, pl);
  if (row_begin > pl.rows || row_count > pl.rows - row_begin)
    fail(ErrorKind::Bounds, "tensor '{}': rows [{}, {}) outside [0, {})", w.name, row_begin,
         row_begin + row_count, pl.rows);
  if (!ok) return matvec_rows_ref(w, row_begin, row_count, x, y, pool);
  run(pl, row_begin, row_count, x, 1, y, row_count, pool);
}

void matmul_simd(const WeightView& w, const float* x, size_t n, float* y, ThreadPool& pool, bool exact) {
  Plan pl;
  if (!make_plan(w, exact, pl)) return matmul_ref(w, x, n, y, pool);
  run(pl, 0, pl.rows, x, n, y, pl.rows, pool);
}

void matmul_multi_simd(std::span<const WeightView* const> ws, const float* x, size_t n,
                       std::span<float* const> ys, ThreadPool& pool, bool exact) {
  if (ws.size() != ys.size())
    fail(ErrorKind::InvalidArgument, "matmul_multi: {} weights but {} outputs", ws.size(), ys.size());
  if (ws.size() > kMaxMulti) {  // more products than scratch slots: one call each
    for (size_t i = 0; i < ws.size(); ++i) matmul_simd(*ws[i], x, n, ys[i], pool, exact);
    return;
  }
  std::array<Plan, kMaxMulti> plans;
  std::array<Job, kMaxMulti> jobs;
  size_t nj = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (!make_plan(*ws[i], exact, plans[nj], nj)) {
      matmul_ref(*ws[i], x, n, ys[i], pool);  // a layout only the reference handles (as matmul_simd)
      continue;
    }
    if (nj > 0 && plans[nj].cols != plans[0].cols)
      fail(ErrorKind::InvalidArgument, "matmul_multi: tensor '{}' has {} columns, '{}' has {}", ws[i]->name,
           plans[nj].cols, ws[0]->name, plans[0].cols);
    Job& j = jobs[nj];
    j = Job{&plans[nj], 0, plans[nj].rows, x, n, ys[i], plans[nj].rows, {}};
    if (plans[nj].int8) {
      // products of one activation in the same layout share its quantization (q/k/v, gate/up);
      // q8_2f folds its own column field into it
      const auto same = [&](size_t k) {
        return plans[k].int8 && plans[k].fam == plans[nj].fam && plans[k].t != DType::Q8_2F &&
               plans[nj].t != DType::Q8_2F;
      };
      size_t k = 0;
      while (k < nj && !same(k)) ++k;
      j.acts = k < nj ? jobs[k].acts : quantize_all(plans[nj], x, n, pool, nj);
    }
    ++nj;
  }
  run(std::span<const Job>(jobs.data(), nj), pool);
  for (size_t i = 0; i < nj; ++i) finish_q1s(jobs[i], pool);
}

}  // namespace cortiq::kernels

#endif  // x86
