// libFuzzer target: open + verify + decode every tensor of an arbitrary byte image.
// Build: CC=clang CXX=clang++ cmake -DCORTIQ_FUZZ=ON ... && cmake --build . --target cmf_fuzz
// Seed corpus: CMF_FUZZ_WRITE_SEEDS=<dir> ./cmf_fuzz   (writes small valid files and exits), then
//              ./cmf_fuzz <dir> -max_total_time=60
// Any cortiq::Error is an expected outcome; a crash, sanitizer report or other exception is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "cmf/masks.h"
#include "cmf/reader.h"
#include "cmf/writer.h"
#include "quant/codec.h"
#include "support/cmf_header.h"
#include "support/fuzz_seeds.h"
#include "util/error.h"

namespace {

using namespace cortiq;
using namespace cortiq::cmf;

Header seed_header() {
  Header h = test::tiny_header("fuzz", 32, 40, 2, 2, 1, 16, 8, 64, QuantType::Q8Row);
  h.arch.layer_types = {LayerType::FullAttention, LayerType::LinearAttention};
  return h;
}

void write_seeds(const std::string& dir) {
  const quant::DType dts[] = {quant::DType::F32,    quant::DType::F16,     quant::DType::BF16,
                              quant::DType::Q8Row,  quant::DType::Q4Block, quant::DType::Q8_2F,
                              quant::DType::VBitRo, quant::DType::Q4Tiled, quant::DType::Q1,
                              quant::DType::Q4TP,   quant::DType::Q2TP};
  std::vector<float> vals(4 * 32);
  for (size_t i = 0; i < vals.size(); ++i)
    vals[i] = static_cast<float>((static_cast<int>(i * 37 % 23) - 11)) * 0.1f;
  const std::vector<uint64_t> shape = {4, 32};
  int k = 0;
  for (auto dt : dts) {
    Header h = seed_header();
    WriterOptions o;
    o.reserve_bytes = 1;
    const std::string p = dir + "/seed_" + std::to_string(k++) + ".cmf";
    Writer w(p, o);
    w.add_tensor("t", dt, shape, quant::encode(dt, shape, vals));
    MaskCatalog c;
    c.default_task = "all";
    c.masks.push_back(make_full_mask(h.arch, "all", 0));
    w.set_masks(c, h.arch);
    const std::string v = "{}";
    w.set_vocab({v.begin(), v.end()});
    w.finish(h);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  test::write_seeds_if_asked(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    Reader r = Reader::open_memory(std::span<const uint8_t>(data, size));
    (void)r.verify();
    for (const auto& t : r.tensors()) {
      if (!quant::dtype_has_codec(t.dtype) || t.numel() > (uint64_t{1} << 22)) continue;
      std::vector<float> out(t.numel());
      try {
        quant::decode(t.dtype, t.shape, r.payload(t), out);
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
