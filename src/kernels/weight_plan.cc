// make_weight_plan / plan_of (weight_plan.h).
#include "kernels/weight_plan.h"

#include <utility>

#include "kernels/simd_avx2.h"
#include "kernels/simd_matvec.h"
#include "kernels/tier_caps.h"
#include "util/error.h"
#include "util/half.h"

namespace cortiq::kernels {

using quant::DType;

std::shared_ptr<const WeightPlan> make_weight_plan(const WeightView& w) {
  if (!simd_detail::any_tier_has_kernel(w.dtype)) return nullptr;  // tier_caps.h
  auto pl = std::make_shared<WeightPlan>();
  pl->dtype = w.dtype;
  pl->data = w.payload.data();
  pl->size = w.payload.size();
  pl->rows = w.rows();
  pl->cols = w.cols();
  switch (w.dtype) {
    case DType::Q1S:  // full check: indices < rows·cols, and whether they ascend
      pl->q1s = quant::q1s_view(w.shape, w.payload, w.name);
      break;
    case DType::VBit:
    case DType::VBitRo:
      pl->vb = quant::vbit_view(w.dtype, w.shape, w.payload, w.name);
      break;
    default:
      quant::validate_payload(w.dtype, w.shape, w.payload, w.name, /*check_rows=*/false);
      break;
  }
  switch (w.dtype) {
    case DType::Q4TP:
    case DType::Q2TP:
      pl->tp = quant::tp_view(w.dtype, w.shape, w.payload, w.name);
      if (w.prepared && w.prepared->size() != 2 * pl->rows)
        fail(ErrorKind::InvalidArgument, "tensor '{}': prepared ladder bases hold {} values, {} rows need {}",
             w.name, w.prepared->size(), pl->rows, 2 * pl->rows);
      pl->bases = w.prepared;
      break;
    case DType::Q1T:
      pl->q1t = quant::q1t_view(w.shape, w.payload, w.name, /*check_rows=*/false);
      break;
    case DType::Q8_2F: {
      const uint8_t* cp = pl->data + pl->rows * pl->cols + 2 * pl->rows;  // [i8 : n][f16 : rows][f16 : cols]
      if (simd_cpu_ok()) {
        pl->col_avx512.resize(pl->cols);
        simd_detail::q8_2f_columns_avx512(cp, pl->cols, pl->col_avx512.data());
      }
      if (avx2_cpu_ok()) {
        pl->col_avx2.resize(pl->cols);
        for (uint64_t c = 0; c < pl->cols; ++c) pl->col_avx2[c] = f16_to_f32(load_le<uint16_t>(cp + 2 * c));
      }
      break;
    }
    default:
      break;
  }
  return pl;
}

const WeightPlan* plan_of(const WeightView& w) {
  const WeightPlan* pl = w.plan.get();
  if (!pl) return nullptr;
  if (pl->dtype != w.dtype || pl->data != w.payload.data() || pl->size != w.payload.size() ||
      pl->rows != w.rows() || pl->cols != w.cols())
    fail(ErrorKind::InvalidArgument,
         "tensor '{}': its kernel plan was made for a {} [{}, {}] payload of {} bytes at another place or "
         "shape (the view is {} [{}, {}], {} bytes); prepare the changed view again",
         w.name, quant::dtype_name(pl->dtype), pl->rows, pl->cols, pl->size, quant::dtype_name(w.dtype),
         w.rows(), w.cols(), w.payload.size());
  return pl;
}

}  // namespace cortiq::kernels
