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

// The roles convert and the quantization plan name (FORMAT-NOTES §1.9 force-f16 list; HF Phi3's
// fused projections), spelled as the checkpoints spell them, and parsing back like the others.
TEST(TensorNames, PlanAndSourceRolesSpellTheirHfNames) {
  EXPECT_EQ(tensor_name(TensorRole::AttnGate, 2), "model.layers.2.self_attn.g_proj.weight");
  EXPECT_EQ(tensor_name(TensorRole::GdnInProjA, 0), "model.layers.0.linear_attn.in_proj_a.weight");
  EXPECT_EQ(tensor_name(TensorRole::GdnInProjB, 0), "model.layers.0.linear_attn.in_proj_b.weight");
  EXPECT_EQ(tensor_name(TensorRole::GdnInProjBa, 0), "model.layers.0.linear_attn.in_proj_ba.weight");
  EXPECT_EQ(tensor_name(TensorRole::FusedQkv, 1), "model.layers.1.self_attn.qkv_proj.weight");
  EXPECT_EQ(tensor_name(TensorRole::FusedGateUp, 1), "model.layers.1.mlp.gate_up_proj.weight");
  for (int r = static_cast<int>(TensorRole::AttnGate); r <= static_cast<int>(TensorRole::FusedGateUp); ++r) {
    const auto role = static_cast<TensorRole>(r);
    const auto p = parse_tensor_name(tensor_name(role, 9));
    ASSERT_TRUE(p) << r;
    EXPECT_EQ(p->role, role);
    EXPECT_EQ(p->layer, 9u);
    EXPECT_TRUE(is_layer_role(role));
  }
}

// The MTP block's layer (ENGINE-NOTES §3.9: `model.mtp.layers.0.self_attn.q_proj` …) and modules.
TEST(TensorNames, MtpLayerNamesAndModules) {
  EXPECT_EQ(tensor_name(TensorName{TensorRole::Q, 0, 0, true}), "model.mtp.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(tensor_name(TensorName{TensorRole::ExpertDown, 2, 5, true}),
            "model.mtp.layers.2.mlp.experts.5.down_proj.weight");
  EXPECT_EQ(tensor_name(TensorName{TensorRole::FinalNorm}), "model.norm.weight");
  EXPECT_THROW(tensor_name(TensorName{TensorRole::MtpEhProj, 0, 0, true}), Error);
  // parse_tensor_name is the trunk's: an MTP layer's tensor is no role there
  EXPECT_FALSE(parse_tensor_name("model.mtp.layers.0.self_attn.q_proj.weight"));
  EXPECT_EQ(tensor_module({TensorRole::QBias, 3}), "model.layers.3.self_attn.q_proj");
  EXPECT_EQ(tensor_module({TensorRole::Q, 3}), "model.layers.3.self_attn.q_proj");
  EXPECT_EQ(tensor_module({TensorRole::ExpertGate, 1, 2}), "model.layers.1.mlp.experts.2.gate_proj");
  EXPECT_EQ(tensor_module({TensorRole::Router, 4, 0, true}), "model.mtp.layers.4.mlp.gate");
  EXPECT_EQ(tensor_module({TensorRole::Head}), "lm_head");
  EXPECT_EQ(tensor_module({TensorRole::MtpEnorm}), "model.mtp.enorm");
}

TEST(TensorNames, PlaceOfNamesRolesDoNotSpellWhole) {
  using R = TensorRole;
  constexpr auto none = std::nullopt;
  struct Case {
    const char* name;
    bool mtp;
    std::optional<uint32_t> layer;
    bool in_experts;
    std::optional<uint32_t> expert;
    std::optional<TensorRole> module;
    const char* tail;
  };
  const Case cases[] = {
      {"model.layers.3.self_attn.o_proj.bias", false, 3, false, none, R::O, "bias"},
      {"model.mtp.layers.0.mlp.experts.7.up_proj.weight", true, 0, true, 7, R::ExpertUp, "weight"},
      {"model.mtp.eh_proj.weight", true, none, false, none, R::MtpEhProj, "weight"},
      // a packed expert bank: under the experts, of no expert and no role
      {"model.layers.2.mlp.experts.gate_up_proj", false, 2, true, none, none, ""},
      {"model.layers.2.mlp.gate.e_score_correction_bias", false, 2, false, none, R::Router,
       "e_score_correction_bias"},
      {"model.layers.2.mlp.gate_proj.weight", false, 2, false, none, R::FfnGate, "weight"},
      {"model.norm.weight", false, none, false, none, R::FinalNorm, "weight"},
      {"model.layers.2.linear_attn.A_log", false, 2, false, none, none, ""},
      {"lm_head", false, none, false, none, none, ""},
      {"model.normx.weight", false, none, false, none, none, ""},
      {"model.layers.01.mlp.up_proj.weight", false, none, false, none, none, ""},
      {"x.lm_head.weight", false, none, false, none, none, ""},
  };
  for (const Case& c : cases) {
    const TensorPlace p = tensor_place(c.name);
    EXPECT_EQ(p.mtp, c.mtp) << c.name;
    EXPECT_EQ(p.layer, c.layer) << c.name;
    EXPECT_EQ(p.in_experts, c.in_experts) << c.name;
    EXPECT_EQ(p.expert, c.expert) << c.name;
    EXPECT_EQ(p.module, c.module) << c.name;
    EXPECT_EQ(p.tail, c.tail) << c.name;
  }
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
