// Encoders and scalar decoders for every CMF dtype with a codec (FORMAT-NOTES §1.7–1.8, spec §3.2).
//
// Byte layouts (all little-endian; "row" = shape[0], "in" = the rest; groups are 32 elements):
//   f32 / f16 / bf16   raw arrays of n elements.
//   u8                 raw bytes; no codec (decode → Error(Unsupported)).
//   q8_row   (3)       [i8 q : rows·in][f16 scale : rows]            w = q·scale[r]
//   q4_block (4)       [u8 nibbles : G·16][f16 scale : G], G = ceil(n/32) over the flattened tensor,
//                      zero padded; byte k of a group: element 2k low nibble, 2k+1 high nibble;
//                      w = (nib − 8)·scale
//   vbit     (8)       see layout.h (VBitView)
//   q8_2f    (9)       [i8 q : rows·in][f16 row_scale : rows][f16 col : in]   w = q·row_scale[r]·col[c]
//   vbit_ro  (10)      see layout.h (VBitView)
//   q4_tiled (11)      per group [f16 scale][16 bytes nibbles] (q4_block values and nibble order)
//   q1 (12), q1s (13), q1t (14), q4tp (15), q2tp (16)   see layout.h
//
// Encoder rounding (FORMAT-NOTES §1.8, decision 12): every scale is f16_scale(x) (f16 RNE, floor
// 2^-14) and values are quantized against that rounded scale with round-half-even
// (std::nearbyint in the default rounding mode); q4tp/q2tp multiply by the f32 reciprocal of the
// rung instead of dividing. Encoders refuse NaN/±Inf input (non-float codecs) and any finite input
// whose scale or stored f16 value would overflow f16 (|x| > 65504 after scaling) with
// Error(InvalidArgument), naming the element/row.
//
// Encoders as implemented (FORMAT-NOTES §1.8 unless noted):
//   q8_row  scale = f16_scale(absmax_row/127), q = clamp(rne(v/scale), −128, 127).
//   q8_2f   col[c] = f16_scale(max(sqrt(mean_r w²), 1e−12)) (f64 sums in fixed 256-row blocks);
//           row_scale = f16_scale(max(absmax(w/col), 1e−12)/127); q = clamp(rne((v/col)/rs), ±127).
//   q4_*    scale = f16_scale(absmax/7), nib = clamp(rne(v/scale), −8, 7) + 8; q4_tiled = q4_block
//           re-interleaved.
//   vbit*   b_r = snap(mean_bits + log2(max(absmax_r,1e−12)) − mean_r(...)) to {3,4,5,6,8}, ties
//           to the lower width (decision 11: 7 never written); scale = f16_scale(absmax_g/L),
//           u = clamp(rne(v/scale) + L, 0, 2^b − 1).
//   q1      s = f16_scale(mean|w| of the group), bit = (w ≥ 0); q1p (q1_error_diffusion): per-row
//           carry, x = w + carry, bit = (x ≥ 0), carry = x ∓ s.
//   q1s     k = floor(keep_frac·n) largest |w| (ties: lower flat index) stored as f16, indices
//           ascending; base = q1p over the non-outliers (outliers excluded from the group mean
//           and the carry; their bit is the sign).
//   q1t     the simple variant (unit activations, zero keep fraction → empty overlay): per group
//           (a) s = f16_scale(mean|w|), code = clamp(rne(w/s), −1, 1); (b) support |w| ≥ 0.7·mean|w|
//           with level f16_scale(mean |w| over the support); keep (b) only if its squared error is
//           strictly lower. Then per row α = <w,ŵ>/<ŵ,ŵ> clamped to [0.5, 2] is folded into the f16
//           scales, kept only if it strictly lowers the row's squared error.
//   q4tp    per row: lg = log2(f16_scale(absmax_tile/7)), lo/hi over live tiles, lo stored as f16,
//           step by tp_step_f16(lo_r, hi, 31), ladder from the stored f16s, nominal rung
//           clamp(rne((lg − lo_r)/st), 0, 31) (dead tiles / st ≤ 0 → 0), optional search over
//           nominal−2..nominal+1 (strict <, earliest wins), nib = clamp(rne(w·(1/t)), −8, 7) + 8.
//   q2tp    lg = log2(f16_scale(absmax/1.5)), 30 intervals; with search the ladder top is chosen
//           among fractions {1, .9, .8, .7} of hi − lo_r (rows scored with rungs nom−2..nom+2),
//           live nominal = 1 + clamp(rne((lg − lo_r)/st), 0, 30) (1 when st ≤ 0), dead → rung 0,
//           final per-tile search max(1, nom−2)..min(31, nom+1); code2 = clamp(rne(w·(1/s) + 1.5),
//           0, 3) (2 on rung 0).
//
// Error bounds (per element, e = |w − decode(encode(w))|, s = the stored scale of its group/row):
//   q8_row, q8_2f (per row_scale·col), q4_block, q4_tiled, vbit, vbit_ro: e ≤ s/2 (plus one f32
//   rounding of the product); q4tp: e ≤ max(t/2, absmax_tile − 7t) for the tile's rung t (the
//   nominal rung is within one ladder step of absmax/7); q2tp: e ≤ max(s/2, absmax_tile − 1.5s);
//   q1/q1p/q1s/q1t: no per-element bound (1-bit / ternary), documented RMS behaviour only;
//   q1s outliers and q1t overlays: exact up to f16 rounding.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "quant/dtype.h"
#include "quant/layout.h"

