// Pieces shared by the two SIMD tiers (avx512/: AVX-512, avx2/: AVX2): the row-block
// size, the weight prefetch distance, scratch growth, the int8 row-block loop, the exp2 table of the
// q4tp/q2tp ladders, and the scalar q1s outlier and q1t overlay passes (compiled for FMA + F16C, which both
// tiers have). Internal to src/kernels (not part of the kernels API).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kernels/weight_view.h"
#include "quant/layout.h"
#include "util/half.h"
#include "util/line_vec.h"

namespace cortiq::kernels::simd_detail {

/// Rows per parallel work unit (and per decoded block / ladder batch) of both tiers.
inline constexpr uint64_t kRowBlock = 16;

/// Whether the CPU has F16C (CPUID leaf 1, ECX bit 29). GCC's __builtin_cpu_supports knows "f16c"
/// but clang 14's does not, so the kernels' CPU checks ask CPUID directly for this one feature.
bool cpu_has_f16c() noexcept;

/// Bytes ahead of the current load that the weight tiles prefetch (rounded up to whole tiles of
/// rows). CMF rows are short (0.4–5 KiB): the hardware prefetchers hardly ramp up inside one row and
/// do not cross 4 KiB pages, so without this a decode matvec ran at ~50% of the streaming bandwidth
/// (measured on the Qwen2.5-0.5B-shaped q8 file: tg 27 → 34 tok/s); 2048–4096 measured best, 8192
/// worse.
inline constexpr uint64_t kPrefetchBytes = 4096;

/// Distance (bytes) from a tile of R consecutive rows of `row_bytes` each to the rows it
/// prefetches: whole R-row tiles, ≥ kPrefetchBytes.
inline uint64_t prefetch_distance(uint64_t row_bytes, int R) {
  const uint64_t tile = std::max<uint64_t>(1, row_bytes * static_cast<uint64_t>(R));
  return std::max<uint64_t>(1, (kPrefetchBytes + tile - 1) / tile) * tile;
}

/// The kernels' scratch vectors are cache-line aligned and grow-only (util/line_vec.h).
using cortiq::grow;
using cortiq::LineVec;

/// The prepared ladder bases of a q4tp/q2tp view (WeightView::prepared: exp2f(lo) of the `rows`
/// rows, then exp2f(step)), or null when the view was not prepared. Throws Error(InvalidArgument)
/// naming the tensor when the prepared data does not hold 2·rows values.
const float* tp_bases(const WeightView& w, uint64_t rows);

/// quant::tp_exp2 of every f16 bit pattern (65536 floats, 256 KiB, built once per process): the
/// q4tp/q2tp ladder bases of views nobody prepared, the values quant::q4tp_ladder starts from.
const float* exp2_f16_table();

/// Defines, in the current namespace, the int8 row-block loop of a tier compiled for TARGET (its
/// target attribute): block_tiles<R, T, Tile>(pl, st, r0, rc, acts, n, y, y_stride, j0) runs rows
/// [r0, r0+rc) (block-local 0..rc) × tokens [0, n) into Y[i·y_stride + j0 + k] in R×T register tiles of
/// Tile::run<R, T>(pl, st, rows, li, a, out) — rows[k] the tensor row, li[k] its block-local index,
/// a[t] = acts.at(token), out[k·T + t] the tile's outputs; row/token tails are padded by repeating the
/// last row/token and dropping those outputs. One text for both tiers, stamped per tier because the
/// loop must carry the tier's target for its tiles to inline as before: a target-less always_inline
/// template compiled every family's block loops differently (block_q8 instances −2 … +12 %
/// instructions), which could not be shown to be as fast.
#define CQ_DEFINE_BLOCK_TILES(TARGET)                                                                    \
  template <int R, int T, class Tile, class Plan, class BlockState, class ActSet>                        \
  TARGET inline void block_tiles(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,         \
                                 const ActSet& acts, size_t n, float* y, size_t y_stride, uint64_t j0) { \
    for (uint64_t k0 = 0; k0 < rc; k0 += R) {                                                            \
      uint64_t rows[R], li[R];                                                                           \
      for (int k = 0; k < R; ++k) {                                                                      \
        li[k] = std::min<uint64_t>(k0 + k, rc - 1);                                                      \
        rows[k] = r0 + li[k];                                                                            \
      }                                                                                                  \
      const uint64_t kn = std::min<uint64_t>(R, rc - k0);                                                \
      for (size_t i0 = 0; i0 < n; i0 += T) {                                                             \
        std::remove_cvref_t<decltype(acts.at(0))> a[T];                                                  \
        for (int t = 0; t < T; ++t) a[t] = acts.at(std::min<size_t>(i0 + t, n - 1));                     \
        float out[R * T];                                                                                \
        Tile::template run<R, T>(pl, st, rows, li, a, out);                                              \
        const size_t tn = std::min<size_t>(T, n - i0);                                                   \
        for (uint64_t k = 0; k < kn; ++k)                                                                \
          for (size_t t = 0; t < tn; ++t) y[(i0 + t) * y_stride + j0 + k0 + k] = out[k * T + t];         \
      }                                                                                                  \
    }                                                                                                    \
  }

/// The instruction sets every SIMD tier has: a function with this target inlines into both tiers'.
#define CQ_FMA_F16C __attribute__((target("fma,f16c")))

/// Fully unrolls a loop over a register tile's rows or tokens, so the R×T f32 accumulators stay in
/// registers: GCC leaves a row loop with a long body rolled and keeps the accumulators on the stack
/// (a load and a store per FMA; q4tp matmul_n4 4864×896 211 → 193 µs on one thread with it).
#define CQ_UNROLL _Pragma("GCC unroll 8")

/// value − base of q1s entry e at column c of a row whose q1 tiles start at `tiles` (base = ±s of
/// the tile under the outlier: the sign bit of its f16 scale flipped when the code bit is 0).
CQ_FMA_F16C inline float q1s_delta(const quant::Q1sView& v, const uint8_t* tiles, uint32_t e, uint64_t c) {
  const uint8_t* t = tiles + quant::kQ1TileBytes * (c / 32);
  const uint32_t flip = (~(t[2 + (c % 32) / 8] >> (c % 8)) & 1u) << 31;
  const float base = std::bit_cast<float>(std::bit_cast<uint32_t>(_cvtsh_ss(load_le<uint16_t>(t))) ^ flip);
  return _cvtsh_ss(load_le<uint16_t>(v.entries + 6 * uint64_t{e} + 4)) - base;
}

/// q1s on the int8 path of either tier, after its q1 tiles: Y[i·y_stride + j0 + k] += Σ_e (value_e −
/// base_e)·X[i, c_e] over the outliers of row r0 + k < r0 + rc (q1 tiles of row r at tiles0 +
/// 6·r·gpr, `cols` columns; X: [n, cols]), summed in f32 in file order (one FMA chain per row,
/// ascending) against the unquantized activation, then added once — the same operations for every
/// n, so matmul stays bitwise equal to matvecs. The row's run is found by binary search, which needs
/// ascending indices: returns false (rows from the offending one on left unadded) when an entry of
/// a run lies below its row, so the caller can redo the call on a path that takes any order.
CQ_FMA_F16C inline bool add_q1s_outliers(const quant::Q1sView& v, const uint8_t* tiles0, uint64_t gpr,
                                         uint64_t cols, uint64_t r0, uint64_t rc, const float* x, size_t n,
                                         float* y, size_t y_stride, uint64_t j0) {
  thread_local std::vector<float> delta;  // batched calls: value − base of the row's outliers
  thread_local std::vector<uint32_t> col;
  uint32_t e0 = v.lower_bound(r0 * cols);
  for (uint64_t k = 0; k < rc; ++k) {
    const uint64_t row0 = (r0 + k) * cols, row1 = row0 + cols;
    const uint8_t* tiles = tiles0 + quant::kQ1TileBytes * (r0 + k) * gpr;
    uint32_t e1 = e0;
    for (; e1 < v.count && v.index(e1) < row1; ++e1)
      if (v.index(e1) < row0) return false;
    if (n == 1) {  // decode: one pass
      float acc = 0.0f;
      for (uint32_t e = e0; e < e1; ++e) {
        const uint64_t c = v.index(e) - row0;
        acc = std::fma(q1s_delta(v, tiles, e, c), x[c], acc);  // explicit: both paths fuse alike
      }
      y[j0 + k] += acc;
    } else if (e1 > e0) {  // prefill: the deltas once, then every token (same sums as n == 1)
      const size_t m = e1 - e0;
      grow(delta, m);
      grow(col, m);
      for (size_t e = 0; e < m; ++e) {
        col[e] = static_cast<uint32_t>(v.index(static_cast<uint32_t>(e0 + e)) - row0);
        delta[e] = q1s_delta(v, tiles, static_cast<uint32_t>(e0 + e), col[e]);
      }
      for (size_t i = 0; i < n; ++i) {
        const float* xi = x + i * cols;
        float acc = 0.0f;
        for (size_t e = 0; e < m; ++e) acc = std::fma(delta[e], xi[col[e]], acc);
        y[i * y_stride + j0 + k] += acc;
      }
    }
    e0 = e1;
  }
  return true;
}

/// q1t on the int8 path of either tier, after its base tiles: for each row r0 + k < r0 + rc, checks
/// the row (quant::q1t_check_row, Error(Parse) naming `what`), then Y[i·y_stride + j0 + k] +=
/// value_e·X[i, col_e] for the row's overlay entries e in file order (X: [n, cols]), one f32
/// multiply and add each. The base code under an entry is 0 (quant/layout.h §q1t), so adding the
/// value equals the reference decoder's replacing it; the operations are the same for every n, so
/// matmul stays bitwise equal to matvecs.
CQ_FMA_F16C inline void add_q1t_overlay(const quant::Q1tView& v, std::string_view what, uint64_t cols,
                                        uint64_t r0, uint64_t rc, const float* x, size_t n, float* y,
                                        size_t y_stride, uint64_t j0) {
  for (uint64_t k = 0; k < rc; ++k) {
    quant::q1t_check_row(v, r0 + k, what);
    for (uint32_t e = v.ptr(r0 + k); e < v.ptr(r0 + k + 1); ++e) {
      const uint16_t c = v.col(e);
      const float val = v.value(e);
      for (size_t i = 0; i < n; ++i) y[i * y_stride + j0 + k] += val * x[i * cols + c];
    }
  }
}

}  // namespace cortiq::kernels::simd_detail
