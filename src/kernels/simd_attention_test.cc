// AVX-512 attention (simd_attention.h): the dispatcher and the vectorized exp. Its comparison with
// attention_ref on random and adversarial inputs and split invariance run in simd_attention_tiers_test.cc,
// one suite for both SIMD tiers.
#include "kernels/simd_attention.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/attention_test_support.h"
#include "kernels/kernels.h"
#include "kernels/simd_matvec.h"

namespace cortiq::kernels {
namespace {

using attention_test::Case;
using attention_test::Data;
using attention_test::make;

class SimdAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!simd_cpu_ok()) GTEST_SKIP() << "CPU lacks AVX-512";
  }
};

TEST_F(SimdAttention, DispatcherFollowsMatmulMode) {
  Case c;
  c.hd = 80;
  c.cap = 40;
  c.end = 33;
  Data d = make(c);
  const size_t n = c.n_heads * c.hd;
  std::vector<float> ref(n), simd(n), out(n);
  attention_ref(d.q.data(), d.view, 0, 33, d.p, nullptr, ref.data());
  attention_simd(d.q.data(), d.view, 0, 33, d.p, nullptr, simd.data());
  ASSERT_NE(std::memcmp(ref.data(), simd.data(), n * sizeof(float)), 0);  // the two paths differ in rounding
  {
    ScopedMatmulMode m(MatmulMode::Reference);
    attention(d.q.data(), d.view, 0, 33, d.p, nullptr, out.data());
    EXPECT_EQ(std::memcmp(out.data(), ref.data(), n * sizeof(float)), 0);
  }
  for (MatmulMode mode : {MatmulMode::Fast, MatmulMode::Exact}) {
    ScopedMatmulMode m(mode);
    attention(d.q.data(), d.view, 0, 33, d.p, nullptr, out.data());
    EXPECT_EQ(std::memcmp(out.data(), simd.data(), n * sizeof(float)), 0);
  }
}

/// ulp distance of f from the exact value e (ulp of the correctly rounded result).
double ulp_err(float f, double e) {
  const float r = static_cast<float>(e);
  const double ulp = static_cast<double>(std::nextafter(r, std::numeric_limits<float>::infinity())) - r;
  return std::fabs(static_cast<double>(f) - e) / ulp;
}

TEST_F(SimdAttention, ExpWithin1UlpOnDenseSweep) {
  // Every 97th f32 bit pattern in [-88, -0] (≈ 11.6M values, all binades), plus a uniform grid.
  // Below kFlushBelow (f32 nearest ln FLT_MIN, the kernel's threshold) the result is +0.
  constexpr float kFlushBelow = -87.3365447f;
  std::vector<float> x;
  const uint32_t lo = std::bit_cast<uint32_t>(-0.0f), hi = std::bit_cast<uint32_t>(-88.0f);
  for (uint64_t b = lo; b <= hi; b += 97) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  for (int i = 0; i <= 1 << 20; ++i)
    x.push_back(-88.0f * static_cast<float>(i) / static_cast<float>(1 << 20));
  std::vector<float> y(x.size());
  exp_simd(x.data(), x.size(), y.data());
  double worst = 0.0;
  float worst_x = 0.0f;
  size_t flushed = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] < kFlushBelow) {
      ASSERT_EQ(y[i], 0.0f) << x[i];
      ++flushed;
      continue;
    }
    const double e = std::exp(static_cast<double>(x[i]));
    const double u = ulp_err(y[i], e);
    if (u > worst) worst = u, worst_x = x[i];
  }
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;
  EXPECT_GT(flushed, 0u);
  RecordProperty("exp_max_ulp", std::to_string(worst));
  // special values
  const float sp[] = {0.0f, -0.0f, -INFINITY, NAN, -1000.0f, 1.0f, 88.0f};
  float so[7];
  exp_simd(sp, 7, so);
  EXPECT_EQ(so[0], 1.0f);
  EXPECT_EQ(so[1], 1.0f);
  EXPECT_EQ(so[2], 0.0f);
  EXPECT_TRUE(std::isnan(so[3]));
  EXPECT_EQ(so[4], 0.0f);
  EXPECT_LE(ulp_err(so[5], std::exp(1.0)), 1.0);
  EXPECT_LE(ulp_err(so[6], std::exp(88.0)), 1.0);
}

}  // namespace
}  // namespace cortiq::kernels
