// A weight tensor as the kernels see it: dtype, logical shape and the payload bytes, read in place
// (normally a span into the mmap of a .cmf file; FORMAT-NOTES §1.6–1.8).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "quant/dtype.h"

namespace cortiq::kernels {

struct WeightPlan;  // weight_plan.h

/// A borrowed view of one tensor. The payload must outlive every use of the view.
/// Matrices are `[rows, cols]` row-major (HF Linear layout `[out_features, in_features]`);
/// 1-D tensors are treated as a single row.
struct WeightView {
  quant::DType dtype = quant::DType::F32;
  std::vector<uint64_t> shape;
  std::span<const uint8_t> payload;
  std::string name;  ///< tensor name, used in error messages
  /// Per-row values derived from the payload once, when the tensor is bound (kernels::prepare_weight),
  /// instead of on every product. q4tp / q2tp: the ladder bases of every row, exp2f(lo) of rows
  /// 0…rows−1 followed by exp2f(step) of the same rows (`[2, rows]` f32; FORMAT-NOTES §1.8). Null for
  /// the other dtypes and for a view nobody prepared, which the kernels compute the same values for on
  /// every call (identical results, slower: two lookups in a 256 KiB table per row).
  std::shared_ptr<const std::vector<float>> prepared = nullptr;
  /// Owns the bytes `payload` points into when kernels::prepare_weight re-laid the tensor out in
  /// memory of its own (q4_tiled → q4_block); null while the payload borrows the caller's bytes.
  std::shared_ptr<const void> storage = nullptr;
  /// The payload parsed and validated once for the SIMD kernels (kernels::prepare_weight; the
  /// internal weight_plan.h): the products of a view that carries one skip the per-call parsing
  /// (quant::validate_payload, the tp / q1s / q1t / vbit views, q8_2f's column field) and give the
  /// same results bit for bit. Immutable, shared by copies of the view and safe to use from any
  /// number of threads. Null for a view nobody prepared, which the kernels parse on every call.
  /// A view whose payload, dtype or shape no longer match its plan is refused
  /// (Error(InvalidArgument)): reset `plan` (or prepare the view again) after changing them.
  std::shared_ptr<const WeightPlan> plan = nullptr;

  /// shape[0] for tensors of rank >= 2, else 1.
  uint64_t rows() const noexcept { return shape.size() >= 2 ? shape[0] : 1; }
  /// Product of shape[1..] for rank >= 2, shape[0] for rank 1, 1 for rank 0.
  uint64_t cols() const noexcept {
    if (shape.empty()) return 1;
    if (shape.size() == 1) return shape[0];
    uint64_t c = 1;
    for (size_t i = 1; i < shape.size(); ++i) c *= shape[i];
    return c;
  }
  /// Total element count.
  uint64_t numel() const noexcept { return rows() * cols(); }
};

}  // namespace cortiq::kernels
