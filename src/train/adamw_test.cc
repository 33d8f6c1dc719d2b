// AdamW (adamw.h): ten steps of training the llama forward-parity model on its prompt equal
// torch.optim.AdamW's in float64 (tests/oracles/grad_oracle.py: the losses and the final values of
// three tensors); the schedule and the clipping by their definitions.
#include "train/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/ops.h"
#include "model/test_support.h"
#include "util/error.h"

namespace cortiq::train {
namespace {

TEST(AdamW, TenStepsEqualTorch) {
  auto c = model::test::load_case("llama");
  ASSERT_TRUE(c);
  std::ifstream f(std::string(CORTIQ_SOURCE_DIR) + "/tests/golden/grad/llama.json");
  ASSERT_TRUE(f);
  const auto gold = nlohmann::json::parse(f).at("adamw");
  Params p = Params::from_source(c->src);
  AdamWOptions o;
  o.beta1 = gold["beta1"];
  o.beta2 = gold["beta2"];
  o.eps = gold["eps"];
  o.weight_decay = gold["weight_decay"];
  AdamW opt(o);
  model::ModelOptions mo;
  mo.kernels = kernels::KernelConfig{kernels::MatmulMode::Exact, kernels::simd_tier()};
  const auto want = gold["losses"].get<std::vector<double>>();
  for (size_t s = 0; s < want.size(); ++s) {
    auto m = model::Model::bind(c->arch, p, mo);
    Grads g;
    const double loss = lm_loss_backward(*m, c->prompt, g);
    EXPECT_NEAR(loss, want[s], 1e-5 * want[s]) << "step " << s;
    opt.step(p, g, gold["lr"].get<double>());
  }
  EXPECT_EQ(opt.steps(), 10u);
  for (const auto& [name, vals] : gold["params"].items()) {
    const auto w = vals.get<std::vector<double>>();
    const auto& got = p.all().at(name).value;
    ASSERT_EQ(got.size(), w.size());
    double scale = 0, worst = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      scale = std::max(scale, std::abs(w[i]));
      worst = std::max(worst, std::abs(got[i] - w[i]));
    }
    EXPECT_LE(worst, 1e-5 * scale) << name;
  }
}

TEST(AdamW, FrozenParametersStay) {
  Params p;
  p.add("a", {2}, {1.0f, 2.0f});
  p.add("b", {2}, {1.0f, 2.0f});
  p.all().at("b").frozen = true;
  Grads g{{"a", {0.5f, -0.5f}}, {"b", {0.5f, -0.5f}}};
  AdamW opt;
  opt.step(p, g, 0.1);
  // first step: m̂ = g, v̂ = g², so the move is lr·sign(g) (eps aside) after the decay
  EXPECT_NEAR(p.all().at("a").value[0], 1.0 * (1 - 0.1 * 0.1) - 0.1, 1e-6);
  EXPECT_NEAR(p.all().at("a").value[1], 2.0 * (1 - 0.1 * 0.1) + 0.1, 1e-6);
  EXPECT_EQ(p.all().at("b").value, (std::vector<float>{1.0f, 2.0f}));
  Grads bad{{"a", {1.0f}}};
  EXPECT_THROW(opt.step(p, bad, 0.1), Error);
}

TEST(Schedule, WarmupThenCosineToTheFloor) {
  EXPECT_DOUBLE_EQ(lr_at(0, 10, 110, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(9, 10, 110, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(10, 10, 110, 1.0, 0.1), 1.0);
  EXPECT_NEAR(lr_at(60, 10, 110, 1.0, 0.1), 0.55, 1e-12);  // half way: the mean of lr and min_lr
  EXPECT_DOUBLE_EQ(lr_at(110, 10, 110, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(500, 10, 110, 1.0, 0.1), 0.1);
}

TEST(Clip, ScalesToTheMaxNormAndReportsTheNormBefore) {
  Grads g{{"a", {3.0f}}, {"b", {4.0f}}};
  EXPECT_DOUBLE_EQ(clip_grad_norm(g, 1.0), 5.0);
  EXPECT_NEAR(g["a"][0], 0.6f, 1e-7);
  EXPECT_NEAR(g["b"][0], 0.8f, 1e-7);
  EXPECT_NEAR(clip_grad_norm(g, 10.0), 1.0, 1e-7);  // under the bound: unchanged
  EXPECT_NEAR(g["a"][0], 0.6f, 1e-7);
}

}  // namespace
}  // namespace cortiq::train
