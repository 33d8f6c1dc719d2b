#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/perplexity.h"

namespace cortiq::runtime {
namespace {

// PITFALLS SMP-1 (CTRL rule, as HF and llama.cpp): seen {0,1,2}, penalty 1.5.
TEST(Sampler, RepetitionPenaltyOnNegativeLogits) {
  std::vector<float> l{2.0f, -2.0f, 0.5f, -0.5f};
  const std::vector<uint32_t> seen{0, 1, 2, 2, 0};  // distinct ids count once
  apply_penalties(l, seen, 1.5f, 0.0f);
  EXPECT_FLOAT_EQ(l[0], 1.3333334f);
  EXPECT_FLOAT_EQ(l[1], -3.0f);
  EXPECT_FLOAT_EQ(l[2], 0.33333334f);
  EXPECT_FLOAT_EQ(l[3], -0.5f);
  std::vector<float> p{1.0f, 1.0f};
  apply_penalties(p, std::vector<uint32_t>{1, 1, 1}, 1.0f, 0.25f);
  EXPECT_FLOAT_EQ(p[1], 0.75f);
  EXPECT_FLOAT_EQ(p[0], 1.0f);
}

TEST(Sampler, GreedyTiesGoToHighestIndex) {
  Sampler s(SamplerParams::greedy());
  std::vector<float> l{1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(l, {}), 2u);
}

TEST(Sampler, SplitMix64KnownValues) {
  SplitMix64 r(1234567);
  // Reference values of SplitMix64 (Vigna's splitmix64.c) for seed 1234567.
  EXPECT_EQ(r.next(), 6457827717110365317ull);
  EXPECT_EQ(r.next(), 3203168211198807973ull);
}

TEST(Sampler, SeededIsDeterministicAndTopKOneIsArgmax) {
  SamplerParams p;
  p.seed = 42;
  p.repeat_penalty = 1.0f;
  std::vector<uint32_t> a, b;
  for (int run = 0; run < 2; ++run) {
    Sampler s(p);
    for (int i = 0; i < 20; ++i) {
      std::vector<float> l{0.1f, 0.5f, 0.2f, 0.4f, 0.3f};
      (run ? b : a).push_back(s.sample(l, {}));
    }
  }
  EXPECT_EQ(a, b);
  p.top_k = 1;
  Sampler s(p);
  for (int i = 0; i < 10; ++i) {
    std::vector<float> l{0.1f, 0.5f, 0.2f, 0.45f};
    EXPECT_EQ(s.sample(l, {}), 1u);
  }
}

TEST(Sampler, SuppressedIdNeverDrawn) {
  SamplerParams p;
  p.seed = 7;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.suppress = {0};
  Sampler s(p);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l{5.0f, 0.0f, 0.0f};
    EXPECT_NE(s.sample(l, {}), 0u);
  }
}

TEST(Perplexity, TokenNll) {
  const std::vector<float> l{0.0f, std::log(3.0f)};  // p = {0.25, 0.75}
  EXPECT_NEAR(token_nll(l, 0), std::log(4.0), 1e-6);
  EXPECT_NEAR(token_nll(l, 1), -std::log(0.75), 1e-6);
}

}  // namespace
}  // namespace cortiq::runtime
