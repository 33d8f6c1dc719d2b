// Test support shared by the SIMD kernel tests (simd_matvec_test.cc, simd_avx2_test.cc): weights of
// every SIMD dtype encoded from floats, and the documented error bounds of the two arithmetic paths.
// Header-only; included by *_test.cc files only.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/tier_caps.h"
#include "kernels/weight_view.h"
#include "quant/codec.h"
#include "quant/layout.h"
#include "quant/test_util.h"
#include "util/half.h"

namespace cortiq::kernels::test {

using quant::DType;

/// Every dtype that has a SIMD kernel in some tier: the rows of the tier capability table.
inline constexpr auto kSimdDtypes = [] {
  std::array<DType, std::size(simd_detail::kTierCaps)> a{};
  for (size_t i = 0; i < a.size(); ++i) a[i] = simd_detail::kTierCaps[i].t;
  return a;
}();

/// Codecs whose encoder accepts any column count (the others need cols % 32 == 0).
inline bool any_cols(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8Row || t == DType::Q8_2F ||
         t == DType::Q4Block;
}

using quant::testing::gaussian;  // n samples of N(0, sigma²) from a fixed seed

/// An encoded weight with its view and its reference decode.
struct Tensor {
  std::vector<uint8_t> bytes;
  WeightView view;
  std::vector<float> deq;  ///< reference-decoded weights [rows, cols]
  std::vector<float> col;  ///< q8_2f column field (else empty)
};

/// Encodes v (`[rows, cols]`) as dtype t.
inline Tensor make(DType t, uint64_t rows, uint64_t cols, const std::vector<float>& v,
                   const quant::EncodeOptions& opt = {}) {
  Tensor o;
  std::vector<uint64_t> shape{rows, cols};
  o.bytes = quant::encode(t, shape, v, opt);
  o.view = WeightView{t, shape, o.bytes, "w"};
  o.deq.resize(rows * cols);
  quant::decode(t, shape, o.bytes, o.deq);
  if (t == DType::Q8_2F) {
    const uint8_t* cp = o.bytes.data() + rows * cols + 2 * rows;
    for (uint64_t c = 0; c < cols; ++c) o.col.push_back(f16_to_f32(load_le<uint16_t>(cp + 2 * c)));
  }
  return o;
}

/// vbit rows carry their own width (3, 4, 5, 6 or 8 bits; the encoder picks it from the row's
/// magnitude): `[rows, cols]` gaussians with row r scaled 2^(r mod 13 − 6) (`rising`) or
/// 2^(6 − r mod 13), so rows ≥ 13 cover every width. widths_seen(view)[b]: some row has width b.
inline std::vector<float> vbit_width_sweep(uint64_t rows, uint64_t cols, bool rising) {
  auto v = gaussian(rows * cols, 54);
  for (uint64_t r = 0; r < rows; ++r) {
    const int e = static_cast<int>(r % 13) - 6;
    for (uint64_t c = 0; c < cols; ++c) v[r * cols + c] *= std::ldexp(1.0f, rising ? e : -e);
  }
  return v;
}
inline std::vector<bool> widths_seen(const quant::VBitView& vb) {
  std::vector<bool> seen(9, false);
  for (uint64_t r = 0; r < vb.rows; ++r) seen[vb.width(r)] = true;
  return seen;
}

/// Adversarial weights `[rows, cols]` (rows ≥ 11, cols ≥ 64): small gaussians with an all-zero row 3,
/// a dead 32-group in live row 10 (q2tp ladder rung 0), outliers 40 at (5, 17) and −25 at (6, cols−1),
/// and a constant-magnitude ±3 row 8.
inline std::vector<float> adversarial_weights(uint64_t rows, uint64_t cols) {
  auto v = gaussian(rows * cols, 7, 0.02f);
  for (uint64_t c = 0; c < cols; ++c) v[3 * cols + c] = 0.0f;
  for (uint64_t c = 32; c < 64; ++c) v[10 * cols + c] = 0.0f;
  v[5 * cols + 17] = 40.0f;
  v[6 * cols + cols - 1] = -25.0f;
  for (uint64_t c = 0; c < cols; ++c) v[8 * cols + c] = (c % 2 ? 1.0f : -1.0f) * 3.0f;
  return v;
}

/// Adversarial activation [cols] (cols ≥ 96): gaussians with outliers 500 at 3 and −300 at cols−2
/// (each dominates its int8 block) and an all-zero 32-block at [64, 96).
inline std::vector<float> adversarial_activation(uint64_t cols) {
  auto x = gaussian(cols, 8);
  x[3] = 500.0f;
  x[cols - 2] = -300.0f;
  for (uint64_t c = 64; c < 96; ++c) x[c] = 0.0f;
  return x;
}

/// The int8 lane blocks of the q8_row / q8_2f kernels: the AVX-512 tier quantizes columns
/// 64s + 4j … 64s + 4j + 3 of the 8 superblocks s of a 512-column chunk as one block (lane j of
/// 16), the AVX2 tier columns 32b + 4j … 32b + 4j + 3 of the 8 blocks b of a 256-column chunk (lane
/// j of 8); see Fam::Q8 in avx512/matvec_internal.h / avx2/matvec_internal.h. Block ids of column c in
/// each tier.
inline uint64_t q8_lane_block_avx512(uint64_t c) {
  return (c / 512) * 16 + (c % 64) / 4;
}
inline uint64_t q8_lane_block_avx2(uint64_t c) {
  return (c / 256) * 8 + (c % 32) / 4;
}

/// Whether column c is element 1 of its 4-column lane group in the first superblock of an AVX-512
/// or AVX2 q8 chunk: every lane block of both tiers holds one.
inline bool q8_lane_marker(uint64_t c) {
  return (c % 512 < 64 || c % 256 < 32) && c % 4 == 1;
}

/// An activation [cols] every int8 quantizer represents exactly: integers/128 with 127/128 in every
/// 32-column block and every q8 lane block, so d = 1/128 and q = 128·x.
inline std::vector<float> int8_representable_activation(uint64_t cols) {
  std::mt19937 g(12);
  std::uniform_int_distribution<int> d(-127, 127);
  std::vector<float> x(cols);
  for (uint64_t c = 0; c < cols; ++c)
    x[c] = static_cast<float>(c % 32 == 5 || q8_lane_marker(c) ? 127 : d(g)) / 128.0f;
  return x;
}

/// A 2×64 q1t payload whose only overlay entry (owned by row 1) has col 64 — outside the row, so
/// every path must fail with Error(Parse) when it decodes row 1.
inline std::vector<uint8_t> q1t_with_overlay_col_out_of_range() {
  std::vector<uint8_t> bytes = make(DType::Q1T, 2, 64, gaussian(128, 46)).bytes;
  // The encoder writes no overlay: 2·2 tiles then row_ptr = {0, 0, 0}.
  store_le<uint32_t>(bytes.data() + 2 * 2 * quant::kQ1tTileBytes + 8, 1);  // row_ptr[2] = 1
  bytes.resize(bytes.size() + 4);
  store_le<uint16_t>(bytes.data() + bytes.size() - 4, 64);
  store_le<uint16_t>(bytes.data() + bytes.size() - 2, f32_to_f16(1.0f));
  return bytes;
}

/// A q1t tensor `[rows, cols]` (cols % 32 == 0) from gaussian weights whose even rows also carry an
/// overlay: three entries at the first columns whose base code is 0, values 0.75·(r+1), −5.5 and 100
/// (an outlier no ternary level reaches). deq is the reference decode, overlay included.
inline Tensor q1t_with_overlay(uint64_t rows, uint64_t cols, uint32_t seed) {
  const Tensor base = make(DType::Q1T, rows, cols, gaussian(rows * cols, seed, 0.05f));
  const uint64_t gpr = cols / 32, tile_bytes = rows * gpr * quant::kQ1tTileBytes;
  std::vector<std::pair<uint16_t, float>> entries;
  std::vector<uint32_t> row_ptr{0};
  for (uint64_t r = 0; r < rows; ++r) {
    const float vals[3] = {0.75f * static_cast<float>(r + 1), -5.5f, 100.0f};
    for (uint64_t c = 0, k = 0; r % 2 == 0 && c < cols && k < 3; ++c)
      if (quant::q1t_code(base.bytes.data() + (r * gpr + c / 32) * quant::kQ1tTileBytes,
                          static_cast<uint32_t>(c % 32)) == 0)
        entries.emplace_back(static_cast<uint16_t>(c), vals[k++]);
    row_ptr.push_back(static_cast<uint32_t>(entries.size()));
  }
  std::vector<uint8_t> bytes(base.bytes.begin(),
                             base.bytes.begin() + static_cast<std::ptrdiff_t>(tile_bytes));
  bytes.resize(tile_bytes + 4 * (rows + 1) + 4 * entries.size());
  for (uint64_t r = 0; r <= rows; ++r) store_le<uint32_t>(bytes.data() + tile_bytes + 4 * r, row_ptr[r]);
  uint8_t* e = bytes.data() + tile_bytes + 4 * (rows + 1);
  for (const auto& [c, v] : entries) {
    store_le<uint16_t>(e, c);
    store_le<uint16_t>(e + 2, f32_to_f16(v));
    e += 4;
  }
  Tensor o;
  o.bytes = std::move(bytes);
  const std::vector<uint64_t> shape{rows, cols};
  o.view = WeightView{DType::Q1T, shape, o.bytes, "w"};
  o.deq.resize(rows * cols);
  quant::decode(DType::Q1T, shape, o.bytes, o.deq);
  return o;
}

/// A q1s payload with the same entries as `w` (a q1s tensor with ≥ 3 ascending outliers) but not
/// ascending: entries 0 and 1 swapped, and a duplicate of entry 2 with value 9 appended (legal: a later
/// duplicate wins).
inline std::vector<uint8_t> q1s_unordered(const Tensor& w) {
  const quant::Q1sView v = quant::q1s_view(w.view.shape, w.bytes, "w");
  std::vector<uint8_t> bytes = w.bytes;
  const size_t e0 = bytes.size() - 6 * v.count;
  std::swap_ranges(bytes.begin() + static_cast<std::ptrdiff_t>(e0),
                   bytes.begin() + static_cast<std::ptrdiff_t>(e0 + 6),
                   bytes.begin() + static_cast<std::ptrdiff_t>(e0 + 6));
  bytes.resize(bytes.size() + 6);
  std::copy_n(bytes.begin() + static_cast<std::ptrdiff_t>(e0 + 12), 4, bytes.end() - 6);
  store_le<uint16_t>(bytes.data() + bytes.size() - 2, f32_to_f16(9.0f));
  store_le<uint32_t>(bytes.data() + e0 - 4, v.count + 1);
  return bytes;
}

/// γ_k = k·2^-24 / (1 − k·2^-24) (Higham, Accuracy and Stability of Numerical Algorithms, §3.1).
inline double gamma(double k) {
  const double u = std::ldexp(1.0, -24);
  return k * u / (1.0 - k * u);
}

/// The exact path's bound for output row r: γ_(⌈cols/chunk⌉+extra)·Σ|ŵx| + 2^-24·|ref|, where a tier
/// accumulates `chunk` columns per FMA step and adds `extra` roundings in its reductions
/// (AVX-512: 64 and 7, simd_matvec.h; AVX2: 16 and 4, simd_avx2.h).
inline double exact_path_bound(const Tensor& w, uint64_t r, const float* x, double ref, uint64_t chunk,
                               double extra) {
  const uint64_t cols = w.view.cols();
  double s = 0;
  for (uint64_t c = 0; c < cols; ++c) s += std::fabs(static_cast<double>(w.deq[r * cols + c]) * x[c]);
  return gamma(static_cast<double>((cols + chunk - 1) / chunk) + extra) * s + std::ldexp(std::fabs(ref), -24);
}

/// The int8 path's bound: Σ|ŵ_c|·absmax(c)/254 (q8_2f: on x·col, divided by col; q1s: |ŵ_c| at least
/// the q1 tile scale s, since the int8 product uses the base ±s at an outlier column and adds the
/// outlier's difference in f32) + f32 slack, plus `exact` (the exact-path bound of the same row).
/// absmax(c) is that of c's 32-column block; for q8_row / q8_2f the largest of it and those of c's
/// lane blocks in both tiers, so one bound holds for either tier.
inline double int8_path_bound(const Tensor& w, uint64_t r, const float* x, double exact) {
  const uint64_t cols = w.view.cols();
  const bool q82f = w.view.dtype == DType::Q8_2F;
  const bool lanes = q82f || w.view.dtype == DType::Q8Row;
  const auto xv = [&](uint64_t c) { return std::fabs(q82f ? x[c] * w.col[c] : x[c]); };
  std::vector<float> lane512(lanes ? (cols + 511) / 512 * 16 : 0, 0.0f);
  std::vector<float> lane256(lanes ? (cols + 255) / 256 * 8 : 0, 0.0f);
  for (uint64_t c = 0; lanes && c < cols; ++c) {
    float& m512 = lane512[q8_lane_block_avx512(c)];
    float& m256 = lane256[q8_lane_block_avx2(c)];
    m512 = std::max(m512, xv(c));
    m256 = std::max(m256, xv(c));
  }
  double q = 0, mag = 0;
  for (uint64_t b = 0; b * 32 < cols; ++b) {
    const uint64_t c1 = std::min<uint64_t>(cols, 32 * b + 32);
    float amax = 0;
    for (uint64_t c = 32 * b; c < c1; ++c) amax = std::max(amax, xv(c));
    for (uint64_t c = 32 * b; c < c1; ++c) {
      double aw = std::fabs(w.deq[r * cols + c]) / (q82f ? w.col[c] : 1.0f);
      if (w.view.dtype == DType::Q1S)  // the q1 base under an outlier: ±s of its tile
        aw = std::max<double>(aw, std::fabs(f16_to_f32(load_le<uint16_t>(
                                      w.bytes.data() + quant::kQ1TileBytes * ((r * cols + c) / 32)))));
      const double am =
          lanes ? std::max({amax, lane512[q8_lane_block_avx512(c)], lane256[q8_lane_block_avx2(c)]}) : amax;
      q += aw * am / 254.0;
      mag += aw * (xv(c) + am / 254.0);
    }
  }
  return q * (1 + 1e-5) + gamma(static_cast<double>(cols) / 32 + 12) * mag + exact;
}

}  // namespace cortiq::kernels::test
