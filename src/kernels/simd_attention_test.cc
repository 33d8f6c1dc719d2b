// SIMD attention (simd_attention.h) against the double-accumulating reference attention_ref on
// random and adversarial inputs, split invariance, the dispatcher, and the vectorized exp.
#include "kernels/simd_attention.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_test_support.h"
#include "kernels/kernels.h"
#include "kernels/simd_matvec.h"
#include "util/half.h"

namespace cortiq::kernels {
namespace {

using attention_test::Case;
using attention_test::check_against_ref;
using attention_test::Data;
using attention_test::kSentinel;
using attention_test::kU;
using attention_test::make;
using attention_test::name;

// Tolerance per output element (simd_attention.h): first-order perturbation of the softmax.
// Score j of head h is computed in f32 (head_dim FMAs + a 4-level tree, then the scale multiply;
// the reference rounds its double dot to f32 and multiplies too), so
//   |δs_j| ≤ E_j = (head_dim + 8)·u·scale·Σ_d |q_d·k_jd|
// (softcap's tanh has slope ≤ 1 and its f32 rounding is ≤ u·|s_j|, inside the +8). A score error
// changes log w_j by δs_j − Σ_i w_i·δs_i, hence |δo_d| ≤ Σ_j w_j·|v_jd|·(E_j + Ē), Ē = Σ_i w_i·E_i.
// On top of that the weights and the weighted sum round in f32: exp ≤ 2 ulp, Σe over nk/16 terms
// per lane, and Σ_j e_j·v_jd sequentially over nk keys. The worst case of the last is nk·u
// (2.4e-4 at 4096 keys) but these roundings are independent, giving ≈ √nk·u (4e-6 at 4096);
// kRel = 1e-5 relative to Σ_j w_j·|v_jd| covers that with margin while any real defect (a wrong
// key, head, weight or dim) is O(1) relative and fails it.
constexpr double kRel = 1e-5;

/// Runs attention_simd and attention_ref on `c` and checks every requested row against the bound.
void check_case(const Case& c) {
  SCOPED_TRACE(name(c));
  Data d = make(c);
  std::vector<float> simd(c.n_heads * c.hd, kSentinel);
  attention_simd(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), simd.data());
  check_against_ref(c, d, simd, static_cast<double>(c.hd), kRel);
}

class SimdAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!simd_cpu_ok()) GTEST_SKIP() << "CPU lacks AVX-512";
  }
};

TEST_F(SimdAttention, MatchesReferenceAcrossHeadDimsAndGroups) {
  uint32_t seed = 10;
  for (size_t hd : {64, 80, 96, 128, 256, 72, 1, 17, 33}) {
    for (size_t group : {1, 2, 7}) {
      for (bool f16 : {false, true}) {
        Case c;
        c.n_kv = 2;
        c.n_heads = 2 * group;
        c.hd = hd;
        c.cap = 53;
        c.begin = 0;
        c.end = 37;  // 2 full key blocks + a tail of 5
        c.f16 = f16;
        c.seed = seed++;
        check_case(c);
      }
    }
  }
}

TEST_F(SimdAttention, KeyRanges) {
  uint32_t seed = 100;
  const size_t ranges[][3] = {{0, 1, 8},    {7, 8, 8},       {0, 16, 16}, {5, 21, 40},
                              {13, 40, 40}, {100, 229, 300}, {0, 15, 20}, {3, 4, 4}};
  for (const auto& r : ranges) {
    for (bool f16 : {false, true}) {
      Case c;
      c.n_heads = 14;
      c.n_kv = 2;
      c.hd = 64;
      c.begin = r[0];
      c.end = r[1];
      c.cap = r[2];
      c.f16 = f16;
      c.seed = seed++;
      check_case(c);
    }
  }
}

TEST_F(SimdAttention, LongContext4096Keys) {
  for (bool f16 : {false, true}) {
    Case c;
    c.n_heads = 14;
    c.n_kv = 2;
    c.hd = 64;
    c.cap = 4096;
    c.end = 4096;
    c.f16 = f16;
    c.seed = f16 ? 201 : 200;
    check_case(c);
  }
}

