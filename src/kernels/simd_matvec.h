// SIMD matrix-vector and batched matrix products over the CMF weight codecs (issue 6; ENGINE-NOTES
// §3.15; payload layouts FORMAT-NOTES §1.8 / quant/layout.h).
//
// Backend: AVX-512 (F, BW, VL, DQ, VNNI) functions compiled with GCC/Clang
// `__attribute__((target(...)))` and selected at run time with `__builtin_cpu_supports`. On a CPU
// without these features `simd_supported` returns false for every dtype; the dispatch layer
// (kernels.h SimdTier) then uses the AVX2 tier (simd_avx2.h) or the scalar reference.
//
// Two arithmetic paths:
//  * exact (`exact = true`): each weight row is dequantized in registers to exactly the f32 values
//    the reference decoder produces (quant::decode_rows), then multiplied by the f32 activation and
//    accumulated with f32 FMA in 4×16 lanes (16-column chunk k goes to accumulator k mod 4, then
//    (a0+a1)+(a2+a3) and a fixed lane tree). Bound against the double-accumulating reference:
//      |y − y_ref| ≤ γ_(⌈cols/64⌉+7) · Σ_c |ŵ_c·x_c| + 2^-24·|y_ref|,   γ_k = k·2^-24 / (1 − k·2^-24)
//    (ŵ = the decoded f32 weight); for cols = 4864 that is ≤ 5e-6 · Σ|ŵx|.
//  * int8 (`exact = false`): the activation is quantized per 32-column block like llama.cpp's q8_0
//    (d_b = absmax_b/127 in f32, q = rne(x·127/absmax_b), |x − d_b·q| ≤ d_b/2 + ulp), integer dot
//    products with AVX-512 VNNI `vpdpbusd` against the integer weight codes, per-block f32 scaling.
//    For q8_row / q8_2f a block is the 32 columns that one int32 lane of vpdpbusd sums over 8
//    superblocks (64s + 4j … 64s + 4j + 3 for the 8 superblocks s of a 512-column chunk, fewer in
//    the last chunk), not a run of 32 columns: the row's lanes then need one convert and one FMA per
//    512 columns instead of per 64 (pp512 at q8 ~1.5× faster). A block holding a NaN or an infinity
//    gets d = NaN and q = 0, so the output is NaN, never a finite value.
//    Error vs the exact product: |y − y_exact| ≤ Σ_c |ŵ_c|·absmax_b(c)/254 (plus f32 rounding,
//    ~1e-6 relative). q8_2f folds its column field into the activation first (x'_c = x_c·col_c,
//    quantized per block; the bound then uses |ŵ_c|/col_c·absmax'_b/254). Used for q8_row, q8_2f,
//    q4_block (cols % 32 == 0), q4_tiled, q4tp, q2tp, q1, q1s (its outliers added in f32), vbit, vbit_ro
//    (rows of any width 3–8 unpacked with VBMI vpermb + vpmultishiftqb) and q1t (with AVX512-VBMI; its sparse
//    overlay is added in f32 against the unquantized activation, so only the ternary base carries the int8
//    error); f32/f16/bf16 (and every dtype whose int8 kernel is not implemented, e.g. q4_block with cols % 32
//    != 0, q1t without VBMI) take the exact path.
//
// Memory: every tile prefetches the same offsets one tile of rows (≥ 4 KiB) ahead — CMF rows are
// short, and the hardware prefetchers neither ramp up inside one nor cross 4 KiB pages.
//
// Threads: output rows are split in contiguous blocks of 16 over the ThreadPool; each output is
// computed by one thread with arithmetic that does not depend on the split, so results are
// bit-identical for any thread count. The int8 activation quantization runs before the row split
// (a batch's tokens spread over the pool, each token quantized on its own; the products of one
// matmul_multi call whose activation layouts match share it). Scratch buffers are thread_local and
// only grow (no allocation once warm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/thread_pool.h"
#include "kernels/weight_view.h"
#include "quant/dtype.h"

