// The parsed form of one weight tensor that the SIMD tiers would otherwise rebuild on every product
// (issue 28, "kernels chosen once"): kernels::prepare_weight makes it once when a tensor is bound and
// stores it with the view (WeightView::plan); avx512/matvec_driver.cc and avx2/matvec_driver.cc read
// it instead of re-validating the payload and re-deriving the layout views per call. Internal to
// src/kernels.
//
// A plan is immutable once made and holds nothing per call or per thread (the int8-or-exact choice
// depends on the MatmulMode and stays per call; scratch stays thread_local in the tiers), so one plan
// can serve any number of threads, models and modes at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/weight_view.h"
#include "quant/dtype.h"
#include "quant/layout.h"
#include "util/line_vec.h"

namespace cortiq::kernels {

/// A tensor's payload parsed once (see the file comment). Every view held here points into the
/// payload the plan was made from (`data`, `size`), which must outlive the plan — as it must outlive
/// the view that carries it.
struct WeightPlan {
  // What it was made from; a view whose payload, dtype or shape differ is refused (plan_of).
  quant::DType dtype = quant::DType::F32;
  const uint8_t* data = nullptr;
  size_t size = 0;
  uint64_t rows = 0, cols = 0;

  quant::TpView tp;    ///< q4tp / q2tp: quant::tp_view
  quant::Q1sView q1s;  ///< q1s: quant::q1s_view with the full entry check (so `ascending` is known)
  quant::Q1tView q1t;  ///< q1t: quant::q1t_view without the row check (rows are checked as read)
  quant::VBitView vb;  ///< vbit / vbit_ro: quant::vbit_view (widths, scales, row offsets)
  /// q4tp / q2tp: the view's prepared ladder bases (WeightView::prepared, `[2, rows]` f32), kept
  /// alive here; null when the view carried none.
  std::shared_ptr<const std::vector<float>> bases;
  /// q8_2f: the f16 column field widened to f32 `[cols]` as each tier widens it — the AVX-512 tier
  /// with vcvtph2ps, the AVX2 tier with util/half.h f16_to_f32; the two differ only on signaling
  /// NaNs (vcvtph2ps quiets them), and each tier's results must stay its own bit for bit. Empty when
  /// the CPU lacks that tier.
  LineVec<float> col_avx512, col_avx2;
};

/// Parses and validates `w` for the SIMD tiers: quant::validate_payload (q1t rows excepted), and the
/// views above for its dtype. Returns null for a dtype without a SIMD kernel in any tier (u8, the
/// reserved ids). Throws Error(Parse) naming `w.name` for a payload that does not match dtype and
/// shape, Error(InvalidArgument) when w.prepared does not hold 2·rows values (q4tp / q2tp).
std::shared_ptr<const WeightPlan> make_weight_plan(const WeightView& w);

/// The plan of `w`, or null when it has none. Throws Error(InvalidArgument) naming the tensor when
/// the plan was made for other bytes, another dtype or another shape (a view copied from a
/// prepared one and then changed: its plan would describe a different tensor).
const WeightPlan* plan_of(const WeightView& w);

namespace simd_detail {
/// out[c] = the f16 values at p (little-endian, n of them) widened with vcvtph2ps, as the AVX-512
/// tier widens the q8_2f column field (avx512/matvec_driver.cc). Only call when simd_cpu_ok().
void q8_2f_columns_avx512(const uint8_t* p, uint64_t n, float* out);
}  // namespace simd_detail

}  // namespace cortiq::kernels
