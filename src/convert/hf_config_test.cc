#include "convert/hf_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "convert/plan.h"
#include "util/error.h"

namespace cortiq::convert {
namespace {

using nlohmann::json;

json base_cfg(const std::string& mt) {
  return json{{"model_type", mt},         {"hidden_size", 64},
              {"intermediate_size", 96},  {"num_hidden_layers", 4},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2},
              {"vocab_size", 100},        {"max_position_embeddings", 1024},
              {"rms_norm_eps", 1e-5},     {"rope_theta", 10000.0}};
}

ErrorKind kind_of(const json& c) {
  try {
    arch_from_hf(c);
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::Signature;
}

// PITFALLS RUN-1: Llama-3.2-1B inverse frequencies after llama3 scaling.
TEST(HfConfig, Llama3RopeFactorsMatchHf) {
  json c = base_cfg("llama");
  c["hidden_size"] = 2048;
  c["num_attention_heads"] = 32;
  c["num_key_value_heads"] = 8;
  c["head_dim"] = 64;
  c["rope_theta"] = 500000.0;
  c["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  auto a = arch_from_hf(c);
  ASSERT_TRUE(a.rope_freq_factors.has_value());
  ASSERT_EQ(a.rope_freq_factors->size(), 32u);
  auto inv = [&](int i) { return 1.0 / std::pow(500000.0, 2.0 * i / 64) / (*a.rope_freq_factors)[i]; };
  EXPECT_NEAR(inv(14), 3.211445995e-3, 1e-11);
  EXPECT_NEAR(inv(15), 1.290547928e-3, 1e-11);
  EXPECT_NEAR(inv(16), 4.295567966e-4, 1e-12);
  EXPECT_NEAR(inv(17), 9.708287803e-5, 1e-13);
  EXPECT_NEAR(inv(18), 1.946163818e-5, 1e-14);
  EXPECT_NEAR(inv(31), 9.418306725e-8, 1e-16);
  EXPECT_EQ((*a.rope_freq_factors)[0], 1.0);
  EXPECT_EQ((*a.rope_freq_factors)[31], 32.0);
  // Legacy key "type" is accepted too; 8B: i = 63 divided by 8.
  c["head_dim"] = 128;
  c["rope_scaling"] = {{"type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  a = arch_from_hf(c);
  EXPECT_NEAR(1.0 / std::pow(500000.0, 126.0 / 128) / (*a.rope_freq_factors)[63], 3.068925989e-7, 1e-15);
  EXPECT_EQ((*a.rope_freq_factors)[28], 1.0);
  EXPECT_GT((*a.rope_freq_factors)[29], 1.0);
  EXPECT_LT((*a.rope_freq_factors)[34], 8.0);
}

TEST(HfConfig, LinearYarnDynamicAndRefusals) {
  json c = base_cfg("llama");
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  auto a = arch_from_hf(c);
  ASSERT_TRUE(a.rope_freq_factors);
  EXPECT_EQ(*a.rope_freq_factors, std::vector<double>(8, 4.0));  // head_dim 16 → 8 pairs
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 256}};
  a = arch_from_hf(c);
  ASSERT_TRUE(a.yarn);
  EXPECT_EQ(a.yarn->factor, 4.0);
  EXPECT_EQ(a.yarn->original_max_position_embeddings, 256u);
  EXPECT_NEAR(a.yarn->attention_factor, 0.1 * std::log(4.0) + 1, 1e-12);
  EXPECT_EQ(a.yarn->beta_fast, 32.0);
  c["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  a = arch_from_hf(c);
  EXPECT_FALSE(a.yarn);
  EXPECT_FALSE(a.rope_freq_factors);
  c["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  try {
    arch_from_hf(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.message().find("llama"), std::string::npos);
    EXPECT_NE(e.message().find("rope_scaling"), std::string::npos);
  }
  c = base_cfg("llama");
  c["mlp_bias"] = true;
  EXPECT_EQ(kind_of(c), ErrorKind::Unsupported);
  c = base_cfg("llama");
  c["hidden_act"] = "gelu";
  EXPECT_EQ(kind_of(c), ErrorKind::Unsupported);
  c = base_cfg("mamba");
  try {
    arch_from_hf(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.message().find("'mamba'"), std::string::npos);
  }
  c = base_cfg("llama");
  c.erase("hidden_size");
  EXPECT_EQ(kind_of(c), ErrorKind::Parse);
  c = base_cfg("llama");
  c["num_key_value_heads"] = 3;
  EXPECT_EQ(kind_of(c), ErrorKind::Unsupported);
}

TEST(HfConfig, FamiliesFields) {
  json c = base_cfg("llama");
  auto a = arch_from_hf(c);
  EXPECT_EQ(a.arch_name, "llama");
  EXPECT_EQ(a.head_dim, 16u);
  EXPECT_EQ(a.norm_style, cmf::NormStyle::Qwen);
  EXPECT_FALSE(a.tie_word_embeddings);
  EXPECT_EQ(a.layer_types, std::vector<cmf::LayerType>(4, cmf::LayerType::FullAttention));

  c = base_cfg("gemma2");
  c["head_dim"] = 32;
  c["sliding_window"] = 128;
  c["attn_logit_softcapping"] = 50.0;
  c["final_logit_softcapping"] = 30.0;
  c["query_pre_attn_scalar"] = 224;
  a = arch_from_hf(c);
  EXPECT_EQ(a.norm_style, cmf::NormStyle::Gemma);
  EXPECT_EQ(a.hidden_act, cmf::HiddenAct::GeluTanh);
  EXPECT_TRUE(a.tie_word_embeddings);
  EXPECT_EQ(a.embed_multiplier, 8.0);
  EXPECT_EQ(a.attn_logit_softcapping, 50.0);
  EXPECT_EQ(a.final_logit_softcapping, 30.0);
  EXPECT_EQ(a.query_pre_attn_scalar, 224.0);
  EXPECT_EQ(a.sliding_window, 128u);
  EXPECT_EQ(a.sliding_window_pattern, 2u);
  EXPECT_EQ(a.layer_types[0], cmf::LayerType::SlidingAttention);
  EXPECT_EQ(a.layer_types[1], cmf::LayerType::FullAttention);

  c = base_cfg("gemma3_text");
  c["num_hidden_layers"] = 12;
  c["sliding_window"] = 512;
  c["sliding_window_pattern"] = 6;
  c["rope_theta"] = 1e6;
  c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  json wrapper = {{"model_type", "gemma3"}, {"text_config", c}, {"tie_word_embeddings", false}};
  a = arch_from_hf(wrapper);
  EXPECT_EQ(a.arch_name, "gemma3_text");
  EXPECT_FALSE(a.tie_word_embeddings);
  EXPECT_EQ(a.rope_local_base_freq, 10000.0);
  EXPECT_EQ(a.rope_theta, 1e6);
  EXPECT_EQ(a.sliding_window_pattern, 6u);
  EXPECT_EQ(a.layer_types[5], cmf::LayerType::FullAttention);
  EXPECT_EQ(a.layer_types[4], cmf::LayerType::SlidingAttention);
  EXPECT_EQ(a.layer_types[11], cmf::LayerType::FullAttention);
  ASSERT_TRUE(a.rope_freq_factors);
  EXPECT_EQ(a.rope_freq_factors->front(), 8.0);

  c = base_cfg("mistral");
  c["sliding_window"] = 4096;
  a = arch_from_hf(c);
  EXPECT_EQ(a.layer_types, std::vector<cmf::LayerType>(4, cmf::LayerType::SlidingAttention));
  EXPECT_EQ(a.sliding_window, 4096u);
  c["sliding_window"] = nullptr;
  EXPECT_EQ(arch_from_hf(c).layer_types[0], cmf::LayerType::FullAttention);

  c = base_cfg("qwen2");
  c["sliding_window"] = 64;
  c["use_sliding_window"] = false;
  EXPECT_FALSE(arch_from_hf(c).sliding_window);
  c["use_sliding_window"] = true;
  c["max_window_layers"] = 2;
  a = arch_from_hf(c);
  EXPECT_EQ(a.layer_types[1], cmf::LayerType::FullAttention);
  EXPECT_EQ(a.layer_types[2], cmf::LayerType::SlidingAttention);

  c = base_cfg("qwen2_moe");
  c["num_experts"] = 8;
  c["num_experts_per_tok"] = 2;
  c["moe_intermediate_size"] = 32;
  c["shared_expert_intermediate_size"] = 64;
  a = arch_from_hf(c);
  ASSERT_TRUE(a.moe);
  EXPECT_EQ(a.moe->num_experts, 8u);
  EXPECT_EQ(a.moe->top_k, 2u);
  EXPECT_EQ(a.moe->moe_intermediate_size, 32u);
  EXPECT_FALSE(a.moe->norm_topk_prob);
  EXPECT_EQ(a.moe->shared_expert_intermediate_size, 64u);
  c["model_type"] = "qwen3_moe";
  c["norm_topk_prob"] = true;
  a = arch_from_hf(c);
  EXPECT_TRUE(a.moe->norm_topk_prob);
  EXPECT_FALSE(a.moe->shared_expert_intermediate_size);

  c = base_cfg("phi3");
  c["partial_rotary_factor"] = 0.75;
  c["mtp_num_hidden_layers"] = 1;
  a = arch_from_hf(c);
  EXPECT_EQ(a.partial_rotary_factor, 0.75);
  ASSERT_TRUE(a.mtp);
  EXPECT_EQ(a.mtp->num_layers, 1u);
  EXPECT_EQ(rotary_dims(16, 0.75), 12u);
}

TEST(HfConfig, BundleEosUnionAndTemplate) {
  HfFiles f;
  f.config = base_cfg("qwen2");
  f.config["eos_token_id"] = 151643;
  f.config["bos_token_id"] = 151643;
  f.generation_config = {{"eos_token_id", {151645, 151643}}, {"pad_token_id", 151643}};
  f.tokenizer_config = {
      {"eos_token", "<|im_end|>"},
      {"chat_template", "{{ x }}"},
      {"added_tokens_decoder",
       {{"151645", {{"content", "<|im_end|>"}}}, {"151644", {{"content", "<|im_start|>"}}}}}};
  auto b = bundle_from_hf(f);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->eos_token_ids, (std::vector<uint32_t>{151645, 151643}));
  EXPECT_EQ(b->chat_template, "{{ x }}");
  EXPECT_EQ(b->bos_token_id, 151643u);
  EXPECT_EQ(b->pad_token_id, 151643u);
  f.chat_template_jinja = "  \n";  // blank file: falls back to tokenizer_config
  EXPECT_EQ(bundle_from_hf(f)->chat_template, "{{ x }}");
  f.chat_template_jinja = "J";
  EXPECT_EQ(bundle_from_hf(f)->chat_template, "J");
  // eos_token found only in tokenizer.json (decision 13: union).
  f.generation_config = nullptr;
  f.tokenizer_config = {{"eos_token", {{"content", "</s>"}}}};
  f.tokenizer_json = R"({"added_tokens":[{"id":7,"content":"</s>"}],"model":{"vocab":{}}})";
  b = bundle_from_hf(f);
  EXPECT_EQ(b->eos_token_ids, (std::vector<uint32_t>{151643, 7}));
  HfFiles empty;
  empty.config = base_cfg("llama");
  EXPECT_FALSE(bundle_from_hf(empty));
}

// `convert model.cmf`: the error says the path is a file (and which command re-encodes a .cmf),
// not that it does not exist; a missing path still says so.
TEST(HfConfig, ReadHfFilesNamesAFileThatIsNotAFolder) {
  const auto file = std::filesystem::temp_directory_path() / ("cortiq_hf_file_" + std::to_string(::getpid()));
  std::ofstream(file) << "CMF";
  for (const auto& [path, want] : {std::pair{file.string(), std::string("is a file, not a model directory")},
                                   std::pair{file.string() + ".missing", std::string("does not exist")}}) {
    try {
      read_hf_files(path);
      ADD_FAILURE() << path << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Io);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(file);
}

TEST(QuantPlan, SpellingsRulesAndPolicy) {
  EXPECT_EQ(parse_quant("q8row").dtype, quant::DType::Q8Row);
  EXPECT_EQ(parse_quant("Q82F").dtype, quant::DType::Q8_2F);
  EXPECT_EQ(parse_quant("q4block").dtype, quant::DType::Q4Block);
  EXPECT_EQ(parse_quant("q4_tiled").dtype, quant::DType::Q4Tiled);
  EXPECT_EQ(parse_quant("q4t_pred").dtype, quant::DType::Q4TP);
  EXPECT_TRUE(parse_quant("q2t_pred").q2tp_profile);
  EXPECT_EQ(parse_quant("fp16").dtype, quant::DType::F16);
  EXPECT_EQ(parse_quant("v_bit").dtype, quant::DType::VBitRo);
  EXPECT_TRUE(parse_quant("q1_ptq").q1p);
  EXPECT_EQ(parse_quant("q1_mask").dtype, quant::DType::Q1S);
  EXPECT_EQ(parse_quant("q1_ternary").dtype, quant::DType::Q1T);
  EXPECT_THROW(parse_quant("q3"), Error);
  EXPECT_EQ(parse_quant("Q1").name, "q1");
  EXPECT_FALSE(parse_quant("q1").q1p);
  EXPECT_FALSE(parse_quant("q4tp").q2tp_profile);
  // the refusal lists every spelling, and points a llama.cpp name at the nearest codec
  for (const char* name : {"q3", "Q8_0", "q4_k_m"}) try {
      (void)parse_quant(name);
      ADD_FAILURE() << name;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(m.find("q8 (q8_row/q8row)"), std::string::npos) << m;
      EXPECT_NE(m.find("vbit (v_bit/vbit_ro)"), std::string::npos) << m;
      EXPECT_EQ(m.find("GGUF") != std::string::npos, std::string(name) != "q3") << m;
    }
  EXPECT_THROW(parse_quant_rule("noequals"), Error);
  EXPECT_THROW(parse_quant_rule("*=zz"), Error);

  EXPECT_TRUE(glob_match("*.self_attn.*", "model.layers.3.self_attn.q_proj.weight"));
  EXPECT_FALSE(glob_match("*.self_attn.*", "model.layers.3.mlp.up_proj.weight"));
  EXPECT_TRUE(glob_match("model.layers.?.mlp.*", "model.layers.3.mlp.up_proj.weight"));
  EXPECT_FALSE(glob_match("model.layers.?.mlp.*", "model.layers.13.mlp.up_proj.weight"));
  EXPECT_TRUE(glob_match("lm_head.weight", "lm_head.weight"));

  QuantPlan p;
  p.base = parse_quant("q4tp");
  p.rules.push_back(parse_quant_rule("*.self_attn.*=q8"));
  p.rules.push_back(parse_quant_rule("*.q_proj.*=f32"));  // shadowed: first match wins
  const std::vector<uint64_t> m{64, 64}, odd{64, 172}, v1{64}, tiny{2, 8};
  EXPECT_EQ(decide(p, "model.layers.0.self_attn.q_proj.weight", m, false).dtype, quant::DType::Q8Row);
  EXPECT_EQ(decide(p, "model.layers.0.mlp.up_proj.weight", m, false).dtype, quant::DType::Q4TP);
  EXPECT_EQ(decide(p, "model.layers.0.mlp.down_proj.weight", odd, false).dtype, quant::DType::Q8_2F);
  EXPECT_EQ(decide(p, "model.layers.0.input_layernorm.weight", v1, false).dtype, quant::DType::F16);
  EXPECT_EQ(decide(p, "model.x.weight", tiny, false).dtype, quant::DType::F16);
  EXPECT_EQ(decide(p, "model.layers.0.mlp.gate.weight", m, true).dtype, quant::DType::F16);
  EXPECT_EQ(decide(p, "model.layers.0.mlp.shared_expert_gate.weight", m, true).dtype, quant::DType::F16);
  EXPECT_EQ(decide(p, "x.tid2eid", m, true).dtype, quant::DType::F32);
  // A rule overrides the router policy but not the shape rules.
  p.rules.insert(p.rules.begin(), parse_quant_rule("*.mlp.gate.weight=q8"));
  EXPECT_EQ(decide(p, "model.layers.0.mlp.gate.weight", m, true).dtype, quant::DType::Q8Row);
  p.rules.insert(p.rules.begin(), parse_quant_rule("*down_proj*=q4t"));
  EXPECT_EQ(decide(p, "model.layers.0.mlp.down_proj.weight", odd, false).dtype, quant::DType::Q8_2F);
  EXPECT_EQ(decide(p, "model.layers.0.mlp.down_proj.weight", m, false).dtype, quant::DType::Q4Tiled);
  // --mean-bits steers vbit only: refused on a plan without it, taken once a rule stores vbit
  EXPECT_FALSE(p.uses_vbit());
  try {
    p.set_mean_bits(3.5);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--mean-bits applies to vbit"), std::string::npos) << e.message();
  }
  p.rules.push_back(parse_quant_rule("*.mlp.*=vbit"));
  EXPECT_TRUE(p.uses_vbit());
  p.set_mean_bits(3.5);
  EXPECT_EQ(p.mean_bits, 3.5f);
  EXPECT_THROW(p.set_mean_bits(9), Error);
  p.rules.pop_back();
  // q4_block and q8 do not need in % 32.
  QuantPlan q4;
  q4.base = parse_quant("q4");
  EXPECT_EQ(decide(q4, "model.layers.0.mlp.down_proj.weight", odd, false).dtype, quant::DType::Q4Block);
  // Float base: everything in that dtype.
  QuantPlan f32;
  f32.base = parse_quant("f32");
  EXPECT_EQ(decide(f32, "model.layers.0.input_layernorm.weight", v1, false).dtype, quant::DType::F32);
  EXPECT_EQ(decide(f32, "model.layers.0.mlp.gate.weight", m, true).dtype, quant::DType::F32);
  // q2tp profile.
  QuantPlan q2;
  q2.base = parse_quant("q2tp");
  EXPECT_EQ(decide(q2, "model.layers.0.mlp.experts.3.gate_proj.weight", m, true).dtype, quant::DType::Q2TP);
  EXPECT_EQ(decide(q2, "model.layers.0.mlp.shared_expert.up_proj.weight", m, true).dtype, quant::DType::Q2TP);
  EXPECT_EQ(decide(q2, "model.layers.0.mlp.experts.3.down_proj.weight", m, true).dtype, quant::DType::Q4TP);
  EXPECT_EQ(decide(q2, "model.layers.0.mlp.gate_proj.weight", m, true).dtype, quant::DType::Q4TP);
  EXPECT_EQ(decide(q2, "model.layers.0.mlp.gate_proj.weight", m, false).dtype, quant::DType::Q2TP);
  EXPECT_EQ(decide(q2, "model.mtp.layers.0.mlp.gate_proj.weight", m, false).dtype, quant::DType::Q4TP);
  EXPECT_EQ(decide(q2, "model.layers.0.self_attn.q_proj.weight", m, false).dtype, quant::DType::Q4TP);
  EXPECT_EQ(header_quant_type(q2.base), cmf::QuantType::Q4Block);
  EXPECT_EQ(p.to_json()["rules"].size(), 4u);
  EXPECT_EQ(p.to_json()["quant"], "q4tp");
}

}  // namespace
}  // namespace cortiq::convert
