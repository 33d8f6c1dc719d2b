// Byte layouts of the variable-size and multi-plane CMF payloads, as parsed read-only views that the
// codecs, the container validator and the kernels share (FORMAT-NOTES §1.8, spec §3.2).
//
// Every view points into the caller's payload bytes (no copies except vbit row offsets) and is only
// valid while those bytes live. Parsing checks every length, offset and index named in the layout
// and throws Error(Parse) (naming `what`, usually the tensor name) on any inconsistency; a view
// that was returned is safe to read in place without further bounds checks.
//
// Shapes are `[rows, in]` row-major; all multi-byte fields are little-endian and unaligned (read
// them with load_le, never by pointer cast).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "quant/dtype.h"
#include "util/half.h"

namespace cortiq::quant {

/// The `[rows, in]` view of a strictly 2-D shape; throws Error(Parse) naming `what` otherwise.
struct Matrix {
  uint64_t rows = 0;
  uint64_t in = 0;
};
Matrix matrix_2d(std::span<const uint64_t> shape, std::string_view what);

/// Whether `b` is an allowed vbit/vbit_ro row width: {3,4,5,6,8} (decision 11).
constexpr bool vbit_width_ok(unsigned b) noexcept {
  return b >= 3 && b <= 8 && b != 7;
}

// ---------------------------------------------------------------------------------------------
// vbit (8) and vbit_ro (10)
//
//   vbit    : [u8 bits : rows][f16 scale : rows·(in/32)][packed rows]
//   vbit_ro : [u8 bits : rows][f16 scale : rows·(in/32)][u32 off : rows+1][packed rows]
// Row r of the packed area holds `in` codes of bits[r] bits each, MSB-first as one bit stream,
// ceil(in·b/8) bytes, last byte zero padded. vbit_ro offsets are relative to the packed area,
// off[0] == 0 and off[r+1] − off[r] == ceil(in·bits[r]/8). Dequant: L = 2^(b−1) − 1,
// w[r,c] = (u − L)·scale[r, c/32].
// ---------------------------------------------------------------------------------------------
struct VBitView {
  uint64_t rows = 0, in = 0;
  const uint8_t* bits = nullptr;    ///< rows bytes, each in {3,4,5,6,8}
  const uint8_t* scales = nullptr;  ///< rows·(in/32) f16 LE, row-major
  const uint8_t* packed = nullptr;  ///< start of the packed rows
  std::vector<uint64_t> row_off;    ///< rows+1 offsets into `packed` (computed for vbit, read for vbit_ro)

