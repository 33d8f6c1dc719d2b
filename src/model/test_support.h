// Test support shared by the unit tests of the model layer and the layers above it (header-only,
// test code only: uses CORTIQ_SOURCE_DIR; not compiled into any library):
//  - llama_arch: a hand-built llama-shaped ModelArch (stories_test.cc, runtime/bench_test.cc);
//  - the tiny checkpoints of the forward-parity goldens (forward_parity_test.cc, batch_test.cc):
//    tests/golden/forward/<family>.json, made by tests/oracles/fwd_oracle.py, stores names, shapes
//    and init kinds, not the weights: the weights are regenerated here with a bit-exact mirror of
//    the oracle's deterministic generator.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cmf/header.h"
#include "model/tensor_source.h"
#include "quant/codec.h"

namespace cortiq::model::test {

/// The dimensions of a llama-shaped model (HF LlamaConfig field names).
struct LlamaDims {
  uint32_t hidden_size = 0;
  uint32_t intermediate_size = 0;
  uint32_t num_layers = 0;
  uint32_t num_attention_heads = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t vocab_size = 0;
  uint64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
};

/// A plain llama ModelArch with the dimensions `d`: arch_name "llama", every layer full attention,
/// rms_norm_eps 1e-5 and rope_theta 10000 (HF LlamaConfig defaults), everything else ModelArch's
/// defaults.
inline cmf::ModelArch llama_arch(const LlamaDims& d) {
  cmf::ModelArch a;
  a.arch_name = "llama";
  a.hidden_size = d.hidden_size;
  a.intermediate_size = d.intermediate_size;
  a.num_layers = d.num_layers;
  a.num_attention_heads = d.num_attention_heads;
  a.num_kv_heads = d.num_kv_heads;
  a.head_dim = d.head_dim;
  a.vocab_size = d.vocab_size;
  a.layer_types.assign(d.num_layers, cmf::LayerType::FullAttention);
  a.rms_norm_eps = 1e-5;
  a.max_position_embeddings = d.max_position_embeddings;
  a.rope_theta = 10000.0;
  a.tie_word_embeddings = d.tie_word_embeddings;
  return a;
}

/// FNV-1a 64-bit of the bytes of `s` (the oracle's per-tensor seed mix).
inline uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

/// Mirror of fwd_oracle.py gen_tensor (f32 arithmetic, SplitMix64 stream seeded with
/// seed ^ fnv1a64(name)): uniform [−1, 1) scaled by `init` — "mat": ·sqrt(3/cols), "norm1":
/// 1 + 0.1·u, "norm0"/"bias": 0.1·u, anything else: u. Returns numel(shape) floats, row-major.
inline std::vector<float> gen_tensor(uint64_t seed, const std::string& name,
                                     const std::vector<uint64_t>& shape, const std::string& init) {
  uint64_t n = 1;
  for (auto d : shape) n *= d;
  uint64_t st = seed ^ fnv1a64(name);
  std::vector<float> v(n);
  uint64_t cols = 1;
  for (size_t i = 1; i < shape.size(); ++i) cols *= shape[i];
  const float a = static_cast<float>(std::sqrt(3.0 / static_cast<double>(cols)));
  for (uint64_t i = 0; i < n; ++i) {
    st += 0x9E3779B97F4A7C15ull;
    uint64_t z = st;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) / 16777216.0f;
    float x = u * 2.0f - 1.0f;
    if (init == "mat")
      x = x * a;
    else if (init == "norm1")
      x = 1.0f + x * 0.1f;
    else if (init == "norm0" || init == "bias")
      x = x * 0.1f;
    v[i] = x;
  }
  return v;
}

/// One family's tiny checkpoint: the golden json, its arch, its tensors and its prompt.
struct Case {
  nlohmann::json g;
  cmf::ModelArch arch;
  MemoryTensorSource src;
  std::vector<uint32_t> prompt;
};

/// Loads tests/golden/forward/<fam>.json and regenerates its tensors (f32); nullptr when the golden
/// is missing. `quant`: when set, every matrix with cols % 32 == 0 (and >= 32 elements) is stored
/// in that dtype instead (the serving path: quantized weights).
inline std::unique_ptr<Case> load_case(const std::string& fam,
                                       std::optional<quant::DType> quant = std::nullopt) {
  std::ifstream f(std::string(CORTIQ_SOURCE_DIR) + "/tests/golden/forward/" + fam + ".json");
  if (!f) return nullptr;
  auto c = std::make_unique<Case>();
  c->g = nlohmann::json::parse(f);
  c->arch = cmf::arch_from_json(c->g["cmf_arch"]);
  for (const auto& t : c->g["tensors"]) {
    const auto shape = t["shape"].get<std::vector<uint64_t>>();
    auto v = gen_tensor(c->g["seed"], t["name"], shape, t["init"]);
    if (quant && shape.size() == 2 && shape[1] % 32 == 0 && v.size() >= 32)
      c->src.add(t["name"], *quant, shape, quant::encode(*quant, shape, v));
    else
      c->src.add_f32(t["name"], shape, v);
  }
  c->prompt = c->g["prompt"].get<std::vector<uint32_t>>();
  return c;
}

}  // namespace cortiq::model::test
