// Batched exact f32 product for the AVX-512 tier (issue 29 item 6, issue 34): the `--exact`
// matmul of f32 / f16 / bf16 weights against many activation rows, near the FMA roof, with per
// output exactly the arithmetic of the decode-shaped exact tile in avx512/exact.cc. Internal to
// src/kernels (not part of the kernels API); reached through matmul_simd / matmul_multi_simd.
//
// Why it can be bit-identical: the exact dot (simd_matvec.h, "exact") keeps four 16-lane
// accumulators per output — 16-column chunk j goes into accumulator j mod 4 with FMA (a masked FMA
// for the tail chunk) — and finishes with (a0+a1)+(a2+a3) and _mm512_reduce_add_ps. The four
// accumulators are four independent FMA chains, each over its chunks in ascending order. This
// kernel runs one chain ("phase" q) at a time for a 4-weight-row × 4-activation-row register tile
// (16 zmm accumulators, one per output), over the chunks j ≡ q (mod 4), keeps the phase results
// ((a0+a1) and a2 in memory), forms (a0+a1)+(a2+a3) in that order, and reduces the 16 outputs of
// one activation row (a block of 16 weight rows) at once with a shuffle tree that adds exactly
// the lane pairs _mm512_reduce_add_ps adds (GCC's avx512fintrin.h: halves 256, 128, then lanes
// {0,1}+{2,3}, then 0+1), storing them as one vector. Per FMA it loads 8/16 of a vector instead
// of the 2×2 tile's 4/4 and spends 3 adds + 1/16 of a reduction per output instead of a whole one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/dtype.h"

namespace cortiq::kernels::simd_detail {

/// Activation rows from which matmul_simd's exact path on f32 / f16 / bf16 weights (and on the
/// codecs whose rows it decodes first, q8_row / q8_2f included) takes gemm_exact_avx512 instead of
/// the 2×2 dot tile. Measured at 256×256 f32, one thread: already at n = 2 the GEMM (padded to 4)
/// is no slower (5.4 vs 6.0 µs), at n = 4 2.1× faster (bench/README.md "Exact GEMM").
inline constexpr size_t kGemmExactMinRows = 2;

/// Y[i·y_stride + j0 + k] = Σ_c W_k(c)·X[i, c] for k < rc, i < n, where W_k is the weight row k
/// of `rc` consecutive rows starting at `w` (dtype t ∈ {F32, F16, BF16}, `cols` elements per row,
/// little-endian, rows contiguous) decoded exactly to f32. X: [n, cols] row-major f32. Each output
/// equals, bit for bit, the AVX-512 exact dot (dot_exact_tile in avx512/exact.cc) of that row and
/// that activation row, so results do not depend on n, the tiling, or the thread split. Needs
/// simd_cpu_ok() (AVX-512 F/BW/VL/DQ, FMA, F16C); the caller checks it. Single-threaded: the caller
/// splits rows over its pool. Throws Error(Unsupported) for another dtype.
void gemm_exact_avx512(quant::DType t, const uint8_t* w, uint64_t rc, uint64_t cols, const float* x, size_t n,
                       float* y, size_t y_stride, uint64_t j0);

/// The 16 sums _mm512_reduce_add_ps(v[o]) (o < 16), computed with one shuffle tree; exposed for
/// the parity test. Needs simd_cpu_ok().
void reduce16_avx512(const float* v /* [16][16] */, float* out /* [16] */);

}  // namespace cortiq::kernels::simd_detail
