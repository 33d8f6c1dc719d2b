// dtype names/ids, expected_nbytes and payload validation (FORMAT-NOTES §1.7–1.8).
#include "quant/dtype.h"

#include <gtest/gtest.h>

#include "quant/codec.h"
#include "quant/test_util.h"
#include "util/error.h"

namespace cortiq::quant {
namespace {

using testing::Bytes;
using Shape = std::vector<uint64_t>;

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no error thrown";
  return ErrorKind::Io;
}

TEST(DType, NamesAndIds) {
  const char* names[] = {"f32", "f16",    "bf16", "q8_row", "q4_block", "mix8_4",
                         "u8",  "q4_col", "vbit", "q8_2f",  "vbit_ro",  "q4_tiled",
                         "q1",  "q1s",    "q1t",  "q4tp",   "q2tp"};
  for (int i = 0; i < kNumDTypes; ++i) {
    auto t = dtype_from_id(static_cast<uint8_t>(i));
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(static_cast<int>(*t), i);
    EXPECT_EQ(dtype_name(*t), names[i]);
    EXPECT_EQ(dtype_from_name(names[i]), t);
  }
  EXPECT_FALSE(dtype_from_id(17).has_value());
  EXPECT_FALSE(dtype_from_id(255).has_value());
  EXPECT_FALSE(dtype_from_name("q4t").has_value());
  EXPECT_FALSE(dtype_from_name("F32").has_value());
  EXPECT_FALSE(dtype_has_codec(DType::U8));
  EXPECT_FALSE(dtype_has_codec(DType::Mix8_4));
  EXPECT_FALSE(dtype_has_codec(DType::Q4Col));
  EXPECT_TRUE(dtype_has_codec(DType::Q2TP));
  EXPECT_TRUE(dtype_has_codec(DType::BF16));
}

TEST(DType, ExpectedNbytesEveryDtype) {
  const Shape s{4, 64};  // n = 256, gpr = 2
  const std::optional<uint64_t> want[kNumDTypes] = {
      1024,              // f32
      512,               // f16
      512,               // bf16
      256 + 8,           // q8_row
      8 * 18,            // q4_block
      std::nullopt,      // mix8_4
      std::nullopt,      // u8
      std::nullopt,      // q4_col
      std::nullopt,      // vbit
      256 + 8 + 128,     // q8_2f
      std::nullopt,      // vbit_ro
      8 * 18,            // q4_tiled
      8 * 6,             // q1
      std::nullopt,      // q1s
      std::nullopt,      // q1t
      4 * (32 + 4 + 2),  // q4tp
      4 * (16 + 4 + 2),  // q2tp
  };
  for (int i = 0; i < kNumDTypes; ++i)
    EXPECT_EQ(expected_nbytes(static_cast<DType>(i), s), want[i]) << dtype_name(static_cast<DType>(i));
  // Shapes a layout cannot hold, odd shapes, code row rounding.
  EXPECT_EQ(expected_nbytes(DType::Q4TP, Shape{4, 48}), std::nullopt);
  EXPECT_EQ(expected_nbytes(DType::Q2TP, Shape{256}), std::nullopt);
  EXPECT_EQ(expected_nbytes(DType::Q4TP, Shape{3, 0}), std::nullopt);
  EXPECT_EQ(expected_nbytes(DType::Q8Row, Shape{64}), std::nullopt);
  EXPECT_EQ(expected_nbytes(DType::Q8_2F, Shape{2, 3, 4}), std::nullopt);
  EXPECT_EQ(expected_nbytes(DType::Q8_2F, Shape{5, 3}), 15u + 10u + 6u);
  EXPECT_EQ(expected_nbytes(DType::Q4Block, Shape{3, 7}), 18u);  // 21 elements → one padded group
  EXPECT_EQ(expected_nbytes(DType::Q4Block, Shape{33}), 36u);
  EXPECT_EQ(expected_nbytes(DType::Q1, Shape{2, 2, 16}), 12u);
  EXPECT_EQ(expected_nbytes(DType::F16, Shape{}), 2u);                         // 0-D scalar
  EXPECT_EQ(expected_nbytes(DType::Q4TP, Shape{2, 96}), 2u * (48 + 4 + 2));    // gpr 3: 15 bits → 2 bytes
  EXPECT_EQ(expected_nbytes(DType::Q4TP, Shape{1, 320}), 1u * (160 + 4 + 7));  // gpr 10: 50 bits → 7 bytes
  EXPECT_EQ(kind_of([] { (void)expected_nbytes(DType::F32, Shape{1ull << 62, 8}); }), ErrorKind::Bounds);
  EXPECT_EQ(kind_of([] {
              (void)expected_nbytes(DType::F16, Shape{1ull << 32, 1ull << 32});
            }),
            ErrorKind::Bounds);
}

TEST(DType, ValidateFixedSize) {
  const Shape s{2, 32};
  std::vector<uint8_t> p(expected_nbytes(DType::Q8Row, s).value());
  validate_payload(DType::Q8Row, s, p, "w");
  p.push_back(0);
  EXPECT_EQ(kind_of([&] { validate_payload(DType::Q8Row, s, p, "w"); }), ErrorKind::Parse);
  p.resize(p.size() - 2);
  EXPECT_EQ(kind_of([&] { validate_payload(DType::Q8Row, s, p, "w"); }), ErrorKind::Parse);
  // u8 accepts anything; reserved ids never validate; q4tp with a bad shape is rejected.
  validate_payload(DType::U8, s, std::vector<uint8_t>(7), "cfg");
  EXPECT_EQ(kind_of([&] { validate_payload(DType::Mix8_4, s, p, "w"); }), ErrorKind::Parse);
  EXPECT_EQ(kind_of([&] { validate_payload(DType::Q4Col, s, p, "w"); }), ErrorKind::Parse);
  EXPECT_EQ(kind_of([&] { validate_payload(DType::Q4TP, Shape{2, 48}, p, "w"); }), ErrorKind::Parse);
  try {
    validate_payload(DType::F32, s, p, "model.layers.0.mlp.up_proj.weight");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << e.message();
  }
}

TEST(DType, ValidateTruncatedAndExtendedEveryCodec) {
  const Shape s{3, 64};
  const auto v = testing::gaussian(192, 7);
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    if (!dtype_has_codec(t)) continue;
    auto p = encode(t, s, v);
    validate_payload(t, s, p, "w");
    auto longer = p;
    longer.push_back(0);
    EXPECT_EQ(kind_of([&] { validate_payload(t, s, longer, "w"); }), ErrorKind::Parse) << dtype_name(t);
    auto shorter = p;
    shorter.pop_back();
    EXPECT_EQ(kind_of([&] { validate_payload(t, s, shorter, "w"); }), ErrorKind::Parse) << dtype_name(t);
    EXPECT_EQ(kind_of([&] { validate_payload(t, s, std::span<const uint8_t>(), "w"); }), ErrorKind::Parse)
        << dtype_name(t);
  }
}

