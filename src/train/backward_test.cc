// lm_loss_backward (backward.h) against PyTorch autograd in float64 (tests/oracles/grad_oracle.py →
// tests/golden/grad/<family>.json) on the forward-parity models: the loss and the gradient of
// every tensor, for llama, qwen2 (q/k/v biases), qwen3 (q/k norms) and llama3 rope scaling.
#include "train/backward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cmf/tensor_names.h"
#include "kernels/ops.h"
#include "model/test_support.h"
#include "util/error.h"

namespace cortiq::train {
namespace {

std::unique_ptr<model::Model> exact_model(const model::test::Case& c) {
  model::ModelOptions o;
  o.threads = 1;
  o.kernels = kernels::KernelConfig{kernels::MatmulMode::Exact, kernels::simd_tier()};
  return model::Model::bind(c.arch, c.src, o);
}

class GradOracle : public ::testing::TestWithParam<const char*> {};

TEST_P(GradOracle, LossAndEveryGradientMatchTorch) {
  const std::string fam = GetParam();
  auto c = model::test::load_case(fam);
  ASSERT_TRUE(c);
  std::ifstream f(std::string(CORTIQ_SOURCE_DIR) + "/tests/golden/grad/" + fam + ".json");
  ASSERT_TRUE(f) << "golden missing: run tests/oracles/grad_oracle.py";
  const auto gold = nlohmann::json::parse(f);
  ASSERT_EQ(gold["prompt"].get<std::vector<uint32_t>>(), c->prompt);
  auto m = exact_model(*c);
  Grads g;
  const double loss = lm_loss_backward(*m, c->prompt, g);
  EXPECT_NEAR(loss, gold["loss"].get<double>(), 1e-5 * gold["loss"].get<double>());
  size_t checked = 0;
  for (const auto& [name, want_j] : gold["grads"].items()) {
    const auto want = want_j.get<std::vector<double>>();
    ASSERT_TRUE(g.count(name)) << "no gradient for " << name;
    const auto& got = g.at(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    double scale = 0.0, worst = 0.0;
    size_t at = 0;
    for (double x : want) scale = std::max(scale, std::abs(x));
    for (size_t i = 0; i < want.size(); ++i)
      if (std::abs(got[i] - want[i]) > worst) worst = std::abs(got[i] - want[i]), at = i;
    EXPECT_LE(worst, 1e-4 * scale) << name << "[" << at << "]: " << got[at] << " vs torch " << want[at]
                                   << " (largest |grad| " << scale << ")";
    ++checked;
  }
  EXPECT_EQ(checked, g.size()) << "a gradient torch has no tensor for";
}

INSTANTIATE_TEST_SUITE_P(Families, GradOracle, ::testing::Values("llama", "qwen2", "qwen3", "llama3_rope"));

TEST(Backward, RefusesWhatItDoesNotCover) {
  auto c = model::test::load_case("gemma2");
  ASSERT_TRUE(c);
  auto m = exact_model(*c);
  Grads g;
  try {
    lm_loss_backward(*m, c->prompt, g);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
  }
  auto q = model::test::load_case("llama");
  model::ModelOptions fast;
  fast.kernels = kernels::KernelConfig{kernels::MatmulMode::Fast, kernels::simd_tier()};
  auto mf = model::Model::bind(q->arch, q->src, fast);
  try {
    lm_loss_backward(*mf, q->prompt, g);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
  }
  auto me = exact_model(*q);
  const uint32_t one = 1;
  EXPECT_THROW(lm_loss_backward(*me, std::span<const uint32_t>(&one, 1), g), Error);
}

// The compile path's options: a tail (first_layer) gets exactly the full backward's gradients of
// its layers and nothing below; the truncated gradient leaves the last layer's FFN gradients as
// they are and gives attention none; KL against the model's own logits is 0 with a 0 gradient.
TEST(Backward, TailTruncationAndKlOptions) {
  auto c = model::test::load_case("qwen2");
  ASSERT_TRUE(c);
  auto m = exact_model(*c);
  const std::span<const uint32_t> p(c->prompt);
  const auto in = p.first(p.size() - 1), tg = p.subspan(1);
  Grads full;
  lm_loss_backward(*m, in, tg, full);
  const auto L = c->arch.num_layers;
  BackwardOptions tail;
  tail.first_layer = L - 1;
  Grads gt;
  lm_loss_backward(*m, in, tg, gt, tail);
  const std::string embed = cmf::tensor_name(cmf::TensorRole::Embed);
  for (const auto& [name, v] : gt)
    if (name != embed) {
      EXPECT_EQ(v, full.at(name)) << name;
    }
  // tied: the embedding holds the head's gradient only, not the input rows'
  ASSERT_TRUE(gt.count(embed));
  EXPECT_NE(gt.at(embed), full.at(embed));
  EXPECT_FALSE(gt.count(cmf::tensor_name(cmf::TensorRole::Q, 0)));
  EXPECT_TRUE(gt.count(cmf::tensor_name(cmf::TensorRole::Q, L - 1)));

  BackwardOptions trunc;
  trunc.through_attention = false;
  Grads gr;
  lm_loss_backward(*m, in, tg, gr, trunc);
  EXPECT_EQ(gr.at(cmf::tensor_name(cmf::TensorRole::FfnDown, L - 1)),
            full.at(cmf::tensor_name(cmf::TensorRole::FfnDown, L - 1)));
  EXPECT_FALSE(gr.count(cmf::tensor_name(cmf::TensorRole::Q, L - 1)));
  EXPECT_NE(gr.at(cmf::tensor_name(cmf::TensorRole::FfnDown, 0)),
            full.at(cmf::tensor_name(cmf::TensorRole::FfnDown, 0)));

  std::vector<float> own(in.size() * m->vocab_size());
  model::KvCache kv(c->arch, in.size());
  m->forward(in, kv, own, model::LogitsMode::All);
  BackwardOptions kl;
  kl.ce_weight = 0.0;
  kl.kl_weight = 1.0;
  kl.teacher_logits = own;
  Grads gk;
  EXPECT_NEAR(lm_loss_backward(*m, in, tg, gk, kl), 0.0, 1e-6);
  for (const auto& [name, v] : gk)
    for (float x : v) ASSERT_NEAR(x, 0.0f, 1e-6f) << name;
  kl.teacher_logits = std::span<const float>(own).first(3);
  EXPECT_THROW(lm_loss_backward(*m, in, tg, gk, kl), Error);
}

// Soft neuron gates and a neuron mask on the FFN activation (a variant from model::open_variant):
// the loss, every tensor's gradient and every gate's gradient against torch (grad_oracle.py,
// llama_gates.json).
TEST(Backward, SoftGatesAndMaskMatchTorch) {
  auto c = model::test::load_case("llama");
  ASSERT_TRUE(c);
  std::ifstream f(std::string(CORTIQ_SOURCE_DIR) + "/tests/golden/grad/llama_gates.json");
  ASSERT_TRUE(f);
  const auto gold = nlohmann::json::parse(f);
  auto m = exact_model(*c);
  model::Variant v = model::open_variant(*m->weights());
  const auto gates = gold["gates"].get<std::vector<std::vector<double>>>();
  for (size_t l = 0; l < gates.size(); ++l) v.ffn_scale[l].assign(gates[l].begin(), gates[l].end());
  v.ffn_alive[0].assign(gates[0].size(), 1);
  for (uint32_t i : gold["masked_layer0"].get<std::vector<uint32_t>>()) v.ffn_alive[0][i] = 0;
  BackwardOptions o;
  o.variant = &v;
  std::vector<std::vector<float>> dg;
  o.ffn_scale_grad = &dg;
  const std::span<const uint32_t> p(c->prompt);
  Grads g;
  const double loss = lm_loss_backward(*m, p.first(p.size() - 1), p.subspan(1), g, o);
  EXPECT_NEAR(loss, gold["loss"].get<double>(), 1e-5 * gold["loss"].get<double>());
  const auto close = [](const std::vector<float>& got, const std::vector<double>& want,
                        const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double scale = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::abs(want[i]));
      worst = std::max(worst, std::abs(got[i] - want[i]));
    }
    EXPECT_LE(worst, 1e-4 * scale) << what;
  };
  for (const auto& [name, want] : gold["grads"].items())
    close(g.at(name), want.get<std::vector<double>>(), name);
  const auto want_g = gold["gate_grads"].get<std::vector<std::vector<double>>>();
  ASSERT_EQ(dg.size(), want_g.size());
  for (size_t l = 0; l < dg.size(); ++l) close(dg[l], want_g[l], "gates of layer " + std::to_string(l));
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(dg[0][i], 0.0f) << "a masked neuron's gate gets no gradient";
  v.head_alive[1][0] = 0;
  EXPECT_THROW(lm_loss_backward(*m, p.first(p.size() - 1), p.subspan(1), g, o), Error);
}

// weight_grads: None gives the same loss and gate gradients as All with no weight gradient at all;
// Ffn gives exactly All's gate/up/down gradients and nothing else.
TEST(Backward, WeightGradSelection) {
  auto c = model::test::load_case("llama");
  ASSERT_TRUE(c);
  auto m = exact_model(*c);
  model::Variant v = model::open_variant(*m->weights());
  for (auto& row : v.ffn_scale) row.assign(c->arch.intermediate_size, 0.75f);
  const std::span<const uint32_t> p(c->prompt);
  const auto in = p.first(p.size() - 1), tg = p.subspan(1);
  BackwardOptions o;
  o.variant = &v;
  std::vector<std::vector<float>> dg_all, dg_none;
  o.ffn_scale_grad = &dg_all;
  Grads all;
  const double l_all = lm_loss_backward(*m, in, tg, all, o);
  o.ffn_scale_grad = &dg_none;
  o.weight_grads = BackwardOptions::WeightGrads::None;
  Grads none;
  EXPECT_EQ(lm_loss_backward(*m, in, tg, none, o), l_all);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(dg_none, dg_all);
  ASSERT_FALSE(dg_all.empty());
  EXPECT_NE(dg_all[0][0], 0.0f);
  o.ffn_scale_grad = nullptr;
  o.weight_grads = BackwardOptions::WeightGrads::Ffn;
  Grads ffn;
  lm_loss_backward(*m, in, tg, ffn, o);
  EXPECT_EQ(ffn.size(), 3u * c->arch.num_layers);
  for (const auto& [name, g] : ffn) {
    EXPECT_NE(name.find("mlp."), std::string::npos) << name;
    EXPECT_EQ(g, all.at(name)) << name;
  }
}

}  // namespace
}  // namespace cortiq::train
