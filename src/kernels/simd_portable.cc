// The SIMD tiers' entry points on CPUs other than x86 (ARM, RISC-V, POWER…), where the AVX-512
// and AVX2 translation units compile to nothing: both tiers report themselves unavailable, so
// kernels.h dispatches every product, attention and activation to the scalar reference kernels
// (reference_*.cc). The other entry points are unreachable there and fail loudly if called.
#if !(defined(__x86_64__) || defined(__i386__))

#include "kernels/simd_activation.h"
#include "kernels/simd_attention.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx2_attention.h"
#include "kernels/simd_matvec.h"
#include "kernels/weight_plan.h"
#include "util/error.h"

namespace cortiq::kernels {
namespace {
[[noreturn]] void no_tier(const char* fn) {
  fail(ErrorKind::UnsupportedFeature, "{}: no x86 SIMD tier on this CPU (the scalar kernels serve it)", fn);
}
}  // namespace

bool simd_cpu_ok() noexcept {
  return false;
}
bool simd_vbmi_ok() noexcept {
  return false;
}
bool simd_supported(quant::DType) noexcept {
  return false;
}
bool avx2_cpu_ok() noexcept {
  return false;
}
bool avx2_supported(quant::DType) noexcept {
  return false;
}

void matvec_rows_simd(const WeightView&, uint64_t, uint64_t, const float*, float*, ThreadPool&, bool) {
  no_tier("matvec_rows_simd");
}
void matmul_simd(const WeightView&, const float*, size_t, float*, ThreadPool&, bool) {
  no_tier("matmul_simd");
}
void matmul_multi_simd(std::span<const WeightView* const>, const float*, size_t, std::span<float* const>,
                       ThreadPool&, bool) {
  no_tier("matmul_multi_simd");
}
void matvec_rows_avx2(const WeightView&, uint64_t, uint64_t, const float*, float*, ThreadPool&, bool) {
  no_tier("matvec_rows_avx2");
}
void matmul_avx2(const WeightView&, const float*, size_t, float*, ThreadPool&, bool) {
  no_tier("matmul_avx2");
}
void attention_simd(const float*, const KvLayerView&, size_t, size_t, const AttentionParams&, const uint8_t*,
                    float*, size_t, size_t) {
  no_tier("attention_simd");
}
void attention_avx2(const float*, const KvLayerView&, size_t, size_t, const AttentionParams&, const uint8_t*,
                    float*, size_t, size_t) {
  no_tier("attention_avx2");
}
void exp_simd(const float*, size_t, float*) {
  no_tier("exp_simd");
}
void exp_avx2(const float*, size_t, float*) {
  no_tier("exp_avx2");
}
void swiglu_simd(const float*, const float*, float*, size_t) {
  no_tier("swiglu_simd");
}
void simd_detail::q8_2f_columns_avx512(const uint8_t*, uint64_t, float*) {
  no_tier("q8_2f_columns_avx512");
}

}  // namespace cortiq::kernels

#endif  // not x86
