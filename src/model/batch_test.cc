// Model::forward_batch (continuous batching): several sequences of different lengths and positions
// in one call must give, for each sequence, logits and KV caches bit-identical to Model::forward on
// that sequence alone. The tiny checkpoints are the forward-parity ones (tests/golden/forward/
// <family>.json, regenerated with the oracle's deterministic generator: test_support.h); their correctness
// against the oracle is asserted there, so equality with forward() is the whole contract here.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model/test_support.h"
#include "quant/codec.h"
#include "util/error.h"

namespace cortiq::model {
namespace {

using test::load_case;

uint32_t argmax(const std::vector<float>& v) {
  uint32_t b = 0;
  for (uint32_t j = 1; j < v.size(); ++j)
    if (v[j] > v[b]) b = j;
  return b;
}

// Three sequences: A decodes 1 token after a 5-token history, B prefills the whole prompt from
// an empty cache, C runs a 3-token chunk after a 2-token history. Then 6 batched greedy decode
// steps. Every logit is compared exactly with a per-sequence forward() on separate caches.
void check_batch_equals_serial(Model& m, const std::vector<uint32_t>& prompt,
                               std::array<const Variant*, 3> var = {}) {
  ASSERT_GE(prompt.size(), 6u);
  const size_t V = m.vocab_size();
  const auto& arch = m.arch();
  std::vector<uint32_t> histA(prompt.begin(), prompt.begin() + 5),
      histC(prompt.rbegin(), prompt.rbegin() + 2);
  std::vector<std::vector<uint32_t>> now = {{prompt[5]}, prompt, {prompt[1], prompt[3], prompt[0]}};
  // batched caches and reference caches with the same history
  std::vector<KvCache> kb, kr;
  for (int i = 0; i < 3; ++i) {
    kb.emplace_back(arch, 64);
    kr.emplace_back(arch, 64);
  }
  std::vector<float> scratch(V);
  for (auto* kv : {&kb[0], &kr[0]}) m.forward(histA, *kv, scratch, LogitsMode::Last, var[0]);
  for (auto* kv : {&kb[2], &kr[2]}) m.forward(histC, *kv, scratch, LogitsMode::Last, var[2]);

  std::vector<std::vector<float>> lb(3, std::vector<float>(V)), lr(3, std::vector<float>(V));
  for (int step = 0; step < 7; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<SeqStep> steps;
    for (size_t s = 0; s < 3; ++s) steps.push_back({now[s], &kb[s], lb[s], false, var[s]});
    m.forward_batch(steps);
    for (size_t s = 0; s < 3; ++s) {
      m.forward(now[s], kr[s], lr[s], LogitsMode::Last, var[s]);
      ASSERT_EQ(kb[s].size(), kr[s].size());
      for (size_t i = 0; i < V; ++i) ASSERT_EQ(lb[s][i], lr[s][i]) << "seq " << s << " logit " << i;
    }
    for (size_t s = 0; s < 3; ++s) now[s] = {argmax(lb[s])};
  }
}

class Batch : public ::testing::TestWithParam<const char*> {};

TEST_P(Batch, BitIdenticalToPerSequenceForward) {
  auto c = load_case(GetParam());
  ASSERT_TRUE(c) << "golden missing";
  auto m = Model::bind(c->arch, c->src, {2});
  check_batch_equals_serial(*m, c->prompt);
}

TEST_P(Batch, BitIdenticalUnderATaskMask) {
  auto c = load_case(GetParam());
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src, {2});
  cmf::TaskMask mask = cmf::make_full_mask(c->arch, "t", 0, c->arch.moe.has_value());
  mask.layer_gates.set(0, c->g["skip_layer"].get<uint32_t>(), false);
  mask.heads.set(0, 0, false);
  if (mask.ffn.cols() > 1) mask.ffn.set(0, 1, false);
  const auto var = m->compile_variant(&mask);
  ASSERT_TRUE(var);
  check_batch_equals_serial(*m, c->prompt, {var.get(), var.get(), var.get()});
}

// Sequences under different task masks (one skipping a layer, one with other heads and neurons
// off, one dense) share one step, and each gets exactly what it gets alone under its own mask
// (this replaces the server's old grouping of a step by mask).
TEST_P(Batch, MixedVariantsInOneStepEqualSeparateCalls) {
  auto c = load_case(GetParam());
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src, {2});
  cmf::TaskMask a = cmf::make_full_mask(c->arch, "a", 0, c->arch.moe.has_value());
  cmf::TaskMask b = a;
  a.layer_gates.set(0, c->g["skip_layer"].get<uint32_t>(), false);
  a.heads.set(0, 0, false);
  b.heads.set(c->arch.num_layers - 1, 1, false);
  for (uint32_t i = 0; i < b.ffn.cols(); i += 2) b.ffn.set(0, i, false);
  if (b.experts) b.experts->set(0, 0, false);
  const auto va = m->compile_variant(&a), vb = m->compile_variant(&b);
  ASSERT_TRUE(va && vb);
  check_batch_equals_serial(*m, c->prompt, {va.get(), nullptr, vb.get()});
  check_batch_equals_serial(*m, c->prompt, {vb.get(), va.get(), va.get()});
  // and the masks change the result (so the comparison above can fail)
  KvCache k1(c->arch, 64), k2(c->arch, 64);
  std::vector<float> l1(m->vocab_size()), l2(m->vocab_size());
  m->forward(c->prompt, k1, l1, LogitsMode::Last, va.get());
  m->forward(c->prompt, k2, l2, LogitsMode::Last, vb.get());
  EXPECT_NE(l1, l2);
}

