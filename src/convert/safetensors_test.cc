#include "convert/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "util/error.h"
#include "util/half.h"

namespace cortiq::convert {
namespace {

std::vector<uint8_t> make_st(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  store_le<uint64_t>(b.data(), header.size());
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

ErrorKind kind_of(const std::vector<uint8_t>& b) {
  try {
    parse_safetensors(b, "t.safetensors");
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::Signature;  // sentinel: no error
}

TEST(Safetensors, ParsesAndConverts) {
  auto b = make_st(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"c":{"dtype":"BF16","shape":[1,2],"data_offsets":[12,16]},)"
      R"("d":{"dtype":"I64","shape":[1],"data_offsets":[16,24]},"e":{"dtype":"I32","shape":[],"data_offsets":[24,28]}})",
      28);
  const size_t base = b.size() - 28;
  store_le<float>(&b[base], 1.5f);
  store_le<float>(&b[base + 4], -2.0f);
  store_le<uint16_t>(&b[base + 8], 0x0001);  // smallest f16 subnormal
  store_le<uint16_t>(&b[base + 10], 0x3C00);
  store_le<uint16_t>(&b[base + 12], 0x3F80);  // bf16 1.0
  store_le<uint16_t>(&b[base + 14], 0xC040);  // bf16 -3.0
  store_le<int64_t>(&b[base + 16], -7);
  store_le<int32_t>(&b[base + 24], 123456);
  auto ts = parse_safetensors(b, "x");
  ASSERT_EQ(ts.size(), 5u);
  EXPECT_EQ(ts[0].name, "a");  // offset order
  EXPECT_EQ(ts[1].name, "b");
  EXPECT_EQ(to_f32(ts[0]), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(to_f32(ts[1]), (std::vector<float>{5.9604645e-8f, 1.0f}));
  EXPECT_EQ(to_f32(ts[2]), (std::vector<float>{1.0f, -3.0f}));
  EXPECT_EQ(ts[2].shape, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(to_f32(ts[3]), (std::vector<float>{-7.0f}));
  EXPECT_EQ(ts[4].numel, 1u);
  EXPECT_EQ(to_f32(ts[4]), (std::vector<float>{123456.0f}));
}

// PITFALLS CTR-5 A..G.
TEST(Safetensors, Ctr5OffsetsShapeOverflow) {
  EXPECT_EQ(kind_of(make_st(R"({"t":{"dtype":"F32","shape":[1000,1000],"data_offsets":[0,4]}})", 4)),
            ErrorKind::Bounds);
  EXPECT_EQ(
      kind_of(make_st(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0)),
      ErrorKind::Bounds);
  EXPECT_EQ(kind_of(make_st(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8)),
            ErrorKind::Bounds);
  EXPECT_EQ(
      kind_of(make_st(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", 4)),
      ErrorKind::Bounds);
  EXPECT_EQ(kind_of(make_st(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[-1,3]}})", 4)),
            ErrorKind::Parse);
  EXPECT_EQ(kind_of(make_st(R"({"t":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}})", 16)),
            ErrorKind::Parse);
  EXPECT_EQ(kind_of(make_st(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4)),
            ErrorKind::Bounds);
}

// A zero or negative dimension is a Parse error naming the tensor, before any size arithmetic
// (issue 27: a zero row count made `cols = numel / rows` divide by zero downstream). A 0-d scalar
// (shape []) stays valid.
TEST(Safetensors, ZeroOrNegativeDimensionIsRefused) {
  auto message = [](const std::string& header) {
    try {
      parse_safetensors(make_st(header, 0), "t.safetensors");
    } catch (const Error& e) {
      return std::make_pair(e.kind(), e.message());
    }
    return std::make_pair(ErrorKind::Signature, std::string());
  };
  for (const char* shape : {"[64,0]", "[0,64]", "[0]", "[2,0,3]", "[-1,4]", "[4,-64]"}) {
    const auto [kind, msg] =
        message(std::string(R"({"model.layers.0.self_attn.q_proj.weight":{"dtype":"F32",)") + R"("shape":)" +
                shape + R"(,"data_offsets":[0,0]}})");
    EXPECT_EQ(kind, ErrorKind::Parse) << shape;
    EXPECT_NE(msg.find("tensor 'model.layers.0.self_attn.q_proj.weight'"), std::string::npos) << msg;
    const bool negative = std::string(shape).find('-') != std::string::npos;
    EXPECT_NE(msg.find(negative ? "must hold non-negative integers" : "has a dimension 0"), std::string::npos)
        << msg;
  }
  auto ts = parse_safetensors(make_st(R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", 4), "f");
  ASSERT_EQ(ts.size(), 1u);
  EXPECT_EQ(ts[0].numel, 1u);
}

// PITFALLS CTR-6 A..E.
TEST(Safetensors, Ctr6OverlapAndHoles) {
  EXPECT_EQ(kind_of(make_st(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                            R"("b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                            16)),
            ErrorKind::Bounds);
  EXPECT_EQ(kind_of(make_st(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                            R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                            24)),
            ErrorKind::Bounds);
  EXPECT_EQ(kind_of(make_st(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                            R"("b":{"dtype":"F32","shape":[4],"data_offsets":[32,48]}})",
                            48)),
            ErrorKind::Bounds);
  EXPECT_EQ(kind_of(make_st(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 32)),
            ErrorKind::Bounds);
  EXPECT_EQ(kind_of(make_st(R"({"b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                            R"("a":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}})",
                            32)),
            ErrorKind::Signature);  // accepted
}

TEST(Safetensors, MalformedHeaders) {
  std::vector<uint8_t> tiny = {1, 2, 3};
  EXPECT_EQ(kind_of(tiny), ErrorKind::Bounds);
  auto b = make_st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  store_le<uint64_t>(b.data(), 1u << 20);  // header length past EOF
  EXPECT_EQ(kind_of(b), ErrorKind::Bounds);
  EXPECT_EQ(kind_of(make_st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4)),
            ErrorKind::Parse);
  EXPECT_EQ(kind_of(make_st(R"([1,2])", 0)), ErrorKind::Parse);
  EXPECT_EQ(kind_of(make_st(R"({"a":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})", 4)),
            ErrorKind::Parse);
  EXPECT_EQ(kind_of(make_st(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4)),
            ErrorKind::Parse);
  EXPECT_EQ(kind_of(make_st(R"({"a":{"dtype":"F32","shape":[1]}})", 4)), ErrorKind::Parse);
  try {
    parse_safetensors(make_st(R"({"model.x.weight":{"dtype":"F32","shape":[3],"data_offsets":[0,4]}})", 4),
                      "f");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("model.x.weight"), std::string::npos) << e.message();
  }
  // Unconvertible dtype is refused by to_f32, naming the tensor.
  auto ts = parse_safetensors(make_st(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", 2), "f");
  try {
    to_f32(ts[0]);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.message().find("'m'"), std::string::npos);
  }
}

TEST(Safetensors, ShardedCheckpoint) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("cortiq_st_shard_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::vector<uint8_t>& b) {
    std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
  };
  write("a.safetensors", make_st(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4));
  write("b.safetensors", make_st(R"({"y":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4));
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})";
  {
    Checkpoint c(dir.string());
    ASSERT_EQ(c.tensors().size(), 2u);
    EXPECT_EQ(c.tensors()[0]->name, "x");
    EXPECT_NE(c.find("y"), nullptr);
    EXPECT_EQ(c.total_bytes(), 8u);
  }
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors"}})";
  EXPECT_THROW(Checkpoint(dir.string()), Error);
  std::ofstream(dir / "model.safetensors.index.json") << R"({"weight_map":{"x":"../a.safetensors"}})";
  EXPECT_THROW(Checkpoint(dir.string()), Error);
  fs::remove_all(dir);
  EXPECT_THROW(Checkpoint(dir.string()), Error);
}

}  // namespace
}  // namespace cortiq::convert
