// The model room's seams: a forward pass in pieces (begin · run_layers · finish), weights with
// overrides that share untouched layers, and kept activations. Oracles: the whole forward_batch
// (bit for bit), a model bound from scratch on the replaced tensors, and products recomputed here in
// double from the tensors themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cmf/tensor_names.h"
#include "model/model.h"
#include "model/test_support.h"
#include "util/error.h"

namespace cortiq::model {
namespace {

using test::load_case;
using R = cmf::TensorRole;

std::vector<float> decoded(const TensorSource& src, const std::string& name) {
  auto w = src.find(name);
  EXPECT_TRUE(w) << name;
  std::vector<float> v(w->numel());
  kernels::decode_rows(*w, 0, w->rows(), v.data());
  return v;
}

TEST(RunLayers, PiecesEqualTheWholePassAndTheHiddenStateAfterLayerL) {
  auto c = load_case("qwen2");
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src, {1});
  const size_t V = m->vocab_size(), Hd = c->arch.hidden_size, T = c->prompt.size(), L = 0;
  ASSERT_GE(c->arch.num_layers, 2u);

  std::vector<float> want(V), tap_l;
  KvCache kv_want(c->arch, 64);
  Taps taps;
  taps.layer_output = [&](size_t layer, std::span<const float> h, size_t) {
    if (layer == L) tap_l.assign(h.begin(), h.end());
  };
  const SeqStep ws{c->prompt, &kv_want, want};
  m->forward_batch(std::span<const SeqStep>(&ws, 1), &taps);

  // Layers 0..L alone: act.h is the hidden state after layer L.
  std::vector<float> got(V);
  KvCache kv(c->arch, 64);
  Activations act;
  const SeqStep st{c->prompt, &kv, got};
  const std::span<const SeqStep> steps(&st, 1);
  m->begin(steps, act);
  m->run_layers(0, L + 1, steps, act);
  EXPECT_EQ(std::vector<float>(act.h.begin(), act.h.begin() + static_cast<std::ptrdiff_t>(T * Hd)), tap_l);
  // The rest of the layers and the head: bit for bit the whole pass.
  m->run_layers(L + 1, c->arch.num_layers, steps, act);
  m->finish(steps, act);
  EXPECT_EQ(got, want);
  EXPECT_EQ(kv.size(), kv_want.size());
  EXPECT_THROW(m->run_layers(2, 1, steps, act), Error);
  EXPECT_THROW(m->run_layers(0, c->arch.num_layers + 1, steps, act), Error);
}

TEST(Weights, OverridesShareUntouchedLayersAndEqualAFreshBind) {
  auto c = load_case("qwen2");
  ASSERT_TRUE(c);
  ASSERT_GE(c->arch.num_layers, 2u);
  auto base = Model::bind(c->arch, c->src, {1});
  // Replace layer 1's down projection by a scaled copy.
  const std::string down = cmf::tensor_name(R::FfnDown, 1);
  const auto w = c->src.find(down);
  std::vector<float> scaled = decoded(c->src, down);
  for (float& x : scaled) x *= -1.5f;
  MemoryTensorSource overlay;
  overlay.add_f32(down, w->shape, scaled);
  auto over = Weights::with_overrides(base->weights(), overlay);
  EXPECT_EQ(over->layers[0], base->weights()->layers[0]);  // shared, not copied
  EXPECT_NE(over->layers[1], base->weights()->layers[1]);

  // Oracle: the same checkpoint with the tensor replaced, bound from scratch.
  MemoryTensorSource replaced;
  for (const std::string& n : c->src.names()) {
    if (n == down) continue;
    replaced.add_f32(n, c->src.find(n)->shape, decoded(c->src, n));
  }
  replaced.add_f32(down, w->shape, scaled);
  auto fresh = Model::bind(c->arch, replaced, {1});
  auto skill = Model::create(over, {1});

  const size_t V = base->vocab_size();
  std::vector<float> a(V), b(V), d(V);
  KvCache k1(c->arch, 64), k2(c->arch, 64), k3(c->arch, 64);
  skill->forward(c->prompt, k1, a);
  fresh->forward(c->prompt, k2, b);
  base->forward(c->prompt, k3, d);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, d);

  MemoryTensorSource bad_name;
  bad_name.add_f32("model.layers.1.mlp.not_a_tensor.weight", {2}, {1, 2});
  EXPECT_THROW(Weights::with_overrides(base->weights(), bad_name), Error);
  MemoryTensorSource bad_shape;
  bad_shape.add_f32(down, {w->shape[0], w->shape[1] + 1},
                    std::vector<float>(w->shape[0] * (w->shape[1] + 1)));
  EXPECT_THROW(Weights::with_overrides(base->weights(), bad_shape), Error);
}

