// q4tp/q2tp ladder and step rule, bit-exact against the independent numpy oracle
// tests/oracles/quant_ladder.py (golden: tests/golden/quant/ladder.txt).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "quant/codec.h"
#include "util/half.h"

namespace cortiq::quant {
namespace {

std::string golden_path() {
  return std::string(CORTIQ_SOURCE_DIR) + "/tests/golden/quant/ladder.txt";
}

TEST(Ladder, MatchesOracle) {
  std::ifstream f(golden_path());
  ASSERT_TRUE(f) << golden_path();
  std::string line;
  int ladders = 0, steps = 0, bumped = 0;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string tag;
    in >> tag >> std::hex;
    if (tag == "L") {
      unsigned lo, st;
      in >> lo >> st;
      float t[32], t2[32];
      q4tp_ladder(static_cast<uint16_t>(lo), static_cast<uint16_t>(st), t);
      q2tp_ladder(static_cast<uint16_t>(lo), static_cast<uint16_t>(st), t2);
      EXPECT_EQ(t2[0], 0.0f);
      for (int c = 0; c < 32; ++c) {
        uint32_t want;
        in >> want;
        EXPECT_EQ(std::bit_cast<uint32_t>(t[c]), want) << line << " rung " << c;
        if (c < 31) {
          EXPECT_EQ(t2[c + 1], t[c]);
        }
      }
      ASSERT_FALSE(in.fail()) << line;
      ++ladders;
    } else if (tag == "S") {
      uint32_t lo_r, hi;
      int k, bumps;
      unsigned want;
      in >> lo_r >> hi >> std::dec >> k >> std::hex >> want >> std::dec >> bumps;
      ASSERT_FALSE(in.fail()) << line;
      EXPECT_EQ(tp_step_f16(std::bit_cast<float>(lo_r), std::bit_cast<float>(hi), k), want) << line;
      ++steps;
      bumped += bumps > 0;
    }
  }
  EXPECT_GE(ladders, 20);
  EXPECT_GE(steps, 40);
  EXPECT_GE(bumped, 5);  // the ULP-bump branch is exercised
}

TEST(Ladder, UlpBumpByHand) {
  // (2 − (−3))/31 = 0.16129 → f16 0x3129 (0.16113) → −3 + 31·0.16113 = 1.995 < 2 → bump once to 0x312A.
  EXPECT_EQ(f32_to_f16(5.0f / 31.0f), 0x3129);
  EXPECT_LT(-3.0f + 31.0f * f16_to_f32(0x3129), 2.0f);
  EXPECT_EQ(tp_step_f16(-3.0f, 2.0f, 31), 0x312A);
  // hi == lo: step rounds to 0 and is bumped to the smallest subnormal.
  EXPECT_EQ(tp_step_f16(-3.0f, -3.0f, 31), 0x0001);
  // Exact fit needs no bump: (1 − (−2))/30 = 0.1 → f16 0x2E66 (0.099976) → bumps until ≥ 1.
  const uint16_t s = tp_step_f16(-2.0f, 1.0f, 30);
  EXPECT_GE(-2.0f + 30.0f * f16_to_f32(s), 1.0f);
  EXPECT_LT(-2.0f + 30.0f * f16_to_f32(static_cast<uint16_t>(s - 1)), 1.0f);
}

TEST(Ladder, PowerOfTwoLadderExact) {
  float t[32];
  q4tp_ladder(0xC000 /* -2 */, 0x3C00 /* 1 */, t);
  for (int c = 0; c < 32; ++c) EXPECT_EQ(t[c], std::ldexp(1.0f, c - 2));
}

}  // namespace
}  // namespace cortiq::quant