// vbit [1,32], width 3: bits(1) + scale(2) + packed(12) = 15 bytes.
Bytes vbit_one_row(int width) {
  Bytes b;
  b.u8({width}).u16({0x3C00}).rep(0, 12);
  return b;
}

TEST(DType, ValidateVbitStructure) {
  const Shape s{1, 32};
  validate_payload(DType::VBit, s, vbit_one_row(3).b, "w");
  for (int bad : {0, 2, 7, 9, 255})
    EXPECT_EQ(kind_of([&] { validate_payload(DType::VBit, s, vbit_one_row(bad).b, "w"); }), ErrorKind::Parse)
        << bad;
  // A width-4 row needs 16 packed bytes; 12 is a length mismatch.
  EXPECT_EQ(kind_of([&] { validate_payload(DType::VBit, s, vbit_one_row(4).b, "w"); }), ErrorKind::Parse);
  EXPECT_EQ(kind_of([&] {
              validate_payload(DType::VBit, Shape{1, 48}, vbit_one_row(3).b, "w");
            }),
            ErrorKind::Parse);

  // vbit_ro [2,32] widths {3,4}: bits 2 + scales 4 + offsets 12 + packed 12+16.
  auto ro = [](uint32_t o0, uint32_t o1, uint32_t o2) {
    Bytes b;
    b.u8({3, 4}).u16({0x3C00, 0x3C00}).u32({o0, o1, o2}).rep(0, 28);
    return b.b;
  };
  const Shape s2{2, 32};
  validate_payload(DType::VBitRo, s2, ro(0, 12, 28), "w");
  EXPECT_EQ(kind_of([&] { validate_payload(DType::VBitRo, s2, ro(1, 13, 29), "w"); }),
            ErrorKind::Parse);  // off[0]
  EXPECT_EQ(kind_of([&] { validate_payload(DType::VBitRo, s2, ro(0, 16, 28), "w"); }),
            ErrorKind::Parse);  // span
  EXPECT_EQ(kind_of([&] { validate_payload(DType::VBitRo, s2, ro(0, 12, 4), "w"); }),
            ErrorKind::Parse);  // non-monotone
  EXPECT_EQ(kind_of([&] { validate_payload(DType::VBitRo, s2, ro(0, 12, 30), "w"); }),
            ErrorKind::Parse);  // end
}

