#include "kernels/simd_activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/simd_matvec.h"

namespace cortiq::kernels {
namespace {

/// Distance in units in the last place between two finite floats of the same sign.
int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = std::numeric_limits<int32_t>::min() - ia;
  if (ib < 0) ib = std::numeric_limits<int32_t>::min() - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

// Dense sweep of g over [-100, 100] against the double-evaluated reference: ≤ 4 ulp where the
// result is a normal float, ~0 where silu underflows (g < −88.7).
TEST(SimdActivation, SwigluWithin4UlpOfDoubleReference) {
  if (!simd_cpu_ok()) GTEST_SKIP() << "CPU lacks AVX-512";
  std::vector<float> g, u;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> du(-3.0f, 3.0f);
  for (float x = -100.0f; x <= 100.0f; x += 0.00731f) g.push_back(x);
  for (float x : {0.0f, -0.0f, 1e-40f, -1e-40f, 1e-30f, -88.5f, -88.8f, 88.7f, 1e30f, -1e30f}) g.push_back(x);
  for (size_t i = 0; i < g.size(); ++i) u.push_back(i % 7 == 0 ? 1.0f : du(rng));
  std::vector<float> want(g.size()), got(g.size());
  swiglu_ref(g.data(), u.data(), want.data(), g.size());
  swiglu_simd(g.data(), u.data(), got.data(), g.size());
  int64_t worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::fabs(want[i]) < 1e-30f) {
      EXPECT_LE(std::fabs(got[i]), 1e-30f) << "g=" << g[i];
      continue;
    }
    const int64_t d = ulps(got[i], want[i]);
    worst = std::max(worst, d);
    ASSERT_LE(d, 4) << "g=" << g[i] << " u=" << u[i] << " got " << got[i] << " want " << want[i];
  }
  EXPECT_GT(worst, 0);  // the f32 evaluation is not the double one: the sweep does see rounding
}

// Every tail length, aliasing out == g and out == u, and NaN propagation.
TEST(SimdActivation, SwigluTailsAliasingAndNaN) {
  if (!simd_cpu_ok()) GTEST_SKIP() << "CPU lacks AVX-512";
  for (size_t n = 1; n <= 35; ++n) {
    std::vector<float> g(n), u(n), want(n);
    for (size_t i = 0; i < n; ++i) {
      g[i] = static_cast<float>(i) * 0.37f - 4.0f;
      u[i] = 1.5f - static_cast<float>(i) * 0.11f;
    }
    swiglu_ref(g.data(), u.data(), want.data(), n);
    std::vector<float> a = g, b = u;
    swiglu_simd(a.data(), u.data(), a.data(), n);  // out aliases g
    swiglu_simd(g.data(), b.data(), b.data(), n);  // out aliases u
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(a[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-30f) << n << " " << i;
      EXPECT_EQ(a[i], b[i]);
    }
  }
  const float g[2] = {std::numeric_limits<float>::quiet_NaN(), 1.0f}, u[2] = {1.0f, std::nanf("")};
  float out[2];
  swiglu_simd(g, u, out, 2);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
}

}  // namespace
}  // namespace cortiq::kernels