// Taps: the hidden state after layer L equals the final hidden state (before the final norm) of
// the same weights bound with only layers 0..L.
TEST(BatchForward, LayerTapEqualsTheModelCutAfterThatLayer) {
  auto c = load_case("qwen2");
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src, {2});
  const size_t L = 0, Hd = c->arch.hidden_size, T = c->prompt.size();
  ASSERT_GE(c->arch.num_layers, 2u);
  std::vector<float> tapped, final_full;
  Taps taps;
  taps.layer_output = [&](size_t layer, std::span<const float> h, size_t rows) {
    EXPECT_EQ(rows, T);
    if (layer == L) tapped.assign(h.begin(), h.end());
  };
  taps.final_hidden = [&](std::span<const float> h, size_t) { final_full.assign(h.begin(), h.end()); };
  KvCache kv(c->arch, 64);
  std::vector<float> lg(m->vocab_size());
  const SeqStep step{c->prompt, &kv, lg};
  m->forward_batch(std::span<const SeqStep>(&step, 1), &taps);
  ASSERT_EQ(tapped.size(), T * Hd);

  cmf::ModelArch cut = c->arch;
  cut.num_layers = static_cast<uint32_t>(L + 1);
  cut.layer_types.resize(L + 1);
  auto mc = Model::bind(cut, c->src, {1});
  std::vector<float> want;
  Taps t2;
  t2.final_hidden = [&](std::span<const float> h, size_t) { want.assign(h.begin(), h.end()); };
  KvCache kv2(cut, 64);
  const SeqStep step2{c->prompt, &kv2, lg};
  mc->forward_batch(std::span<const SeqStep>(&step2, 1), &t2);
  EXPECT_EQ(tapped, want);
  EXPECT_NE(tapped, final_full);
}

TEST_P(Batch, BitIdenticalWithQuantizedWeights) {
  auto c = load_case(GetParam(), quant::DType::Q4TP);
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src, {3});
  check_batch_equals_serial(*m, c->prompt);
}

// Dense with biases (qwen2), q/k norms (qwen3), sliding window + softcaps + sandwich norms
// (gemma2), MoE with a shared expert (qwen2_moe).
INSTANTIATE_TEST_SUITE_P(Families, Batch, ::testing::Values("qwen2", "qwen3", "gemma2", "qwen2_moe"));

TEST(BatchForward, StepWithoutLogitsStillAdvancesItsCache) {
  auto c = load_case("llama");
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src, {1});
  const size_t V = m->vocab_size();
  KvCache a(c->arch, 32), b(c->arch, 32), ref(c->arch, 32);
  std::vector<float> la(V), lr(V);
  const std::vector<uint32_t> chunk1(c->prompt.begin(), c->prompt.begin() + 3),
      chunk2(c->prompt.begin() + 3, c->prompt.end());
  // chunked prefill of `a` (first chunk without logits) next to a decode of `b`
  std::vector<uint32_t> one = {c->prompt[0]};
  std::vector<SeqStep> s1 = {{chunk1, &a, {}}, {one, &b, lr}};
  m->forward_batch(s1);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(b.size(), 1u);
  std::vector<SeqStep> s2 = {{chunk2, &a, la}};
  m->forward_batch(s2);
  m->forward(c->prompt, ref, lr);
  EXPECT_EQ(la, lr);
}

