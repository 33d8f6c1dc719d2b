// Parity of Model::forward with the PyTorch oracle (tests/oracles/fwd_oracle.py, goldens in
// tests/golden/forward/<family>.json): tiny checkpoints of every family are regenerated here with
// the oracle's deterministic generator; last-position logits must agree within 1e-4 (relative to
// the largest |logit|) and the 32-token greedy continuation must be identical. Also: task masks
// (all-open mask == no mask; a closed layer gate == the oracle skipping that layer), quantized
// weights == their dequantized f32 copies (the runtime adds no error of its own), prefill == decode.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model/test_support.h"
#include "quant/codec.h"
#include "util/error.h"

namespace cortiq::model {
namespace {

const char* kFamilies[] = {"llama", "llama3_rope", "mistral", "qwen2", "qwen2_yarn", "qwen3",
                           "gemma", "gemma2",      "gemma3",  "phi3",  "qwen2_moe",  "qwen3_moe"};

using test::load_case;

std::vector<float> last_logits(Model& m, const std::vector<uint32_t>& ids, const Variant* var = nullptr) {
  KvCache kv(m.arch(), 128);
  std::vector<float> lg(m.vocab_size());
  m.forward(ids, kv, lg, LogitsMode::Last, var);
  return lg;
}

std::vector<uint32_t> greedy(Model& m, std::vector<uint32_t> ids, size_t n,
                             std::vector<float>* first = nullptr, const Variant* var = nullptr) {
  KvCache kv(m.arch(), 128);
  std::vector<float> lg(m.vocab_size());
  m.forward(ids, kv, lg, LogitsMode::Last, var);
  if (first) *first = lg;
  std::vector<uint32_t> out;
  for (size_t i = 0; i < n; ++i) {
    uint32_t best = 0;
    for (uint32_t j = 1; j < lg.size(); ++j)
      if (lg[j] > lg[best]) best = j;
    out.push_back(best);
    m.forward(std::span<const uint32_t>(&best, 1), kv, lg, LogitsMode::Last, var);
  }
  return out;
}

void expect_close(const std::vector<float>& got, const nlohmann::json& want) {
  ASSERT_EQ(got.size(), want.size());
  double mx = 0;
  for (const auto& w : want) mx = std::max(mx, std::abs(w.get<double>()));
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i].get<double>(), 1e-4 * mx) << "logit " << i;
}

class ForwardParity : public ::testing::TestWithParam<const char*> {};

TEST_P(ForwardParity, LogitsAndGreedyMatchOracle) {
  auto c = load_case(GetParam());
  ASSERT_TRUE(c) << "golden missing";
  auto m = Model::bind(c->arch, c->src, {2});
  std::vector<float> first;
  const auto g = greedy(*m, c->prompt, 32, &first);
  expect_close(first, c->g["last_logits"]);
  EXPECT_EQ(g, c->g["greedy"].get<std::vector<uint32_t>>());
}

TEST_P(ForwardParity, MasksOpenEqualsNoneAndClosedLayerEqualsSkip) {
  auto c = load_case(GetParam());
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src, {1});
  const auto base = last_logits(*m, c->prompt);
  cmf::TaskMask open = cmf::make_full_mask(c->arch, "open", 0, c->arch.moe.has_value());
  EXPECT_EQ(m->compile_variant(&open), nullptr);  // dropped
  cmf::TaskMask closed = open;
  const uint32_t skip = c->g["skip_layer"];
  closed.layer_gates.set(0, skip, false);
  const auto var = m->compile_variant(&closed);
  ASSERT_NE(var, nullptr);
  expect_close(last_logits(*m, c->prompt, var.get()), c->g["skip_last_logits"]);
  EXPECT_EQ(greedy(*m, c->prompt, 8, nullptr, var.get()), c->g["skip_greedy"].get<std::vector<uint32_t>>());
  EXPECT_EQ(last_logits(*m, c->prompt), base);  // the model itself is unchanged
}

