// The quantization plan's per-tensor decisions (plan.h file comment, FORMAT-NOTES §1.9): the
// force-f16 list, the q2tp profile's targets, skill overlays decided as the tensor they overlay,
// and a rule overriding the name list.
#include "convert/plan.h"

#include <gtest/gtest.h>

namespace cortiq::convert {
namespace {

using quant::DType;

QuantPlan plan(const char* quant) {
  QuantPlan p;
  p.base = parse_quant(quant);
  return p;
}

DType dtype(const QuantPlan& p, const std::string& name, bool moe = false) {
  const std::vector<uint64_t> shape = {64, 64};
  return decide(p, name, shape, moe).dtype;
}

TEST(Plan, ForceF16List) {
  const QuantPlan q8 = plan("q8");
  for (const char* n :
       {"model.layers.0.mlp.gate.weight", "model.mtp.layers.0.mlp.gate.weight",
        "model.layers.3.mlp.shared_expert_gate.weight", "model.layers.3.self_attn.g_proj.weight",
        "model.layers.1.linear_attn.in_proj_a.weight", "model.layers.1.linear_attn.in_proj_b.weight",
        "model.layers.1.linear_attn.in_proj_ba.weight", "model.layers.1.linear_attn.conv1d.weight",
        "model.layers.1.short_conv.conv1d.weight", "model.layers.1.self_attn.q_norm.weight",
        "skill.code.model.layers.0.mlp.gate.weight"})
    EXPECT_EQ(dtype(q8, n), DType::F16) << n;
  for (const char* n :
       {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.experts.0.gate_proj.weight",
        "model.layers.0.mlp.shared_expert.gate_proj.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.linear_attn.in_proj_qkv.weight", "lm_head.weight"})
    EXPECT_EQ(dtype(q8, n), DType::Q8Row) << n;
  // under --quant f32 the list stays f32; a rule overrides the list
  EXPECT_EQ(dtype(plan("f32"), "model.layers.0.mlp.gate.weight"), DType::F32);
  QuantPlan ruled = q8;
  ruled.rules.push_back(parse_quant_rule("*.mlp.gate.weight=q4"));
  EXPECT_EQ(dtype(ruled, "model.layers.0.mlp.gate.weight"), DType::Q4Block);
}

TEST(Plan, Q2tpProfileTargets) {
  const QuantPlan p = plan("q2tp");
  // MoE: the experts' and the shared expert's gate/up, not the dense layers' nor the down projections
  EXPECT_EQ(dtype(p, "model.layers.0.mlp.experts.3.gate_proj.weight", true), DType::Q2TP);
  EXPECT_EQ(dtype(p, "model.layers.0.mlp.experts.3.up_proj.weight", true), DType::Q2TP);
  EXPECT_EQ(dtype(p, "model.layers.0.mlp.shared_expert.up_proj.weight", true), DType::Q2TP);
  EXPECT_EQ(dtype(p, "model.layers.0.mlp.experts.3.down_proj.weight", true), DType::Q4TP);
  EXPECT_EQ(dtype(p, "model.layers.1.mlp.gate_proj.weight", true), DType::Q4TP);
  // dense: the FFN gate/up
  EXPECT_EQ(dtype(p, "model.layers.1.mlp.gate_proj.weight"), DType::Q2TP);
  EXPECT_EQ(dtype(p, "skill.code.model.layers.1.mlp.up_proj.weight"), DType::Q2TP);
  EXPECT_EQ(dtype(p, "model.layers.1.mlp.down_proj.weight"), DType::Q4TP);
  EXPECT_EQ(dtype(p, "model.layers.1.self_attn.q_proj.weight"), DType::Q4TP);
  // never in the MTP block
  EXPECT_EQ(dtype(p, "model.mtp.layers.0.mlp.gate_proj.weight"), DType::Q4TP);
  EXPECT_EQ(dtype(p, "model.mtp.layers.0.mlp.experts.0.gate_proj.weight", true), DType::Q4TP);
}

}  // namespace
}  // namespace cortiq::convert