// Kept activations: each layer's values equal the products recomputed in double from the tensors.
TEST(Activations, KeptLayerValuesMatchTheTensors) {
  auto c = load_case("llama");
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src, {1});
  const size_t Hd = c->arch.hidden_size, T = c->prompt.size();
  KvCache kv(c->arch, 64);
  std::vector<float> lg(m->vocab_size());
  Activations act;
  act.keep = true;
  std::vector<std::vector<float>> outs;
  Taps taps;
  taps.layer_output = [&](size_t, std::span<const float> h, size_t) {
    outs.emplace_back(h.begin(), h.end());
  };
  const SeqStep st{c->prompt, &kv, lg};
  m->forward_batch(std::span<const SeqStep>(&st, 1), &taps, &act);
  ASSERT_EQ(act.kept.size(), c->arch.num_layers);
  for (uint32_t l = 0; l < c->arch.num_layers; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const KeptLayer& k = act.kept[l];
    if (l > 0) {
      EXPECT_EQ(k.h_in, outs[l - 1]);
    }
    const auto gw = decoded(c->src, cmf::tensor_name(R::FfnGate, l));
    const auto uw = decoded(c->src, cmf::tensor_name(R::FfnUp, l));
    const auto dw = decoded(c->src, cmf::tensor_name(R::FfnDown, l));
    const size_t W = gw.size() / Hd;
    ASSERT_EQ(k.gate.size(), T * W);
    ASSERT_EQ(k.act.size(), T * W);
    for (size_t t = 0; t < T; ++t) {
      for (size_t i = 0; i < W; ++i) {
        double g = 0, u = 0;
        for (size_t d = 0; d < Hd; ++d) {
          g += static_cast<double>(gw[i * Hd + d]) * k.x_ffn[t * Hd + d];
          u += static_cast<double>(uw[i * Hd + d]) * k.x_ffn[t * Hd + d];
        }
        ASSERT_NEAR(k.gate[t * W + i], g, 1e-5 * (1 + std::abs(g)));
        ASSERT_NEAR(k.up[t * W + i], u, 1e-5 * (1 + std::abs(u)));
        const double gk = k.gate[t * W + i], a = gk / (1 + std::exp(-gk)) * k.up[t * W + i];
        ASSERT_NEAR(k.act[t * W + i], a, 1e-5 * (1 + std::abs(a)));
      }
      // The layer's output: the attention residual plus down · act.
      for (size_t r = 0; r < Hd; ++r) {
        double y = k.h_mid[t * Hd + r];
        for (size_t i = 0; i < W; ++i) y += static_cast<double>(dw[r * W + i]) * k.act[t * W + i];
        ASSERT_NEAR(outs[l][t * Hd + r], y, 1e-5 * (1 + std::abs(y)));
      }
    }
  }
  // Off by default: nothing kept.
  Activations quiet;
  KvCache kv2(c->arch, 64);
  const SeqStep st2{c->prompt, &kv2, lg};
  m->forward_batch(std::span<const SeqStep>(&st2, 1), nullptr, &quiet);
  EXPECT_TRUE(quiet.kept.empty());
}

}  // namespace
}  // namespace cortiq::model

