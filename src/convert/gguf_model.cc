#include "convert/gguf_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <utility>

#include "cmf/tensor_names.h"
#include "util/error.h"

namespace cortiq::convert {

namespace {

using json = nlohmann::json;

/// The `{arch}.*` metadata of one GGUF, with errors that name the key.
struct Md {
  const json& m;
  std::string arch;

  const json* get(const std::string& key) const {
    auto it = m.find(key);
    return it == m.end() ? nullptr : &*it;
  }
  std::string key(std::string_view k) const { return arch + "." + std::string(k); }
  /// `{arch}.k` as a non-negative integer; nullopt when absent.
  std::optional<uint64_t> uint(std::string_view k) const {
    const json* v = get(key(k));
    if (!v) return std::nullopt;
    if (!v->is_number_integer() || v->get<int64_t>() < 0)
      fail(ErrorKind::Parse, "GGUF key '{}' must be a non-negative integer, not {}", key(k), v->dump());
    return v->get<uint64_t>();
  }
  /// `{arch}.k` as one non-negative integer: a scalar, or an array of equal ones (llama.cpp's
  /// get_key_or_arr, as deci writes per-layer head counts); nullopt when absent. Throws
  /// Error(Unsupported) naming the key when the array's values differ.
  std::optional<uint64_t> uniform_uint(std::string_view k) const {
    const json* v = get(key(k));
    if (!v || !v->is_array()) return uint(k);
    if (v->empty()) fail(ErrorKind::Parse, "GGUF key '{}' is an empty array", key(k));
    for (const json& x : *v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        fail(ErrorKind::Parse, "GGUF key '{}' holds {}, not a non-negative integer", key(k), x.dump());
      if (x != v->front())
        fail(ErrorKind::Unsupported, "GGUF key '{}' = {}: per-layer values are not supported from GGUF input",
             key(k), v->dump());
    }
    return v->front().get<uint64_t>();
  }
  uint64_t need_uint(std::string_view k) const {
    auto v = uint(k);
    if (!v) fail(ErrorKind::Parse, "GGUF key '{}' is missing", key(k));
    return *v;
  }
  /// `{arch}.k` as a number. GGUF stores these as f32: a value an f32 holds exactly is given as the
  /// shortest decimal that reads back to that f32 (1e-5, not 9.999999747378752e-06), the number
  /// config.json had before llama.cpp's converter narrowed it.
  std::optional<double> num(std::string_view k) const {
    const json* v = get(key(k));
    if (!v) return std::nullopt;
    if (!v->is_number()) fail(ErrorKind::Parse, "GGUF key '{}' must be a number, not {}", key(k), v->dump());
    const double d = v->get<double>();
    const float f = static_cast<float>(d);
    if (v->is_number_float() && static_cast<double>(f) == d) return std::stod(fmt::format("{}", f));
    return d;
  }
};

/// rope_scaling_from_gguf (gguf_model.h) on the metadata of one architecture.
std::optional<json> rope_scaling_of(const Md& md) {
  const json* t = md.get(md.key("rope.scaling.type"));
  if (!t || (t->is_string() && t->get<std::string>() == "none")) {
    const auto lin = md.num("rope.scale_linear");
    if (!lin || *lin == 1.0) return std::nullopt;
    if (!(*lin > 0))
      fail(ErrorKind::Parse, "GGUF key '{}' = {} must be > 0", md.key("rope.scale_linear"), *lin);
    return json{{"rope_type", "linear"}, {"factor", *lin}};
  }
  const std::string type = t->is_string() ? t->get<std::string>() : t->dump();
  if (type != "linear" && type != "yarn")
    fail(ErrorKind::Unsupported, "GGUF key '{}' = {}: RoPE scaling from GGUF input is linear or yarn",
         md.key("rope.scaling.type"), t->dump());
  const auto factor = md.num("rope.scaling.factor");
  if (!factor)
    fail(ErrorKind::Parse, "GGUF key '{}' is missing ({} RoPE scaling)", md.key("rope.scaling.factor"), type);
  if (!(*factor > 0))
    fail(ErrorKind::Parse, "GGUF key '{}' = {} must be > 0", md.key("rope.scaling.factor"), *factor);
  json rs{{"rope_type", type}, {"factor", *factor}};
  if (type == "yarn") {
    if (auto orig = md.uint("rope.scaling.original_context_length"))
      rs["original_max_position_embeddings"] = *orig;
    for (const auto& [k, dflt] : {std::pair<std::string_view, double>{"rope.scaling.attn_factor", 1.0},
                                  {"rope.scaling.yarn_beta_fast", 32.0},
                                  {"rope.scaling.yarn_beta_slow", 1.0}})
      if (auto v = md.num(k); v && *v != dflt)
        fail(ErrorKind::Unsupported, "GGUF key '{}' = {}: only {} (llama.cpp's default) is supported",
             md.key(k), *v, dflt);
  }
  return rs;
}

/// GGUF's per-layer tensor names (llama.cpp gguf-py constants.py, `blk.{l}.NAME.weight` / `.bias`)
/// and the roles whose modules they stand for.
constexpr std::pair<std::string_view, cmf::TensorRole> kLayerNames[] = {
    {"attn_norm", cmf::TensorRole::InputNorm},
    {"attn_q", cmf::TensorRole::Q},
    {"attn_k", cmf::TensorRole::K},
    {"attn_v", cmf::TensorRole::V},
    {"attn_output", cmf::TensorRole::O},
    {"ffn_norm", cmf::TensorRole::PostAttnNorm},
    {"ffn_gate", cmf::TensorRole::FfnGate},
    {"ffn_up", cmf::TensorRole::FfnUp},
    {"ffn_down", cmf::TensorRole::FfnDown},
    {"attn_q_norm", cmf::TensorRole::QNorm},  // qwen3
    {"attn_k_norm", cmf::TensorRole::KNorm},
    {"attn_qkv", cmf::TensorRole::FusedQkv},  // phi3
};

/// gemma2's per-layer norms: post_attention_norm follows the attention, ffn_norm is the FFN's input.
constexpr std::pair<std::string_view, cmf::TensorRole> kGemma2Norms[] = {
    {"post_attention_norm", cmf::TensorRole::PostAttnNorm},
    {"ffn_norm", cmf::TensorRole::PreFfnNorm},
    {"post_ffw_norm", cmf::TensorRole::PostFfnNorm},
};

/// GGUF's whole-model tensor names and their roles.
constexpr std::pair<std::string_view, cmf::TensorRole> kModelNames[] = {
    {"token_embd.weight", cmf::TensorRole::Embed},
    {"output_norm.weight", cmf::TensorRole::FinalNorm},
    {"output.weight", cmf::TensorRole::Head},
};

}  // namespace

std::string gguf_architectures() {
  std::string names;
  for (const GgufArchitecture& a : kGgufArchitectureTable)
    names += (names.empty() ? "" : ", ") + std::string(a.gguf);
  return names;
}

json hf_config_from_gguf(const GgufFile& f) {
  const json& m = f.metadata();
  auto a = m.find("general.architecture");
  if (a == m.end() || !a->is_string())
    fail(ErrorKind::Parse, "GGUF key 'general.architecture' is missing or not a string");
  Md md{m, a->get<std::string>()};
  const GgufArchitecture* known = nullptr;
  for (const GgufArchitecture& k : kGgufArchitectureTable)
    if (k.gguf == md.arch) known = &k;
  if (!known)
    fail(ErrorKind::Unsupported, "GGUF general.architecture '{}' is not supported (supported: {})", md.arch,
         gguf_architectures());
  json c;
  c["model_type"] = md.arch == "deci" ? std::string("llama") : md.arch;
  c["architectures"] = json::array({std::string(known->hf_class)});
  c["hidden_size"] = md.need_uint("embedding_length");
  c["num_hidden_layers"] = md.need_uint("block_count");
  // a defragged model's per-layer widths come as an array (llama.cpp's get_key_or_arr); the
  // nominal size is the largest, the tensors' shapes carry each layer's own
  if (const json* ff = md.get(md.key("feed_forward_length")); ff && ff->is_array()) {
    uint64_t widest = 0;
    for (const json& w : *ff) {
      if (!w.is_number_integer() || w.get<int64_t>() <= 0)
        fail(ErrorKind::Parse, "GGUF key '{}' holds {}, not a positive width", md.key("feed_forward_length"),
             w.dump());
      widest = std::max(widest, w.get<uint64_t>());
    }
    if (ff->empty()) fail(ErrorKind::Parse, "GGUF key '{}' is an empty array", md.key("feed_forward_length"));
    c["intermediate_size"] = widest;
  } else {
    c["intermediate_size"] = md.need_uint("feed_forward_length");
  }
  const auto heads_or = md.uniform_uint("attention.head_count");
  if (!heads_or) fail(ErrorKind::Parse, "GGUF key '{}' is missing", md.key("attention.head_count"));
  const uint64_t heads = *heads_or;
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = md.uniform_uint("attention.head_count_kv").value_or(heads);
  if (c["num_key_value_heads"] == 0)  // deci's attention-free (linear / no-op) layers
    fail(ErrorKind::Unsupported, "GGUF key '{}' = 0: layers without attention are not supported",
         md.key("attention.head_count_kv"));
  if (auto kl = md.uint("attention.key_length")) c["head_dim"] = *kl;
  c["rms_norm_eps"] = md.num("attention.layer_norm_rms_epsilon").value_or(1e-5);
  c["rope_theta"] = md.num("rope.freq_base").value_or(10000.0);
  c["max_position_embeddings"] = md.need_uint("context_length");
  // vocab: {arch}.vocab_size, else the token list, else the embedding's rows
  uint64_t vocab = md.uint("vocab_size").value_or(0);
  if (!vocab) {
    auto t = m.find("tokenizer.ggml.tokens");
    if (t != m.end() && t->is_array()) vocab = t->size();
  }
  if (const GgufTensor* e = f.find("token_embd.weight"); !vocab && e && e->shape.size() == 2)
    vocab = e->shape[0];
  if (!vocab)
    fail(ErrorKind::Parse, "GGUF has no vocabulary size ({}, tokenizer.ggml.tokens or token_embd.weight)",
         md.key("vocab_size"));
  c["vocab_size"] = vocab;
  c["tie_word_embeddings"] = f.find("output.weight") == nullptr;
  if (auto rs = rope_scaling_of(md)) c["rope_scaling"] = *rs;
  if (md.arch == "phi3") {
    // Phi3MiniModel.set_gguf_parameters: rope.dimension_count = partial_rotary_factor · hidden /
    // heads, the window (0 = none) and the pre-extension context
    const uint64_t head_dim = c.contains("head_dim")
                                  ? c["head_dim"].get<uint64_t>()
                                  : c["hidden_size"].get<uint64_t>() / std::max<uint64_t>(heads, 1);
    if (auto rot = md.uint("rope.dimension_count"); rot && *rot != head_dim) {
      if (*rot == 0 || *rot > head_dim || *rot % 2 != 0)
        fail(ErrorKind::Parse, "GGUF key '{}' = {} must be even and in (0, head_dim {}]",
             md.key("rope.dimension_count"), *rot, head_dim);
      c["partial_rotary_factor"] = static_cast<double>(*rot) / static_cast<double>(head_dim);
    }
    if (auto w = md.uint("attention.sliding_window"); w && *w > 0) c["sliding_window"] = *w;
    if (auto o = md.uint("rope.scaling.original_context_length")) c["original_max_position_embeddings"] = *o;
  } else if (md.arch == "gemma2") {
    // what llama.cpp b4748's gemma2 graph runs (llama-model.cpp's defaults where a key is absent):
    // both caps, the window on even layers (transformers' Gemma2 layout), Q scaled by
    // 1/sqrt(head_dim), for its 46-layer 27B by 1/sqrt(hidden/heads)
    c["attn_logit_softcapping"] = md.num("attn_logit_softcapping").value_or(50.0);
    c["final_logit_softcapping"] = md.num("final_logit_softcapping").value_or(30.0);
    c["sliding_window"] = md.uint("attention.sliding_window").value_or(4096);
    const uint64_t hidden = c["hidden_size"].get<uint64_t>();
    const uint64_t head_dim =
        c.contains("head_dim") ? c["head_dim"].get<uint64_t>() : hidden / std::max<uint64_t>(heads, 1);
    c["query_pre_attn_scalar"] =
        c["num_hidden_layers"].get<uint64_t>() == 46 ? hidden / std::max<uint64_t>(heads, 1) : head_dim;
  } else if (md.get(md.key("attention.sliding_window"))) {
    fail(ErrorKind::Unsupported, "GGUF key '{}': sliding-window attention is not supported from GGUF input",
         md.key("attention.sliding_window"));
  }
  if (md.arch == "gemma" || md.arch == "gemma2") c["hidden_activation"] = "gelu_pytorch_tanh";
  for (const auto& [k, hf] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                              std::pair{"tokenizer.ggml.eos_token_id", "eos_token_id"},
                              std::pair{"tokenizer.ggml.padding_token_id", "pad_token_id"}})
    if (auto it = m.find(k); it != m.end() && it->is_number_integer()) c[hf] = *it;
  return c;
}

