// libFuzzer target for the GGUF reader (gguf.h): parse an arbitrary byte image as a GGUF file,
// read its metadata and dequantize every tensor of at most 2^20 values.
// Build: CC=clang CXX=clang++ cmake -DCORTIQ_FUZZ=ON ... && cmake --build . --target gguf_fuzz
// Seed corpus: CMF_FUZZ_WRITE_SEEDS=<dir> ./gguf_fuzz   (writes small valid GGUF files and exits),
//              then ./gguf_fuzz <dir> -max_total_time=60
// GgufFile maps a path, so each input is written to one scratch file per process first. A
// cortiq::Error is an expected outcome; a crash, a sanitizer report or any other exception is a bug.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "convert/gguf.h"
#include "support/fuzz_seeds.h"
#include "util/error.h"

namespace {

using namespace cortiq;
using namespace cortiq::convert;

/// A little-endian GGUF v3 image built field by field (the layout of gguf.h's file comment).
struct Image {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    b.insert(b.end(), raw, raw + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void pad(uint64_t align) {
    while (b.size() % align) b.push_back(0);
  }
  /// One metadata entry with a scalar value: key, u32 value type, the value.
  template <class T>
  void kv(const std::string& key, uint32_t type, T v) {
    str(key);
    put<uint32_t>(type);
    put<T>(v);
  }
  /// The head of an array entry (element type, count); the caller writes the elements.
  void kv_array(const std::string& key, uint32_t elem_type, uint64_t count) {
    str(key);
    put<uint32_t>(9);
    put<uint32_t>(elem_type);
    put<uint64_t>(count);
  }
};

struct SeedTensor {
  const char* name;
  GgmlType type;
  std::vector<uint64_t> ne;
};

/// One valid file: every metadata value type (nested arrays included) and tensors of the
/// dequantized types, with deterministic pseudo-random data.
std::vector<uint8_t> seed(uint32_t alignment, const std::vector<SeedTensor>& tensors) {
  Image im;
  const uint64_t n_kv = alignment == 32 ? 9 : 10;
  im.b = {'G', 'G', 'U', 'F'};
  im.put<uint32_t>(3);
  im.put<uint64_t>(tensors.size());
  im.put<uint64_t>(n_kv);
  im.str("general.architecture");
  im.put<uint32_t>(8);
  im.str("llama");
  im.kv<uint32_t>("llama.block_count", 4, 1);
  im.kv<float>("llama.rope.freq_base", 6, 10000.0f);
  im.kv<uint8_t>("general.flag", 7, 1);
  im.kv<int64_t>("general.i64", 11, -5);
  im.kv<double>("general.f64", 12, 0.25);
  im.kv_array("tokenizer.ggml.tokens", 8, 3);
  for (const char* t : {"<unk>", "a",
                        "\xe2\x96\x81"
                        "b"})
    im.str(t);
  im.kv_array("tokenizer.ggml.scores", 6, 3);
  for (float s : {0.0f, -1.0f, -2.0f}) im.put<float>(s);
  im.kv_array("general.nested", 9, 2);  // array of arrays of i16
  for (int a = 0; a < 2; ++a) {
    im.put<uint32_t>(3);
    im.put<uint64_t>(2);
    im.put<int16_t>(static_cast<int16_t>(a));
    im.put<int16_t>(-7);
  }
  if (alignment != 32) im.kv<uint32_t>("general.alignment", 4, alignment);
  std::vector<uint64_t> sizes;
  uint64_t off = 0;
  for (const auto& t : tensors) {
    im.str(t.name);
    im.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    uint64_t numel = 1;
    for (uint64_t d : t.ne) {
      im.put<uint64_t>(d);
      numel *= d;
    }
    im.put<uint32_t>(static_cast<uint32_t>(t.type));
    im.put<uint64_t>(off);
    uint64_t be = 0, bb = 0;
    ggml_block_geometry(static_cast<uint32_t>(t.type), be, bb);
    sizes.push_back(numel / be * bb);
    off += (sizes.back() + alignment - 1) / alignment * alignment;
  }
  im.pad(alignment);
  uint32_t x = 12345;
  for (uint64_t s : sizes) {
    for (uint64_t i = 0; i < s; ++i) {
      x = x * 1664525u + 1013904223u;
      im.b.push_back(static_cast<uint8_t>(x >> 24));
    }
    im.pad(alignment);
  }
  return im.b;
}

void write_seeds(const std::string& dir) {
  const std::vector<SeedTensor> quants = {
      {"token_embd.weight", GgmlType::F32, {32, 2}}, {"blk.0.attn_q.weight", GgmlType::F16, {32, 2}},
      {"blk.0.attn_k.weight", GgmlType::BF16, {32}}, {"blk.0.attn_v.weight", GgmlType::Q4_0, {32, 2}},
      {"blk.0.ffn_up.weight", GgmlType::Q8_0, {64}}, {"blk.0.ffn_down.weight", GgmlType::Q5_1, {32}},
  };
  const std::vector<SeedTensor> kquants = {
      {"a", GgmlType::Q2_K, {256}}, {"b", GgmlType::Q3_K, {256}}, {"c", GgmlType::Q4_K, {256}},
      {"d", GgmlType::Q5_K, {256}}, {"e", GgmlType::Q6_K, {256}}, {"f", GgmlType::Q8_K, {256}},
  };
  int k = 0;
  for (const auto& [align, ts] : {std::pair{32u, quants}, std::pair{64u, kquants}, std::pair{32u, kquants}}) {
    test::write_seed(dir + "/seed_" + std::to_string(k++) + ".gguf", seed(align, ts));
  }
}

std::string scratch_path() {
  return (std::filesystem::temp_directory_path() / ("gguf_fuzz_" + std::to_string(::getpid()) + ".gguf"))
      .string();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  test::write_seeds_if_asked(write_seeds);
  std::atexit([] { std::filesystem::remove(scratch_path()); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = scratch_path();
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const GgufFile g(path);
    try {
      (void)g.metadata().dump();  // documented: keys and strings are kept as bytes, not checked UTF-8
    } catch (const nlohmann::json::exception&) {
    }
    for (const auto& t : g.tensors()) {
      (void)ggml_type_name(t.type);
      if (t.numel > (uint64_t{1} << 20)) continue;
      try {
        (void)gguf_to_f32(t);
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