TEST(DType, ValidateQ1sStructure) {
  const Shape s{1, 32};
  auto q1s = [](uint32_t count, uint32_t idx) {
    Bytes b;
    b.u16({0x3C00}).rep(0, 4).u32({count});
    for (uint32_t i = 0; i < count; ++i) b.u32({idx}).u16({0x3C00});
    return b.b;
  };
  validate_payload(DType::Q1S, s, q1s(1, 31), "w");
  validate_payload(DType::Q1S, s, q1s(0, 0), "w");
  EXPECT_EQ(kind_of([&] { validate_payload(DType::Q1S, s, q1s(1, 32), "w"); }), ErrorKind::Parse);
  auto p = q1s(2, 3);
  p[6] = 3;  // count says 3 entries, only 2 present
  EXPECT_EQ(kind_of([&] { validate_payload(DType::Q1S, s, p, "w"); }), ErrorKind::Parse);
}

TEST(DType, ValidateQ1tStructure) {
  // [2,32]: tiles 18 bytes, row_ptr 12 bytes, entries.
  auto q1t = [](uint32_t p1, uint32_t p2, std::vector<std::pair<uint16_t, uint16_t>> entries,
                int code_byte0) {
    Bytes b;
    b.u16({0x3C00}).u8({code_byte0}).rep(0, 6).u16({0x3C00}).rep(0, 7).u32({0, p1, p2});
    for (auto [c, v] : entries) b.u16({c, v});
    return b.b;
  };
  const Shape s{2, 32};
  validate_payload(DType::Q1T, s, q1t(1, 2, {{5, 0x4000}, {31, 0x4000}}, 0), "w");
  EXPECT_EQ(kind_of([&] {
              validate_payload(DType::Q1T, s, q1t(1, 2, {{32, 0x4000}, {0, 0}}, 0), "w");
            }),
            ErrorKind::Parse);  // col >= in
  EXPECT_EQ(kind_of([&] {
              validate_payload(DType::Q1T, s, q1t(2, 1, {{1, 0}, {2, 0}}, 0), "w");
            }),
            ErrorKind::Parse);  // non-monotone
  EXPECT_EQ(kind_of([&] {
              validate_payload(DType::Q1T, s, q1t(1, 3, {{1, 0}, {2, 0}}, 0), "w");
            }),
            ErrorKind::Parse);  // row_ptr[rows] beyond the entries
  // Row 0, col 0 is an outlier but its base code (byte0 % 3 = 1) is not 0.
  EXPECT_EQ(kind_of([&] {
              validate_payload(DType::Q1T, s, q1t(1, 1, {{0, 0x4000}}, 1), "w");
            }),
            ErrorKind::Parse);
  validate_payload(DType::Q1T, s, q1t(1, 1, {{0, 0x4000}}, 3), "w");  // byte0 = 3: code0 = 0, code1 = 1
  auto bad0 = q1t(0, 0, {}, 0);
  bad0[18] = 1;  // row_ptr[0] != 0
  EXPECT_EQ(kind_of([&] { validate_payload(DType::Q1T, s, bad0, "w"); }), ErrorKind::Parse);
  EXPECT_EQ(kind_of([&] {
              validate_payload(DType::Q1T, Shape{1, 65568}, q1t(0, 0, {}, 0), "w");
            }),
            ErrorKind::Parse);  // in > 65536
}

}  // namespace
}  // namespace cortiq::quant
