// Source checkpoint names → CMF names (tensor_map.h): the renames of CLI-NOTES §convert (wrappers,
// towers, the MTP block), the write order of its file comment, and what map_tensors splits, drops
// and refuses — on tiny hand-written safetensors checkpoints.
#include "convert/tensor_map.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "support/cmf_header.h"
#include "support/errors.h"
#include "util/error.h"

namespace cortiq::convert {
namespace {

namespace fs = std::filesystem;

TEST(TensorMap, CanonicalNames) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight"},
      // gemma3's multimodal wrappers, old and new transformers layout
      {"language_model.model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight"},
      {"language_model.lm_head.weight", "lm_head.weight"},
      {"model.language_model.norm.weight", "model.norm.weight"},
      {"language_model.other.weight", "language_model.other.weight"},
      // Qwen3-Next's MTP block
      {"mtp.fc.weight", "model.mtp.eh_proj.weight"},
      {"mtp.pre_fc_norm_embedding.weight", "model.mtp.enorm.weight"},
      {"mtp.pre_fc_norm_hidden.weight", "model.mtp.hnorm.weight"},
      {"mtp.norm.weight", "model.mtp.norm.weight"},
      {"mtp.layers.0.self_attn.q_proj.weight", "model.mtp.layers.0.self_attn.q_proj.weight"},
      // dropped: the towers and RoPE buffers
      {"vision_tower.blocks.0.attn.weight", ""},
      {"model.vision_tower.x", ""},
      {"multi_modal_projector.w", ""},
      {"model.multi_modal_projector.w", ""},
      {"vision_model.a", ""},
      {"model.vision_model.a", ""},
      {"model.layers.0.self_attn.rotary_emb.inv_freq", ""},
  };
  for (const auto& [source, want] : cases) EXPECT_EQ(canonical_name(source), want) << source;
}

// The file comment's order, written out: embed → layers by index (attention → norms → FFN, the
// experts role-contiguous) → final norm → lm_head → MTP block → anything else.
TEST(TensorMap, WriteOrder) {
  const std::vector<std::string> want = {
      "model.embed_tokens.weight",
      "model.layers.2.input_layernorm.weight",
      "model.layers.2.self_attn.q_proj.bias",
      "model.layers.2.self_attn.q_proj.weight",
      "model.layers.2.self_attn.k_proj.weight",
      "model.layers.2.self_attn.v_proj.weight",
      "model.layers.2.self_attn.q_norm.weight",
      "model.layers.2.self_attn.k_norm.weight",
      "model.layers.2.self_attn.o_proj.weight",
      "model.layers.2.post_attention_layernorm.weight",
      "model.layers.2.pre_feedforward_layernorm.weight",
      "model.layers.2.mlp.gate.weight",
      "model.layers.2.mlp.gate_proj.weight",
      "model.layers.2.mlp.up_proj.weight",
      "model.layers.2.mlp.down_proj.weight",
      "model.layers.2.mlp.experts.0.gate_proj.weight",
      "model.layers.2.mlp.experts.1.gate_proj.weight",
      "model.layers.2.mlp.experts.10.gate_proj.weight",
      "model.layers.2.mlp.experts.0.up_proj.weight",
      "model.layers.2.mlp.experts.1.up_proj.weight",
      "model.layers.2.mlp.experts.0.down_proj.weight",
      "model.layers.2.mlp.shared_expert.gate_proj.weight",
      "model.layers.2.mlp.shared_expert.up_proj.weight",
      "model.layers.2.mlp.shared_expert.down_proj.weight",
      "model.layers.2.mlp.shared_expert_gate.weight",
      "model.layers.2.post_feedforward_layernorm.weight",
      "model.layers.2.linear_attn.A_log",  // under no listed role: last in its layer, by name
      "model.layers.2.self_attn.g_proj.weight",
      "model.layers.10.input_layernorm.weight",
      "model.norm.weight",
      "lm_head.weight",
      "model.mtp.eh_proj.weight",
      "model.mtp.enorm.weight",
      "model.mtp.hnorm.weight",
      "model.mtp.norm.weight",
      "model.mtp.layers.0.input_layernorm.weight",
      "model.mtp.layers.0.self_attn.q_proj.weight",
      "model.mtp.layers.0.mlp.experts.0.up_proj.weight",
      "rope.freqs",
      "zz.extra",
  };
  std::vector<std::string> got = want;
  std::shuffle(got.begin(), got.end(), std::mt19937(5));
  std::sort(got.begin(), got.end(), write_order_less);
  EXPECT_EQ(got, want);
}