TEST_P(ForwardParity, PrefillEqualsDecodeAndThreadCountInvariant) {
  auto c = load_case(GetParam());
  ASSERT_TRUE(c);
  auto m1 = Model::bind(c->arch, c->src, {1});
  auto m3 = Model::bind(c->arch, c->src, {3});
  const size_t V = m1->vocab_size(), T = c->prompt.size();
  KvCache kv(c->arch, 64);
  std::vector<float> all(T * V);
  m1->forward(c->prompt, kv, all, LogitsMode::All);
  KvCache kv2(c->arch, 64, /*f16=*/false);
  std::vector<float> one(V);
  for (size_t t = 0; t < T; ++t) {
    m3->forward(std::span<const uint32_t>(&c->prompt[t], 1), kv2, one);
    for (size_t i = 0; i < V; ++i) ASSERT_EQ(one[i], all[t * V + i]) << t;
  }
}

// Quantized weights: the oracle for a quantized file is the same model on the dequantized weights;
// our forward on the quantized payloads must match the forward on their f32 decode (no error of
// the runtime's own) — logits to 1e-5 relative and greedy identical.
TEST_P(ForwardParity, QuantizedEqualsDequantized) {
  // `--exact` semantics: f32 activations, so the only difference is the weights' quantization.
  kernels::ScopedMatmulMode mode(kernels::MatmulMode::Exact);
  auto c = load_case(GetParam());
  ASSERT_TRUE(c);
  for (auto dt : {quant::DType::Q8Row, quant::DType::Q4TP, quant::DType::Q8_2F, quant::DType::VBitRo,
                  quant::DType::Q4Block, quant::DType::F16, quant::DType::Q1T}) {
    SCOPED_TRACE(std::string(quant::dtype_name(dt)));
    MemoryTensorSource qs, ds;
    for (const auto& name : c->src.names()) {
      auto w = *c->src.find(name);
      std::vector<float> v(w.numel());
      std::memcpy(v.data(), w.payload.data(), v.size() * 4);
      if (w.shape.size() == 2 && w.shape[1] % 32 == 0 && w.numel() >= 32) {
        auto bytes = quant::encode(dt, w.shape, v);
        std::vector<float> deq(v.size());
        quant::decode(dt, w.shape, bytes, deq);
        qs.add(name, dt, w.shape, bytes);
        ds.add_f32(name, w.shape, deq);
      } else {
        qs.add_f32(name, w.shape, v);
        ds.add_f32(name, w.shape, v);
      }
    }
    auto mq = Model::bind(c->arch, qs, {2});
    auto md = Model::bind(c->arch, ds, {1});
    std::vector<float> lq, ld;
    const auto gq = greedy(*mq, c->prompt, 16, &lq);
    const auto gd = greedy(*md, c->prompt, 16, &ld);
    double mx = 0;
    for (float x : ld) mx = std::max(mx, static_cast<double>(std::abs(x)));
    for (size_t i = 0; i < lq.size(); ++i) ASSERT_NEAR(lq[i], ld[i], 1e-5 * mx);
    EXPECT_EQ(gq, gd);
  }
}

/// A MemoryTensorSource that records what the model hands back (TensorSource::release).
class ReleaseRecorder : public MemoryTensorSource {
 public:
  void release(std::span<const uint8_t> bytes) const override { released.push_back(bytes); }
  mutable std::vector<std::span<const uint8_t>> released;
};

