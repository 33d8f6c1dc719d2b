// dtype names, ids, fixed payload sizes and payload validation (FORMAT-NOTES §1.7–1.8).
#include "quant/dtype.h"

#include <fmt/ranges.h>

#include <array>

#include "quant/detail.h"
#include "quant/layout.h"
#include "util/error.h"

namespace cortiq::quant {

namespace {
constexpr std::array<std::string_view, kNumDTypes> kNames = {
    "f32",   "f16",     "bf16",     "q8_row", "q4_block", "mix8_4", "u8",   "q4_col", "vbit",
    "q8_2f", "vbit_ro", "q4_tiled", "q1",     "q1s",      "q1t",    "q4tp", "q2tp"};
}  // namespace

std::string_view dtype_name(DType t) noexcept {
  const auto i = static_cast<size_t>(t);
  return i < kNames.size() ? kNames[i] : std::string_view("unknown");
}

std::optional<DType> dtype_from_id(uint8_t id) noexcept {
  if (id >= kNumDTypes) return std::nullopt;
  return static_cast<DType>(id);
}

std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<DType>(i);
  return std::nullopt;
}

bool dtype_has_codec(DType t) noexcept {
  switch (t) {
    case DType::Mix8_4:
    case DType::Q4Col:
    case DType::U8:
      return false;
    default:
      return static_cast<int>(t) < kNumDTypes;
  }
}

std::optional<uint64_t> expected_nbytes(DType t, std::span<const uint64_t> shape) {
  using detail::add;
  using detail::mul;
  const std::string_view w = dtype_name(t);
  const uint64_t n = detail::numel(shape, w);
  const bool two_d = shape.size() == 2;
  switch (t) {
    case DType::F32:
      return mul(n, 4, w);
    case DType::F16:
    case DType::BF16:
      return mul(n, 2, w);
    case DType::Q8Row:
      if (!two_d) return std::nullopt;
      return add(n, mul(shape[0], 2, w), w);
    case DType::Q8_2F:
      if (!two_d) return std::nullopt;
      return add(add(n, mul(shape[0], 2, w), w), mul(shape[1], 2, w), w);
    case DType::Q4Block:
    case DType::Q4Tiled:
      return mul(detail::ceil_div(n, kGroup), 18, w);
    case DType::Q1:
      return mul(detail::ceil_div(n, kGroup), kQ1TileBytes, w);
    case DType::Q4TP:
    case DType::Q2TP: {
      if (!two_d || shape[1] == 0 || shape[1] % kGroup != 0) return std::nullopt;
      const uint64_t gpr = shape[1] / kGroup;
      const uint64_t per_row =
          add(add(mul(gpr, t == DType::Q4TP ? 16 : 8, w), 4, w), tp_code_row_bytes(gpr), w);
      return mul(shape[0], per_row, w);
    }
    default:
      return std::nullopt;
  }
}

void validate_payload(DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
                      std::string_view tensor_name, bool check_rows) {
  const auto id = static_cast<unsigned>(t);
  if (id >= static_cast<unsigned>(kNumDTypes))
    fail(ErrorKind::Parse, "tensor '{}': unknown dtype {}", tensor_name, id);
  switch (t) {
    case DType::U8:
      return;
    case DType::Mix8_4:
    case DType::Q4Col:
      fail(ErrorKind::Parse, "tensor '{}': dtype {} ({}) is reserved and has no layout", tensor_name, id,
           dtype_name(t));
    case DType::VBit:
    case DType::VBitRo:
      (void)vbit_view(t, shape, payload, tensor_name);
      return;
    case DType::Q1S:
      (void)q1s_view(shape, payload, tensor_name);
      return;
    case DType::Q1T:
      (void)q1t_view(shape, payload, tensor_name, check_rows);
      return;
    default:
      break;
  }
  const auto want = expected_nbytes(t, shape);
  if (!want) {
    fail(ErrorKind::Parse, "tensor '{}': dtype {} cannot hold shape [{}]", tensor_name, dtype_name(t),
         fmt::join(shape, ","));
  }
  if (payload.size() != *want)
    fail(ErrorKind::Parse, "tensor '{}': {} payload is {} bytes, expected {}", tensor_name, dtype_name(t),
         payload.size(), *want);
}

}  // namespace cortiq::quant