std::optional<json> rope_scaling_from_gguf(const json& metadata, const std::string& arch) {
  return rope_scaling_of(Md{metadata, arch});
}

std::string hf_name_from_gguf(std::string_view g, std::string_view arch) {
  for (const auto& [gguf, role] : kModelNames)
    if (g == gguf) return cmf::tensor_name(role);
  if (g == "rope_freqs.weight") return "";
  if (g.starts_with("blk.")) {
    const std::string_view rest = g.substr(4);
    const size_t dot = rest.find('.');
    uint32_t layer = 0;
    if (dot != std::string_view::npos && dot > 0) {
      const auto r = std::from_chars(rest.data(), rest.data() + dot, layer);
      if (r.ec == std::errc() && r.ptr == rest.data() + dot) {
        const std::string_view tail = rest.substr(dot + 1);  // e.g. attn_q.weight
        if (arch == "gemma2")  // the sandwich norms (gguf-py: ATTN_POST_NORM, FFN_PRE_NORM, FFN_POST_NORM)
          for (auto [gg, role] : kGemma2Norms)
            if (tail == std::string(gg) + ".weight") return cmf::tensor_name(role, layer);
        for (auto [gg, role] : kLayerNames)
          for (std::string_view suffix : {".weight", ".bias"})
            if (tail.size() == gg.size() + suffix.size() && tail.starts_with(gg) && tail.ends_with(suffix)) {
              // phi3's ffn_up is HF's fused gate_up_proj (Phi3MiniModel writes it unsplit); its
              // attn_qkv is qkv_proj (kLayerNames). The caller splits both as tensor_map does HF's.
              if (arch == "phi3" && role == cmf::TensorRole::FfnUp && suffix == ".weight")
                role = cmf::TensorRole::FusedGateUp;
              return cmf::tensor_module({role, layer}) + std::string(suffix);
            }
      }
    }
  }
  fail(ErrorKind::Unsupported, "GGUF tensor '{}' has no HF counterpart this converter knows ({})", g,
       gguf_architectures());
}

void unpermute_qk_rows(std::span<float> w, uint64_t rows, uint64_t cols, uint32_t heads,
                       std::string_view tensor) {
  if (heads == 0 || rows % heads != 0 || (rows / heads) % 2 != 0 || w.size() != rows * cols)
    fail(ErrorKind::Parse, "tensor '{}': {} rows are not {} heads of an even head_dim", tensor, rows, heads);
  const uint64_t hd = rows / heads, half = hd / 2;
  std::vector<float> head(hd * cols);
  for (uint64_t h = 0; h < heads; ++h) {
    float* base = w.data() + h * hd * cols;
    std::copy(base, base + hd * cols, head.begin());
    for (uint64_t i = 0; i < 2; ++i)
      for (uint64_t j = 0; j < half; ++j)
        std::copy_n(head.data() + (2 * j + i) * cols, cols, base + (i * half + j) * cols);
  }
}

}  // namespace cortiq::convert
