// The SIMD attention tiers — AVX-512 (simd_attention.h) and AVX2 (simd_avx2_attention.h) — against the
// double-accumulating reference attention_ref on random and adversarial inputs, plus split invariance:
// one suite, run once per tier the CPU has. The tier-specific parts (dispatchers, the vectorized exp)
// are tested in simd_attention_test.cc and simd_avx2_attention_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/attention_test_support.h"
#include "kernels/simd_attention.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx2_attention.h"
#include "kernels/simd_matvec.h"
#include "util/half.h"

namespace cortiq::kernels {
namespace {

using attention_test::Case;
using attention_test::check_against_ref;
using attention_test::Data;
using attention_test::kSentinel;
using attention_test::make;
using attention_test::name;

// Tolerance per output element (simd_attention.h, simd_avx2_attention.h): first-order perturbation of
// the softmax. Score j of head h is an f32 FMA chain of S steps per lane (AVX-512: head_dim, 16 lanes
// each taking one dim; AVX2: ⌈head_dim/8⌉), a lane tree and the scale product; the reference rounds its
// double dot to f32 and multiplies by the scale in f32 too, so
//   |δs_j| ≤ E_j = (S + 8)·u·scale·Σ_d |q_d·k_jd|
// (+8 covers the tree, the scale product and softcap's f32-rounded tanh, whose slope is ≤ 1). A score
// error changes log w_j by δs_j − Σ_i w_i·δs_i, hence |δo_d| ≤ Σ_j w_j·|v_jd|·(E_j + Ē), Ē = Σ_i w_i·E_i.
// On top of that the weights and the weighted sum round in f32: s_j − m, exp ≤ 2 ulp, Σe per lane, and
// Σ_j e_j·v_jd sequentially over nk keys. The worst case of the last is nk·u (2.4e-4 at 4096 keys) but
// these roundings are independent, giving ≈ √nk·u (4e-6 at 4096); kRel = 1e-5 relative to
// Σ_j w_j·|v_jd| covers that with margin while any real defect (a wrong key, head, weight or dim) is
// O(1) relative and fails it.
constexpr double kRel = 1e-5;

using AttentionFn = void (*)(const float*, const KvLayerView&, size_t, size_t, const AttentionParams&,
                             const uint8_t*, float*, size_t, size_t);

/// One SIMD attention tier: its kernel, whether this CPU runs it, and its FMA steps per score (S above).
struct Tier {
  const char* name;
  AttentionFn fn;
  bool (*cpu_ok)();
  size_t lanes;  ///< S = ⌈head_dim / lanes⌉: 1 for AVX-512 (one dim per lane), 8 for AVX2
};

bool avx512_ok() {
  return simd_cpu_ok();
}
bool avx2_ok() {
  return avx2_cpu_ok();
}

class AttentionTier : public ::testing::TestWithParam<Tier> {
 protected:
  void SetUp() override {
    if (!GetParam().cpu_ok()) GTEST_SKIP() << "CPU lacks " << GetParam().name;
  }
  /// The tier's kernel on kv heads [kv_begin, kv_end).
  void run(const float* q, const KvLayerView& kv, size_t begin, size_t end, const AttentionParams& p,
           const uint8_t* alive, float* out, size_t kv_begin = 0, size_t kv_end = SIZE_MAX) const {
    GetParam().fn(q, kv, begin, end, p, alive, out, kv_begin, kv_end);
  }
  /// Checks `got` (the tier's output for `c`, `d`) against attention_ref with the tier's bound.
  void check(const Case& c, const Data& d, const std::vector<float>& got) const {
    const size_t lanes = GetParam().lanes;
    check_against_ref(c, d, got, static_cast<double>((c.hd + lanes - 1) / lanes), kRel);
  }
  /// A grouped-query case: 2 kv heads of `group` query heads each, keys [begin, end) of `cap`.
  static Case gqa_case(size_t group, size_t hd, bool f16, size_t cap, size_t begin, size_t end,
                       uint32_t seed) {
    Case c;
    c.n_kv = 2;
    c.n_heads = 2 * group;
    c.hd = hd;
    c.cap = cap;
    c.begin = begin;
    c.end = end;
    c.f16 = f16;
    c.seed = seed;
    return c;
  }
  /// Runs the tier on `c` and checks every row against the bound (rows are all requested).
  void check_case(const Case& c) const {
    SCOPED_TRACE(name(c));
    Data d = make(c);
    std::vector<float> got(c.n_heads * c.hd, kSentinel);
    run(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), got.data());
    check(c, d, got);
  }
};

TEST_P(AttentionTier, MatchesReferenceAcrossHeadDimsAndGroups) {
  uint32_t seed = 10;
  for (size_t hd : {64, 80, 96, 128, 256, 72, 100, 1, 7, 12, 17, 33}) {
    for (size_t group : {1, 2, 7}) {
      for (bool f16 : {false, true})
        check_case(gqa_case(group, hd, f16, 53, 0, 37, seed++));  // 4 full key blocks + a tail of 5
    }
  }
}

// Every V-tile width the shared template (attention/attention_tiles.h) instantiates — 1..8 query heads
// per pass over V on AVX-512, 1..4 on AVX2 — and groups spanning several tiles (9 = 8 + 1, 17 = 8 + 8 + 1
// on AVX-512; 4 + … + 1 on AVX2), at head_dims giving each chunk shape of the V pass: 12 (one partial
// chunk on AVX-512, a full + partial pair on AVX2), 24 (a full + partial pair / a pair and a single full
// chunk), 40 (a full pair and a partial chunk / two pairs and a full chunk), 48 (a pair and a full chunk /
// three pairs).
TEST_P(AttentionTier, EveryHeadTileWidth) {
  uint32_t seed = 500;
  for (size_t group = 1; group <= 17; ++group) {
    for (size_t hd : {12, 24, 40, 48}) {
      for (bool f16 : {false, true})
        check_case(gqa_case(group, hd, f16, 40, 2, 39, seed++));  // 37 keys: full blocks and a tail of 5
    }
  }
}

TEST_P(AttentionTier, KeyRanges) {
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

TEST_P(AttentionTier, LongContext4096Keys) {
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

TEST_P(AttentionTier, SoftcapDeadHeadsOutliersAndUnderflow) {
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

TEST_P(AttentionTier, AllScoresFarBelowZero) {
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
      run(d.q.data(), d.view, 0, nk, d.p, nullptr, got.data());
      check(c, d, got);
    }
  }
}

TEST_P(AttentionTier, EqualScoresGiveTheMeanOfV) {
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
    run(d.q.data(), d.view, 0, 9, d.p, nullptr, out.data());
    for (size_t h = 0; h < 2; ++h)
      for (size_t i = 0; i < c.hd; ++i) {
        double mean = 0.0;
        for (size_t j = 0; j < 9; ++j) mean += d.vf[j * c.hd + i] / 9.0;
        EXPECT_NEAR(out[h * c.hd + i], mean, 1e-6) << h << " " << i;
      }
  }
}

TEST_P(AttentionTier, OneDominantKeyPairsWithItsValueRow) {
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
  run(d.q.data(), d.view, 0, 12, d.p, nullptr, out.data());
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

TEST_P(AttentionTier, NoKeysGivesZerosAndOtherRowsUntouched) {
  Case c;
  c.n_heads = 6;
  c.n_kv = 3;
  c.hd = 24;
  c.cap = 8;
  Data d = make(c);
  std::vector<float> out(6 * 24, kSentinel);
  run(d.q.data(), d.view, 5, 5, d.p, nullptr, out.data(), 1, 2);  // kv head 1 only
  for (size_t i = 0; i < out.size(); ++i) {
    const bool inside = i >= 2 * 24 && i < 4 * 24;
    EXPECT_EQ(out[i], inside ? 0.0f : kSentinel) << i;
  }
  std::fill(out.begin(), out.end(), kSentinel);
  run(d.q.data(), d.view, 0, 8, d.p, nullptr, out.data(), 2, 99);  // end clamps to n_kv
  for (size_t i = 0; i < 4 * 24; ++i) EXPECT_EQ(out[i], kSentinel) << i;
  for (size_t i = 4 * 24; i < out.size(); ++i) EXPECT_NE(out[i], kSentinel) << i;
}

TEST_P(AttentionTier, SplitInvariantBitExact) {
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
      run(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), whole.data());
      for (size_t g = 0; g < 3; ++g)
        run(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), parts.data(), g, g + 1);
      run(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), pairs.data(), 0, 2);
      run(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), pairs.data(), 2, 3);
      EXPECT_EQ(std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(whole.data(), pairs.data(), whole.size() * sizeof(float)), 0);
      check(c, d, whole);
      // a head's result also does not depend on which other heads of its group are alive (so on the
      // V tile it lands in)
      std::vector<uint8_t> all(c.n_heads, 1);
      std::vector<float> full(c.n_heads * hd);
      run(d.q.data(), d.view, c.begin, c.end, d.p, all.data(), full.data());
      for (size_t h = 0; h < c.n_heads; ++h) {
        if (d.alive[h]) {
          EXPECT_EQ(std::memcmp(whole.data() + h * hd, full.data() + h * hd, hd * sizeof(float)), 0) << h;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, AttentionTier,
                         ::testing::Values(Tier{"avx512", &attention_simd, &avx512_ok, 1},
                                           Tier{"avx2", &attention_avx2, &avx2_ok, 8}),
                         [](const ::testing::TestParamInfo<Tier>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace cortiq::kernels