/// A checkpoint folder holding model.safetensors with F32 tensors of the given names and shapes;
/// element i of each tensor is i (so a row slice is recognizable by its first value).
class MapTensors : public ::testing::Test {
 protected:
  void write(const std::vector<std::pair<std::string, std::vector<uint64_t>>>& tensors) {
    dir_ = fs::temp_directory_path() / ("tensor_map_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::string header = "{";
    std::vector<float> data;
    for (const auto& [name, shape] : tensors) {
      uint64_t n = 1;
      std::string dims;
      for (uint64_t d : shape) {
        n *= d;
        dims += (dims.empty() ? "" : ",") + std::to_string(d);
      }
      const uint64_t begin = data.size() * 4;
      for (uint64_t i = 0; i < n; ++i) data.push_back(static_cast<float>(i));
      header += (header.size() > 1 ? "," : "") +
                fmt::format(R"("{}":{{"dtype":"F32","shape":[{}],)", name, dims) +
                fmt::format(R"("data_offsets":[{},{}]}})", begin, data.size() * 4);
    }
    header += "}";
    std::ofstream f(dir_ / "model.safetensors", std::ios::binary);
    const uint64_t len = header.size();
    f.write(reinterpret_cast<const char*>(&len), 8);
    f << header;
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// One layer, hidden 8, 2 heads of 4 (q 8 rows), 1 KV head (k, v 4 rows each), vocab 16.
  static cmf::ModelArch arch(bool tied) {
    cmf::ModelArch a = test::tiny_header("test", 8, 16, 1, 2, 1, 4, 16, 64).arch;
    a.tie_word_embeddings = tied;
    return a;
  }
  static Error map_error(const Checkpoint& c, const cmf::ModelArch& a) {
    return test::error_of([&] { map_tensors(c, a); }).value_or(Error(ErrorKind::Signature, "no error"));
  }
  fs::path dir_;
};

// Phi3's fused qkv_proj / gate_up_proj become row slices; a tied lm_head is dropped; the MTP
// block's layers are counted.
TEST_F(MapTensors, SplitsFusedProjectionsAndDropsTheTiedHead) {
  write({{"model.embed_tokens.weight", {16, 8}},
         {"model.layers.0.self_attn.qkv_proj.weight", {16, 8}},
         {"model.layers.0.mlp.gate_up_proj.weight", {12, 8}},
         {"lm_head.weight", {16, 8}},
         {"mtp.layers.0.input_layernorm.weight", {8}},
         {"mtp.layers.1.input_layernorm.weight", {8}}});
  const Checkpoint c(dir_.string());
  const TensorMapping m = map_tensors(c, arch(true));
  std::vector<std::string> names;
  for (const auto& t : m.tensors) names.push_back(t.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
                "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
                "model.mtp.layers.0.input_layernorm.weight", "model.mtp.layers.1.input_layernorm.weight"}));
  // rows 0..7 are q, 8..11 k, 12..15 v; gate is rows 0..5, up 6..11 (8 values a row)
  const auto first = [&](size_t i) { return to_f32(m.tensors[i].src)[0]; };
  EXPECT_EQ(m.tensors[1].shape, (std::vector<uint64_t>{8, 8}));
  EXPECT_EQ(m.tensors[2].shape, (std::vector<uint64_t>{4, 8}));
  EXPECT_EQ(first(2), 64.0f);
  EXPECT_EQ(first(3), 96.0f);
  EXPECT_EQ(m.tensors[5].shape, (std::vector<uint64_t>{6, 8}));
  EXPECT_EQ(first(5), 48.0f);
  EXPECT_EQ(m.dropped, (std::vector<std::string>{"lm_head.weight"}));
  EXPECT_TRUE(m.has_mtp);
  EXPECT_EQ(m.mtp_layers, 2u);
}

TEST_F(MapTensors, RefusesWhatTheRuntimeWouldIgnore) {
  for (const char* bad :
       {"model.layers.0.self_attn.o_proj.bias", "model.layers.0.mlp.down_proj.bias",
        "model.layers.0.mlp.experts.0.up_proj.bias", "model.layers.0.mlp.experts.gate_up_proj"}) {
    write({{"model.embed_tokens.weight", {16, 8}}, {bad, {8, 8}}});
    const Error e = map_error(Checkpoint(dir_.string()), arch(true));
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << bad << ": " << e.what();
    EXPECT_NE(e.message().find(fmt::format("tensor '{}'", bad)), std::string::npos) << e.what();
    fs::remove_all(dir_);
  }
  // a Q/K/V bias and a router bias are carried
  write({{"model.embed_tokens.weight", {16, 8}},
         {"model.layers.0.self_attn.q_proj.bias", {8}},
         {"model.layers.0.mlp.gate.bias", {4}}});
  EXPECT_EQ(map_tensors(Checkpoint(dir_.string()), arch(true)).tensors.size(), 3u);
}

TEST_F(MapTensors, RequiredTensorsAreNamed) {
  write({{"model.layers.0.input_layernorm.weight", {8}}});
  Error e = map_error(Checkpoint(dir_.string()), arch(true));
  EXPECT_EQ(e.kind(), ErrorKind::Parse);
  EXPECT_EQ(e.message(), "checkpoint has no 'model.embed_tokens.weight'");
  fs::remove_all(dir_);
  write({{"model.embed_tokens.weight", {16, 8}}, {"model.layers.0.input_layernorm.weight", {8}}});
  e = map_error(Checkpoint(dir_.string()), arch(false));
  EXPECT_EQ(e.message(), "checkpoint has no 'lm_head.weight' and tie_word_embeddings is false");
  fs::remove_all(dir_);
  write({{"model.embed_tokens.weight", {16, 7}}, {"model.layers.0.input_layernorm.weight", {8}}});
  e = map_error(Checkpoint(dir_.string()), arch(true));
  EXPECT_EQ(
      e.message(),
      "tensor 'model.embed_tokens.weight' has shape [16, 7], config says [vocab_size 16, hidden_size 8]");
  fs::remove_all(dir_);
  write({{"model.embed_tokens.weight", {16, 8}}, {"model.layers.1.input_layernorm.weight", {8}}});
  e = map_error(Checkpoint(dir_.string()), arch(true));
  EXPECT_NE(e.message().find("'model.layers.1.input_layernorm.weight' belongs to layer 1"), std::string::npos)
      << e.what();
}

}  // namespace
}  // namespace cortiq::convert
