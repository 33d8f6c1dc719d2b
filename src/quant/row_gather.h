// Row gather on encoded tensors: the payload of the tensor made of some rows of a `[rows, cols]`
// tensor, copied byte for byte (no decode, no re-quantization), for the codecs whose layout keeps
// each row's bytes apart. Task masks use it to read only the gate/up rows of alive FFN neurons
// (model/variant.cc, issue 28 "masks that save work"); defrag will use it to drop dead neurons.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "quant/dtype.h"

namespace cortiq::quant {

/// Whether gather_rows can copy rows of a `[rows, cols]` tensor of dtype t: f32, f16, bf16, q8_row,
/// q8_2f (each row's codes and scale; q8_2f keeps its column field), and q4_block, q4_tiled and q1
/// when cols % 32 == 0 (a row is then whole groups). Not: q4tp / q2tp / q1s / q1t / vbit / vbit_ro
/// (row ladders, outlier lists, overlays or offsets that are not per-row byte ranges) nor u8.
bool can_gather_rows(DType t, uint64_t cols) noexcept;

/// The payload of the `[ids.size(), cols]` tensor whose row j is row ids[j] of the `[rows, cols]`
/// tensor `payload` (dtype t, row-major); ids may repeat and need not ascend. The result decodes to
/// exactly the selected rows of decode(payload). Returns nullopt when !can_gather_rows(t, cols).
/// Throws Error(Parse) naming `name` when the payload does not match dtype and shape
/// (validate_payload), Error(Bounds) for an id ≥ rows.
std::optional<std::vector<uint8_t>> gather_rows(DType t, uint64_t rows, uint64_t cols,
                                                std::span<const uint8_t> payload,
                                                std::span<const uint32_t> ids, std::string_view name);

}  // namespace cortiq::quant
