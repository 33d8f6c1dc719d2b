// The process-wide settings the dispatcher (dispatch.cc) builds its default kernel table from: the
// SIMD tier (detected from the CPU, lowered by CORTIQ_SIMD or set_simd_tier) and the matmul mode.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_matvec.h"

namespace cortiq::kernels {

namespace {
std::atomic<MatmulMode> g_matmul_mode{MatmulMode::Fast};

SimdTier tier_from_env() noexcept {
  const SimdTier best = best_simd_tier();
  const char* e = std::getenv("CORTIQ_SIMD");
  if (!e || !*e) return best;
  const std::string_view v(e);
  SimdTier t = best;
  if (v == "avx512")
    t = SimdTier::Avx512;
  else if (v == "avx2")
    t = SimdTier::Avx2;
  else if (v == "scalar")
    t = SimdTier::Scalar;
  else
    std::fprintf(stderr, "warning: CORTIQ_SIMD='%s' is not avx512, avx2 or scalar; using %s\n", e,
                 simd_tier_name(best));
  return std::min(t, best);
}

std::atomic<SimdTier>& tier_slot() noexcept {
  static std::atomic<SimdTier> t{tier_from_env()};
  return t;
}

}  // namespace

SimdTier best_simd_tier() noexcept {
  static const SimdTier best = simd_cpu_ok()   ? SimdTier::Avx512
                               : avx2_cpu_ok() ? SimdTier::Avx2
                                               : SimdTier::Scalar;
  return best;
}
SimdTier simd_tier() noexcept {
  return tier_slot().load(std::memory_order_relaxed);
}
void set_simd_tier(SimdTier t) noexcept {
  tier_slot().store(std::min(t, best_simd_tier()), std::memory_order_relaxed);
}
const char* simd_tier_name(SimdTier t) noexcept {
  return t == SimdTier::Avx512 ? "avx512" : t == SimdTier::Avx2 ? "avx2" : "scalar";
}
void set_matmul_mode(MatmulMode m) noexcept {
  g_matmul_mode.store(m, std::memory_order_relaxed);
}
MatmulMode matmul_mode() noexcept {
  return g_matmul_mode.load(std::memory_order_relaxed);
}

}  // namespace cortiq::kernels