namespace cortiq::model {
namespace {

TEST(Kernels, TwoModelsInOneProcessKeepTheirOwnTable) {
  // One weight set, an exact and a fast model side by side: each gives what a model made while
  // the process-wide mode said its mode gives, whatever the process-wide mode says meanwhile.
  auto c = test::load_case("qwen2", quant::DType::Q8Row);
  ASSERT_TRUE(c);
  auto w = Weights::bind(c->arch, c->src);
  const kernels::SimdTier tier = kernels::best_simd_tier();
  auto logits = [&](Model& m) {
    std::vector<float> out(m.vocab_size());
    KvCache kv(c->arch, 64);
    const SeqStep st{c->prompt, &kv, out};
    m.forward_batch(std::span<const SeqStep>(&st, 1));
    return out;
  };
  std::vector<float> want_exact, want_fast;
  {
    const kernels::ScopedMatmulMode g(kernels::MatmulMode::Exact);
    want_exact = logits(*Model::create(w, {.threads = 1}));
  }
  {
    const kernels::ScopedMatmulMode g(kernels::MatmulMode::Fast);
    want_fast = logits(*Model::create(w, {.threads = 1}));
  }
  if (tier != kernels::SimdTier::Scalar) {
    EXPECT_NE(want_exact, want_fast);  // q8 has an int8 path
  }
  auto exact =
      Model::create(w, {.threads = 1, .kernels = kernels::KernelConfig{kernels::MatmulMode::Exact, tier}});
  auto fast =
      Model::create(w, {.threads = 1, .kernels = kernels::KernelConfig{kernels::MatmulMode::Fast, tier}});
  for (kernels::MatmulMode global : {kernels::MatmulMode::Reference, kernels::MatmulMode::Exact}) {
    const kernels::ScopedMatmulMode g(global);
    EXPECT_EQ(logits(*exact), want_exact);
    EXPECT_EQ(logits(*fast), want_fast);
  }
  EXPECT_EQ(exact->ops().config().mode, kernels::MatmulMode::Exact);
}

// A mask that keeps a quarter of every layer's neurons: compiled with row gather (the alive gate/up
// rows copied) and without it (every neuron computed, the dead ones zeroed), the logits of a prefill
// and of batched decode steps are the same bit for bit, in every codec that can gather, with the
// gathered sequence sharing its steps with a dense one and one under the ungathered variant.
TEST(Variant, GatheredFfnEqualsMaskedFull) {
  for (std::optional<quant::DType> dt :
       {std::optional<quant::DType>{}, std::optional{quant::DType::Q8Row},
        std::optional{quant::DType::Q4Tiled}, std::optional{quant::DType::Q8_2F}}) {
    SCOPED_TRACE(dt ? std::string(quant::dtype_name(*dt)) : "f32");
    auto c = load_case("qwen2", dt);
    ASSERT_TRUE(c);
    auto m = Model::bind(c->arch, c->src, {2});
    cmf::TaskMask mask = cmf::make_full_mask(c->arch, "quarter", 0);
    for (uint32_t l = 0; l < c->arch.num_layers; ++l)
      for (uint32_t i = 0; i < mask.ffn.cols(); ++i) mask.ffn.set(l, i, (i * 7 + l) % 4 == 0);
    const auto gathered = m->compile_variant(&mask);
    const auto full = m->compile_variant(&mask, {.gather_at_most = -1.0});
    ASSERT_TRUE(gathered && full);
    for (uint32_t l = 0; l < c->arch.num_layers; ++l) {
      ASSERT_TRUE(gathered->ffn_gathered[l]) << "layer " << l;
      EXPECT_FALSE(full->ffn_gathered[l]);
      EXPECT_EQ(gathered->ffn_gathered[l]->ids, gathered->ffn_index[l]);
    }
    EXPECT_EQ(full->gathered_bytes(), 0u);
    EXPECT_GT(gathered->gathered_bytes(), 0u);

    const size_t V = m->vocab_size();
    std::vector<KvCache> kv;
    for (int i = 0; i < 4; ++i) kv.emplace_back(c->arch, 64);
    std::vector<std::vector<float>> lg(4, std::vector<float>(V));
    // seq 0: gathered, 1: full (ungathered) variant, 2: dense, 3: gathered alone per step
    const Variant* var[] = {gathered.get(), full.get(), nullptr};
    std::vector<std::vector<uint32_t>> now(3, c->prompt);
    std::vector<uint32_t> now3 = c->prompt;
    for (int step = 0; step < 5; ++step) {
      std::vector<SeqStep> steps;
      for (size_t s = 0; s < 3; ++s) steps.push_back({now[s], &kv[s], lg[s], false, var[s]});
      m->forward_batch(steps);
      m->forward(now3, kv[3], lg[3], LogitsMode::Last, gathered.get());
      ASSERT_EQ(lg[0], lg[1]) << "step " << step;
      ASSERT_EQ(lg[3], lg[1]) << "step " << step;
      EXPECT_NE(lg[2], lg[1]) << "the mask changes the result";
      const auto next = static_cast<uint32_t>(std::max_element(lg[1].begin(), lg[1].end()) - lg[1].begin());
      now = {{next}, {next}, {next}};
      now3 = {next};
    }
  }
}

// A codec without per-row bytes (q4tp: row ladders) keeps the full read.
TEST(Variant, NoGatherWhereTheCodecKeepsNoRows) {
  auto c = load_case("qwen2", quant::DType::Q4TP);
  ASSERT_TRUE(c);
  auto m = Model::bind(c->arch, c->src, {1});
  cmf::TaskMask mask = cmf::make_full_mask(c->arch, "quarter", 0);
  for (uint32_t i = 0; i < mask.ffn.cols(); i += 2) mask.ffn.set(0, i, false);
  const auto v = m->compile_variant(&mask);
  ASSERT_TRUE(v);
  EXPECT_FALSE(v->ffn_gathered[0]);
}

}  // namespace
}  // namespace cortiq::model
