#include "cmf/tensor_names.h"

#include <gtest/gtest.h>

#include "util/error.h"

namespace cortiq::cmf {
namespace {

// Every role names a tensor the way HF checkpoints (and so CMF files) spell it, and parses back.
TEST(TensorNames, RolesSpellTheHfNamesAndParseBack) {
  EXPECT_EQ(tensor_name(TensorRole::Embed), "model.embed_tokens.weight");
  EXPECT_EQ(tensor_name(TensorRole::Head), "lm_head.weight");
  EXPECT_EQ(tensor_name(TensorRole::Q, 3), "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(tensor_name(TensorRole::VBias, 0), "model.layers.0.self_attn.v_proj.bias");
  EXPECT_EQ(tensor_name(TensorRole::FfnDown, 27), "model.layers.27.mlp.down_proj.weight");
  EXPECT_EQ(tensor_name(TensorRole::Router, 1), "model.layers.1.mlp.gate.weight");
  EXPECT_EQ(tensor_name(TensorRole::ExpertUp, 2, 63), "model.layers.2.mlp.experts.63.up_proj.weight");
  EXPECT_EQ(tensor_name(TensorRole::SharedExpertGate, 5), "model.layers.5.mlp.shared_expert_gate.weight");
  EXPECT_EQ(tensor_name(TensorRole::MtpEhProj), "model.mtp.eh_proj.weight");
  for (int r = 0; r <= static_cast<int>(TensorRole::MtpNorm); ++r) {
    const auto role = static_cast<TensorRole>(r);
    const std::string n = tensor_name(role, 12, 7);
    const auto p = parse_tensor_name(n);
    ASSERT_TRUE(p) << n;
    EXPECT_EQ(p->role, role) << n;
    EXPECT_EQ(p->layer, is_layer_role(role) ? 12u : 0u) << n;
  }
  const auto e = parse_tensor_name("model.layers.4.mlp.experts.10.down_proj.weight");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->role, TensorRole::ExpertDown);
  EXPECT_EQ(e->layer, 4u);
  EXPECT_EQ(e->expert, 10u);
}

TEST(TensorNames, OtherNamesAreNotRoles) {
  for (const char* n :
       {"", "model.layers.", "model.layers.x.mlp.up_proj.weight", "model.layers.01.mlp.up_proj.weight",
        "model.layers.3.mlp.up_proj", "model.layers.3.mlp.experts.1.gate.weight",
        "model.layers.99999999999.mlp.up_proj.weight", "skill.a.lm_head.weight", "rope.freqs"})
    EXPECT_FALSE(parse_tensor_name(n)) << n;
}

// What masks and defrag prune: gate/up rows, down columns.
TEST(TensorNames, NeuronAxisOfTheFfnTensors) {
  EXPECT_EQ(neuron_axis(TensorRole::FfnGate), NeuronAxis::Rows);
  EXPECT_EQ(neuron_axis(TensorRole::FfnUp), NeuronAxis::Rows);
  EXPECT_EQ(neuron_axis(TensorRole::FfnDown), NeuronAxis::Cols);
  EXPECT_EQ(neuron_axis(TensorRole::ExpertDown), NeuronAxis::Cols);
  EXPECT_EQ(neuron_axis(TensorRole::SharedUp), NeuronAxis::Rows);
  EXPECT_EQ(neuron_axis(TensorRole::Q), NeuronAxis::None);
  EXPECT_EQ(neuron_axis(TensorRole::Router), NeuronAxis::None);
}

TEST(TensorNames, SkillOverlayNames) {
  EXPECT_EQ(skill_tensor_name("code", "model.layers.3.mlp.up_proj.weight"),
            "skill.code.model.layers.3.mlp.up_proj.weight");
  const auto p = parse_skill_name("skill.code.model.layers.3.mlp.up_proj.weight");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->first, "code");
  EXPECT_EQ(p->second, "model.layers.3.mlp.up_proj.weight");
  EXPECT_FALSE(parse_skill_name("skill..x"));
  EXPECT_FALSE(parse_skill_name("skill.code"));
  EXPECT_FALSE(parse_skill_name("model.norm.weight"));
  EXPECT_THROW(skill_tensor_name("a.b", "lm_head.weight"), Error);
  EXPECT_THROW(skill_tensor_name("", "lm_head.weight"), Error);
}

}  // namespace
}  // namespace cortiq::cmf