TEST_F(SimdAttention, SoftcapDeadHeadsOutliersAndUnderflow) {
  Case c;
  c.n_heads = 8;
  c.n_kv = 4;
  c.hd = 256;
  c.cap = 70;
  c.begin = 3;
  c.end = 70;
  c.softcap = 50.0f;
  c.q_sigma = 30.0f;  // scores up to hundreds: most exp arguments far below -87 → 0
  c.dead = {1, 6};
  c.seed = 300;
  check_case(c);
  c.softcap = 0.0f;
  c.outliers = 20;
  c.hd = 72;
  c.seed = 301;
  check_case(c);
  c.f16 = true;
  c.q_sigma = 100.0f;
  c.seed = 302;
  check_case(c);
  c.n_heads = 7;
  c.n_kv = 1;
  c.dead = {0, 1, 2, 3, 4, 5, 6};  // all dead
  check_case(c);
}

TEST_F(SimdAttention, EqualScoresGiveTheMeanOfV) {
  // q = 0 → all scores 0 → uniform weights; the output is the mean of V rows, checked directly.
  Case c;
  c.n_heads = 2;
  c.n_kv = 1;
  c.hd = 20;
  c.cap = 9;
  c.end = 9;
  Data d = make(c);
  std::fill(d.q.begin(), d.q.end(), 0.0f);
  std::vector<float> out(2 * c.hd);
  attention_simd(d.q.data(), d.view, 0, 9, d.p, nullptr, out.data());
  for (size_t h = 0; h < 2; ++h)
    for (size_t i = 0; i < c.hd; ++i) {
      double mean = 0.0;
      for (size_t j = 0; j < 9; ++j) mean += d.vf[j * c.hd + i] / 9.0;
      EXPECT_NEAR(out[h * c.hd + i], mean, 1e-6) << h << " " << i;
    }
}

TEST_F(SimdAttention, NoKeysGivesZerosAndOtherRowsUntouched) {
  Case c;
  c.n_heads = 6;
  c.n_kv = 3;
  c.hd = 24;
  c.cap = 8;
  Data d = make(c);
  std::vector<float> out(6 * 24, kSentinel);
  attention_simd(d.q.data(), d.view, 5, 5, d.p, nullptr, out.data(), 1, 2);  // kv head 1 only
  for (size_t i = 0; i < out.size(); ++i) {
    const bool inside = i >= 2 * 24 && i < 4 * 24;
    EXPECT_EQ(out[i], inside ? 0.0f : kSentinel) << i;
  }
  std::fill(out.begin(), out.end(), kSentinel);
  attention_simd(d.q.data(), d.view, 0, 8, d.p, nullptr, out.data(), 2, 99);  // end clamps to n_kv
  for (size_t i = 0; i < 4 * 24; ++i) EXPECT_EQ(out[i], kSentinel) << i;
  for (size_t i = 4 * 24; i < out.size(); ++i) EXPECT_NE(out[i], kSentinel) << i;
}

TEST_F(SimdAttention, SplitInvariantBitExact) {
  for (bool f16 : {false, true}) {
    for (size_t hd : {64, 72}) {
      Case c;
      c.n_heads = 21;
      c.n_kv = 3;  // group 7
      c.hd = hd;
      c.cap = 150;
      c.begin = 10;
      c.end = 133;
      c.f16 = f16;
      c.dead = {4, 15};
      c.seed = 400 + static_cast<uint32_t>(hd) + f16;
      Data d = make(c);
      std::vector<float> whole(c.n_heads * hd, kSentinel), parts(c.n_heads * hd, kSentinel),
          pairs(c.n_heads * hd, kSentinel);
      attention_simd(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), whole.data());
      for (size_t g = 0; g < 3; ++g)
        attention_simd(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), parts.data(), g, g + 1);
      attention_simd(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), pairs.data(), 0, 2);
      attention_simd(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), pairs.data(), 2, 3);
      EXPECT_EQ(std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(whole.data(), pairs.data(), whole.size() * sizeof(float)), 0);
      // a head's result also does not depend on which other heads of its group are alive
      std::vector<uint8_t> all(c.n_heads, 1);
      std::vector<float> full(c.n_heads * hd);
      attention_simd(d.q.data(), d.view, c.begin, c.end, d.p, all.data(), full.data());
      for (size_t h = 0; h < c.n_heads; ++h) {
        if (d.alive[h]) {
          EXPECT_EQ(std::memcmp(whole.data() + h * hd, full.data() + h * hd, hd * sizeof(float)), 0) << h;
        }
      }
    }
  }
}

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