// all_logits: a chunk's every position, next to other steps (so the lm_head rows of several steps
// share one matmul), equals forward(..., LogitsMode::All) bit for bit; the row of its last position
// equals the Last-mode logits.
TEST(BatchForward, AllLogitsStepEqualsForwardAll) {
  auto c = load_case("gemma2");
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src, {2});
  const size_t V = m->vocab_size(), T = c->prompt.size();
  KvCache a(c->arch, 32), b(c->arch, 32), ref(c->arch, 32), ref_b(c->arch, 32);
  std::vector<float> all(T * V, -1.0f), lb(V), want_all(T * V), want_b(V);
  std::vector<uint32_t> one = {c->prompt[2]};
  std::vector<SeqStep> steps = {{one, &b, lb}, {c->prompt, &a, all, /*all_logits=*/true}};
  m->forward_batch(steps);
  m->forward(c->prompt, ref, want_all, LogitsMode::All);
  m->forward(one, ref_b, want_b);
  EXPECT_EQ(all, want_all);
  EXPECT_EQ(lb, want_b);
  EXPECT_EQ(a.size(), T);
  std::vector<float> last(V);
  KvCache ref2(c->arch, 32);
  m->forward(c->prompt, ref2, last);
  EXPECT_TRUE(std::equal(last.begin(), last.end(), all.end() - static_cast<std::ptrdiff_t>(V)));
  // an all_logits buffer of only [vocab] is rejected
  KvCache d(c->arch, 32);
  std::vector<SeqStep> bad = {{c->prompt, &d, lb, true}};
  EXPECT_THROW(m->forward_batch(bad), Error);
  EXPECT_EQ(d.size(), 0u);
}

TEST(BatchForward, InvalidBatchIsRejectedBeforeAnyCacheMoves) {
  auto c = load_case("llama");
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src, {1});
  const size_t V = m->vocab_size();
  KvCache a(c->arch, 8), small(c->arch, 2);
  std::vector<float> l1(V), l2(V), shortl(V - 1);
  std::vector<uint32_t> tok = {c->prompt[0]}, three = {1, 2, 3}, bad = {static_cast<uint32_t>(V + 100)};
  auto expect_invalid = [&](std::vector<SeqStep> steps) {
    try {
      m->forward_batch(steps);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    }
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(small.size(), 0u);
  };
  expect_invalid({{tok, &a, l1}, {three, &small, l2}});  // overflow in the 2nd step
  expect_invalid({{tok, &a, l1}, {tok, &a, l2}});        // shared cache
  expect_invalid({{tok, &a, l1}, {{}, &small, l2}});     // no tokens
  expect_invalid({{tok, &a, l1}, {bad, &small, l2}});    // token id out of range
  expect_invalid({{tok, &a, shortl}});                   // logits too short
  expect_invalid({{tok, nullptr, l1}});                  // no cache
}

// A NaN in the embedding row of a prompt token (a flipped byte in the file) must not decode into
// token 0 forever: forward() throws Error(NonFinite). The same NaN in the row of a token the prompt
// does not use changes nothing.
TEST(Forward, NonFiniteHiddenStateIsAnError) {
  auto c = load_case("llama");
  ASSERT_TRUE(c);
  const std::string name = "model.embed_tokens.weight";
  const auto w = c->src.find(name);
  ASSERT_TRUE(w && w->dtype == quant::DType::F32);
  const uint64_t H = w->cols();
  std::vector<float> emb(w->numel());
  std::memcpy(emb.data(), w->payload.data(), emb.size() * 4);
  uint32_t unused = 0;
  while (std::find(c->prompt.begin(), c->prompt.end(), unused) != c->prompt.end()) ++unused;
  ASSERT_LT(unused, w->rows());
  const auto run = [&](uint32_t row) {
    std::vector<float> e = emb;
    e[row * H + H / 2] = std::numeric_limits<float>::quiet_NaN();
    c->src.add_f32(name, w->shape, e);
    auto m = Model::bind(c->arch, c->src, {1});
    KvCache kv(c->arch, 32);
    std::vector<float> logits(m->vocab_size());
    m->forward(c->prompt, kv, logits);
    return logits;
  };
  const std::vector<float> clean = run(unused);
  for (uint32_t i = 0; i < clean.size(); ++i)  // (a tied lm_head has the NaN in logit `unused`)
    if (i != unused) {
      ASSERT_TRUE(std::isfinite(clean[i])) << i;
    }
  try {
    run(c->prompt.back());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NonFinite) << e.what();
    EXPECT_NE(std::string(e.what()).find("cortiq verify"), std::string::npos) << e.what();
  }
}

// The attention kernels read key and value rows with whole-line vector loads: every layer's
// planes start on a cache line, in both storage widths (a plain std::vector of this size lands 16
// bytes past a page).
TEST(KvCache, LayerPlanesStartOnACacheLine) {
  auto c = load_case("llama");
  ASSERT_TRUE(c);
  const size_t layers = c->arch.num_layers;
  ASSERT_GE(layers, 2u);
  for (bool f16 : {false, true}) {
    KvCache kv(c->arch, 4096, f16);
    for (size_t l = 0; l < layers; ++l) {
      const kernels::KvLayerView v = kv.layer(l).view();
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.k) % 64, 0u) << "layer " << l << " f16 " << f16;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.v) % 64, 0u) << "layer " << l << " f16 " << f16;
      EXPECT_EQ(v.f16, f16);
    }
  }
}

}  // namespace
}  // namespace cortiq::model
