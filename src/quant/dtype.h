// CMF v2 dtype ids, names and payload sizes (spec §3–4, FORMAT-NOTES §1.7).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace cortiq::quant {

/// On-disk dtype ids of the tensor directory (FORMAT-NOTES §1.7). Ids 5 (mix8_4) and 7 (q4_col)
/// are reserved: known ids with no codec.
enum class DType : uint8_t {
  F32 = 0,
  F16 = 1,
  BF16 = 2,
  Q8Row = 3,
  Q4Block = 4,
  Mix8_4 = 5,
  U8 = 6,
  Q4Col = 7,
  VBit = 8,
  Q8_2F = 9,
  VBitRo = 10,
  Q4Tiled = 11,
  Q1 = 12,
  Q1S = 13,
  Q1T = 14,
  Q4TP = 15,
  Q2TP = 16,
};

/// Number of known dtype ids (0..16).
inline constexpr int kNumDTypes = 17;
/// Elements per quantization group for every grouped codec.
inline constexpr uint64_t kGroup = 32;

/// Canonical lowercase name: "f32", "f16", "bf16", "q8_row", "q4_block", "mix8_4", "u8", "q4_col",
/// "vbit", "q8_2f", "vbit_ro", "q4_tiled", "q1", "q1s", "q1t", "q4tp", "q2tp".
std::string_view dtype_name(DType t) noexcept;

/// The dtype for an on-disk id, or nullopt for an unknown id (> 16).
std::optional<DType> dtype_from_id(uint8_t id) noexcept;

/// Parses a canonical name (as returned by dtype_name); nullopt if unknown.
std::optional<DType> dtype_from_name(std::string_view name) noexcept;

/// Whether the dtype is a raw float array (f32, f16, bf16): no quantization, elements stored as is.
constexpr bool is_float_dtype(DType t) noexcept {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

/// Whether a codec (decode) exists for the dtype: false for mix8_4, q4_col and u8.
bool dtype_has_codec(DType t) noexcept;

/// Exact payload size in bytes for fixed-size dtypes, given the row-major shape (`[rows, in]` for
/// matrices). Returns nullopt for variable-size dtypes (vbit, vbit_ro, q1s, q1t, u8, reserved) and
/// for q4tp/q2tp/q8_row/q8_2f with a shape their layout cannot hold (not 2-D, in % 32 != 0).
/// Throws Error(Bounds) if the size overflows u64.
std::optional<uint64_t> expected_nbytes(DType t, std::span<const uint64_t> shape);

/// Validates a payload against its dtype and shape without decoding it: fixed-size dtypes must
/// have exactly expected_nbytes; vbit/vbit_ro/q1s/q1t are parsed and their exact length and
/// internal offsets/indices checked (FORMAT-NOTES §1.8); u8 accepts anything; reserved ids and
/// shapes a codec cannot hold are rejected. Throws Error(Parse or Bounds) naming `tensor_name`.
/// `check_rows = false` leaves q1t's per-row overlay check (O(rows + overlay)) to the caller, which
/// must run q1t_check_row on every row it reads — as decode_rows and the matvec kernels do, so a
/// per-call check stays O(1) for q1t; every other dtype is checked in full either way.
void validate_payload(DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
                      std::string_view tensor_name, bool check_rows = true);

}  // namespace cortiq::quant
