// AVX2 attention (simd_avx2_attention.h): the tier dispatcher, the vectorized 8-lane exp and a timing
// probe. Its comparison with attention_ref on random and adversarial inputs and split invariance run in
// simd_attention_tiers_test.cc, one suite for both SIMD tiers.
#include "kernels/simd_avx2_attention.h"

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/attention_test_support.h"
#include "kernels/kernels.h"
#include "kernels/simd_attention.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_matvec.h"

namespace cortiq::kernels {
namespace {

using attention_test::Case;
using attention_test::Data;
using attention_test::kSentinel;
using attention_test::make;

class Avx2Attention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!avx2_cpu_ok()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  }
};

TEST_F(Avx2Attention, DispatcherFollowsTierAndMatmulMode) {
  Case c;
  c.hd = 80;
  c.cap = 40;
  c.end = 33;
  c.f16 = true;
  Data d = make(c);
  const size_t n = c.n_heads * c.hd;
  std::vector<float> ref(n), avx2(n), out(n);
  attention_ref(d.q.data(), d.view, 0, 33, d.p, nullptr, ref.data());
  attention_avx2(d.q.data(), d.view, 0, 33, d.p, nullptr, avx2.data());
  ASSERT_NE(std::memcmp(ref.data(), avx2.data(), n * sizeof(float)), 0);  // the two paths differ in rounding
  for (SimdTier t : {SimdTier::Avx512, SimdTier::Avx2, SimdTier::Scalar}) {
    ScopedSimdTier st(t);
    const SimdTier used = simd_tier();
    SCOPED_TRACE(simd_tier_name(used));
    {
      ScopedMatmulMode m(MatmulMode::Reference);
      attention(d.q.data(), d.view, 0, 33, d.p, nullptr, out.data());
      EXPECT_EQ(std::memcmp(out.data(), ref.data(), n * sizeof(float)), 0);
    }
    std::vector<float> want = ref;
    if (used == SimdTier::Avx2) want = avx2;
    if (used == SimdTier::Avx512) attention_simd(d.q.data(), d.view, 0, 33, d.p, nullptr, want.data());
    for (MatmulMode mode : {MatmulMode::Fast, MatmulMode::Exact}) {
      ScopedMatmulMode m(mode);
      attention(d.q.data(), d.view, 0, 33, d.p, nullptr, out.data());
      EXPECT_EQ(std::memcmp(out.data(), want.data(), n * sizeof(float)), 0);
    }
  }
}

/// ulp distance of f from the exact value e (ulp of the correctly rounded result).
double ulp_err(float f, double e) {
  const float r = static_cast<float>(e);
  const double ulp = static_cast<double>(std::nextafter(r, std::numeric_limits<float>::infinity())) - r;
  return std::fabs(static_cast<double>(f) - e) / ulp;
}

TEST_F(Avx2Attention, ExpWithin1UlpOnDenseSweep) {
  // Every 97th f32 bit pattern in [-88, -0] (≈ 11.6M values, all binades), plus a uniform grid and
  // [0, 88.7]. Below kFlushBelow (f32 nearest ln FLT_MIN, the kernel's threshold) the result is +0.
  constexpr float kFlushBelow = -87.3365447f;
  std::vector<float> x;
  const uint32_t lo = std::bit_cast<uint32_t>(-0.0f), hi = std::bit_cast<uint32_t>(-88.0f);
  for (uint64_t b = lo; b <= hi; b += 97) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  for (int i = 0; i <= 1 << 20; ++i)
    x.push_back(-88.0f * static_cast<float>(i) / static_cast<float>(1 << 20));
  const size_t n_neg = x.size();
  for (int i = 0; i <= 1 << 16; ++i) x.push_back(88.7f * static_cast<float>(i) / static_cast<float>(1 << 16));
  x.push_back(3.0f);  // odd count: the 8-lane tail path
  std::vector<float> y(x.size() + 1, kSentinel);
  exp_avx2(x.data(), x.size(), y.data());
  EXPECT_EQ(y.back(), kSentinel);  // nothing written past n
  double worst = 0.0, worst_pos = 0.0;
  float worst_x = 0.0f;
  size_t flushed = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] < kFlushBelow) {
      ASSERT_EQ(y[i], 0.0f) << x[i];
      ASSERT_FALSE(std::signbit(y[i])) << x[i];
      ++flushed;
      continue;
    }
    const double e = std::exp(static_cast<double>(x[i]));
    const double u = ulp_err(y[i], e);
    if (i < n_neg) {
      if (u > worst) worst = u, worst_x = x[i];
    } else {
      worst_pos = std::max(worst_pos, u);
    }
  }
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;
  EXPECT_LE(worst_pos, 2.0);  // outside the intended domain: finite and close
  EXPECT_GT(flushed, 0u);
  RecordProperty("exp_max_ulp", std::to_string(worst));
  // special values (n = 11: one full vector + a tail of 3)
  const float sp[] = {0.0f, -0.0f, -INFINITY, NAN, -1000.0f, 1.0f, 88.0f, INFINITY, 89.0f, -NAN, -87.33f};
  float so[11];
  exp_avx2(sp, 11, so);
  EXPECT_EQ(so[0], 1.0f);
  EXPECT_EQ(so[1], 1.0f);
  EXPECT_EQ(so[2], 0.0f);
  EXPECT_TRUE(std::isnan(so[3]));
  EXPECT_EQ(so[4], 0.0f);
  EXPECT_LE(ulp_err(so[5], std::exp(1.0)), 1.0);
  EXPECT_LE(ulp_err(so[6], std::exp(88.0)), 1.0);
  EXPECT_EQ(so[7], INFINITY);
  EXPECT_EQ(so[8], INFINITY);
  EXPECT_TRUE(std::isnan(so[9]));
  EXPECT_LE(ulp_err(so[10], std::exp(static_cast<double>(sp[10]))), 1.0);
  EXPECT_GE(so[10], std::numeric_limits<float>::min());
}

// Timing of one decode query (14 query heads / 2 kv heads, head_dim 64, f16 KV): attention_avx2 vs
// attention_ref vs attention_simd. Prints only (no time is asserted); run with
// --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Timing*'.
TEST_F(Avx2Attention, DISABLED_TimingDecodeQuery) {
  for (size_t nk : {512, 2048}) {
    Case c;
    c.n_heads = 14;
    c.n_kv = 2;
    c.hd = 64;
    c.cap = nk;
    c.end = nk;
    c.f16 = true;
    Data d = make(c);
    std::vector<float> out(c.n_heads * c.hd);
    auto time_us = [&](auto&& fn) {
      for (int i = 0; i < 3; ++i) fn();
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        const int iters = 20;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) fn();
        const auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
      }
      return best;
    };
    const double t_ref = time_us([&] { attention_ref(d.q.data(), d.view, 0, nk, d.p, nullptr, out.data()); });
    const double t_avx2 =
        time_us([&] { attention_avx2(d.q.data(), d.view, 0, nk, d.p, nullptr, out.data()); });
    double t_simd = -1.0;
    if (simd_cpu_ok())
      t_simd = time_us([&] { attention_simd(d.q.data(), d.view, 0, nk, d.p, nullptr, out.data()); });
    std::printf("nk=%zu f16 14/2 hd64: ref %.1f us, avx2 %.1f us, avx512 %.1f us\n", nk, t_ref, t_avx2,
                t_simd);
  }
}

}  // namespace
}  // namespace cortiq::kernels
