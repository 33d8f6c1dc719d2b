// AVX2 tier of the SIMD matvec / batched matmul kernels (issue 6: "AVX2 and AVX-512 ... scalar fallback
// kept as the reference"), for x86 CPUs with AVX2 + FMA + F16C but without the AVX-512 features that
// simd_matvec.h needs. Same contracts as matvec_rows_simd / matmul_simd; payload layouts FORMAT-NOTES §1.8,
// quant/codec.h, quant/layout.h.
//
// Backend: functions compiled with `__attribute__((target("avx2,fma,f16c")))` (the project itself is built
// without -mavx2), only reached after avx2_cpu_ok() checked the CPU with __builtin_cpu_supports.
//
// Two arithmetic paths:
//  * exact (`exact = true`): f32/f16/bf16 rows are read natively (f16/bf16 widened exactly). The quantized
//    codecs decode each block of 16 rows into a thread-local buffer to exactly the values ŵ of the
//    reference decoder: q8_row, q8_2f, q4_tiled, q4_block, q4tp, q2tp and q1 with AVX2 decoders that form
//    the same single f32 product per weight as quant::decode_rows (ladders from the same exp2f/product
//    chain as quant::q4tp_ladder; vbit/vbit_ro codes unpacked 8 at a time — b whole bytes read as one
//    big-endian qword, split by 64-bit variable shifts; q1t's base-3 code bytes through the digit table
//    quant::kQ1tDigits, then its overlay entries); the flat-group codecs with cols % 32 != 0 through
//    quant::RowDecoder (the payload parsed once per call). The dot with the f32
//    activation accumulates with f32 FMA in 2×8 lanes: 8-column chunk k goes to accumulator k mod 2 (the
//    ragged tail chunk zero padded), then a0 + a1 and a fixed lane tree. Bound against the
//    double-accumulating reference (the standard FMA dot-product analysis, Higham, "Accuracy and Stability of
//    Numerical Algorithms", §3.1):
//      |y − y_ref| ≤ γ_(⌈cols/16⌉+4) · Σ_c |ŵ_c·x_c| + 2^-24·|y_ref|,   γ_k = k·2^-24 / (1 − k·2^-24)
//    (for cols = 4864: ≤ 1.8e-5 · Σ|ŵx|).
//  * int8 (`exact = false`), for q8_row, q8_2f, q2tp, q1t, vbit, vbit_ro, and q4_tiled, q4tp, q4_block, q1,
//  q1s when
//    cols % 32 == 0 (q1s: when its outlier indices are strictly ascending): the
//    activation is quantized per 32-column block like llama.cpp's q8_0 (d_b = absmax_b/127 in f32,
//    q = rne(x·(127/absmax_b)), so |x − d_b·q| ≤ d_b/2 + ulp). Each block's integer dot Σ w_code·q is
//    formed exactly with _mm256_maddubs_epi16 + _mm256_madd_epi16 (q8: |w| × q·sign(w); 4-bit codes:
//    nibble × q plus the per-lane bias −8·Σq; q1: 2·bit × q plus −Σq, i.e. Σ (2·bit − 1)·q; q1t: u × q
//    plus −Σq with u = value + 1 ∈ {0, 1, 2} from the tile's base-3 code bytes (a 256-entry table of 5
//    packed u8 digits per byte, its code bytes checked as on the exact path), i.e. Σ value·q; q2tp: 2·code
//    × q in four bit planes summed in int16 (≤ 4·2·6·127 < 2^15) plus −3·Σq, i.e. 2·Σ (code − 1.5)·q,
//    against an activation laid out in matching planes; vbit / vbit_ro: the row's codes u as signed bytes
//    w = u − L for widths b < 8, w = u − 128 for b = 8 (u − L would reach 128) with +Σq added back,
//    multiplied as q8 is, |w| × q·sign(w), pairs ≤ 2·128·127 < 2^15, i.e. Σ (u − L)·q), converted to f32 and
//    FMA'd into one 8-lane accumulator per output with the block scale d_b (times the group scale for the
//    4-bit, 2-bit and 1-bit codecs and vbit's f16 group scales — q2tp's from the row's ladder, halved with
//    d_b; the q8 codecs multiply the row scale at the end). q1s adds, per output, Σ_e (value_e −
//    base_e)·x_(c_e) over the row's outliers (base_e = the q1 ±s under outlier e) in f32 FMAs against the
//    unquantized activation, in file order, after the int8 base; q1t likewise adds Σ_e value_e·x_(c_e) over
//    its row's overlay entries (base code 0 there) in f32, in file order, after checking the row
//    (quant::q1t_check_row). For q8_row / q8_2f a block is the 32 columns that one int32 lane of
//    _mm256_madd_epi16 sums over 8 blocks (32b + 4j … 32b + 4j + 3 for the 8 blocks b of a 256-column chunk,
//    fewer in the last chunk): the lanes are summed in int32 over the chunk and get one convert and FMA per
//    256 columns instead of per 32. Error vs the exact product:
//      |y − y_exact| ≤ Σ_c |ŵ_c|·absmax_b(c)/254   (plus f32 rounding, ~γ_(cols/32+6) relative).
//    q8_2f folds its column field into the activation first (x'_c = x_c·col_c, quantized per block; the
//    bound then uses |ŵ_c|/col_c and absmax'_b); for q1s, |ŵ_c| at an outlier column is replaced by
//    max(|ŵ_c|, s) (the int8 part multiplies the base ±s there; the outlier correction adds only f32
//    rounding; q1t's overlay columns carry base 0 in the int8 part, so |ŵ_c| over-bounds them).
//    A block holding a NaN/±Inf activation yields NaN outputs. Every other case (f32, f16, bf16,
//    q4_* / q1 with cols % 32 != 0, q1s with unordered outliers) takes the exact path when exact =
//    false.
//
// Threads: output rows are split in contiguous blocks of 16 over ThreadPool::parallel_for; each output is
// computed by one thread with arithmetic that depends neither on the split nor on the register tile it
// lands in, so results are bit-identical for any thread count, and matmul_avx2 of n tokens equals n
// matvec_rows_avx2 calls bit for bit. The int8 activation quantization runs once on the caller before the
// split. Scratch buffers are thread_local and only grow (no allocation once warm); q4tp/q2tp use a
// process-wide 256 KiB exp2f table of all f16 values, built on first use.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/thread_pool.h"
#include "kernels/weight_view.h"
#include "quant/dtype.h"

