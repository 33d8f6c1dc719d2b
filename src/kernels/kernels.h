// The one compute interface of the forward pass (DESIGN.md "kernels"; ENGINE-NOTES §3.3–3.6).
//
// Every op the model calls goes through the functions declared here. Each has a scalar reference
// implementation (`*_ref`, reference_matmul.cc, reference_attention.cc, reference_norm_rope.cc)
// that accumulates in double; the public matrix, attention and activation entry points go through
// the dispatcher (dispatch.cc, ops.h) by `matmul_mode()` and `simd_tier()` to the SIMD kernels
// (or the reference), and the `*_ref` versions stay for parity tests. Weight preparation and
// decode_rows: weight_prepare.cc.
//
// Conventions: matrices are `[rows, cols]` row-major (HF `[out_features, in_features]`), vectors are
// contiguous f32. Matrix products are split over output rows across the ThreadPool; each output
// element is computed by one thread with the serial arithmetic, so results are identical for any
// thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "kernels/thread_pool.h"
#include "kernels/weight_view.h"
#include "util/mmap_file.h"

namespace cortiq::kernels {

// ---------------------------------------------------------------------------------------------
// Weights

/// Which implementation the public matvec/matvec_rows/matmul dispatch to (DESIGN.md "Exactness is
/// always one flag away").
///  - Fast (default): SIMD kernels of the current SimdTier; for the codecs with an int8 kernel
///    (AVX-512: q8_row, q8_2f, q4_block, q4_tiled, q4tp, q2tp, q1; AVX2: q8_row, q8_2f, q4_block,
///    q4_tiled, q4tp) the activation is quantized to int8 per 32-block (llama.cpp q8_0 style) — an
///    approximation whose perplexity cost is measured, not asserted.
///  - Exact (`--exact`): SIMD kernels with f32 activations; each weight decodes to exactly the
///    reference value and accumulates in f32 FMA (bounds in simd_matvec.h / simd_avx2.h).
///  - Reference: the scalar `*_ref` kernels (double accumulation), for parity tests.
/// Dtypes without a kernel in the current tier (or the Scalar tier) use the reference.
enum class MatmulMode : uint8_t { Fast, Exact, Reference };

/// Instruction-set tier of the matrix and attention kernels, one dispatch layer for all of them:
/// Avx512 (AVX-512 F/BW/VL/DQ/VNNI: simd_matvec.h, simd_attention.h), Avx2 (AVX2+FMA+F16C:
/// simd_avx2.h, simd_avx2_attention.h) or Scalar (the `*_ref` kernels). Detected
/// once from the CPU (__builtin_cpu_supports) as the best it has; the environment variable
/// `CORTIQ_SIMD=avx512|avx2|scalar` or set_simd_tier lowers it (never above what the CPU has).
enum class SimdTier : uint8_t { Scalar, Avx2, Avx512 };

/// The best tier this CPU supports.
SimdTier best_simd_tier() noexcept;
/// The tier in use: best_simd_tier(), lowered by CORTIQ_SIMD (read on first call; an unknown
/// value is ignored with a warning on stderr) or by set_simd_tier.
SimdTier simd_tier() noexcept;
/// Uses min(t, best_simd_tier()) from now on; call before any forward pass (tests, benchmarks).
void set_simd_tier(SimdTier t) noexcept;
/// Sets the tier for a scope and restores the previous one on exit (tests, benchmarks).
class ScopedSimdTier {
 public:
  explicit ScopedSimdTier(SimdTier t) noexcept : prev_(simd_tier()) { set_simd_tier(t); }
  ~ScopedSimdTier() { set_simd_tier(prev_); }
  ScopedSimdTier(const ScopedSimdTier&) = delete;
  ScopedSimdTier& operator=(const ScopedSimdTier&) = delete;

