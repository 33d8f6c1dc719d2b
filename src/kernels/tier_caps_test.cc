// The tier capability table (tier_caps.h) and the three places that answer from it: the AVX-512
// tier's simd_supported, the AVX2 tier's avx2_supported and make_weight_plan.
#include "kernels/tier_caps.h"

#include <gtest/gtest.h>

#include <set>

#include "kernels/simd_avx2.h"
#include "kernels/simd_matvec.h"
#include "kernels/simd_test_support.h"
#include "kernels/weight_plan.h"

namespace cortiq::kernels {
namespace {

using quant::DType;
using simd_detail::Cap;

TEST(TierCaps, EveryRowIsOneDtypeWithAKernelInSomeTier) {
  std::set<DType> seen;
  for (const auto& c : simd_detail::kTierCaps) {
    EXPECT_TRUE(seen.insert(c.t).second) << quant::dtype_name(c.t) << " has two rows";
    EXPECT_TRUE(c.avx512 != Cap::No || c.avx2 != Cap::No) << quant::dtype_name(c.t);
  }
  // the dtypes only the reference implements (quant/dtype.h)
  for (DType t : {DType::U8, DType::Mix8_4, DType::Q4Col}) {
    EXPECT_FALSE(simd_detail::any_tier_has_kernel(t)) << quant::dtype_name(t);
    EXPECT_FALSE(simd_supported(t)) << quant::dtype_name(t);
    EXPECT_FALSE(avx2_supported(t)) << quant::dtype_name(t);
  }
  // vbit's AVX-512 unpacking needs VBMI; the AVX2 tier has every row
  EXPECT_FALSE(simd_detail::avx512_has_kernel(DType::VBit, false));
  EXPECT_TRUE(simd_detail::avx512_has_kernel(DType::VBit, true));
  EXPECT_TRUE(simd_detail::avx512_has_kernel(DType::Q1T, false));
  EXPECT_EQ(test::kSimdDtypes.size(), std::size(simd_detail::kTierCaps));
}

TEST(TierCaps, TiersAndWeightPlansAnswerFromTheTable) {
  for (int id = 0; id < quant::kNumDTypes; ++id) {
    const auto t = static_cast<DType>(id);
    const std::string name(quant::dtype_name(t));
    EXPECT_EQ(simd_supported(t), simd_cpu_ok() && simd_detail::avx512_has_kernel(t, simd_vbmi_ok())) << name;
    EXPECT_EQ(avx2_supported(t), avx2_cpu_ok() && simd_detail::avx2_has_kernel(t)) << name;
    if (!simd_detail::any_tier_has_kernel(t)) {
      // refused before the payload is looked at
      const WeightView v{t, {4, 64}, {}, "w"};
      EXPECT_EQ(make_weight_plan(v), nullptr) << name;
    } else {
      const test::Tensor w = test::make(t, 4, 64, test::gaussian(4 * 64, 3, 0.1f));
      EXPECT_NE(make_weight_plan(w.view), nullptr) << name;
    }
  }
}

}  // namespace
}  // namespace cortiq::kernels