namespace cortiq::kernels {

/// Whether this CPU has AVX2, FMA and F16C (__builtin_cpu_supports), the features the AVX2 tier needs.
bool avx2_cpu_ok() noexcept;

/// Whether matvec_rows_avx2 / matmul_avx2 implement `t` on this CPU: true for f32, f16, bf16, q8_row,
/// q8_2f, q4_block, q4_tiled, q4tp, q2tp, q1, q1s (unordered outliers: exact path through
/// quant::RowDecoder), q1t (int8 path tile_q1t), vbit, vbit_ro when avx2_cpu_ok(); false otherwise (u8 and
/// the reserved ids: the caller uses the reference there).
bool avx2_supported(quant::DType t) noexcept;

/// y[i] = Σ_c W[row_begin+i, c]·x[c] for i < row_count. W: `[rows, cols]` row-major (w.rows(), w.cols()),
/// x: [cols] f32, y: [row_count] f32. `exact` selects the f32-activation path, otherwise the
/// int8-activation path where one exists (file comment for both and their error bounds). Throws
/// Error(Unsupported) when !avx2_supported(w.dtype), Error(Parse) for a payload whose size/layout does not
/// match dtype and shape (quant::validate_payload / the layout parsers on every call; q1t code bytes and
/// overlay rows when their rows are read, on either path), Error(Bounds) for a row range outside [0, rows).
void matvec_rows_avx2(const WeightView& w, uint64_t row_begin, uint64_t row_count, const float* x, float* y,
                      ThreadPool& pool, bool exact);

/// Batched (prefill) product: Y[i, r] = Σ_c W[r, c]·X[i, c] for i < n, r < rows. X: `[n, cols]`, Y:
/// `[n, rows]`. Each block of 16 weight rows is decoded (exact path, quantized codecs) once and applied to
/// all n tokens in register tiles of 2 rows × 2 tokens (int8 path: q2tp 4 rows × 2 tokens, q1 / q1s / q1t 2 ×
/// 4 when n % 4 == 0); each Y[i, r] is computed with exactly the arithmetic of matvec_rows_avx2 with the same
/// `exact` flag, so the result is bit-identical to n matvec calls. Same errors as matvec_rows_avx2.
void matmul_avx2(const WeightView& w, const float* x, size_t n, float* y, ThreadPool& pool, bool exact);

}  // namespace cortiq::kernels
