// The kernel table of one model: which implementation (AVX-512, AVX2, scalar reference) and which
// activation precision (int8 or f32) every matrix, attention and activation kernel uses — chosen
// once, when the table is built, from a KernelConfig. Two models in one process may hold different
// tables (one `--exact`, one fast); the process-wide mode and tier (kernels.h) only give the
// default a table is built from, and what the free functions of kernels.h use. Implemented in
// dispatch.cc (the dispatcher) and dispatch_settings.cc (the process-wide mode and tier).
#pragma once

#include <span>

#include "kernels/kernels.h"

namespace cortiq::kernels {

/// What an Ops table is built from. `tier` is clamped to best_simd_tier() by Ops.
struct KernelConfig {
  MatmulMode mode = MatmulMode::Fast;
  SimdTier tier = SimdTier::Scalar;

  /// The process-wide settings now: matmul_mode() and simd_tier().
  static KernelConfig current() noexcept;
};

/// A kernel table: the entry points of kernels.h that depend on mode or tier, dispatching on the
/// table's own config and never on the process globals. Trivially copyable, immutable, usable from
/// any number of threads at once. Each call has the contract of the free function of the same name
/// in kernels.h (shapes, errors) and gives bit for bit what that function gives while the process
/// globals equal this table's config.
class Ops {
 public:
  /// Errors: none; a tier above the CPU's is lowered to best_simd_tier().
  explicit Ops(KernelConfig c = KernelConfig::current()) noexcept;

  /// The config in force (tier already clamped).
  KernelConfig config() const noexcept { return cfg_; }
  /// "avx512", "avx2" or "reference": what matvec/matmul run for dtype `t` under this table.
  const char* kernel_name(quant::DType t) const noexcept;

  /// y[row_count] = W[row_begin .. row_begin+row_count) · x[cols].
  void matvec_rows(const WeightView& w, uint64_t row_begin, uint64_t row_count, const float* x, float* y,
                   ThreadPool& pool) const;
  /// Y[n, rows] = X[n, cols] · Wᵀ.
  void matmul(const WeightView& w, const float* x, size_t n, float* y, ThreadPool& pool) const;
  /// ys[i][n, rows_i] = X[n, cols] · W_iᵀ for weights of equal cols, one pool hand-off when every
  /// weight takes the AVX-512 path. Throws Error(InvalidArgument) on a count or cols mismatch.
  void matmul_multi(std::span<const WeightView* const> ws, const float* x, size_t n,
                    std::span<float* const> ys, ThreadPool& pool) const;
  /// Causal attention of one query row over keys [key_begin, key_end) (kernels.h `attention`).
  void attention(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
                 const AttentionParams& p, const uint8_t* head_alive, float* out, size_t kv_head_begin,
                 size_t kv_head_end) const;
  /// out[i] = silu(g[i]) · u[i] for n elements (out may alias g).
  void swiglu(const float* g, const float* u, float* out, size_t n) const;

 private:
  enum class Impl : uint8_t { Reference, Avx2, Avx512 };
  Impl impl_for(quant::DType t) const noexcept;
  bool avx512_ops() const noexcept;
  KernelConfig cfg_;
};

}  // namespace cortiq::kernels
