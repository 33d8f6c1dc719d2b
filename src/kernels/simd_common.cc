// simd_common.h: the exp2 table shared by the SIMD tiers, and the prepared ladder bases' check.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/simd_common.h"

#include <cpuid.h>

#include "quant/codec.h"
#include "util/error.h"

namespace cortiq::kernels::simd_detail {

bool cpu_has_f16c() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

const float* exp2_f16_table() {
  static const std::vector<float> t = [] {
    std::vector<float> v(65536);
    for (uint32_t h = 0; h < 65536; ++h) v[h] = quant::tp_exp2(static_cast<uint16_t>(h));
    return v;
  }();
  return t.data();
}

const float* tp_bases(const WeightView& w, uint64_t rows) {
  if (!w.prepared) return nullptr;
  if (w.prepared->size() != 2 * rows)
    fail(ErrorKind::InvalidArgument, "tensor '{}': prepared ladder bases hold {} values, {} rows need {}",
         w.name, w.prepared->size(), rows, 2 * rows);
  return w.prepared->data();
}

}  // namespace cortiq::kernels::simd_detail

#endif  // x86