// A q4_tiled model is bound as q4_block (kernels::prepare_weight): its logits equal those of the
// same values stored as q4_block bit for bit, on the int8 and the exact path, and every byte of
// every q4_tiled payload is handed back exactly once — the tied embedding (embed_tokens and lm_head,
// one payload) too, so it was copied once.
TEST_P(ForwardParity, Q4TiledBindsAsQ4Block) {
  auto t = load_case(GetParam(), quant::DType::Q4Tiled);
  auto b = load_case(GetParam(), quant::DType::Q4Block);
  ASSERT_TRUE(t && b);
  ReleaseRecorder src;
  std::map<const uint8_t*, size_t> want;  // q4_tiled payload start → size
  for (const auto& name : t->src.names()) {
    const auto w = *t->src.find(name);
    src.add(name, w.dtype, w.shape, std::vector<uint8_t>(w.payload.begin(), w.payload.end()));
    const auto mine = *src.find(name);
    if (mine.dtype == quant::DType::Q4Tiled) want[mine.payload.data()] = mine.payload.size();
  }
  ASSERT_FALSE(want.empty());
  for (auto mode : {kernels::MatmulMode::Fast, kernels::MatmulMode::Exact}) {
    kernels::ScopedMatmulMode m(mode);
    src.released.clear();
    auto mt = Model::bind(t->arch, src, {2});
    auto mb = Model::bind(b->arch, b->src, {2});
    const auto lt = last_logits(*mt, t->prompt), lb = last_logits(*mb, b->prompt);
    ASSERT_EQ(lt.size(), lb.size());
    EXPECT_EQ(std::memcmp(lt.data(), lb.data(), 4 * lt.size()), 0);
    std::map<const uint8_t*, size_t> got;  // released bytes, merged per payload
    for (const auto& r : src.released) {
      bool merged = false;
      for (auto& [start, size] : got)
        if (start + size == r.data()) size += r.size(), merged = true;
      if (!merged) {
        ASSERT_EQ(got.count(r.data()), 0u) << "bytes released twice";
        got[r.data()] = r.size();
      }
    }
    EXPECT_EQ(got, want);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ForwardParity, ::testing::ValuesIn(kFamilies));

TEST(ModelBind, MissingTensorsAreNamed) {
  auto c = load_case("qwen2");
  ASSERT_TRUE(c);
  c->src.remove("model.layers.1.mlp.up_proj.weight");
  c->src.remove("model.norm.weight");
  try {
    Model::bind(c->arch, c->src);
    FAIL();
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << w;
    EXPECT_NE(w.find("model.norm.weight"), std::string::npos) << w;
  }
}

TEST(ModelBind, UntiedWithoutLmHeadIsAnError) {
  auto c = load_case("llama");
  ASSERT_TRUE(c);
  c->arch.tie_word_embeddings = false;
  EXPECT_THROW(Model::bind(c->arch, c->src), Error);
}

TEST(ModelBind, DtypeWithoutKernelFailsAtLoadNamingTensor) {
  auto c = load_case("llama");
  ASSERT_TRUE(c);
  c->src.add("model.layers.0.self_attn.k_proj.weight", quant::DType::Mix8_4, {16, 32},
             std::vector<uint8_t>(16));
  try {
    Model::bind(c->arch, c->src);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("model.layers.0.self_attn.k_proj.weight"), std::string::npos);
  }
}

TEST(ModelForward, ContextOverflowIsAnError) {
  auto c = load_case("llama");
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src);
  KvCache kv(c->arch, 4);
  std::vector<float> lg(m->vocab_size());
  EXPECT_THROW(m->forward(c->prompt, kv, lg), Error);
}

TEST(ModelForward, LogitsModesAndShortBuffers) {
  auto c = load_case("qwen3_moe");
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src, {2});
  const size_t V = m->vocab_size(), T = c->prompt.size();
  KvCache kv(c->arch, 32);
  std::vector<float> small(V - 1), almost(T * V - 1);
  EXPECT_THROW(m->forward(c->prompt, kv, small), Error);                    // Last: [vocab]
  EXPECT_THROW(m->forward(c->prompt, kv, almost, LogitsMode::All), Error);  // All: [T, vocab]
  EXPECT_EQ(kv.size(), 0u);
  // None: no logits, the cache advances; the next decode equals prefill-with-logits + decode.
  m->forward(std::span<const uint32_t>(c->prompt).first(T - 1), kv, {}, LogitsMode::None);
  EXPECT_EQ(kv.size(), T - 1);
  std::vector<float> a(V), b(V);
  m->forward(std::span<const uint32_t>(&c->prompt[T - 1], 1), kv, a);
  KvCache ref(c->arch, 32);
  m->forward(c->prompt, ref, b);
  EXPECT_EQ(a, b);
}

TEST(ModelForward, F16KvCacheStaysClose) {
  auto c = load_case("qwen3");
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src);
  KvCache kv(c->arch, 64, true);
  std::vector<float> lg(m->vocab_size());
  m->forward(c->prompt, kv, lg);
  const auto& want = c->g["last_logits"];
  double mx = 0;
  for (const auto& w : want) mx = std::max(mx, std::abs(w.get<double>()));
  for (size_t i = 0; i < lg.size(); ++i) EXPECT_NEAR(lg[i], want[i].get<double>(), 5e-3 * mx);
}

}  // namespace
}  // namespace cortiq::model