 private:
  SimdTier prev_;
};
/// "avx512", "avx2" or "scalar".
const char* simd_tier_name(SimdTier t) noexcept;
/// Which implementation matvec/matmul run for dtype `t` under the current mode and tier:
/// "avx512", "avx2" or "reference".
const char* kernel_name(quant::DType t) noexcept;

/// Sets the process-wide mode; call before any forward pass (not synchronized with running kernels).
void set_matmul_mode(MatmulMode m) noexcept;
/// The current process-wide mode.
MatmulMode matmul_mode() noexcept;

/// Sets the mode for a scope and restores the previous one on exit (tests, one-off checks).
class ScopedMatmulMode {
 public:
  explicit ScopedMatmulMode(MatmulMode m) noexcept : prev_(matmul_mode()) { set_matmul_mode(m); }
  ~ScopedMatmulMode() { set_matmul_mode(prev_); }
  ScopedMatmulMode(const ScopedMatmulMode&) = delete;
  ScopedMatmulMode& operator=(const ScopedMatmulMode&) = delete;

 private:
  MatmulMode prev_;
};

/// Whether matvec/matmul/decode_rows support this dtype (every codec dtype: f32, f16, bf16,
/// q8_row, q4_block, vbit, q8_2f, vbit_ro, q4_tiled, q1, q1s, q1t, q4tp, q2tp).
bool has_kernel(quant::DType t) noexcept;

/// Load-time check: throws Error(Unsupported) naming `w.name` when the dtype has no kernel, and
/// Error(Parse) when the payload does not match dtype and shape (quant::validate_payload).
void check_weight(const WeightView& w);

/// Where prepare_weight puts a copy and whom it tells about the original bytes.
struct PrepareOptions {
  /// Takes each range of the original payload once prepare_weight has copied it, so a caller can
  /// hand those pages back as it goes (TensorSource::release): about 1 MiB at a time, back to back
  /// in order, every range but the last ending at a 64 KiB-aligned address (so that page-granular
  /// releases of consecutive ranges leave no page between them behind).
  std::function<void(std::span<const uint8_t> bytes)> release = nullptr;
  /// Memory for copies (tensors of one model share its 2 MiB pages); null: a HugeBuffer per copy.
  HugeArena* arena = nullptr;
};

/// Readies a view for the kernels, once, when a tensor is bound (the model does); products are then
/// cheaper, and their results equal those of the dtype the view ends up with.
/// - q4tp / q2tp: fills w.prepared (weight_view.h) with exp2f of every row's lo and step, computed
///   as quant::q4tp_ladder does (one pass over the `[rows]` parameter plane; 8 bytes per row).
/// - q4_tiled: re-lays the payload out as q4_block (quant::q4_tiled_to_block: the same values in
///   the same nibble order, scales in a plane of their own) in huge-page memory the view then owns
///   (w.storage), and sets w.dtype = Q4Block: the kernels read whole 64-byte blocks of nibbles
///   instead of 18-byte tiles (kernels_bench matvec 896×4864: q4_block 57 µs against q4_tiled 73
///   µs; `cortiq bench` tg +12–15%, pp512 +30–40% on the Qwen2.5-0.5B-shaped file).
/// - every other dtype: unchanged.
/// Then, for every dtype with a SIMD kernel, sets w.plan (weight_view.h): the payload validated
/// (quant::validate_payload; q1s entries and vbit row offsets in full) and parsed once, so that the
/// products of the view skip that work on every call; their results are bit-identical to those of
/// an unprepared view (kernels_bench matvec 896×896, 1 thread: see the issue-28 notes).
/// Throws Error(Parse) naming the tensor when the payload does not match dtype and shape
/// (quant::validate_payload and the layout parsers, the q4_tiled size 18·ceil(n/32)), Error(Io)
/// when the copy cannot be allocated.
void prepare_weight(WeightView& w, const PrepareOptions& opt = {});

/// Dequantizes rows [row_begin, row_begin+count) into out[count * cols] (f32). Throws
/// Error(Bounds) for rows past the end, Error(Unsupported) for a dtype without a codec.
void decode_rows(const WeightView& w, uint64_t row_begin, uint64_t count, float* out);

/// y[r] = Σ_c W[r, c]·x[c] for r in [0, rows). x: [cols], y: [rows].
void matvec(const WeightView& w, const float* x, float* y, ThreadPool& pool);
/// Same for the row range [row_begin, row_begin+row_count): y[i] = W[row_begin+i]·x.
void matvec_rows(const WeightView& w, uint64_t row_begin, uint64_t row_count, const float* x, float* y,
                 ThreadPool& pool);
/// Batched: Y[i, r] = Σ_c W[r, c]·X[i, c] for i < n. X: [n, cols], Y: [n, rows]. Bit-identical to
/// n calls of matvec.
void matmul(const WeightView& w, const float* x, size_t n, float* y, ThreadPool& pool);

/// Several products over one input, y_j = matmul(*ws[j], x, n) for every j (a layer's Q/K/V or
/// gate/up projections; every W_j has the same cols). Bit-identical to separate matmul calls; in
/// the Avx512 tier all of them run in one thread-pool hand-off (fewer barriers per decode step).
/// Throws Error(InvalidArgument) when ws and ys differ in length or the weights' cols differ.
void matmul_multi(std::span<const WeightView* const> ws, const float* x, size_t n, std::span<float* const> ys,
                  ThreadPool& pool);

/// Scalar references (decode a row, dot in double). Same contracts as above.
void matvec_rows_ref(const WeightView& w, uint64_t row_begin, uint64_t row_count, const float* x, float* y,
                     ThreadPool& pool);
void matmul_ref(const WeightView& w, const float* x, size_t n, float* y, ThreadPool& pool);

// ---------------------------------------------------------------------------------------------
// Norms and activations (ENGINE-NOTES §3.3, §3.4)

/// `qwen`: x̂·w; `gemma`: x̂·(1+w) (spec §2 `norm_style`).
enum class NormStyle : uint8_t { Qwen, Gemma };

/// RMSNorm over n elements: ms = mean(x²) in double, inv = f32(1/sqrt(ms+eps)),
/// out = x·inv·w (Qwen) or x·inv·(1+w) (Gemma); w == nullptr → weightless (out = x·inv).
/// out may alias x.
void rmsnorm(const float* x, const float* w, size_t n, double eps, NormStyle style, float* out);

/// In-place numerically stable softmax (max-subtracted, sums in double).
void softmax(float* x, size_t n);
/// silu(x) = x/(1+e^−x).
float silu(float x);
/// gelu with the tanh approximation: 0.5x(1+tanh(√(2/π)(x+0.044715x³))) (HF gelu_pytorch_tanh).
float gelu_tanh(float x);
/// out[i] = silu(g[i])·u[i] (SwiGLU). out may alias g or u. Uses swiglu_simd (simd_activation.h,
/// ≤ 4 ulp) in the Avx512 tier unless the mode is Reference, else swiglu_ref.
void swiglu(const float* g, const float* u, float* out, size_t n);
/// Reference SwiGLU: silu evaluated in double, rounded once per element.
void swiglu_ref(const float* g, const float* u, float* out, size_t n);
/// out[i] = gelu_tanh(g[i])·u[i] (GeGLU). out may alias g or u.
void geglu(const float* g, const float* u, float* out, size_t n);
/// c·tanh(x/c) in place (Gemma-2 softcapping); c <= 0 is a no-op.
void softcap(float* x, size_t n, float c);

// ---------------------------------------------------------------------------------------------
// RoPE (ENGINE-NOTES §3.5; HF `rotate_half`, half-split pairing)

/// YaRN parameters (FORMAT-NOTES §1.5 `arch.yarn`; HF `_compute_yarn_parameters`).
struct YarnParams {
  double factor = 1.0;
  double original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 1.0;
};

/// Precomputed rotary frequencies for one kind of layer.
struct RopeTable {
  uint32_t rotary_dim = 0;      ///< rotated dims per head (even), the rest pass through
  std::vector<float> inv_freq;  ///< [rotary_dim/2]
  float scale = 1.0f;           ///< multiplies cos and sin (YaRN attention_factor)
};

/// inv_freq[i] = 1/θ^(2i/rotary) (computed in double, stored f32), rotary =
/// max(2, int(head_dim·partial_rotary_factor)) rounded down to even; YaRN blends interpolated and
/// extrapolated frequencies by the linear ramp of ENGINE-NOTES §3.5; freq_factors (if given, length
/// rotary/2) divide inv_freq per index (llama.cpp `rope_freqs`). Throws Error(InvalidArgument) on a
/// freq_factors length mismatch.
RopeTable make_rope(uint32_t head_dim, double theta, double partial_rotary_factor,
                    const std::optional<YarnParams>& yarn, std::span<const double> freq_factors);

/// Llama-3 `rope_scaling` (rope_type "llama3") expressed as per-index divisors of inv_freq
/// (PITFALLS RUN-1; HF `_compute_llama3_parameters`): for wavelength λ = 2π/inv_freq, λ <
/// orig/high_ff → 1; λ > orig/low_ff → factor; else 1/((1−s)/factor + s) with
/// s = (orig/λ − low_ff)/(high_ff − low_ff). Returns [rotary/2] divisors.
std::vector<double> llama3_freq_factors(uint32_t rotary_dim, double theta, double factor,
                                        double low_freq_factor, double high_freq_factor,
                                        double original_max_position_embeddings);

/// Rotates `n_heads` consecutive heads of `head_dim` floats at absolute position `pos` in place:
/// for i < rotary/2, (x_i, x_{i+rotary/2}) → (x_i·c − x_{i+h}·s, x_{i+h}·c + x_i·s)·scale with
/// angle = f32(pos)·inv_freq[i] (f32, as HF computes it).
void rope(float* x, size_t n_heads, size_t head_dim, const RopeTable& t, int64_t pos);

// ---------------------------------------------------------------------------------------------
// Attention (ENGINE-NOTES §3.6)

/// One layer's KV storage for one sequence, head-major: [n_kv_heads][capacity][head_dim],
/// f32 or f16 (IEEE RNE on store).
struct KvLayerView {
  const void* k = nullptr;
  const void* v = nullptr;
  bool f16 = false;
  size_t capacity = 0;  ///< positions per head
};

/// Attention parameters of one layer.
struct AttentionParams {
  size_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;    ///< 1/sqrt(head_dim) or 1/sqrt(query_pre_attn_scalar)
  float softcap = 0.0f;  ///< pre-softmax c·tanh(s/c); 0 = off
};

/// Causal GQA attention of one query position over stored keys [key_begin, key_end):
/// q: [n_heads·head_dim] (already RoPE'd), out: [n_heads·head_dim]. q head h reads kv head
/// h / (n_heads/n_kv_heads). Only the query heads of kv heads [kv_head_begin, min(kv_head_end,
/// n_kv_heads)) are computed (their `out` rows written; other rows untouched) — the forward pass
/// splits (token, kv head) pairs over threads. `head_alive` (nullable, [n_heads]) zeroes dead heads'
/// outputs. softmax(scale·q·k [→ softcap]) · V (Vaswani et al. 2017; softcap: Gemma 2 report).
/// Dispatch: matmul_mode() == Reference or the Scalar tier → attention_ref; the Avx512 tier →
/// attention_simd (simd_attention.h); the Avx2 tier → attention_avx2 (simd_avx2_attention.h). Both
/// SIMD kernels accumulate in f32; their headers give the error bound vs the reference.
/// Results do not depend on the kv-head split or on the thread.
void attention(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
               const AttentionParams& p, const uint8_t* head_alive, float* out, size_t kv_head_begin = 0,
               size_t kv_head_end = SIZE_MAX);

/// Scalar reference of `attention` (scores and weighted sums accumulate in double).
void attention_ref(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
                   const AttentionParams& p, const uint8_t* head_alive, float* out, size_t kv_head_begin = 0,
                   size_t kv_head_end = SIZE_MAX);

}  // namespace cortiq::kernels
