// The real trained stories260K (../shared/models/stories260K-hf, HF LlamaForCausalLM, f32) bound
// straight from its safetensors into a MemoryTensorSource: greedy decoding from BOS must reproduce
// the llama2.c golden token for token (../shared/models/stories260K-llama2c/golden/), including
// the near-tie at step 185. The .cmf path of the same check is tests/run_stories_test.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/kernels.h"
#include "model/model.h"
#include "model/test_support.h"
#include "util/half.h"

namespace cortiq::model {
namespace {

std::string shared_dir() {
  return std::string(CORTIQ_SOURCE_DIR) + "/../shared";
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Minimal safetensors reader (F32 only) for this test.
void load_safetensors_f32(const std::string& path, MemoryTensorSource& src) {
  const std::string bytes = slurp(path);
  ASSERT_GT(bytes.size(), 8u);
  const uint64_t hlen = load_le<uint64_t>(bytes.data());
  const auto j = nlohmann::json::parse(bytes.substr(8, hlen));
  const char* data = bytes.data() + 8 + hlen;
  for (const auto& [name, e] : j.items()) {
    if (name == "__metadata__") continue;
    ASSERT_EQ(e["dtype"], "F32") << name;
    std::vector<uint64_t> shape = e["shape"].get<std::vector<uint64_t>>();
    const uint64_t b = e["data_offsets"][0], en = e["data_offsets"][1];
    std::vector<float> v((en - b) / 4);
    std::memcpy(v.data(), data + b, en - b);
    src.add_f32(name, shape, v);
  }
}

// stories260K's config.json (../shared/models/stories260K-hf).
cmf::ModelArch stories_arch() {
  return test::llama_arch({.hidden_size = 64,
                           .intermediate_size = 172,
                           .num_layers = 5,
                           .num_attention_heads = 8,
                           .num_kv_heads = 4,
                           .head_dim = 8,
                           .vocab_size = 512,
                           .max_position_embeddings = 512,
                           .tie_word_embeddings = true});
}

uint32_t argmax_first(std::span<const float> v) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

TEST(Stories260K, GreedyFromBosMatchesLlama2cGolden) {
  const std::string hf = shared_dir() + "/models/stories260K-hf/model.safetensors";
  const std::string golden = shared_dir() + "/models/stories260K-llama2c/golden/greedy_bos.json";
  if (!std::ifstream(hf) || !std::ifstream(golden)) GTEST_SKIP() << "../shared missing";
  MemoryTensorSource src;
  load_safetensors_f32(hf, src);
  const auto g = nlohmann::json::parse(slurp(golden));
  const auto want = g["token_ids"].get<std::vector<uint32_t>>();
  const auto pos0 = g["logits_after_BOS_pos0"].get<std::vector<float>>();
  // Every kernel tier this CPU has (AVX-512, AVX2, scalar reference) and two thread counts.
  for (auto [tier, threads] : {std::pair{kernels::SimdTier::Avx512, size_t{1}},
                               {kernels::SimdTier::Avx512, size_t{3}},
                               {kernels::SimdTier::Avx2, size_t{2}},
                               {kernels::SimdTier::Scalar, size_t{2}}}) {
    if (tier > kernels::best_simd_tier()) continue;
    kernels::ScopedSimdTier scoped(tier);
    SCOPED_TRACE(kernels::simd_tier_name(tier));
    auto m = Model::bind(stories_arch(), src, {threads});
    KvCache kv(m->arch(), 512);
    std::vector<float> logits(512);
    std::vector<uint32_t> got{1};
    m->forward(std::span<const uint32_t>(got.data(), 1), kv, logits);
    for (size_t i = 0; i < pos0.size(); ++i) ASSERT_NEAR(logits[i], pos0[i], 1e-4f) << i;
    while (got.size() < want.size()) {
      const uint32_t next = argmax_first(logits);
      got.push_back(next);
      if (next == 1) break;
      m->forward(std::span<const uint32_t>(&got.back(), 1), kv, logits);
    }
    EXPECT_EQ(got, want) << "threads=" << threads;
  }
}

TEST(Stories260K, PrefillEqualsDecodeLogits) {
  const std::string hf = shared_dir() + "/models/stories260K-hf/model.safetensors";
  const std::string golden = shared_dir() + "/models/stories260K-llama2c/golden/greedy_prompt.json";
  if (!std::ifstream(hf) || !std::ifstream(golden)) GTEST_SKIP() << "../shared missing";
  MemoryTensorSource src;
  load_safetensors_f32(hf, src);
  const auto g = nlohmann::json::parse(slurp(golden));
  const auto prompt = g["prompt_token_ids"].get<std::vector<uint32_t>>();
  const auto want = g["token_ids"].get<std::vector<uint32_t>>();
  auto m = Model::bind(stories_arch(), src, {2});
  KvCache kv(m->arch(), 512);
  std::vector<float> all(prompt.size() * 512);
  m->forward(prompt, kv, all, LogitsMode::All);
  // Per-position decode gives the same logits (bit-identical math per row).
  KvCache kv2(m->arch(), 512);
  std::vector<float> one(512);
  for (size_t t = 0; t < prompt.size(); ++t) {
    m->forward(std::span<const uint32_t>(&prompt[t], 1), kv2, one);
    for (size_t i = 0; i < 512; ++i) ASSERT_EQ(one[i], all[t * 512 + i]) << t << " " << i;
  }
  std::vector<uint32_t> got = prompt;
  std::vector<float> logits(all.end() - 512, all.end());
  while (got.size() < want.size()) {
    const uint32_t next = argmax_first(logits);
    got.push_back(next);
    if (next == 1) break;
    m->forward(std::span<const uint32_t>(&got.back(), 1), kv, logits);
  }
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace cortiq::model
