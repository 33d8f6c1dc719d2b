// GGUF → HF mapping: tensor names, the Q/K row order llama.cpp's converter changed, and the
// config.json a GGUF's metadata stands for (stories260K-f32.gguf against stories260K-hf's
// config.json, read through arch_from_hf).
#include "convert/gguf_model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <tuple>

#include "convert/hf_config.h"
#include "util/error.h"

namespace cortiq::convert {
namespace {

// The message list names the table's architectures, in its order.
TEST(GgufModel, ArchitectureListMatchesTheTable) {
  EXPECT_EQ(gguf_architectures(), "llama, qwen2, qwen3, phi3, gemma, gemma2, deci");
}

// gemma2's sandwich norms (gguf-py ATTN_POST_NORM / FFN_PRE_NORM / FFN_POST_NORM); ffn_norm is the
// pre-FFN norm there and post_attention_layernorm elsewhere.
TEST(GgufModel, Gemma2NormNames) {
  EXPECT_EQ(hf_name_from_gguf("blk.1.post_attention_norm.weight", "gemma2"),
            "model.layers.1.post_attention_layernorm.weight");
  EXPECT_EQ(hf_name_from_gguf("blk.1.ffn_norm.weight", "gemma2"),
            "model.layers.1.pre_feedforward_layernorm.weight");
  EXPECT_EQ(hf_name_from_gguf("blk.1.post_ffw_norm.weight", "gemma2"),
            "model.layers.1.post_feedforward_layernorm.weight");
  EXPECT_EQ(hf_name_from_gguf("blk.1.ffn_norm.weight", "gemma"),
            "model.layers.1.post_attention_layernorm.weight");
  EXPECT_THROW(hf_name_from_gguf("blk.1.post_ffw_norm.weight", "gemma"), Error);
}

TEST(GgufModel, TensorNames) {
  EXPECT_EQ(hf_name_from_gguf("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(hf_name_from_gguf("output_norm.weight"), "model.norm.weight");
  EXPECT_EQ(hf_name_from_gguf("output.weight"), "lm_head.weight");
  EXPECT_EQ(hf_name_from_gguf("blk.0.attn_norm.weight"), "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(hf_name_from_gguf("blk.12.attn_q.weight"), "model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(hf_name_from_gguf("blk.3.attn_k.bias"), "model.layers.3.self_attn.k_proj.bias");
  EXPECT_EQ(hf_name_from_gguf("blk.3.attn_output.weight"), "model.layers.3.self_attn.o_proj.weight");
  EXPECT_EQ(hf_name_from_gguf("blk.3.ffn_norm.weight"), "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(hf_name_from_gguf("blk.3.ffn_down.weight"), "model.layers.3.mlp.down_proj.weight");
  EXPECT_EQ(hf_name_from_gguf("rope_freqs.weight"), "");
  EXPECT_EQ(hf_name_from_gguf("blk.1.attn_q_norm.weight", "qwen3"), "model.layers.1.self_attn.q_norm.weight");
  // phi3's fused projections keep HF's fused names (convert splits them); ffn_up is gate and up
  EXPECT_EQ(hf_name_from_gguf("blk.1.attn_qkv.weight", "phi3"), "model.layers.1.self_attn.qkv_proj.weight");
  EXPECT_EQ(hf_name_from_gguf("blk.1.ffn_up.weight", "phi3"), "model.layers.1.mlp.gate_up_proj.weight");
  EXPECT_EQ(hf_name_from_gguf("blk.1.ffn_up.weight", "llama"), "model.layers.1.mlp.up_proj.weight");
  for (const char* bad : {"blk.x.attn_q.weight", "blk.1.attn_qq.weight", "blk.1.ffn_gate_exps.weight", "foo"})
    try {
      (void)hf_name_from_gguf(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
      EXPECT_NE(e.message().find(bad), std::string::npos) << e.what();
    }
}

// convert_hf_to_gguf's permute on 2 heads of head_dim 4 (rows h·4 + [0 1 2 3] → h·4 + [0 2 1 3]),
// 3 columns: undoing it gives the HF rows back.
TEST(GgufModel, UnpermuteQkRows) {
  const uint64_t rows = 8, cols = 3;
  std::vector<float> hf(rows * cols);
  std::iota(hf.begin(), hf.end(), 0.0f);
  // GGUF row h·hd + 2j + i = HF row h·hd + i·hd/2 + j
  std::vector<float> gguf(rows * cols);
  for (uint64_t h = 0; h < 2; ++h)
    for (uint64_t i = 0; i < 2; ++i)
      for (uint64_t j = 0; j < 2; ++j)
        for (uint64_t c = 0; c < cols; ++c)
          gguf[(h * 4 + 2 * j + i) * cols + c] = hf[(h * 4 + i * 2 + j) * cols + c];
  EXPECT_EQ(gguf[1 * cols], hf[2 * cols]);  // row 1 of the GGUF is HF row 2
  unpermute_qk_rows(gguf, rows, cols, 2, "q");
  EXPECT_EQ(gguf, hf);
  std::vector<float> odd(6 * cols);
  EXPECT_THROW(unpermute_qk_rows(odd, 6, cols, 2, "k"), Error);  // head_dim 3 is odd
}

TEST(GgufModel, ConfigOfStories260K) {
  const std::filesystem::path shared = std::filesystem::path(CORTIQ_SOURCE_DIR) / "../shared/models";
  if (!std::filesystem::exists(shared / "stories260K-gguf/stories260K-f32.gguf"))
    GTEST_SKIP() << "../shared missing";
  const GgufFile g((shared / "stories260K-gguf/stories260K-f32.gguf").string());
  const auto c = hf_config_from_gguf(g);
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_EQ(c["rms_norm_eps"], 1e-5);
  const auto from_gguf = cmf::arch_to_json(arch_from_hf(c));
  const auto from_hf =
      cmf::arch_to_json(arch_from_hf(read_hf_files((shared / "stories260K-hf").string()).config));
  EXPECT_EQ(from_gguf, from_hf);
  // another architecture is named
  const GgufFile v((shared / "ggml-vocab/ggml-vocab-gpt-2.gguf").string());
  try {
    (void)hf_config_from_gguf(v);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
    EXPECT_NE(e.message().find("'gpt2'"), std::string::npos) << e.what();
  }
}

// RoPE scaling keys as llama.cpp's convert_hf_to_gguf.py writes them (the e2e GGUF oracle test
// converts both ways and compares the archs); here the refusals, each naming its key.
TEST(GgufModel, RopeScalingKeys) {
  using nlohmann::json;
  EXPECT_FALSE(rope_scaling_from_gguf(json::object(), "llama"));
  EXPECT_FALSE(rope_scaling_from_gguf({{"llama.rope.scaling.type", "none"}}, "llama"));
  EXPECT_FALSE(rope_scaling_from_gguf({{"llama.rope.scale_linear", 1.0}}, "llama"));
  EXPECT_EQ(rope_scaling_from_gguf({{"llama.rope.scale_linear", 4.0}}, "llama"),
            json({{"rope_type", "linear"}, {"factor", 4.0}}));
  EXPECT_EQ(rope_scaling_from_gguf(
                {{"llama.rope.scaling.type", "linear"}, {"llama.rope.scaling.factor", 2.0}}, "llama"),
            json({{"rope_type", "linear"}, {"factor", 2.0}}));
  EXPECT_EQ(rope_scaling_from_gguf({{"qwen2.rope.scaling.type", "yarn"},
                                    {"qwen2.rope.scaling.factor", 4.0},
                                    {"qwen2.rope.scaling.original_context_length", 32768},
                                    {"qwen2.rope.scaling.attn_factor", 1.0}},
                                   "qwen2"),
            json({{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}));
  const std::vector<std::tuple<json, ErrorKind, std::string>> bad = {
      {{{"llama.rope.scaling.type", "longrope"}}, ErrorKind::Unsupported, "llama.rope.scaling.type"},
      {{{"llama.rope.scaling.type", "linear"}}, ErrorKind::Parse, "llama.rope.scaling.factor"},
      {{{"llama.rope.scaling.type", "linear"}, {"llama.rope.scaling.factor", 0.0}},
       ErrorKind::Parse,
       "llama.rope.scaling.factor"},
      {{{"llama.rope.scale_linear", -2.0}}, ErrorKind::Parse, "llama.rope.scale_linear"},
      {{{"qwen2.rope.scaling.type", "yarn"},
        {"qwen2.rope.scaling.factor", 4.0},
        {"qwen2.rope.scaling.attn_factor", 0.5}},
       ErrorKind::Unsupported,
       "qwen2.rope.scaling.attn_factor"},
      {{{"qwen2.rope.scaling.type", "yarn"},
        {"qwen2.rope.scaling.factor", 4.0},
        {"qwen2.rope.scaling.yarn_beta_fast", 16.0}},
       ErrorKind::Unsupported,
       "qwen2.rope.scaling.yarn_beta_fast"},
  };
  for (const auto& [md, kind, key] : bad) {
    const std::string arch = md.begin().key().substr(0, md.begin().key().find('.'));
    try {
      (void)rope_scaling_from_gguf(md, arch);
      ADD_FAILURE() << md.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(e.message().find(key), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace cortiq::convert