  uint32_t width(uint64_t r) const noexcept { return bits[r]; }
  const uint8_t* row(uint64_t r) const noexcept { return packed + row_off[r]; }
  /// Scale of group g (= column / 32) of row r, as f32.
  float scale(uint64_t r, uint64_t g) const noexcept {
    return f16_to_f32(load_le<uint16_t>(scales + 2 * (r * (in / 32) + g)));
  }
};
/// Parses a vbit (t == VBit) or vbit_ro (t == VBitRo) payload; exact length and offsets checked.
VBitView vbit_view(DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
                   std::string_view what);
/// vbit_view into `out`, reusing the capacity of out.row_off (no allocation once it has rows + 1
/// entries: for kernels that parse the tensor on every call). Same checks and errors.
void vbit_view_into(VBitView& out, DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
                    std::string_view what);
/// Code k of a packed vbit row of width b (MSB-first bit stream).
inline uint32_t vbit_code(const uint8_t* row, uint64_t k, uint32_t b) noexcept {
  uint64_t bit = k * b;
  uint32_t v = 0;
  for (uint32_t i = 0; i < b; ++i, ++bit) v = (v << 1) | ((row[bit >> 3] >> (7 - (bit & 7))) & 1u);
  return v;
}
/// Bytes of one packed vbit row: ceil(in·b/8).
constexpr uint64_t vbit_row_bytes(uint64_t in, uint32_t b) noexcept {
  return (in * b + 7) / 8;
}

// ---------------------------------------------------------------------------------------------
// q1 (12): per 32-group tile [f16 scale][4 bytes]; bit k of byte j (LSB-first) is weight 8j+k of
// the group; w = +s if the bit is set else −s. Groups run over the flattened tensor.
// q1s (13): q1 base for n/32 groups, then [u32 count] and count × [u32 flat_index][f16 value];
// the value replaces the base value at that flat index (a later entry with the same index wins).
// The format does not require any order; our encoder writes strictly ascending indices, and
// readers find a row's entries by binary search when they are (Q1sView::ascending).
// ---------------------------------------------------------------------------------------------
inline constexpr uint64_t kQ1TileBytes = 6;
struct Q1sView {
  uint64_t rows = 0, in = 0;
  const uint8_t* base = nullptr;     ///< (rows·in/32) q1 tiles
  uint32_t count = 0;                ///< number of outliers
  const uint8_t* entries = nullptr;  ///< count × 6 bytes
  bool ascending = true;             ///< flat indices strictly ascending (hence no duplicates)
  uint32_t index(uint32_t i) const noexcept { return load_le<uint32_t>(entries + 6 * uint64_t{i}); }
  float value(uint32_t i) const noexcept {
    return f16_to_f32(load_le<uint16_t>(entries + 6 * uint64_t{i} + 4));
  }
  /// First entry whose flat index is ≥ e (count if none), by binary search: O(log count).
  /// Only meaningful when `ascending`.
  uint32_t lower_bound(uint64_t e) const noexcept {
    uint32_t lo = 0, hi = count;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      if (index(mid) < e)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo;
  }
  /// Writes the outliers of flat range [e0, e1) at out[index − e0] (out covers the range), the run
  /// found by binary search — for `ascending` views. Returns false (out partly written) when an
  /// entry of the run lies below e0, which only a view whose order was not checked can show.
  bool overwrite_run(uint64_t e0, uint64_t e1, float* out) const noexcept {
    for (uint32_t i = lower_bound(e0); i < count && index(i) < e1; ++i) {
      if (index(i) < e0) return false;
      out[index(i) - e0] = value(i);
    }
    return true;
  }
};
/// Parses a q1s payload: exact length, every flat index < rows·in; sets `ascending` (same pass).
/// `check_entries = false` does only the O(1) part (shape, exact length from the count) and leaves
/// `ascending` true unverified: the caller must then check every entry (index < rows·in, strict
/// order) itself before trusting a binary search — the SIMD kernels do, spread over their row blocks.
Q1sView q1s_view(std::span<const uint64_t> shape, std::span<const uint8_t> payload, std::string_view what,
                 bool check_entries = true);

// ---------------------------------------------------------------------------------------------
// q1t (14): per 32-group tile [f16 scale][7 bytes codes] (9 bytes); code k is base-3 digit (k mod 5)
// of byte k/5 (bytes 0..5 hold 5 codes, byte 6 holds 2); code 0 → 0, 1 → +s, 2 → −s. Then the
// per-row overlay [u32 row_ptr[rows+1]] and row_ptr[rows] entries [u16 col][f16 value]; row r owns
// entries [row_ptr[r], row_ptr[r+1]); value is written at (r, col). The base code at an overlay
// position is 0, so kernels may add the overlay instead of replacing.
// ---------------------------------------------------------------------------------------------
inline constexpr uint64_t kQ1tTileBytes = 9;
struct Q1tView {
  uint64_t rows = 0, in = 0;
  const uint8_t* base = nullptr;     ///< (rows·in/32) tiles of 9 bytes
  const uint8_t* row_ptr = nullptr;  ///< rows+1 u32 LE
  const uint8_t* entries = nullptr;  ///< row_ptr(rows) × 4 bytes
  uint32_t ptr(uint64_t r) const noexcept { return load_le<uint32_t>(row_ptr + 4 * r); }
  uint16_t col(uint32_t i) const noexcept { return load_le<uint16_t>(entries + 4 * uint64_t{i}); }
  float value(uint32_t i) const noexcept {
    return f16_to_f32(load_le<uint16_t>(entries + 4 * uint64_t{i} + 2));
  }
};
/// Parses a q1t payload: in ≤ 65536, exact length, row_ptr[0] == 0 and monotone, every col < in,
/// base code 0 at every overlay position (base code bytes themselves are checked by decode).
/// `check_rows = false` does only the O(1) part (in, sizes, row_ptr[0], exact length from
/// row_ptr[rows]); the caller must then q1t_check_row every row it reads — decode_rows does, so a
/// per-block decode costs O(block), not O(tensor). Throws Error(Parse) naming `what`.
Q1tView q1t_view(std::span<const uint64_t> shape, std::span<const uint8_t> payload, std::string_view what,
                 bool check_rows = true);
/// The per-row part of q1t_view for row r: row_ptr[r] ≤ row_ptr[r+1] ≤ row_ptr[rows], every col
/// < in, base code 0 under every overlay entry. Throws Error(Parse) naming `what` and the row.
void q1t_check_row(const Q1tView& v, uint64_t r, std::string_view what);
/// The base-3 digits of every code byte b, least significant first: kQ1tDigits[b][p] = (b / 3^p) % 3
/// (bytes ≥ 243, which q1t_tile_ok rejects, included so any byte can be looked up). A table
/// instead of divisions: decoding q1t goes through it (q1t_code, the row decoders).
inline constexpr std::array<std::array<uint8_t, 5>, 256> kQ1tDigits = [] {
  std::array<std::array<uint8_t, 5>, 256> a{};
  for (uint32_t b = 0; b < 256; ++b)
    for (uint32_t p = 0, v = b; p < 5; ++p, v /= 3) a[b][p] = static_cast<uint8_t>(v % 3);
  return a;
}();
/// Ternary code k (0..31) of a 9-byte q1t tile (0, 1 or 2 for a tile accepted by q1t_tile_ok).
inline uint32_t q1t_code(const uint8_t* tile, uint32_t k) noexcept {
  return kQ1tDigits[tile[2 + k / 5]][k % 5];
}
/// Whether a q1t tile's code bytes are canonical base-3: bytes 0..5 < 243, byte 6 < 9.
inline bool q1t_tile_ok(const uint8_t* tile) noexcept {
  for (int j = 0; j < 6; ++j)
    if (tile[2 + j] >= 243) return false;
  return tile[8] < 9;
}

// ---------------------------------------------------------------------------------------------
// q4tp (15) / q2tp (16): three planes, gpr = in/32 tiles per row.
//   [weights : rows·gpr·W]   W = 16 (q4tp: q4_tiled nibble order, element 2k low nibble of byte
//                            k, 2k+1 high) or 8 (q2tp: weight 4k+j in bits 2j..2j+1 of byte k)
//   [params  : rows × (f16 lo, f16 step)]
//   [codes   : rows × ceil(5·gpr/8)]  5-bit rung per tile, LSB-first bit stream, row aligned
// q4tp: w = (nib − 8)·t[code]; q2tp: w = (code2 − 1.5)·s[code] (s[0] = 0, s[c] = t[c−1]).
// Ladders: q4tp_ladder / q2tp_ladder in codec.h.
// ---------------------------------------------------------------------------------------------
struct TpView {
  uint64_t rows = 0, in = 0, gpr = 0;
  uint64_t tile_bytes = 0;      ///< 16 (q4tp) or 8 (q2tp)
  uint64_t code_row_bytes = 0;  ///< ceil(5·gpr/8)
  const uint8_t* weights = nullptr;
  const uint8_t* params = nullptr;
  const uint8_t* codes = nullptr;