namespace cortiq::quant {

/// Encoder knobs (FORMAT-NOTES §1.8).
struct EncodeOptions {
  float mean_bits = 4.25f;          ///< vbit / vbit_ro target mean bits per weight (clamped 3..8)
  bool q1_error_diffusion = false;  ///< dtype q1: use the q1p error-diffusion encoder
  bool ladder_search = true;        ///< q4tp/q2tp candidate-rung search (CMF_Q2TP_SEARCH, default on)
  float q1s_keep_frac = 0.01f;      ///< q1s outlier fraction (clamped 0..0.25)
};

/// Encodes row-major f32 `values` of `shape` (values.size() == Π shape) to the dtype's payload.
/// Shape rules: q8_row, q8_2f, vbit, vbit_ro, q1s, q1t, q4tp, q2tp need a 2-D `[rows, in]`;
/// q4_tiled and q1 accept 2-D or 1-D (as [1, n]); vbit, vbit_ro, q4_tiled, q1, q1s, q1t, q4tp,
/// q2tp need in % 32 == 0 (q4tp/q2tp also in > 0; q1t in ≤ 65536); f32/f16/bf16/q4_block any.
/// Throws Error(InvalidArgument) for NaN/±Inf input to a non-float codec (naming the element
/// index), for a value that overflows the target (f16/bf16 or an f16 scale), for a shape the codec
/// cannot hold, a NaN option, and for u8 and reserved dtypes.
std::vector<uint8_t> encode(DType t, std::span<const uint64_t> shape, std::span<const float> values,
                            const EncodeOptions& opt = {});

/// Decodes a whole payload to f32 (`out.size()` must be Π shape, else Error(InvalidArgument)).
/// The payload is validated first (validate_payload). Throws Error(Unsupported) for u8 and the
/// reserved dtypes, Error(Parse) for a malformed payload (including a non-canonical q1t code byte).
void decode(DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload, std::span<float> out);

/// Decodes rows [row_begin, row_begin + row_count) of the `[rows, in]` view of the tensor (2-D as
/// is; 1-D as [1, n]; 0-D as [1, 1]; k-D as [shape[0], Π rest]) into `out` (row_count·in floats).
/// Reads only those rows' bytes plus the shared planes (per-row scales, col field, overlays).
/// Same errors as decode, plus Error(InvalidArgument) for a row range outside the tensor.
void decode_rows(DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
                 uint64_t row_begin, uint64_t row_count, std::span<float> out);

/// decode_rows for callers that decode rows of one tensor again and again (the reference kernels'
/// row blocks, an embedding lookup per token): the constructor checks the payload and parses the
/// tensor-wide structure once — validate_payload (q1t rows excepted: decode checks each row it
/// reads), vbit/vbit_ro row offsets (O(rows)), the q1s outliers (O(outliers); when their indices are
/// not ascending, an order by index keeping the last of duplicates, O(outliers·log)) — so decode()
/// costs O(row_count·in), plus O(log outliers) for q1s. Values bit-identical to decode_rows. The
/// decoder points into `payload`, which must outlive it.
class RowDecoder {
 public:
  /// Throws what decode_rows throws for an unsupported dtype or a malformed payload; `what` names
  /// the tensor in those messages.
  RowDecoder(DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
             std::string_view what = "<decode>");
  /// Rows [row_begin, row_begin + row_count) of the [rows, in] view into `out` (row_count·in floats,
  /// row-major). Throws Error(InvalidArgument) for a range outside the tensor or a wrong `out`
  /// size, Error(Parse) for a malformed q1t row.
  void decode(uint64_t row_begin, uint64_t row_count, std::span<float> out) const;
  uint64_t rows() const noexcept { return m_.rows; }
  uint64_t cols() const noexcept { return m_.in; }
  DType dtype() const noexcept { return t_; }

