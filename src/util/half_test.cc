#include "util/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "util/error.h"

namespace cortiq {
namespace {

TEST(Half, KnownBitPatterns) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);    // tie at the top rounds to even -> Inf
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);    // smallest normal
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);    // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);    // tie between 0 and 2^-24 -> even (0)
  EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002);  // 1.5 ulp -> tie -> even (2)
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::quiet_NaN()) & 0x7E00, 0x7E00);
  // 1 + 2^-11 is a tie between 1 and 1+2^-10: RNE keeps 1.
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
}

TEST(Half, DecodeSubnormalsExactly) {
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x8001), -0x1p-24f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0xFC00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
}

TEST(Half, RoundTripAllFiniteF16) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    if ((b & 0x7C00) == 0x7C00) continue;
    ASSERT_EQ(f32_to_f16(f16_to_f32(b)), b) << std::hex << h;
  }
}

TEST(Half, Bf16) {
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);      // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie -> even (up)
}

TEST(ErrorTest, KindAndMessage) {
  try {
    fail(ErrorKind::Bounds, "tensor '{}' at offset {}", "x", 42);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Bounds);
    EXPECT_STREQ(e.what(), "Bounds: tensor 'x' at offset 42");
  }
}

}  // namespace
}  // namespace cortiq
