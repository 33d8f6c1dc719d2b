#include "convert/gguf.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>

#include "util/error.h"
#include "util/half.h"

namespace cortiq::convert {
namespace {

namespace fs = std::filesystem;

std::string shared_models() {
  return std::string(CORTIQ_SOURCE_DIR) + "/../shared/models";
}

#define REQUIRE_FILE(path)                                              \
  do {                                                                  \
    if (!fs::exists(path)) GTEST_SKIP() << "not available: " << (path); \
  } while (0)

std::string f32_path() {
  return shared_models() + "/stories260K-gguf/stories260K-f32.gguf";
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

/// This process's scratch folder, removed at exit. ctest runs the tests of this binary in parallel
/// processes: a file name shared between them would be rewritten under another's mapping (SIGBUS).
const fs::path& scratch_dir() {
  struct Dir {
    fs::path p = fs::temp_directory_path() / ("cortiq_gguf_" + std::to_string(::getpid()));
    Dir() { fs::create_directories(p); }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  };
  static const Dir d;
  return d.p;
}

std::string write_temp(const std::vector<uint8_t>& bytes, const std::string& name = "t.gguf") {
  const std::string p = (scratch_dir() / name).string();
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return p;
}

// Opens `bytes` as a GGUF file; returns the ErrorKind thrown, or nullopt on success. Anything else
// than cortiq::Error escaping fails the test.
std::optional<ErrorKind> open_kind(const std::vector<uint8_t>& bytes, std::string* msg = nullptr) {
  const std::string p = write_temp(bytes);
  try {
    GgufFile g(p);
  } catch (const Error& e) {
    if (msg) *msg = e.message();
    return e.kind();
  }
  return std::nullopt;
}

// Minimal GGUF writer for synthetic files.
class Builder {
 public:
  explicit Builder(uint32_t version = 3) {
    raw("GGUF", 4);
    u32(version);
    n_tensors_at_ = b_.size();
    u64(0);
    n_kv_at_ = b_.size();
    u64(0);
  }
  Builder& u8(uint8_t v) { return put(v); }
  Builder& u32(uint32_t v) { return put(v); }
  Builder& u64(uint64_t v) { return put(v); }
  template <typename T>
  Builder& put(T v) {
    const size_t at = b_.size();
    b_.resize(at + sizeof(T));
    std::memcpy(&b_[at], &v, sizeof(T));
    return *this;
  }
  Builder& raw(const void* p, size_t n) {
    const size_t at = b_.size();
    b_.resize(at + n);
    if (n) std::memcpy(b_.data() + at, p, n);
    return *this;
  }
  Builder& str(std::string_view s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  // Starts a key: writes the key and its type; the caller writes the value.
  Builder& key(std::string_view k, uint32_t type) {
    ++n_kv_;
    str(k);
    return u32(type);
  }
  Builder& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    ++n_tensors_;
    str(name);
    u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t x : ne) u64(x);
    u32(type);
    return u64(offset);
  }
  Builder& pad(uint64_t alignment) {
    while (b_.size() % alignment) b_.push_back(0);
    return *this;
  }
  Builder& zeros(size_t n) {
    b_.resize(b_.size() + n, 0);
    return *this;
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> b = b_;
    std::memcpy(&b[n_tensors_at_], &n_tensors_, 8);
    std::memcpy(&b[n_kv_at_], &n_kv_, 8);
    return b;
  }
  size_t size() const { return b_.size(); }
  std::vector<uint8_t>& buf() { return b_; }

 private:
  std::vector<uint8_t> b_;
  size_t n_tensors_at_ = 0, n_kv_at_ = 0;
  uint64_t n_tensors_ = 0, n_kv_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Real files.

TEST(GgufReader, StoriesF32) {
  REQUIRE_FILE(f32_path());
  GgufFile g(f32_path());
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.data_offset(), 14464u);
  ASSERT_EQ(g.tensors().size(), 47u);
  EXPECT_EQ(g.total_tensor_bytes(), 1054592u - 14464u);
  const auto& m = g.metadata();
  EXPECT_EQ(m.size(), 28u);
  ASSERT_EQ(g.metadata_keys().size(), 28u);
  EXPECT_EQ(g.metadata_keys()[0], "general.architecture");
  EXPECT_EQ(g.metadata_keys()[27], "general.quantization_version");
  EXPECT_EQ(m.at("general.architecture"), "llama");
  EXPECT_EQ(m.at("general.name"), "stories260K");
  EXPECT_EQ(m.at("llama.block_count"), 5);
  EXPECT_TRUE(m.at("llama.block_count").is_number_unsigned());
  EXPECT_EQ(m.at("llama.embedding_length"), 64);
  EXPECT_EQ(m.at("llama.feed_forward_length"), 172);
  EXPECT_EQ(m.at("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(m.at("llama.rope.freq_base").get<double>(), 10000.0);
  EXPECT_EQ(m.at("llama.attention.layer_norm_rms_epsilon").get<double>(), static_cast<double>(1e-5f));
  EXPECT_EQ(m.at("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(m.at("tokenizer.ggml.pre"), "default");
  EXPECT_EQ(m.at("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(m.at("tokenizer.ggml.add_eos_token"), false);
  const auto& toks = m.at("tokenizer.ggml.tokens");
  ASSERT_EQ(toks.size(), 512u);
  EXPECT_EQ(toks[0], "<unk>");
  EXPECT_EQ(toks[1], "<s>");
  EXPECT_EQ(toks[3], "<0x00>");
  EXPECT_EQ(toks[259], "\xe2\x96\x81t");   // "▁t"
  EXPECT_EQ(toks[300], "\xe2\x96\x81ha");  // "▁ha"
  EXPECT_EQ(m.at("tokenizer.ggml.scores")[0].get<double>(), -1000.0);
  EXPECT_EQ(m.at("tokenizer.ggml.scores")[511].get<double>(), -252.0);
  EXPECT_EQ(m.at("tokenizer.ggml.token_type")[0], 3);
  EXPECT_EQ(m.at("tokenizer.ggml.token_type")[3], 6);
  EXPECT_EQ(g.metadata_type("llama.block_count"), 4);
  EXPECT_EQ(g.metadata_type("tokenizer.ggml.tokens"), 9);
  EXPECT_EQ(g.metadata_array_type("tokenizer.ggml.tokens"), 8);
  EXPECT_EQ(g.metadata_array_type("tokenizer.ggml.scores"), 6);
  EXPECT_EQ(g.metadata_array_type("llama.block_count"), -1);
  EXPECT_EQ(g.metadata_type("nope"), -1);

  const GgufTensor& e = g.tensors()[0];
  EXPECT_EQ(e.name, "token_embd.weight");
  EXPECT_EQ(e.ne, (std::vector<uint64_t>{64, 512}));
  EXPECT_EQ(e.shape, (std::vector<uint64_t>{512, 64}));
  EXPECT_EQ(e.type, static_cast<uint32_t>(GgmlType::F32));
  EXPECT_EQ(e.numel, 512u * 64u);
  EXPECT_EQ(e.offset, 0u);
  EXPECT_EQ(e.data.size(), 512u * 64u * 4u);
  EXPECT_EQ(g.tensors()[2].name, "blk.0.ffn_down.weight");
  EXPECT_EQ(g.tensors()[2].shape, (std::vector<uint64_t>{64, 172}));
  EXPECT_EQ(g.tensors()[46].name, "output_norm.weight");
  const GgufTensor* k = g.find("blk.4.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<uint64_t>{32, 64}));
  EXPECT_EQ(k->offset, 990720u);
  EXPECT_EQ(g.find("output.weight"), nullptr);  // tied embeddings: no output tensor
  for (const auto& t : g.tensors()) EXPECT_EQ(t.type, 0u) << t.name;

  std::vector<float> v = gguf_to_f32(e);
  EXPECT_EQ(v[0], -0.29474878311157227f);
  EXPECT_EQ(v[1], 0.5618956089019775f);
  EXPECT_EQ(v[3], 0.34057360887527466f);
  g.release(e);  // pages dropped; the mapping still reads back the file
  EXPECT_EQ(gguf_to_f32(e), v);
  const GgufTensor* an = g.find("blk.0.attn_norm.weight");
  ASSERT_NE(an, nullptr);
  EXPECT_EQ(gguf_to_f32(*an)[0], 0.9722429513931274f);
}

TEST(GgufReader, StoriesQ4_0Types) {
  const std::string p = shared_models() + "/stories260K-gguf/stories260K-q4_0.gguf";
  REQUIRE_FILE(p);
  GgufFile g(p);
  ASSERT_EQ(g.tensors().size(), 47u);
  int counts[31] = {};
  for (const auto& t : g.tensors()) ++counts[t.type < 31 ? t.type : 0];
  EXPECT_EQ(counts[2], 31);  // Q4_0
  EXPECT_EQ(counts[1], 5);   // F16 (ffn_down: rows of 172)
  EXPECT_EQ(counts[0], 11);  // F32 norms
  EXPECT_EQ(g.metadata().at("general.file_type"), 2);
  const GgufTensor* e = g.find("token_embd.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(ggml_type_name(e->type), "Q4_0");
  EXPECT_EQ(e->data.size(), 512u * 64u / 32u * 18u);
  EXPECT_EQ(ggml_type_name(g.find("blk.3.ffn_down.weight")->type), "F16");
}

TEST(GgufReader, StoriesQ8_0Types) {
  const std::string p = shared_models() + "/stories260K-gguf/stories260K-q8_0.gguf";
  REQUIRE_FILE(p);
  GgufFile g(p);
  ASSERT_EQ(g.tensors().size(), 47u);
  int counts[31] = {};
  for (const auto& t : g.tensors()) ++counts[t.type < 31 ? t.type : 0];
  EXPECT_EQ(counts[8], 31);
  EXPECT_EQ(counts[1], 5);
  EXPECT_EQ(counts[0], 11);
}

TEST(GgufReader, LlamaTinyRandom) {
  const std::string p = shared_models() + "/llama-2-tiny-random-gguf/llama-2-tiny-random.gguf";
  REQUIRE_FILE(p);
  GgufFile g(p);
  EXPECT_EQ(g.version(), 3u);
  ASSERT_EQ(g.tensors().size(), 12u);
  EXPECT_EQ(g.metadata().size(), 18u);
  EXPECT_EQ(g.data_offset(), 724416u);
  EXPECT_EQ(g.metadata().at("llama.embedding_length"), 8);
  EXPECT_EQ(g.metadata().at("general.file_type"), 1);
  const auto& toks = g.metadata().at("tokenizer.ggml.tokens");
  ASSERT_EQ(toks.size(), 32000u);
  EXPECT_EQ(toks[1576], "The");
  EXPECT_EQ(toks[29871], "\xe2\x96\x81");
  const GgufTensor* o = g.find("output.weight");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->type, static_cast<uint32_t>(GgmlType::F16));
  EXPECT_EQ(o->shape, (std::vector<uint64_t>{32000, 8}));
  EXPECT_EQ(g.find("blk.0.ffn_down.weight")->ne, (std::vector<uint64_t>{32, 8}));
  EXPECT_EQ(g.find("blk.0.attn_norm.weight")->type, 0u);
  const std::vector<float> v = gguf_to_f32(*o);
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(v[i], f16_to_f32(load_le<uint16_t>(o->data.data() + 2 * i)));
}

TEST(GgufReader, VocabOnly) {
  const std::string p = shared_models() + "/ggml-vocab/ggml-vocab-llama-spm.gguf";
  REQUIRE_FILE(p);
  GgufFile g(p);
  EXPECT_TRUE(g.tensors().empty());
  EXPECT_EQ(g.total_tensor_bytes(), 0u);
  EXPECT_EQ(g.metadata().size(), 22u);
  EXPECT_EQ(g.metadata().at("llama.block_count"), 32);
  EXPECT_EQ(g.metadata().at("llama.embedding_length"), 4096);
  EXPECT_EQ(g.metadata().at("tokenizer.ggml.model"), "llama");
  const auto& toks = g.metadata().at("tokenizer.ggml.tokens");
  ASSERT_EQ(toks.size(), 32000u);
  EXPECT_EQ(toks[259], "\xe2\x96\x81\xe2\x96\x81");
  EXPECT_EQ(toks[1576], "The");
  EXPECT_EQ(toks[31999], "\xe7\xbb\x99");
  EXPECT_EQ(g.metadata().at("tokenizer.ggml.token_type")[0], 2);
  EXPECT_EQ(g.metadata().at("tokenizer.ggml.scores").size(), 32000u);
}

// ---------------------------------------------------------------------------------------------
// Synthetic files.

TEST(GgufReader, AllValueTypesAndAlignment) {
  Builder b(2);
  b.key("a.u8", 0).u8(200);
  b.key("a.i8", 1).put<int8_t>(-5);
  b.key("a.u16", 2).put<uint16_t>(65535);
  b.key("a.i16", 3).put<int16_t>(-32768);
  b.key("a.u32", 4).u32(4000000000u);
  b.key("a.i32", 5).put<int32_t>(-7);
  b.key("a.f32", 6).put<float>(0.1f);
  b.key("a.bool", 7).u8(1);
  b.key("a.str", 8).str("h\xc3\xa9llo");
  b.key("a.arr", 9).u32(5).u64(3).put<int32_t>(1).put<int32_t>(-2).put<int32_t>(3);
  b.key("a.u64", 10).u64(UINT64_MAX);
  b.key("a.i64", 11).put<int64_t>(INT64_MIN);
  b.key("a.f64", 12).put<double>(-2.5);
  b.key("a.nested", 9).u32(9).u64(2);  // array of arrays
  b.u32(8).u64(2).str("x").str("");
  b.u32(7).u64(1).u8(0);
  b.key("a.empty", 9).u32(8).u64(0);
  b.key("general.alignment", 4).u32(64);
  b.tensor("w", {32, 2}, 8, 0).tensor("n", {3}, 0, 128);
  b.pad(64);
  b.zeros(128 + 12);
  GgufFile g(write_temp(b.bytes()));
  const auto& m = g.metadata();
  EXPECT_EQ(g.version(), 2u);
  EXPECT_EQ(m.at("a.u8"), 200);
  EXPECT_EQ(m.at("a.i8"), -5);
  EXPECT_TRUE(m.at("a.i8").is_number_integer() && !m.at("a.i8").is_number_unsigned());
  EXPECT_EQ(m.at("a.u16"), 65535);
  EXPECT_EQ(m.at("a.i16"), -32768);
  EXPECT_EQ(m.at("a.u32"), 4000000000u);
  EXPECT_EQ(m.at("a.i32"), -7);
  EXPECT_EQ(m.at("a.f32").get<double>(), static_cast<double>(0.1f));
  EXPECT_EQ(m.at("a.bool"), true);
  EXPECT_EQ(m.at("a.str"), "h\xc3\xa9llo");
  EXPECT_EQ(m.at("a.arr"), nlohmann::json({1, -2, 3}));
  EXPECT_EQ(m.at("a.u64").get<uint64_t>(), UINT64_MAX);
  EXPECT_EQ(m.at("a.i64").get<int64_t>(), INT64_MIN);
  EXPECT_EQ(m.at("a.f64").get<double>(), -2.5);
  EXPECT_EQ(m.at("a.nested"), nlohmann::json::parse(R"([["x",""],[false]])"));
  EXPECT_EQ(m.at("a.empty"), nlohmann::json::array());
  EXPECT_EQ(g.metadata_array_type("a.nested"), 9);
  EXPECT_EQ(g.metadata_array_type("a.empty"), 8);
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.data_offset() % 64, 0u);
  ASSERT_EQ(g.tensors().size(), 2u);
  EXPECT_EQ(g.tensors()[0].data.size(), 2u * 34u);
  EXPECT_EQ(g.tensors()[1].data.size(), 12u);
  EXPECT_EQ(g.total_tensor_bytes(), 80u);
  EXPECT_EQ(g.tensors()[1].data.data() - g.tensors()[0].data.data(), 128);
}

TEST(GgufReader, TypeNames) {
  EXPECT_EQ(ggml_type_name(0), "F32");
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
  EXPECT_EQ(ggml_type_name(30), "BF16");
  EXPECT_EQ(ggml_type_name(17), "IQ2_XS");
  EXPECT_EQ(ggml_type_name(4), "type 4");
  EXPECT_EQ(ggml_type_name(99), "type 99");
  uint64_t be = 0, bb = 0;
  ASSERT_TRUE(ggml_block_geometry(14, be, bb));
  EXPECT_EQ(be, 256u);
  EXPECT_EQ(bb, 210u);
  EXPECT_FALSE(ggml_block_geometry(5, be, bb));
}

ErrorKind kind_or_none(const std::vector<uint8_t>& bytes, std::string* msg = nullptr) {
  auto k = open_kind(bytes, msg);
  return k ? *k : ErrorKind::Signature;  // Signature = sentinel for "no error"
}

TEST(GgufMalformed, Truncated) {
  REQUIRE_FILE(f32_path());
  const std::vector<uint8_t> full = read_all(f32_path());
  // header, header counts, in a string KV, in the tokens / scores / token_type arrays, in the tensor
  // table, at the data start, in the data, one byte short.
  for (size_t len : {size_t{0}, size_t{3}, size_t{10}, size_t{20}, size_t{30}, size_t{100}, size_t{5000},
                     size_t{8000}, size_t{11000}, size_t{12000}, size_t{14000}, size_t{14446}, size_t{14464},
                     size_t{500000}, full.size() - 1}) {
    std::vector<uint8_t> t(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
    std::string msg;
    EXPECT_EQ(kind_or_none(t, &msg), ErrorKind::Bounds) << "length " << len << ": " << msg;
  }
  EXPECT_EQ(kind_or_none(full), ErrorKind::Signature);  // the untruncated file opens
}

TEST(GgufMalformed, MagicAndVersion) {
  REQUIRE_FILE(f32_path());
  std::vector<uint8_t> b = read_all(f32_path());
  std::string msg;
  auto bad = b;
  std::memcpy(bad.data(), "GGML", 4);
  EXPECT_EQ(kind_or_none(bad, &msg), ErrorKind::InvalidMagic);
  EXPECT_NE(msg.find("not a GGUF file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("47 47 4d 4c"), std::string::npos) << msg;
  EXPECT_EQ(kind_or_none({'x'}), ErrorKind::InvalidMagic);
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    auto vb = b;
    store_le<uint32_t>(&vb[4], v);
    EXPECT_EQ(kind_or_none(vb, &msg), ErrorKind::UnsupportedVersion) << v;
  }
  auto v2 = b;
  store_le<uint32_t>(&v2[4], 2);  // v2 has the same layout
  EXPECT_EQ(kind_or_none(v2), ErrorKind::Signature);
}

TEST(GgufMalformed, TensorOffsets) {
  REQUIRE_FILE(f32_path());
  const std::vector<uint8_t> b = read_all(f32_path());
  // The table ends at 14446; its last 8 bytes are output_norm.weight's offset (1039872, 256 bytes,
  // the last tensor, ending exactly at the end of the file).
  const size_t at = 14446 - 8;
  ASSERT_EQ(load_le<uint64_t>(&b[at]), 1039872u);
  auto set = [&](uint64_t off) {
    auto c = b;
    store_le<uint64_t>(&c[at], off);
    return c;
  };
  std::string msg;
  EXPECT_EQ(kind_or_none(set(1039872 + 32), &msg), ErrorKind::Bounds);  // 32 bytes past the end
  EXPECT_NE(msg.find("output_norm.weight"), std::string::npos) << msg;
  EXPECT_EQ(kind_or_none(set(UINT64_MAX - 31), &msg), ErrorKind::Bounds);  // offset + size overflows
  EXPECT_EQ(kind_or_none(set(1039872 + 4), &msg), ErrorKind::Bounds);      // misaligned
  EXPECT_NE(msg.find("alignment"), std::string::npos) << msg;
  EXPECT_EQ(kind_or_none(set(1039872 - 256), &msg), ErrorKind::Bounds);  // overlaps blk.4.attn_v
  EXPECT_NE(msg.find("overlaps"), std::string::npos) << msg;
  EXPECT_EQ(kind_or_none(set(0), &msg), ErrorKind::Bounds);  // overlaps token_embd
}

// A valid little file, for mutation: a few KVs, two tensors.
Builder small_file() {
  Builder b;
  b.key("general.architecture", 8).str("llama");
  b.key("tokenizer.ggml.tokens", 9).u32(8).u64(3).str("a").str("bc").str("");
  b.key("x.scores", 9).u32(6).u64(2).put<float>(1.f).put<float>(2.f);
  b.tensor("a", {32, 2}, 2, 0).tensor("b", {4}, 0, 64);
  b.pad(32).zeros(64 + 16);
  return b;
}

TEST(GgufMalformed, ParseErrors) {
  ASSERT_EQ(kind_or_none(small_file().bytes()), ErrorKind::Signature);
  std::string msg;
  {  // unknown metadata value type
    Builder b;
    b.key("k", 13).u32(0);
    EXPECT_EQ(kind_or_none(b.bytes(), &msg), ErrorKind::Parse);
    EXPECT_NE(msg.find("'k'"), std::string::npos) << msg;
  }
  {  // unknown array element type
    Builder b;
    b.key("k", 9).u32(42).u64(1).u32(0);
    EXPECT_EQ(kind_or_none(b.bytes()), ErrorKind::Parse);
  }
  {  // huge array count
    Builder b;
    b.key("k", 9).u32(0).u64(uint64_t{1} << 60).zeros(16);
    EXPECT_EQ(kind_or_none(b.bytes(), &msg), ErrorKind::Parse);
    EXPECT_NE(msg.find("'k'"), std::string::npos) << msg;
    Builder s;  // huge string-array count
    s.key("k", 9).u32(8).u64(UINT64_MAX).zeros(16);
    EXPECT_EQ(kind_or_none(s.bytes()), ErrorKind::Parse);
  }
  {  // huge key / tensor counts
    auto b = small_file().bytes();
    store_le<uint64_t>(&b[16], uint64_t{1} << 40);
    EXPECT_EQ(kind_or_none(b), ErrorKind::Parse);
    b = small_file().bytes();
    store_le<uint64_t>(&b[8], UINT64_MAX);
    EXPECT_EQ(kind_or_none(b), ErrorKind::Parse);
  }
  {  // huge string length: runs past the end
    Builder b;
    b.key("k", 8).u64(UINT64_MAX - 3);
    EXPECT_EQ(kind_or_none(b.bytes()), ErrorKind::Bounds);
  }
  {  // arrays nested too deep
    Builder b;
    b.key("k", 9);
    for (int i = 0; i < 40; ++i) b.u32(9).u64(1);
    b.u32(0).u64(0);
    EXPECT_EQ(kind_or_none(b.bytes()), ErrorKind::Parse);
  }
  {  // duplicate key
    Builder b;
    b.key("k", 4).u32(1).key("k", 4).u32(2);
    EXPECT_EQ(kind_or_none(b.bytes()), ErrorKind::Parse);
  }
  for (uint64_t align : {0ull, 48ull}) {  // bad alignment
    Builder b;
    b.key("general.alignment", 4).u32(static_cast<uint32_t>(align));
    EXPECT_EQ(kind_or_none(b.bytes()), ErrorKind::Parse) << align;
  }
  {
    Builder b;
    b.key("general.alignment", 8).str("32");
    EXPECT_EQ(kind_or_none(b.bytes()), ErrorKind::Parse);
  }
  auto one_tensor = [](std::vector<uint64_t> ne, uint32_t type) {
    Builder b;
    b.tensor("t", ne, type, 0).pad(32).zeros(4096);
    return b.bytes();
  };
  EXPECT_EQ(kind_or_none(one_tensor({4}, 0)), ErrorKind::Signature);
  EXPECT_EQ(kind_or_none(one_tensor({}, 0), &msg), ErrorKind::Parse);  // 0 dims
  EXPECT_NE(msg.find("'t'"), std::string::npos) << msg;
  EXPECT_EQ(kind_or_none(one_tensor({1, 1, 1, 1, 1}, 0)), ErrorKind::Parse);  // 5 dims
  EXPECT_EQ(kind_or_none(one_tensor({48, 2}, 2), &msg), ErrorKind::Parse);    // 48 % 32
  EXPECT_NE(msg.find("Q4_0"), std::string::npos) << msg;
  EXPECT_EQ(kind_or_none(one_tensor({2, 16}, 2)), ErrorKind::Parse);  // numel 32 but rows of 2
  EXPECT_EQ(kind_or_none(one_tensor({4}, 99)), ErrorKind::Parse);     // unknown ggml type
  EXPECT_EQ(kind_or_none(one_tensor({uint64_t{1} << 63}, 0)), ErrorKind::Parse);
  EXPECT_EQ(kind_or_none(one_tensor({uint64_t{1} << 40, uint64_t{1} << 40}, 0)), ErrorKind::Parse);
  EXPECT_EQ(kind_or_none(one_tensor({uint64_t{1} << 40}, 0)), ErrorKind::Bounds);  // data past the end
  {                                                                                // duplicate tensor names
    Builder b;
    b.tensor("t", {4}, 0, 0).tensor("t", {4}, 0, 32).pad(32).zeros(64);
    EXPECT_EQ(kind_or_none(b.bytes(), &msg), ErrorKind::Parse);
    EXPECT_NE(msg.find("'t'"), std::string::npos) << msg;
  }
}

// A zero dimension (issue 27: an attn_q of ne [64, 0] crashed `convert` with SIGFPE on
// `cols = numel / rows`) is a Parse error naming the tensor and the dimension, in any position.
TEST(GgufMalformed, ZeroDimensionIsRefusedNamingTheTensor) {
  const std::vector<std::vector<uint64_t>> shapes = {{64, 0}, {0, 64}, {0}, {32, 4, 0}, {32, 0, 4, 2}};
  for (const auto& ne : shapes) {
    Builder b;
    b.tensor("blk.0.attn_q.weight", ne, 0, 0).tensor("b", {4}, 0, 0).pad(32).zeros(64);
    std::string msg;
    EXPECT_EQ(kind_or_none(b.bytes(), &msg), ErrorKind::Parse) << fmt::format("{}", fmt::join(ne, ","));
    EXPECT_NE(msg.find("tensor 'blk.0.attn_q.weight'"), std::string::npos) << msg;
    const size_t zero = static_cast<size_t>(std::find(ne.begin(), ne.end(), 0) - ne.begin());
    EXPECT_NE(msg.find(fmt::format("ne[{}] is 0", zero)), std::string::npos) << msg;
  }
  Builder ok;  // the same file with the dimension set is read
  ok.tensor("blk.0.attn_q.weight", {4, 2}, 0, 0).tensor("b", {4}, 0, 32).pad(32).zeros(64);
  EXPECT_EQ(kind_or_none(ok.bytes()), ErrorKind::Signature);
}

// llama.cpp reads general.alignment only as u32: stored as any other integer type (even with a
// valid value) the file is refused, naming the key and the type.
TEST(GgufMalformed, AlignmentNotU32IsRefused) {
  struct Case {
    uint32_t type;
    const char* name;
  };
  for (const Case c : {Case{5, "i32"}, Case{10, "u64"}, Case{0, "u8"}, Case{2, "u16"}, Case{11, "i64"}}) {
    Builder b;
    b.key("general.alignment", c.type);
    if (c.type == 5) b.put<int32_t>(64);
    if (c.type == 10) b.u64(64);
    if (c.type == 0) b.u8(64);
    if (c.type == 2) b.put<uint16_t>(64);
    if (c.type == 11) b.put<int64_t>(64);
    b.tensor("t", {4}, 0, 0).pad(64).zeros(64);
    std::string msg;
    EXPECT_EQ(kind_or_none(b.bytes(), &msg), ErrorKind::Parse) << c.name;
    EXPECT_NE(msg.find("general.alignment"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("stored as {} (type {})", c.name, c.type)), std::string::npos) << msg;
  }
  Builder b;  // the same value as u32 is read and applied
  b.key("general.alignment", 4).u32(64).tensor("t", {4}, 0, 0).pad(64).zeros(64);
  GgufFile g(write_temp(b.bytes()));
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.data_offset() % 64, 0u);
}

// Random byte flips and truncations of small files and of the real file's header: each open must
// either succeed or throw cortiq::Error (a crash or another exception fails the test).
TEST(GgufMalformed, RandomMutationsNeverCrash) {
  std::mt19937_64 rng(12345);
  std::vector<std::vector<uint8_t>> seeds = {small_file().bytes()};
  if (fs::exists(f32_path())) {
    auto f = read_all(f32_path());
    f.resize(14464 + 64);  // header + table (+ a little data): tensors run past the end unless mutated
    seeds.push_back(std::move(f));
  }
  int errors = 0, ok = 0;
  for (int it = 0; it < 1000; ++it) {
    std::vector<uint8_t> b = seeds[it % seeds.size()];
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) {
      const size_t pos = (it % 3 == 0 && b.size() > 400) ? rng() % 400 : rng() % b.size();
      b[pos] = (rng() % 4 == 0) ? 0xFF : static_cast<uint8_t>(rng());
    }
    if (rng() % 4 == 0) b.resize(rng() % (b.size() + 1));
    const std::string p = write_temp(b, "fuzz.gguf");
    try {
      GgufFile g(p);
      for (const auto& t : g.tensors()) {
        if (t.numel > (1u << 20)) continue;
        try {
          std::vector<float> v = gguf_to_f32(t);
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
        }
      }
      ++ok;
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
  std::cout << "mutations: " << ok << " opened, " << errors << " refused\n";
}

// ---------------------------------------------------------------------------------------------
// Dequantization: hand-built blocks. Each block is PACKED here the way ggml's quantizers pack
// them (ggml-quants.c quantize_row_*_ref), from chosen scales/mins/quants, and the expected floats
// come straight from the format's definition (value = d·scale·q − dmin·min, ...). The scales are
// powers of two and the integers small, so every expected value is exact in f32 whatever the
// operation order (and fused multiply-adds) — equality is required.

uint16_t h(float f) {
  return f32_to_f16(f);
}
void put16(std::vector<uint8_t>& b, size_t at, float f) {
  store_le<uint16_t>(&b[at], h(f));
}

struct Built {
  std::vector<uint8_t> bytes;
  std::vector<float> want;
};

// d values cycled over blocks (f16-exact, both signs).
constexpr float kD[] = {0.5f, 0.25f, 2.0f, -0.125f};

void block_q4_0(std::mt19937& rng, int bi, Built& o) {
  std::vector<uint8_t> b(18);
  const float d = kD[bi % 4];
  put16(b, 0, d);
  int L[32];
  for (int j = 0; j < 32; ++j) L[j] = j < 16 ? j : static_cast<int>(rng() % 16);  // all 16 codes
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
  for (int j = 0; j < 32; ++j) o.want.push_back(static_cast<float>((L[j] - 8) * static_cast<double>(d)));
  o.bytes.insert(o.bytes.end(), b.begin(), b.end());
}

void block_q4_1(std::mt19937& rng, int bi, Built& o) {
  std::vector<uint8_t> b(20);
  const float d = kD[bi % 4], m = -1.5f + static_cast<float>(bi);
  put16(b, 0, d);
  put16(b, 2, m);
  int L[32];
  for (int j = 0; j < 32; ++j) L[j] = static_cast<int>(rng() % 16);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
  for (int j = 0; j < 32; ++j) o.want.push_back(static_cast<float>(L[j] * static_cast<double>(d) + m));
  o.bytes.insert(o.bytes.end(), b.begin(), b.end());
}

void block_q5(std::mt19937& rng, int bi, Built& o, bool with_min) {
  const size_t base = with_min ? 4 : 2;
  std::vector<uint8_t> b(with_min ? 24 : 22);
  const float d = kD[bi % 4], m = with_min ? 3.0f - static_cast<float>(bi) : 0.0f;
  put16(b, 0, d);
  if (with_min) put16(b, 2, m);
  int L[32];
  for (int j = 0; j < 32; ++j) L[j] = j < 32 && bi == 0 ? j : static_cast<int>(rng() % 32);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    b[base + 4 + j] = static_cast<uint8_t>((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
    qh |= static_cast<uint32_t>(L[j] >> 4) << j;
    qh |= static_cast<uint32_t>(L[j + 16] >> 4) << (j + 16);
  }
  store_le<uint32_t>(&b[base], qh);
  for (int j = 0; j < 32; ++j)
    o.want.push_back(with_min ? static_cast<float>(L[j] * static_cast<double>(d) + m)
                              : static_cast<float>((L[j] - 16) * static_cast<double>(d)));
  o.bytes.insert(o.bytes.end(), b.begin(), b.end());
}

void block_q8_0(std::mt19937& rng, int bi, Built& o) {
  std::vector<uint8_t> b(34);
  const float d = kD[bi % 4];
  put16(b, 0, d);
  for (int j = 0; j < 32; ++j) {
    const int q = j == 0 ? -128 : j == 1 ? 127 : static_cast<int>(rng() % 256) - 128;
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
    o.want.push_back(static_cast<float>(q * static_cast<double>(d)));
  }
  o.bytes.insert(o.bytes.end(), b.begin(), b.end());
}

// 2-bit values L[256] packed as ggml's Q2_K/Q3_K quantizers do.
void pack_2bit(const int* L, uint8_t* qs) {
  for (int j = 0; j < 256; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>((L[j + l] & 3) | ((L[j + l + 32] & 3) << 2) |
                                           ((L[j + l + 64] & 3) << 4) | ((L[j + l + 96] & 3) << 6));
}

void block_q2_K(std::mt19937& rng, int bi, Built& o) {
  std::vector<uint8_t> b(84);
  const float d = kD[bi % 4], dmin = kD[(bi + 1) % 4];
  int ls[16], lm[16], L[256];
  for (int j = 0; j < 16; ++j) {
    ls[j] = bi == 0 ? j : static_cast<int>(rng() % 16);
    lm[j] = bi == 0 ? 15 - j : static_cast<int>(rng() % 16);
    b[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
  }
  for (int j = 0; j < 256; ++j) L[j] = static_cast<int>(rng() % 4);
  pack_2bit(L, &b[16]);
  put16(b, 80, d);
  put16(b, 82, dmin);
  for (int e = 0; e < 256; ++e)
    o.want.push_back(static_cast<float>(static_cast<double>(d) * ls[e / 16] * L[e] -
                                        static_cast<double>(dmin) * lm[e / 16]));
  o.bytes.insert(o.bytes.end(), b.begin(), b.end());
}

void block_q3_K(std::mt19937& rng, int bi, Built& o) {
  std::vector<uint8_t> b(110, 0);
  const float d = kD[bi % 4];
  int Ls[16], L[256];
  for (int j = 0; j < 16; ++j) Ls[j] = bi == 0 ? (j * 4 + (j & 3)) & 63 : static_cast<int>(rng() % 64);
  if (bi == 0) Ls[15] = 63, Ls[14] = 0;
  // scales: low nibbles in bytes 0..7 (j < 8 low half, j >= 8 high half), high 2 bits in 8..11.
  uint8_t* sc = &b[96];
  for (int j = 0; j < 16; ++j) {
    if (j < 8)
      sc[j] = static_cast<uint8_t>(Ls[j] & 0xF);
    else
      sc[j - 8] |= static_cast<uint8_t>((Ls[j] & 0xF) << 4);
    sc[8 + j % 4] |= static_cast<uint8_t>((Ls[j] >> 4) << (2 * (j / 4)));
  }
  int low[256];
  for (int j = 0; j < 256; ++j) {
    L[j] = static_cast<int>(rng() % 8);  // value L - 4 in -4..3
    low[j] = L[j];
    if (L[j] > 3) {
      b[j % 32] |= static_cast<uint8_t>(1u << (j / 32));  // hmask
      low[j] -= 4;
    }
  }
  pack_2bit(low, &b[32]);
  put16(b, 108, d);
  for (int e = 0; e < 256; ++e)
    o.want.push_back(static_cast<float>(static_cast<double>(d) * (Ls[e / 16] - 32) * (L[e] - 4)));
  o.bytes.insert(o.bytes.end(), b.begin(), b.end());
}

// 8 six-bit scales and mins packed into 12 bytes as quantize_row_q4_K_ref does.
void pack_k4_scales(const int* ls, const int* lm, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = static_cast<uint8_t>(ls[j]);
      s[j + 4] = static_cast<uint8_t>(lm[j]);
    } else {
      s[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      s[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      s[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

void k4_scales(std::mt19937& rng, int bi, int* ls, int* lm) {
  static constexpr int kLs0[8] = {1, 17, 33, 63, 48, 5, 62, 31};  // high bits set in both halves
  static constexpr int kLm0[8] = {63, 0, 16, 47, 2, 59, 32, 21};
  for (int j = 0; j < 8; ++j) {
    ls[j] = bi == 0 ? kLs0[j] : static_cast<int>(rng() % 64);
    lm[j] = bi == 0 ? kLm0[j] : static_cast<int>(rng() % 64);
  }
}

void block_q4_K(std::mt19937& rng, int bi, Built& o) {
  std::vector<uint8_t> b(144);
  const float d = kD[bi % 4], dmin = kD[(bi + 2) % 4];
  int ls[8], lm[8], L[256];
  k4_scales(rng, bi, ls, lm);
  put16(b, 0, d);
  put16(b, 2, dmin);
  pack_k4_scales(ls, lm, &b[4]);
  for (int j = 0; j < 256; ++j) L[j] = static_cast<int>(rng() % 16);
  uint8_t* q = &b[16];
  for (int j = 0; j < 256; j += 64) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    q += 32;
  }
  for (int e = 0; e < 256; ++e)
    o.want.push_back(static_cast<float>(static_cast<double>(d) * ls[e / 32] * L[e] -
                                        static_cast<double>(dmin) * lm[e / 32]));
  o.bytes.insert(o.bytes.end(), b.begin(), b.end());
}

void block_q5_K(std::mt19937& rng, int bi, Built& o) {
  std::vector<uint8_t> b(176, 0);
  const float d = kD[bi % 4], dmin = kD[(bi + 3) % 4];
  int ls[8], lm[8], L[256];
  k4_scales(rng, bi, ls, lm);
  put16(b, 0, d);
  put16(b, 2, dmin);
  pack_k4_scales(ls, lm, &b[4]);
  for (int j = 0; j < 256; ++j) L[j] = static_cast<int>(rng() % 32);
  uint8_t* qh = &b[16];
  uint8_t* ql = &b[48];
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < 256; n += 64) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j], l2 = L[n + j + 32];
      if (l1 > 15) l1 -= 16, qh[j] |= m1;
      if (l2 > 15) l2 -= 16, qh[j] |= m2;
      ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
    m1 = static_cast<uint8_t>(m1 << 2);
    m2 = static_cast<uint8_t>(m2 << 2);
    ql += 32;
  }
  for (int e = 0; e < 256; ++e)
    o.want.push_back(static_cast<float>(static_cast<double>(d) * ls[e / 32] * L[e] -
                                        static_cast<double>(dmin) * lm[e / 32]));
  o.bytes.insert(o.bytes.end(), b.begin(), b.end());
}

void block_q6_K(std::mt19937& rng, int bi, Built& o) {
  std::vector<uint8_t> b(210, 0);
  const float d = kD[bi % 4] / 16.0f;
  int sc[16], L[256];
  for (int j = 0; j < 16; ++j) sc[j] = bi == 0 ? (j * 17) - 128 : static_cast<int>(rng() % 256) - 128;
  if (bi == 0) sc[15] = 127;
  for (int j = 0; j < 256; ++j) L[j] = bi == 0 && j < 64 ? j : static_cast<int>(rng() % 64);
  uint8_t* ql = &b[0];
  uint8_t* qh = &b[128];
  for (int j = 0; j < 256; j += 128) {
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF,
                q4 = L[j + l + 96] & 0xF;
      ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                   ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
    }
    ql += 64;
    qh += 32;
  }
  for (int j = 0; j < 16; ++j) b[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(sc[j]));
  put16(b, 208, d);
  for (int e = 0; e < 256; ++e)
    o.want.push_back(static_cast<float>(static_cast<double>(d) * sc[e / 16] * (L[e] - 32)));
  o.bytes.insert(o.bytes.end(), b.begin(), b.end());
}

void block_q8_K(std::mt19937& rng, int bi, Built& o) {
  std::vector<uint8_t> b(292, 0);
  const float d = 0.375f * kD[bi % 4];
  store_le<float>(&b[0], d);
  for (int j = 0; j < 256; ++j) {
    const int q = static_cast<int>(rng() % 256) - 128;
    b[4 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
    o.want.push_back(static_cast<float>(static_cast<double>(d) * q));
  }
  o.bytes.insert(o.bytes.end(), b.begin(), b.end());
}

GgufTensor view(std::string name, uint32_t type, std::vector<uint64_t> ne,
                const std::vector<uint8_t>& bytes) {
  GgufTensor t;
  t.name = std::move(name);
  t.type = type;
  t.ne = ne;
  t.shape.assign(ne.rbegin(), ne.rend());
  t.numel = 1;
  for (uint64_t x : ne) t.numel *= x;
  t.data = bytes;
  return t;
}

void check_blocks(GgmlType type, uint64_t block, void (*make)(std::mt19937&, int, Built&)) {
  std::mt19937 rng(static_cast<uint32_t>(type) * 7919u);
  Built o;
  const int kBlocks = 6;  // 3 rows of 2 blocks
  for (int bi = 0; bi < kBlocks; ++bi) make(rng, bi, o);
  const GgufTensor t = view("w", static_cast<uint32_t>(type), {2 * block, 3}, o.bytes);
  ASSERT_EQ(o.want.size(), t.numel);
  const std::vector<float> got = gguf_to_f32(t);
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != o.want[i] && ++bad <= 5)
      ADD_FAILURE() << ggml_type_name(static_cast<uint32_t>(type)) << " element " << i << " (block "
                    << i / block << ", index " << i % block << "): got " << got[i] << ", want " << o.want[i];
  EXPECT_EQ(bad, 0) << ggml_type_name(static_cast<uint32_t>(type));
}

TEST(GgufDequant, HandBuiltBlocks) {
  check_blocks(GgmlType::Q4_0, 32, block_q4_0);
  check_blocks(GgmlType::Q4_1, 32, block_q4_1);
  check_blocks(GgmlType::Q5_0, 32, [](std::mt19937& r, int bi, Built& o) { block_q5(r, bi, o, false); });
  check_blocks(GgmlType::Q5_1, 32, [](std::mt19937& r, int bi, Built& o) { block_q5(r, bi, o, true); });
  check_blocks(GgmlType::Q8_0, 32, block_q8_0);
  check_blocks(GgmlType::Q2_K, 256, block_q2_K);
  check_blocks(GgmlType::Q3_K, 256, block_q3_K);
  check_blocks(GgmlType::Q4_K, 256, block_q4_K);
  check_blocks(GgmlType::Q5_K, 256, block_q5_K);
  check_blocks(GgmlType::Q6_K, 256, block_q6_K);
  check_blocks(GgmlType::Q8_K, 256, block_q8_K);
}

// A few values written out by hand from the definitions, independent of the packers above.
TEST(GgufDequant, HandComputedValues) {
  {  // Q4_0: d = 0.5; byte 0x9F = lo 15, hi 9 → y0 = (15-8)·0.5 = 3.5, y16 = (9-8)·0.5 = 0.5.
    std::vector<uint8_t> b(18, 0x88);  // every other value (8-8)·d = 0
    put16(b, 0, 0.5f);
    b[2] = 0x9F;
    b[17] = 0x0F;  // y15 = (15-8)·0.5 = 3.5... and y31 = (0-8)·0.5 = -4
    auto v = gguf_to_f32(view("q", 2, {32}, b));
    EXPECT_EQ(v[0], 3.5f);
    EXPECT_EQ(v[16], 0.5f);
    EXPECT_EQ(v[1], 0.0f);
    EXPECT_EQ(v[15], 3.5f);
    EXPECT_EQ(v[31], -4.0f);
  }
  {  // Q5_0: d = 1; qh bit 0 and bit 16 set: y0 = (0x1F)-16 = 15 with qs lo 0xF; y16 = 16+0-16 = 0.
    std::vector<uint8_t> b(22, 0);
    put16(b, 0, 1.0f);
    store_le<uint32_t>(&b[2], 0x00010001u);
    b[6] = 0x0F;
    auto v = gguf_to_f32(view("q", 6, {32}, b));
    EXPECT_EQ(v[0], 15.0f);
    EXPECT_EQ(v[16], 0.0f);
    EXPECT_EQ(v[1], -16.0f);
  }
  {  // Q4_K: d = 1, dmin = 1. scales bytes: s[0] = 0xC5 (sc0 = 5, top bits 3 → sc4 high = 3),
     // s[4] = 0x42 (mn0 = 2, top bits 1 → mn4 high = 1), s[8] = 0x7A (sc4 low = 0xA, mn4 low = 7).
     // → sc0 = 5, mn0 = 2, sc4 = 0xA | 3<<4 = 58, mn4 = 7 | 1<<4 = 23. qs[0] = 0x31.
     // y0 = 5·1 − 2 = 3 (lo nibble of qs[0]); y32 = sc1·3 − mn1 = 0 (sc1 = mn1 = 0);
     // element 128 is sub-block 4, lo nibble of qs[64] = 2: 58·2 − 23 = 93.
    std::vector<uint8_t> b(144, 0);
    put16(b, 0, 1.0f);
    put16(b, 2, 1.0f);
    b[4 + 0] = 0xC5;
    b[4 + 4] = 0x42;
    b[4 + 8] = 0x7A;
    b[16 + 0] = 0x31;
    b[16 + 64] = 0x02;
    auto v = gguf_to_f32(view("q", 12, {256}, b));
    EXPECT_EQ(v[0], 3.0f);
    EXPECT_EQ(v[1], -2.0f);  // q = 0
    EXPECT_EQ(v[32], 0.0f);
    EXPECT_EQ(v[128], 93.0f);
    EXPECT_EQ(v[129], -23.0f);
  }
  {  // Q6_K: d = 1, scales[0] = -3; ql[0] = 0x05, qh[0] = 0x02 → q = 5 | 2<<4 = 37 → (37-32)·-3 = -15.
    std::vector<uint8_t> b(210, 0);
    put16(b, 208, 1.0f);
    b[192] = static_cast<uint8_t>(-3);
    b[0] = 0x05;
    b[128] = 0x02;
    auto v = gguf_to_f32(view("q", 14, {256}, b));
    EXPECT_EQ(v[0], -15.0f);
    EXPECT_EQ(v[1], 96.0f);  // q = 0 → (0-32)·-3
    EXPECT_EQ(v[16], 0.0f);  // scales[1] = 0
  }
  {  // Q3_K: d = 1; all scales 0 → sc = -32; hmask 0 → q = low2 − 4; qs[0] = 0x03 → y0 = (3−4)·−32 = 32.
    std::vector<uint8_t> b(110, 0);
    put16(b, 108, 1.0f);
    b[32] = 0x03;
    b[0] = 0x02;  // hmask byte 0 bit 1 → element 32 has the high bit: q = 0 → 0
    auto v = gguf_to_f32(view("q", 11, {256}, b));
    EXPECT_EQ(v[0], 32.0f);
    EXPECT_EQ(v[1], 128.0f);  // (0−4)·−32
    EXPECT_EQ(v[32], 0.0f);
  }
}

TEST(GgufDequant, PlainTypes) {
  std::vector<uint8_t> b(8);
  store_le<uint16_t>(&b[0], 0x3C00);  // 1.0
  store_le<uint16_t>(&b[2], 0x0001);  // smallest subnormal
  store_le<uint16_t>(&b[4], 0xC000);  // -2
  store_le<uint16_t>(&b[6], 0x7C00);  // +inf
  EXPECT_EQ(gguf_to_f32(view("h", 1, {4}, b)), (std::vector<float>{1.0f, 5.9604645e-8f, -2.0f, INFINITY}));
  std::vector<uint8_t> bf(4);
  store_le<uint16_t>(&bf[0], 0x3F80);
  store_le<uint16_t>(&bf[2], 0xC040);
  EXPECT_EQ(gguf_to_f32(view("bf", 30, {2}, bf)), (std::vector<float>{1.0f, -3.0f}));
}

TEST(GgufDequant, Errors) {
  std::vector<uint8_t> b(74, 0);
  try {
    gguf_to_f32(view("blk.0.ffn_down.weight", 17, {256}, b));  // IQ2_XS
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.message().find("blk.0.ffn_down.weight"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("IQ2_XS"), std::string::npos) << e.message();
  }
  std::vector<uint8_t> q81(36, 0);
  EXPECT_THROW(
      try { gguf_to_f32(view("x", 9, {32}, q81)); } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
        throw;
      },
      Error);
  std::vector<uint8_t> q80(34, 0);
  std::vector<float> out(31);
  try {
    gguf_to_f32(view("x", 8, {32}, q80), out);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  }
  std::vector<uint8_t> short_data(33, 0);
  try {
    gguf_to_f32(view("x", 8, {32}, short_data));
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Bounds);
  }
}

// ---------------------------------------------------------------------------------------------
// Dequantization against the real files: the q8_0 / q4_0 files were quantized by llama.cpp from
// the f32 file (same tensors, same metadata), with ggml's reference quantizers
// (quantize_row_q8_0_ref, quantize_row_q4_0_ref). Re-quantizing each f32 block with those formulas
// must give exactly our dequantized values; and every value is within the quantization step.

struct RefCheck {
  int q_tensors = 0, f16_tensors = 0, f32_tensors = 0;
  uint64_t values = 0, exact = 0;
  double worst_ratio = 0;  // max |x − deq| / |d|
};

RefCheck check_against_f32(const std::string& qpath, GgmlType qtype) {
  RefCheck r;
  GgufFile ref(f32_path());
  GgufFile q(qpath);
  EXPECT_EQ(q.tensors().size(), ref.tensors().size());
  for (const auto& t : q.tensors()) {
    const GgufTensor* rt = ref.find(t.name);
    if (rt == nullptr) {
      ADD_FAILURE() << t.name << " missing in f32 file";
      continue;
    }
    EXPECT_EQ(t.ne, rt->ne) << t.name;
    const std::vector<float> x = gguf_to_f32(*rt);
    const std::vector<float> y = gguf_to_f32(t);
    if (t.type == 0) {
      ++r.f32_tensors;
      EXPECT_EQ(x, y) << t.name;
      continue;
    }
    if (t.type == 1) {
      ++r.f16_tensors;
      size_t bad = 0;
      for (size_t i = 0; i < x.size(); ++i) bad += y[i] != round_f16(x[i]);
      EXPECT_EQ(bad, 0u) << t.name;
      continue;
    }
    EXPECT_EQ(t.type, static_cast<uint32_t>(qtype)) << t.name;
    ++r.q_tensors;
    for (size_t b0 = 0; b0 < x.size(); b0 += 32) {
      const float* xb = &x[b0];
      float amax = 0, max = 0;
      for (int j = 0; j < 32; ++j)
        if (amax < std::fabs(xb[j])) amax = std::fabs(xb[j]), max = xb[j];
      float d, id;
      if (qtype == GgmlType::Q8_0) {
        d = amax / 127.0f;
      } else {
        d = max / -8.0f;
      }
      id = d != 0.0f ? 1.0f / d : 0.0f;
      const float d16 = round_f16(d);
      for (int j = 0; j < 32; ++j) {
        float want;
        bool clamped = false;
        if (qtype == GgmlType::Q8_0) {
          want = std::round(xb[j] * id) * d16;
        } else {
          const int qi = static_cast<int8_t>(xb[j] * id + 8.5f);
          clamped = qi > 15;
          want = static_cast<float>(std::min(15, qi) - 8) * d16;
        }
        const float got = y[b0 + j];
        ++r.values;
        if (got == want) ++r.exact;
        // The step bound: half a step (one step for q4_0's clamped +8 code), plus the f16 rounding
        // of d times the largest code.
        const double err = std::fabs(static_cast<double>(xb[j]) - got);
        const double step = std::fabs(static_cast<double>(d16));
        const double bound =
            (clamped ? 1.0 : 0.5) * step + 128.0 * std::fabs(static_cast<double>(d) - d16) + 1e-12;
        if (step > 0) r.worst_ratio = std::max(r.worst_ratio, err / step);
        if (err > bound)
          ADD_FAILURE() << t.name << " [" << b0 + j << "]: x = " << xb[j] << ", dequantized " << got
                        << ", step " << step;
      }
    }
  }
  return r;
}

TEST(GgufDequant, StoriesQ8_0MatchesF32) {
  const std::string p = shared_models() + "/stories260K-gguf/stories260K-q8_0.gguf";
  REQUIRE_FILE(p);
  REQUIRE_FILE(f32_path());
  const RefCheck r = check_against_f32(p, GgmlType::Q8_0);
  EXPECT_EQ(r.q_tensors, 31);
  EXPECT_EQ(r.f16_tensors, 5);
  EXPECT_EQ(r.f32_tensors, 11);
  EXPECT_EQ(r.exact, r.values);                  // bit-identical to re-quantizing with ggml's formula
  EXPECT_LE(r.worst_ratio, 0.5 + 128.0 / 2048);  // half a step + f16 rounding of d (2^-11 rel) × 127
  std::cout << "q8_0: " << r.values << " values, " << r.exact << " exact, worst |x-q|/d " << r.worst_ratio
            << "\n";
}

TEST(GgufDequant, StoriesQ4_0MatchesF32) {
  const std::string p = shared_models() + "/stories260K-gguf/stories260K-q4_0.gguf";
  REQUIRE_FILE(p);
  REQUIRE_FILE(f32_path());
  const RefCheck r = check_against_f32(p, GgmlType::Q4_0);
  EXPECT_EQ(r.q_tensors, 31);
  EXPECT_EQ(r.f16_tensors, 5);
  EXPECT_EQ(r.f32_tensors, 11);
  EXPECT_EQ(r.exact, r.values);
  std::cout << "q4_0: " << r.values << " values, " << r.exact << " exact, worst |x-q|/d " << r.worst_ratio
            << "\n";
}

}  // namespace
}  // namespace cortiq::convert
