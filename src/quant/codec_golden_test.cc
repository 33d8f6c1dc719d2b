// Decoding hand-built payloads (bytes written from the layouts of FORMAT-NOTES §1.8, not by encode)
// gives exact values; decode_rows slices agree with decode.
#include <gtest/gtest.h>

#include <cmath>

#include "quant/codec.h"
#include "quant/test_util.h"
#include "util/error.h"

namespace cortiq::quant {
namespace {

using testing::Bytes;
using Shape = std::vector<uint64_t>;

std::vector<float> dec(DType t, const Shape& s, const std::vector<uint8_t>& p) {
  uint64_t n = 1;
  for (auto d : s) n *= d;
  std::vector<float> out(n, 12345.0f);
  decode(t, s, p, out);
  return out;
}

void expect_exact(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

TEST(Golden, RawFloats) {
  Bytes f32;
  f32.u32({0x3FC00000u, 0xC0000000u, 0x00000001u});
  expect_exact(dec(DType::F32, {3}, f32.b), {1.5f, -2.0f, 0x1p-149f});
  Bytes f16;
  f16.u16({0x3C00, 0x0001, 0x03FF, 0xFC00, 0xC500});
  const auto h = dec(DType::F16, {5}, f16.b);
  expect_exact({h[0], h[1], h[2], h[4]}, {1.0f, 0x1p-24f, 1023 * 0x1p-24f, -5.0f});
  EXPECT_TRUE(std::isinf(h[3]) && h[3] < 0);
  Bytes f16nan;
  f16nan.u16({0x7E00});
  EXPECT_TRUE(std::isnan(dec(DType::F16, {1}, f16nan.b)[0]));
  Bytes bf;
  bf.u16({0x3F80, 0xC040, 0x0001});
  expect_exact(dec(DType::BF16, {1, 3}, bf.b), {1.0f, -3.0f, 0x1p-133f});
}

TEST(Golden, Q8Row) {
  Bytes b;
  b.u8({1, 0xFE, 127, 0x80, 0, 5}).u16({0x3800, 0x4000});
  expect_exact(dec(DType::Q8Row, {2, 3}, b.b), {0.5f, -1.0f, 63.5f, -256.0f, 0.0f, 10.0f});
}

TEST(Golden, Q8_2F) {
  Bytes b;
  b.u8({2, 0xFD, 127, 0x81}).u16({0x3800, 0x3C00}).u16({0x4000, 0x3400});
  expect_exact(dec(DType::Q8_2F, {2, 2}, b.b), {2.0f, -0.375f, 254.0f, -31.75f});
}

// Two q4 groups: g0 scale 0.5, g1 scale 3.0. Nibble byte k: element 2k low, 2k+1 high.
std::vector<float> q4_expected(size_t n) {
  std::vector<float> w(n, 0.0f);
  w[0] = 3.5f, w[1] = 0.5f, w[30] = -0.5f, w[31] = -4.0f, w[32] = -21.0f, w[33] = 6.0f, w[38] = 12.0f;
  return w;
}
void q4_group_bytes(Bytes& b, int g) {
  if (g == 0)
    b.u8({0x9F}).rep(0x88, 14).u8({0x07});
  else
    b.u8({0xA1, 0x88, 0x88, 0x8C}).rep(0x88, 12);
}

TEST(Golden, Q4BlockPaddedTail) {
  Bytes b;
  q4_group_bytes(b, 0);
  q4_group_bytes(b, 1);
  b.u16({0x3800, 0x4200});
  expect_exact(dec(DType::Q4Block, {40}, b.b), q4_expected(40));
  expect_exact(dec(DType::Q4Block, {5, 8}, b.b), q4_expected(40));
}

TEST(Golden, Q4Tiled) {
  Bytes b;
  b.u16({0x3800});
  q4_group_bytes(b, 0);
  b.u16({0x4200});
  q4_group_bytes(b, 1);
  expect_exact(dec(DType::Q4Tiled, {2, 32}, b.b), q4_expected(64));
}

// vbit [2,32]: row 0 width 3 (L=3, scale 1), row 1 width 8 (L=127, scale 0.5).
Bytes vbit_packed() {
  Bytes b;
  // Row 0 codes 7, 0, then 3 x30 (MSB-first): 111 000 011 011 011 011 011 011 | 011...
  b.u8({0xE1, 0xB6, 0xDB}).u8({0x6D, 0xB6, 0xDB, 0x6D, 0xB6, 0xDB, 0x6D, 0xB6, 0xDB});
  // Row 1 codes 0xFF, 0x00, 0x7F x29, 0x80.
  b.u8({0xFF, 0x00}).rep(0x7F, 29).u8({0x80});
  return b;
}
std::vector<float> vbit_expected() {
  std::vector<float> w(64, 0.0f);
  w[0] = 4.0f, w[1] = -3.0f, w[32] = 64.0f, w[33] = -63.5f, w[63] = 0.5f;
  return w;
}

TEST(Golden, VBit) {
  Bytes b;
  b.u8({3, 8}).u16({0x3C00, 0x3800});
  const auto packed = vbit_packed().b;
  b.b.insert(b.b.end(), packed.begin(), packed.end());
  expect_exact(dec(DType::VBit, {2, 32}, b.b), vbit_expected());
}

TEST(Golden, VBitRo) {
  Bytes b;
  b.u8({3, 8}).u16({0x3C00, 0x3800}).u32({0, 12, 44});
  const auto packed = vbit_packed().b;
  b.b.insert(b.b.end(), packed.begin(), packed.end());
  expect_exact(dec(DType::VBitRo, {2, 32}, b.b), vbit_expected());
  const VBitView v = vbit_view(DType::VBitRo, Shape{2, 32}, b.b, "w");
  EXPECT_EQ(v.row_off, (std::vector<uint64_t>{0, 12, 44}));
  EXPECT_EQ(vbit_code(v.row(0), 0, 3), 7u);
  EXPECT_EQ(vbit_code(v.row(0), 2, 3), 3u);
  EXPECT_EQ(vbit_code(v.row(1), 31, 8), 0x80u);
}

std::vector<float> q1_expected() {
  std::vector<float> w(32, -2.0f);
  w[0] = 2.0f, w[15] = 2.0f;
  for (int i = 16; i < 24; ++i) w[i] = 2.0f;
  return w;
}

TEST(Golden, Q1) {
  Bytes b;
  b.u16({0x4000}).u8({0x01, 0x80, 0xFF, 0x00});
  expect_exact(dec(DType::Q1, {1, 32}, b.b), q1_expected());
}

TEST(Golden, Q1s) {
  Bytes b;
  b.u16({0x4000}).u8({0x01, 0x80, 0xFF, 0x00}).u32({2}).u32({1}).u16({0x4500}).u32({31}).u16({0x0001});
  auto want = q1_expected();
  want[1] = 5.0f, want[31] = 0x1p-24f;
  expect_exact(dec(DType::Q1S, {1, 32}, b.b), want);
}

TEST(Golden, Q1t) {
  Bytes b;
  // Row 0: scale 1; codes c0=1, c1=2, c4=1 → byte0 = 1 + 2·3 + 1·81 = 88; c30=2, c31=1 → byte6 = 5.
  b.u16({0x3C00}).u8({88, 0, 0, 0, 0, 0, 5});
  // Row 1: scale 0.5; c10 = 1 → byte2 = 1.
  b.u16({0x3800}).u8({0, 0, 1, 0, 0, 0, 0});
  b.u32({0, 1, 3}).u16({2, 0x4400}).u16({0, 0xC200}).u16({31, 0x3400});
  std::vector<float> want(64, 0.0f);
  want[0] = 1, want[1] = -1, want[2] = 4, want[4] = 1, want[30] = -1, want[31] = 1;
  want[32] = -3, want[42] = 0.5f, want[63] = 0.25f;
  expect_exact(dec(DType::Q1T, {2, 32}, b.b), want);
  // A non-canonical code byte (>= 243) is a Parse error at decode.
  auto bad = b.b;
  bad[3] = 250;
  std::vector<float> out(64);
  EXPECT_THROW(decode(DType::Q1T, Shape{2, 32}, bad, out), Error);
}

// q4tp/q2tp [1,64], lo = -2, step = 1: t[c] = 2^(c-2) (exact).
TEST(Golden, Q4tp) {
  Bytes b;
  b.u8({0xF0}).rep(0x88, 15);                // tile 0: elem0 = -8, elem1 = +7
  b.rep(0x88, 15).u8({0x89});                // tile 1: elem62 = +1
  b.u16({0xC000, 0x3C00}).u8({0x23, 0x02});  // codes 3, 17
  std::vector<float> want(64, 0.0f);
  want[0] = -16.0f, want[1] = 14.0f, want[62] = 32768.0f;
  expect_exact(dec(DType::Q4TP, {1, 64}, b.b), want);
  EXPECT_EQ(q4tp_code(b.b.data() + 36, 0), 3u);
  EXPECT_EQ(q4tp_code(b.b.data() + 36, 1), 17u);
}

TEST(Golden, Q2tp) {
  Bytes b;
  b.rep(0x1B, 8);                            // tile 0 on rung 0: decodes to zeros whatever the weights
  b.u8({0xE4}).rep(0x55, 7);                 // tile 1: codes 0,1,2,3 then all 1
  b.u16({0xC000, 0x3C00}).u8({0x80, 0x00});  // codes 0, 4 (s = 2^(4-3) = 2)
  std::vector<float> want(64, 0.0f);
  want[32] = -3, want[33] = -1, want[34] = 1, want[35] = 3;
  for (int i = 36; i < 64; ++i) want[i] = -1;
  expect_exact(dec(DType::Q2TP, {1, 64}, b.b), want);
}

TEST(Golden, CodeExtractorAllOffsets) {
  // 8 tiles = 40 bits = 5 bytes; codes 0..7 written as an LSB-first stream by hand.
  // bits: c0=31(11111) c1=0 c2=21(10101) c3=10(01010) c4=1 c5=30 c6=17 c7=2
  uint64_t stream = 0;
  const uint32_t codes[8] = {31, 0, 21, 10, 1, 30, 17, 2};
  for (int g = 0; g < 8; ++g) stream |= static_cast<uint64_t>(codes[g]) << (5 * g);
  uint8_t bytes[6] = {};
  for (int i = 0; i < 5; ++i) bytes[i] = static_cast<uint8_t>(stream >> (8 * i));
  for (int g = 0; g < 8; ++g) EXPECT_EQ(q4tp_code(bytes, g), codes[g]) << g;
}

TEST(Golden, UnsupportedAndReserved) {
  std::vector<float> out(4);
  const Shape s{4};
  for (DType t : {DType::U8, DType::Mix8_4, DType::Q4Col}) {
    try {
      decode(t, s, std::vector<uint8_t>(4), out);
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    }
  }
}

TEST(DecodeRows, EqualsSliceOfDecodeEveryDtype) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    if (!dtype_has_codec(t)) continue;
    // Flat-group codecs also get a shape whose rows straddle groups.
    std::vector<Shape> shapes{{5, 64}};
    if (t == DType::Q4Block || t == DType::F32 || t == DType::F16 || t == DType::BF16)
      shapes.push_back({5, 40});
    if (t == DType::Q4Block || t == DType::Q4Tiled || t == DType::Q1) shapes.push_back({128});
    for (const auto& s : shapes) {
      const uint64_t n = s.size() == 2 ? s[0] * s[1] : s[0];
      const uint64_t rows = s.size() == 2 ? s[0] : 1, in = n / rows;
      auto v = testing::gaussian(n, 11 + i);
      v[3] = 40.0f;  // an outlier so q1s/q1t carry overlay entries
      const auto p = encode(t, s, v);
      std::vector<float> all(n);
      decode(t, s, p, all);
      for (uint64_t r0 = 0; r0 < rows; ++r0) {
        for (uint64_t cnt = 0; r0 + cnt <= rows; ++cnt) {
          std::vector<float> part(cnt * in, -1.0f);
          decode_rows(t, s, p, r0, cnt, part);
          for (uint64_t k = 0; k < cnt * in; ++k)
            ASSERT_EQ(part[k], all[r0 * in + k])
                << dtype_name(t) << " rows " << r0 << "+" << cnt << " k " << k;
        }
      }
      std::vector<float> one(in);
      EXPECT_THROW(decode_rows(t, s, p, rows, 1, one), Error) << dtype_name(t);
    }
  }
}

}  // namespace
}  // namespace cortiq::quant