 private:
  DType t_;
  std::span<const uint8_t> payload_;
  std::string what_;
  uint64_t n_ = 0;
  Matrix m_{};
  VBitView vb_;                      // vbit / vbit_ro
  Q1sView q1s_;                      // q1s
  std::vector<uint32_t> q1s_order_;  // q1s, indices not ascending: entry ids by index, last duplicate
  Q1tView q1t_;                      // q1t (rows unchecked)
  TpView tp_;                        // q4tp / q2tp
};

/// Re-lays flat groups [g_begin, g_end) of a q4_tiled payload (`tiled`, G = tiled.size() / 18
/// groups: per group [f16 scale][16 nibble bytes]) into the q4_block layout of the same tensor
/// (`block`, same size: [16 nibble bytes : G][f16 scale : G]): group g's nibbles go to byte 16·g,
/// its scale to 16·G + 2·g. The two dtypes hold identical values in identical nibble order
/// (FORMAT-NOTES §1.8), so the result decodes to the same tensor. Ranges may be converted in any
/// order and in pieces. Throws Error(InvalidArgument) when the sizes differ, are not a multiple of
/// 18, or the range is outside [0, G].
void q4_tiled_to_block(std::span<const uint8_t> tiled, std::span<uint8_t> block, uint64_t g_begin,
                       uint64_t g_end);

/// The scale rule of FORMAT-NOTES §1.1: round x to f16 (RNE), back to f32, floor at 2^-14.
float f16_scale(float x);

/// exp2f of an f16 value: a q4tp/q2tp ladder base (t[0] = tp_exp2(lo_f16), ratio = tp_exp2(step_f16)).
float tp_exp2(uint16_t h);
/// q4tp/q2tp normative ladder (FORMAT-NOTES §1.8): lo = f16(lo_f16), step = f16(step_f16),
/// t[0] = exp2f(lo), ratio = exp2f(step), t[c] = t[c−1]·ratio in f32 for c = 1..31.
void q4tp_ladder(uint16_t lo_f16, uint16_t step_f16, float out[32]);
/// q2tp ladder: out[0] = 0, out[c] = q4tp_ladder(...)[c−1] for c = 1..31.
void q2tp_ladder(uint16_t lo_f16, uint16_t step_f16, float out[32]);

/// The q4tp/q2tp step search of FORMAT-NOTES §1.8: st = f16((hi − lo_r)/intervals), then the f16
/// bit pattern is incremented by one (up to 64 times) until st > 0 && lo_r + intervals·st ≥ hi
/// (f32 arithmetic). `intervals` is 31 for q4tp, 30 for q2tp. Returns the stored f16 bits.
uint16_t tp_step_f16(float lo_r, float hi, int intervals);

}  // namespace cortiq::quant
