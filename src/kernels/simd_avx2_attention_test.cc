// AVX2 attention (simd_avx2_attention.h) against the double-accumulating reference attention_ref on random
// and adversarial inputs, split invariance, the tier dispatcher, and the vectorized 8-lane exp.
#include "kernels/simd_avx2_attention.h"

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_test_support.h"
#include "kernels/kernels.h"
#include "kernels/simd_attention.h"
#include "kernels/simd_avx2.h"
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

// Tolerance per output element (simd_avx2_attention.h): first-order perturbation of the softmax.
// Score j of head h is an f32 FMA chain of ⌈head_dim/8⌉ steps per lane, a 3-level lane tree and the scale
// product; the reference rounds its double dot to f32 and multiplies by the scale in f32 too, so
//   |δs_j| ≤ E_j = (⌈head_dim/8⌉ + 8)·u·scale·Σ_d |q_d·k_jd|
// (the header's +6, plus 2 for softcap's f32-rounded tanh, whose slope is ≤ 1). A score error changes
// log w_j by δs_j − Σ_i w_i·δs_i, hence |δo_d| ≤ Σ_j w_j·|v_jd|·(E_j + Ē), Ē = Σ_i w_i·E_i. On top of that
// the weights and the weighted sum round in f32: s_j − m, exp ≤ 1 ulp, Σe over nk/8 terms per lane, and
// Σ_j e_j·v_jd sequentially over nk keys. The worst case of the last is nk·u (2.4e-4 at 4096 keys) but
// these roundings are independent, giving ≈ √nk·u (4e-6 at 4096); kRel = 1e-5 relative to Σ_j w_j·|v_jd|
// covers that with margin while any real defect (a wrong key, head, weight or dim) is O(1) relative.
constexpr double kRel = 1e-5;

/// Checks `got` (attention_avx2's output for `c`, `d`) against attention_ref with this tier's bound:
/// ⌈head_dim/8⌉ FMA steps per score.
void check_avx2(const Case& c, const Data& d, const std::vector<float>& got) {
  check_against_ref(c, d, got, static_cast<double>((c.hd + 7) / 8), kRel);
}

/// Runs attention_avx2 on `c` and checks every row against the bound (rows are all requested).
void check_case(const Case& c) {
  SCOPED_TRACE(name(c));
  Data d = make(c);
  std::vector<float> got(c.n_heads * c.hd, kSentinel);
  attention_avx2(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), got.data());
  check_avx2(c, d, got);
}

class Avx2Attention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!avx2_cpu_ok()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  }
};

TEST_F(Avx2Attention, MatchesReferenceAcrossHeadDimsAndGroups) {
  uint32_t seed = 10;
  for (size_t hd : {64, 80, 96, 128, 256, 72, 100, 1, 7, 12, 17, 33}) {
    for (size_t group : {1, 2, 7}) {
      for (bool f16 : {false, true}) {
        Case c;
        c.n_kv = 2;
        c.n_heads = 2 * group;
        c.hd = hd;
        c.cap = 53;
        c.begin = 0;
        c.end = 37;  // 4 full key blocks + a tail of 5
        c.f16 = f16;
        c.seed = seed++;
        check_case(c);
      }
    }
  }
}

TEST_F(Avx2Attention, KeyRanges) {
  uint32_t seed = 100;
  const size_t ranges[][3] = {{0, 1, 8},   {7, 8, 8},    {0, 8, 8},       {0, 16, 16},
                              {5, 21, 40}, {13, 40, 40}, {100, 229, 300}, {0, 15, 20},
                              {3, 4, 4},   {0, 7, 9},    {17, 401, 410},  {0, 256, 256}};
  for (const auto& r : ranges) {
    for (bool f16 : {false, true}) {
      for (size_t hd : {64, 100}) {
        Case c;
        c.n_heads = 14;
        c.n_kv = 2;
        c.hd = hd;
        c.begin = r[0];
        c.end = r[1];
        c.cap = r[2];
        c.f16 = f16;
        c.seed = seed++;
        check_case(c);
      }
    }
  }
}