  const uint8_t* row_weights(uint64_t r) const noexcept { return weights + r * gpr * tile_bytes; }
  const uint8_t* row_codes(uint64_t r) const noexcept { return codes + r * code_row_bytes; }
  uint16_t lo_f16(uint64_t r) const noexcept { return load_le<uint16_t>(params + 4 * r); }
  uint16_t step_f16(uint64_t r) const noexcept { return load_le<uint16_t>(params + 4 * r + 2); }
};
/// Parses a q4tp (t == Q4TP) or q2tp (t == Q2TP) payload (exact size).
TpView tp_view(DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
               std::string_view what);
/// 5-bit rung of tile g from a row's code bytes (FORMAT-NOTES §1.8 q4tp).
inline uint32_t q4tp_code(const uint8_t* row_codes, size_t g) noexcept {
  const size_t bit = 5 * g, b = bit / 8, sh = bit % 8;
  uint32_t v = row_codes[b];
  if (sh > 3) v |= static_cast<uint32_t>(row_codes[b + 1]) << 8;
  return (v >> sh) & 31u;
}
/// Bytes of one q4tp/q2tp code row: ceil(5·gpr/8).
constexpr uint64_t tp_code_row_bytes(uint64_t gpr) noexcept {
  return (5 * gpr + 7) / 8;
}

}  // namespace cortiq::quant
