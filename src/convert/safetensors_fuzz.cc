// libFuzzer target for the safetensors header parser (convert/safetensors.h): parse an arbitrary
// byte image with parse_safetensors, check the documented result invariants, and convert every
// tensor of at most 2^20 values to f32.
// Build: CC=clang CXX=clang++ cmake -DCORTIQ_FUZZ=ON ... && cmake --build . --target safetensors_fuzz
// Seed corpus: tests/fuzz_corpus/safetensors_fuzz (CMF_FUZZ_WRITE_SEEDS=<dir> ./safetensors_fuzz
//              writes the same small valid files and exits), then ./safetensors_fuzz <dir>
// A cortiq::Error is an expected outcome; a crash, a sanitizer report, any other exception or a
// result breaking the header contract (a tensor's bytes outside the input or not numel × dtype
// size) is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "convert/safetensors.h"
#include "support/fuzz_seeds.h"
#include "util/error.h"

namespace {

using namespace cortiq;
using namespace cortiq::convert;

/// [u64 LE length][header][data] with `data_len` bytes of a fixed pattern.
std::string image(const std::string& header, size_t data_len) {
  std::string s(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(s.data(), &n, 8);
  s += header;
  for (size_t i = 0; i < data_len; ++i) s.push_back(static_cast<char>(i * 37 + 11));
  return s;
}

void write_seeds(const std::string& dir) {
  const std::pair<const char*, std::string> seeds[] = {
      {"f32", image(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 24)},
      {"mixed",
       image(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},)"
             R"("b":{"dtype":"F16","shape":[2,2],"data_offsets":[8,16]},"c":{"dtype":"I8","shape":[3],)"
             R"("data_offsets":[16,19]}})",
             19)},
      {"scalar", image(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})", 8)},
      {"empty", image(R"({"e":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})", 0)},
      {"ints", image(R"({"i":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"j":{"dtype":"I32",)"
                     R"("shape":[1,1],"data_offsets":[8,12]},"k":{"dtype":"I16","shape":[2],)"
                     R"("data_offsets":[12,16]},"m":{"dtype":"BOOL","shape":[1],"data_offsets":[16,17]}})",
                     17)},
      {"nohdr", image("{}", 0)},
  };
  for (const auto& [name, bytes] : seeds) test::write_seed(dir + "/" + name + ".safetensors", bytes);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  test::write_seeds_if_asked(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  std::vector<StTensor> ts;
  try {
    ts = parse_safetensors(bytes, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  for (const auto& t : ts) {
    const bool inside =
        t.data.empty() || (t.data.data() >= data && t.data.data() + t.data.size() <= data + size);
    if (!inside || t.data.size() != t.numel * st_dtype_size(t.dtype)) {
      std::fprintf(stderr, "tensor '%s': %zu bytes at %p break the contract\n", t.name.c_str(), t.data.size(),
                   static_cast<const void*>(t.data.data()));
      std::abort();
    }
    if (t.numel > (uint64_t{1} << 20)) continue;
    try {
      (void)to_f32(t);
    } catch (const Error&) {
    }
  }
  return 0;
}