TEST_F(Avx2Attention, LongContext4096Keys) {
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

TEST_F(Avx2Attention, SoftcapDeadHeadsOutliersAndUnderflow) {
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
  c.hd = 100;
  c.softcap = 30.0f;
  c.seed = 303;
  check_case(c);
  c.n_heads = 7;
  c.n_kv = 1;
  c.dead = {0, 1, 2, 3, 4, 5, 6};  // all dead
  check_case(c);
}

TEST_F(Avx2Attention, AllScoresFarBelowZero) {
  // every score ≈ −240 (keys ≈ 1, q ≈ −30): the softmax must shift by the true maximum, not by the 0 of
  // a padded key lane, or every e_j underflows; key counts that are not multiples of 8 leave padded lanes.
  for (bool f16 : {false, true}) {
    for (size_t nk : {5, 13, 37}) {
      Case c;
      c.n_heads = 4;
      c.n_kv = 2;
      c.hd = 64;
      c.cap = nk;
      c.end = nk;
      c.f16 = f16;
      c.seed = 500 + static_cast<uint32_t>(nk) + f16;
      SCOPED_TRACE(name(c));
      Data d = make(c);
      for (size_t i = 0; i < d.kf.size(); ++i) {
        float k = 1.0f + 0.05f * d.kf[i];
        if (f16) {
          d.kh[i] = f32_to_f16(k);
          k = f16_to_f32(d.kh[i]);
        }
        d.kf[i] = k;
      }
      for (size_t i = 0; i < d.q.size(); ++i) d.q[i] = -30.0f + 0.1f * d.q[i];
      std::vector<float> got(c.n_heads * c.hd, kSentinel);
      attention_avx2(d.q.data(), d.view, 0, nk, d.p, nullptr, got.data());
      check_avx2(c, d, got);
    }
  }
}

TEST_F(Avx2Attention, EqualScoresGiveTheMeanOfV) {
  // q = 0 → all scores 0 → uniform weights; the output is the mean of V rows, checked directly.
  for (size_t hd : {20, 64}) {
    Case c;
    c.n_heads = 2;
    c.n_kv = 1;
    c.hd = hd;
    c.cap = 9;
    c.end = 9;
    Data d = make(c);
    std::fill(d.q.begin(), d.q.end(), 0.0f);
    std::vector<float> out(2 * c.hd);
    attention_avx2(d.q.data(), d.view, 0, 9, d.p, nullptr, out.data());
    for (size_t h = 0; h < 2; ++h)
      for (size_t i = 0; i < c.hd; ++i) {
        double mean = 0.0;
        for (size_t j = 0; j < 9; ++j) mean += d.vf[j * c.hd + i] / 9.0;
        EXPECT_NEAR(out[h * c.hd + i], mean, 1e-6) << h << " " << i;
      }
  }
}

TEST_F(Avx2Attention, OneDominantKeyPairsWithItsValueRow) {
  // key 5 is q itself scaled up, the others orthogonal-ish noise: its weight is 1 to f32 precision, so
  // the output equals V row 5 (within a few ulp), which pins the key ↔ value row pairing and the dims.
  Case c;
  c.n_heads = 3;
  c.n_kv = 1;
  c.hd = 44;
  c.cap = 12;
  c.end = 12;
  c.f16 = true;
  Data d = make(c);
  for (size_t h = 0; h < 3; ++h)
    for (size_t i = 0; i < c.hd; ++i) d.q[h * c.hd + i] = i == 5 + h ? 8.0f : 0.0f;
  for (size_t j = 0; j < 12; ++j)
    for (size_t i = 0; i < c.hd; ++i) {
      const float kval = (i == j) ? 8.0f : 0.0f;  // key j points along dim j: q_h picks key 5 + h
      d.kh[j * c.hd + i] = f32_to_f16(kval);
      d.kf[j * c.hd + i] = kval;
    }
  std::vector<float> out(3 * c.hd);
  attention_avx2(d.q.data(), d.view, 0, 12, d.p, nullptr, out.data());
  // score of the picked key = 64/√44 ≈ 9.65 vs 0: its weight is 1/(1 + 11·e^-9.65) ≈ 0.9993, so compare
  // with the exact weighted mean instead
  for (size_t h = 0; h < 3; ++h) {
    const double s = 64.0 / std::sqrt(44.0);
    const double wk = std::exp(s) / (std::exp(s) + 11.0), wo = 1.0 / (std::exp(s) + 11.0);
    for (size_t i = 0; i < c.hd; ++i) {
      double want = 0.0;
      for (size_t j = 0; j < 12; ++j) want += (j == 5 + h ? wk : wo) * d.vf[j * c.hd + i];
      EXPECT_NEAR(out[h * c.hd + i], want, 1e-5) << h << " " << i;
    }
  }
}

TEST_F(Avx2Attention, NoKeysGivesZerosAndOtherRowsUntouched) {
  Case c;
  c.n_heads = 6;
  c.n_kv = 3;
  c.hd = 24;
  c.cap = 8;
  Data d = make(c);
  std::vector<float> out(6 * 24, kSentinel);
  attention_avx2(d.q.data(), d.view, 5, 5, d.p, nullptr, out.data(), 1, 2);  // kv head 1 only
  for (size_t i = 0; i < out.size(); ++i) {
    const bool inside = i >= 2 * 24 && i < 4 * 24;
    EXPECT_EQ(out[i], inside ? 0.0f : kSentinel) << i;
  }
  std::fill(out.begin(), out.end(), kSentinel);
  attention_avx2(d.q.data(), d.view, 0, 8, d.p, nullptr, out.data(), 2, 99);  // end clamps to n_kv
  for (size_t i = 0; i < 4 * 24; ++i) EXPECT_EQ(out[i], kSentinel) << i;
  for (size_t i = 4 * 24; i < out.size(); ++i) EXPECT_NE(out[i], kSentinel) << i;
}

TEST_F(Avx2Attention, SplitInvariantBitExact) {
  for (bool f16 : {false, true}) {
    for (size_t hd : {64, 72, 100}) {
      Case c;
      c.n_heads = 21;
      c.n_kv = 3;  // group 7: head tiles 4 + 3
      c.hd = hd;
      c.cap = 150;
      c.begin = 10;
      c.end = 133;
      c.f16 = f16;
      c.dead = {4, 15};
      c.seed = 400 + static_cast<uint32_t>(hd) + f16;
      SCOPED_TRACE(name(c));
      Data d = make(c);
      std::vector<float> whole(c.n_heads * hd, kSentinel), parts(c.n_heads * hd, kSentinel),
          pairs(c.n_heads * hd, kSentinel);
      attention_avx2(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), whole.data());
      for (size_t g = 0; g < 3; ++g)
        attention_avx2(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), parts.data(), g, g + 1);
      attention_avx2(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), pairs.data(), 0, 2);
      attention_avx2(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), pairs.data(), 2, 3);
      EXPECT_EQ(std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(whole.data(), pairs.data(), whole.size() * sizeof(float)), 0);
      check_avx2(c, d, whole);
      // a head's result also does not depend on which other heads of its group are alive (so on the
      // V tile it lands in)
      std::vector<uint8_t> all(c.n_heads, 1);
      std::vector<float> full(c.n_heads * hd);
      attention_avx2(d.q.data(), d.view, c.begin, c.end, d.p, all.data(), full.data());
      for (size_t h = 0; h < c.n_heads; ++h) {
        if (d.alive[h]) {
          EXPECT_EQ(std::memcmp(whole.data() + h * hd, full.data() + h * hd, hd * sizeof(float)), 0) << h;
        }
      }
    }
  }
}

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
