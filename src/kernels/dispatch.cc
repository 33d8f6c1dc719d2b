// The kernel dispatcher (ops.h): an Ops table picks the implementation of each call — AVX-512,
// AVX2 or the scalar reference (reference_*.cc) — from its own config; the free functions of
// kernels.h build a table from the process-wide mode and tier (dispatch_settings.cc).
#include "kernels/ops.h"

#include <algorithm>

#include "kernels/simd_activation.h"
#include "kernels/simd_attention.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx2_attention.h"
#include "kernels/simd_matvec.h"
#include "util/error.h"

namespace cortiq::kernels {

KernelConfig KernelConfig::current() noexcept {
  return {matmul_mode(), simd_tier()};
}

Ops::Ops(KernelConfig c) noexcept : cfg_{c.mode, std::min(c.tier, best_simd_tier())} {}

Ops::Impl Ops::impl_for(quant::DType t) const noexcept {
  if (cfg_.mode == MatmulMode::Reference) return Impl::Reference;
  if (cfg_.tier == SimdTier::Avx512 && simd_supported(t)) return Impl::Avx512;
  if (cfg_.tier >= SimdTier::Avx2 && avx2_supported(t)) return Impl::Avx2;
  return Impl::Reference;
}

bool Ops::avx512_ops() const noexcept {
  return cfg_.mode != MatmulMode::Reference && cfg_.tier == SimdTier::Avx512;
}

const char* Ops::kernel_name(quant::DType t) const noexcept {
  const Impl i = impl_for(t);
  return i == Impl::Avx512 ? "avx512" : i == Impl::Avx2 ? "avx2" : "reference";
}

void Ops::matvec_rows(const WeightView& w, uint64_t row_begin, uint64_t row_count, const float* x, float* y,
                      ThreadPool& pool) const {
  const bool exact = cfg_.mode == MatmulMode::Exact;
  switch (impl_for(w.dtype)) {
    case Impl::Avx512:
      return matvec_rows_simd(w, row_begin, row_count, x, y, pool, exact);
    case Impl::Avx2:
      return matvec_rows_avx2(w, row_begin, row_count, x, y, pool, exact);
    case Impl::Reference:
      return matvec_rows_ref(w, row_begin, row_count, x, y, pool);
  }
}

void Ops::matmul(const WeightView& w, const float* x, size_t n, float* y, ThreadPool& pool) const {
  const bool exact = cfg_.mode == MatmulMode::Exact;
  switch (impl_for(w.dtype)) {
    case Impl::Avx512:
      return matmul_simd(w, x, n, y, pool, exact);
    case Impl::Avx2:
      return matmul_avx2(w, x, n, y, pool, exact);
    case Impl::Reference:
      return matmul_ref(w, x, n, y, pool);
  }
}

void Ops::matmul_multi(std::span<const WeightView* const> ws, const float* x, size_t n,
                       std::span<float* const> ys, ThreadPool& pool) const {
  if (ws.size() != ys.size())
    fail(ErrorKind::InvalidArgument, "matmul_multi: {} weights but {} outputs", ws.size(), ys.size());
  for (const WeightView* w : ws)
    if (w->cols() != ws[0]->cols())
      fail(ErrorKind::InvalidArgument, "matmul_multi: tensor '{}' has {} columns, '{}' has {}", w->name,
           w->cols(), ws[0]->name, ws[0]->cols());
  bool all512 = true;
  for (const WeightView* w : ws) all512 = all512 && impl_for(w->dtype) == Impl::Avx512;
  if (all512) return matmul_multi_simd(ws, x, n, ys, pool, cfg_.mode == MatmulMode::Exact);
  for (size_t i = 0; i < ws.size(); ++i) matmul(*ws[i], x, n, ys[i], pool);
}

void Ops::attention(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
                    const AttentionParams& p, const uint8_t* head_alive, float* out, size_t kv_head_begin,
                    size_t kv_head_end) const {
  if (avx512_ops())
    attention_simd(q, kv, key_begin, key_end, p, head_alive, out, kv_head_begin, kv_head_end);
  else if (cfg_.mode != MatmulMode::Reference && cfg_.tier == SimdTier::Avx2 && avx2_cpu_ok())
    attention_avx2(q, kv, key_begin, key_end, p, head_alive, out, kv_head_begin, kv_head_end);
  else
    attention_ref(q, kv, key_begin, key_end, p, head_alive, out, kv_head_begin, kv_head_end);
}

void Ops::swiglu(const float* g, const float* u, float* out, size_t n) const {
  if (avx512_ops()) return swiglu_simd(g, u, out, n);
  swiglu_ref(g, u, out, n);
}

// The free functions of kernels.h: a table from the process-wide settings, per call.
const char* kernel_name(quant::DType t) noexcept {
  return Ops().kernel_name(t);
}
void matvec(const WeightView& w, const float* x, float* y, ThreadPool& pool) {
  Ops().matvec_rows(w, 0, w.rows(), x, y, pool);
}
void matvec_rows(const WeightView& w, uint64_t row_begin, uint64_t row_count, const float* x, float* y,
                 ThreadPool& pool) {
  Ops().matvec_rows(w, row_begin, row_count, x, y, pool);
}
void matmul(const WeightView& w, const float* x, size_t n, float* y, ThreadPool& pool) {
  Ops().matmul(w, x, n, y, pool);
}
void matmul_multi(std::span<const WeightView* const> ws, const float* x, size_t n, std::span<float* const> ys,
                  ThreadPool& pool) {
  Ops().matmul_multi(ws, x, n, ys, pool);
}
void attention(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
               const AttentionParams& p, const uint8_t* head_alive, float* out, size_t kv_head_begin,
               size_t kv_head_end) {
  Ops().attention(q, kv, key_begin, key_end, p, head_alive, out, kv_head_begin, kv_head_end);
}
void swiglu(const float* g, const float* u, float* out, size_t n) {
  Ops().swiglu(g, u, out, n);
}

}  // namespace cortiq::kernels