namespace cortiq::kernels {

/// Whether this CPU has the AVX-512 (F/BW/VL/DQ/VNNI) features the SIMD kernels need.
bool simd_cpu_ok() noexcept;

/// Whether simd_cpu_ok() and the CPU also has AVX512-VBMI, which q1t's int8 kernel needs (its tiles
/// are gathered with vpermi2b); without it q1t takes the exact path.
bool simd_vbmi_ok() noexcept;

/// Whether matvec_rows_simd / matmul_simd implement `t` on this CPU. True for f32, f16, bf16,
/// q8_row, q8_2f, q4_block, q4_tiled, q4tp, q2tp, q1, q1s, q1t when simd_cpu_ok(), and vbit /
/// vbit_ro when simd_vbmi_ok(); false otherwise (and for u8 and the reserved ids — the caller uses
/// the reference there). q1s
/// runs here when its outlier indices are strictly ascending (as our encoder writes them; other
/// orders go to the reference, which applies the overwrite semantics); q1t's int8 path needs
/// simd_vbmi_ok() too, else it takes the exact path (rows decoded in registers + f32 dot).
bool simd_supported(quant::DType t) noexcept;

/// y[i] = Σ_c W[row_begin+i, c]·x[c] for i < row_count. W: `[rows, cols]`, x: [cols], y: [row_count].
/// `exact` selects the f32-activation path, otherwise the int8-activation path where one exists
/// (file comment). Throws Error(Unsupported) when !simd_supported(w.dtype), Error(Bounds) for a row
/// range outside the tensor, Error(Parse) for a payload whose size/layout does not match dtype and
/// shape (checked with quant::validate_payload / the layout parsers on every call — O(1) for the
/// fixed-size dtypes).
void matvec_rows_simd(const WeightView& w, uint64_t row_begin, uint64_t row_count, const float* x, float* y,
                      ThreadPool& pool, bool exact);

/// Batched (prefill) product: Y[i, r] = Σ_c W[r, c]·X[i, c] for i < n, r < rows. X: `[n, cols]`,
/// Y: `[n, rows]`. Cache- and register-blocked: a block of 16 weight rows is decoded (exact path,
/// quantized codecs but q8_row / q8_2f, whose rows decode in registers) once and applied to all n
/// tokens from L1/L2; the inner kernels compute tiles of
/// 2 rows × 2 tokens (exact) or, int8: q8 4 rows × 2 tokens; the 4- and 2-bit codecs 4 rows × 2, 3
/// or 4 tokens, whichever divides small batches; q1t 4 rows × 1 or 2 rows × 2, 3 or 4 tokens; all
/// activations quantized once up front), loading/unpacking each weight superblock once per tile. Each Y[i, r]
/// is computed with exactly the arithmetic of matvec_rows_simd with the same `exact` flag, so the result is
/// bit-identical to n matvec calls (a stronger property than the contract requires). Same errors.
void matmul_simd(const WeightView& w, const float* x, size_t n, float* y, ThreadPool& pool, bool exact);

/// Several batched products over one input in one hand-off to the pool: Y_j[i, r] = Σ_c W_j[r, c]·X[i, c]
/// for every weight j (the Q/K/V or gate/up projections of a layer). X: `[n, cols]` (every W_j has
/// `cols` columns), ys[j]: `[n, rows_j]`. Each output is computed exactly as matmul_simd computes it, so
/// the result is bit-identical to ws.size() matmul_simd calls; only the thread-pool barriers and
/// the per-call start are shared. Throws Error(InvalidArgument) when ws and ys differ in length or
/// the column counts differ; otherwise the errors of matmul_simd.
void matmul_multi_simd(std::span<const WeightView* const> ws, const float* x, size_t n,
                       std::span<float* const> ys, ThreadPool& pool, bool exact);

}  // namespace cortiq::kernels
