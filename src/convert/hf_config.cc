#include "convert/hf_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numbers>
#include <set>

#include "convert/sentencepiece.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::convert {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json read_json_file(const std::string& path) {
  const std::string text = read_file(path);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(ErrorKind::Parse, "'{}' is not valid JSON", path);
  return j;
}

// Reads config fields of one family; every error names model_type and the field.
class Cfg {
 public:
  Cfg(const json& j, std::string model_type) : j_(j), mt_(std::move(model_type)) {}
  const std::string& model_type() const { return mt_; }
  const json* get(const char* k) const {
    auto it = j_.find(k);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool has(const char* k) const { return get(k) != nullptr; }
  uint64_t u64(const char* k) const {
    const json* v = get(k);
    if (!v) fail(ErrorKind::Parse, "config.json (model_type '{}'): missing required field '{}'", mt_, k);
    return as_u64(*v, k);
  }
  uint64_t as_u64(const json& v, const char* k) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (d >= 0 && d == std::floor(d) && d < 1.8e19) return static_cast<uint64_t>(d);
    }
    fail(ErrorKind::Parse, "config.json (model_type '{}'): field '{}' must be a non-negative integer, got {}",
         mt_, k, v.dump());
  }
  uint32_t u32(const char* k) const {
    uint64_t x = u64(k);
    if (x > UINT32_MAX)
      fail(ErrorKind::Parse, "config.json (model_type '{}'): field '{}' = {} too large", mt_, k, x);
    return static_cast<uint32_t>(x);
  }
  uint32_t u32_or(const char* k, uint32_t d) const { return has(k) ? u32(k) : d; }
  double f64(const char* k) const {
    const json* v = get(k);
    if (!v) fail(ErrorKind::Parse, "config.json (model_type '{}'): missing required field '{}'", mt_, k);
    if (!v->is_number())
      fail(ErrorKind::Parse, "config.json (model_type '{}'): field '{}' must be a number, got {}", mt_, k,
           v->dump());
    return v->get<double>();
  }
  double f64_or(const char* k, double d) const { return has(k) ? f64(k) : d; }
  std::optional<double> opt_f64(const char* k) const {
    if (!has(k)) return std::nullopt;
    return f64(k);
  }
  bool boolean_or(const char* k, bool d) const {
    const json* v = get(k);
    if (!v) return d;
    if (!v->is_boolean())
      fail(ErrorKind::Parse, "config.json (model_type '{}'): field '{}' must be a boolean, got {}", mt_, k,
           v->dump());
    return v->get<bool>();
  }
  std::string str_or(const char* k, const std::string& d) const {
    const json* v = get(k);
    if (!v) return d;
    if (!v->is_string())
      fail(ErrorKind::Parse, "config.json (model_type '{}'): field '{}' must be a string, got {}", mt_, k,
           v->dump());
    return v->get<std::string>();
  }
  [[noreturn]] void refuse(const std::string& field, const std::string& why) const {
    fail(ErrorKind::Unsupported, "model_type '{}': config field '{}' {}", mt_, field, why);
  }

 private:
  const json& j_;
  std::string mt_;
};

const std::set<std::string> kFamilies = {"llama",     "mistral",     "qwen2", "qwen3",
                                         "qwen2_moe", "qwen3_moe",   "gemma", "gemma2",
                                         "gemma3",    "gemma3_text", "phi3"};

bool is_gemma(const std::string& mt) {
  return mt == "gemma" || mt == "gemma2" || mt == "gemma3_text";
}
bool is_qwen(const std::string& mt) {
  return mt == "qwen2" || mt == "qwen3" || mt == "qwen2_moe" || mt == "qwen3_moe";
}

// transformers `get_mscale` for YaRN.
double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

void apply_rope_scaling(const Cfg& c, const json& rs, cmf::ModelArch& a) {
  if (!rs.is_object()) c.refuse("rope_scaling", "must be an object or null");
  Cfg r(rs, c.model_type());
  std::string type = r.str_or("rope_type", r.str_or("type", ""));
  if (type.empty() && !rs.contains("factor")) return;  // e.g. rope_parameters holding only rope_theta
  if (type.empty()) c.refuse("rope_scaling", "has a factor but no 'rope_type'");
  if (type == "default") return;
  const uint32_t rotary = rotary_dims(a.head_dim, a.partial_rotary_factor);
  if (type == "linear") {
    const double f = r.f64("factor");
    if (!(f > 0)) c.refuse("rope_scaling.factor", fmt::format("= {} must be > 0", f));
    a.rope_freq_factors = std::vector<double>(rotary / 2, f);
    return;
  }
  if (type == "llama3") {
    const double f = r.f64("factor");
    const double lo = r.f64("low_freq_factor"), hi = r.f64("high_freq_factor");
    const double orig = r.f64("original_max_position_embeddings");
    if (!(f > 0) || !(lo > 0) || !(hi > lo) || !(orig > 0))
      c.refuse("rope_scaling",
               "llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
               "original_max_position_embeddings > 0");
    a.rope_freq_factors = llama3_freq_factors(a.rope_theta, rotary, f, lo, hi, orig);
    return;
  }
  if (type == "yarn") {
    cmf::Yarn y;
    y.factor = r.f64("factor");
    if (!(y.factor >= 1))
      c.refuse("rope_scaling.factor", fmt::format("= {} must be >= 1 for yarn", y.factor));
    y.original_max_position_embeddings = static_cast<uint32_t>(
        r.has("original_max_position_embeddings")   ? r.u32("original_max_position_embeddings")
        : c.has("original_max_position_embeddings") ? c.u32("original_max_position_embeddings")
                                                    : static_cast<uint32_t>(a.max_position_embeddings));
    y.beta_fast = r.f64_or("beta_fast", 32.0);
    y.beta_slow = r.f64_or("beta_slow", 1.0);
    if (!r.boolean_or("truncate", true)) c.refuse("rope_scaling.truncate", "= false is not supported");
    if (r.has("attention_factor")) {
      y.attention_factor = r.f64("attention_factor");
    } else if (r.has("mscale") && r.has("mscale_all_dim")) {
      y.attention_factor =
          yarn_get_mscale(y.factor, r.f64("mscale")) / yarn_get_mscale(y.factor, r.f64("mscale_all_dim"));
    } else {
      y.attention_factor = yarn_get_mscale(y.factor, 1.0);
    }
    if (r.has("mscale_all_dim")) y.mscale_all_dim = r.f64("mscale_all_dim");
    a.yarn = y;
    return;
  }
  if (type == "dynamic") return;  // identical to unscaled up to max_position_embeddings
  c.refuse("rope_scaling",
           fmt::format("type '{}' cannot be represented (supported: linear, llama3, yarn, dynamic)", type));
}

cmf::LayerType layer_type_from_hf(const Cfg& c, const json& v, size_t i) {
  if (!v.is_string()) c.refuse(fmt::format("layer_types[{}]", i), "must be a string");
  const std::string s = v.get<std::string>();
  if (s == "full_attention") return cmf::LayerType::FullAttention;
  if (s == "sliding_attention") return cmf::LayerType::SlidingAttention;
  c.refuse(fmt::format("layer_types[{}]", i), fmt::format("= '{}' is not supported", s));
}

}  // namespace

uint32_t rotary_dims(uint32_t head_dim, double partial_rotary_factor) {
  const double r = std::floor(static_cast<double>(head_dim) * partial_rotary_factor);
  return std::max<uint32_t>(2, static_cast<uint32_t>(r));
}

std::vector<double> llama3_freq_factors(double rope_theta, uint32_t rotary, double factor,
                                        double low_freq_factor, double high_freq_factor, double orig) {
  std::vector<double> out(rotary / 2);
  const double low_wavelen = orig / low_freq_factor;
  const double high_wavelen = orig / high_freq_factor;
  for (uint32_t i = 0; i < rotary / 2; ++i) {
    const double inv = 1.0 / std::pow(rope_theta, 2.0 * i / rotary);
    const double wavelen = 2 * std::numbers::pi / inv;
    if (wavelen < high_wavelen) {
      out[i] = 1.0;
    } else if (wavelen > low_wavelen) {
      out[i] = factor;
    } else {
      const double s = (orig / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      out[i] = 1.0 / ((1 - s) / factor + s);
    }
  }
  return out;
}

HfFiles read_hf_files(const std::string& dir) {
  HfFiles f;
  f.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    if (fs::exists(dir, ec))
      fail(ErrorKind::Io,
           "'{}' is a file, not a model directory: convert reads a Hugging Face checkpoint folder "
           "(config.json + *.safetensors) or a GGUF file; `cortiq requant` re-encodes a .cmf file",
           dir);
    fail(ErrorKind::Io, "model directory '{}' does not exist", dir);
  }
  const fs::path d(dir);
  if (!fs::exists(d / "config.json", ec)) {
    // a folder of GGUF files: the file is the input, not the folder
    std::string gguf;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.path().extension() == ".gguf" && (gguf.empty() || e.path().string() < gguf))
        gguf = e.path().string();
    fail(ErrorKind::Io, "no config.json in '{}'{}", dir,
         gguf.empty() ? std::string() : "; it holds GGUF files: give one of them (e.g. " + gguf + ")");
  }
  f.config = read_json_file((d / "config.json").string());
  if (!f.config.is_object())
    fail(ErrorKind::Parse, "'{}' is not a JSON object", (d / "config.json").string());
  if (fs::exists(d / "generation_config.json", ec))
    f.generation_config = read_json_file((d / "generation_config.json").string());
  if (fs::exists(d / "tokenizer_config.json", ec))
    f.tokenizer_config = read_json_file((d / "tokenizer_config.json").string());
  if (fs::exists(d / "chat_template.jinja", ec))
    f.chat_template_jinja = read_file((d / "chat_template.jinja").string());
  if (fs::exists(d / "tokenizer.json", ec)) {
    f.tokenizer_json = read_file((d / "tokenizer.json").string());
    if (json::parse(*f.tokenizer_json, nullptr, false).is_discarded())
      fail(ErrorKind::Parse, "'{}' is not valid JSON", (d / "tokenizer.json").string());
  } else if (fs::exists(d / "tokenizer.model", ec)) {
    // the Llama-2 / Mistral layout: the SentencePiece model alone, turned into the tokenizer.json
    // transformers' LlamaConverter makes of it (or refused here: a file run cannot tokenize for
    // is never written)
    const std::string path = (d / "tokenizer.model").string();
    const std::string proto = read_file(path);
    std::optional<bool> add_bos, add_eos;
    if (f.tokenizer_config.is_object()) {
      if (auto it = f.tokenizer_config.find("add_bos_token");
          it != f.tokenizer_config.end() && it->is_boolean())
        add_bos = it->get<bool>();
      if (auto it = f.tokenizer_config.find("add_eos_token");
          it != f.tokenizer_config.end() && it->is_boolean())
        add_eos = it->get<bool>();
    }
    f.tokenizer_json = tokenizer_json_from_sentencepiece(
        {reinterpret_cast<const uint8_t*>(proto.data()), proto.size()}, path, add_bos, add_eos);
    f.tokenizer_from_model = true;
  }
  return f;
}

json text_config(const json& config) {
  auto it = config.find("text_config");
  if (it == config.end() || !it->is_object()) return config;
  json t = *it;
  for (const char* k : {"tie_word_embeddings", "eos_token_id", "bos_token_id", "pad_token_id"})
    if (config.contains(k) && !config[k].is_null()) t[k] = config[k];
  if (!t.contains("model_type") && config.contains("model_type")) t["model_type"] = config["model_type"];
  return t;
}

std::string hf_model_type(const json& config) {
  const json t = text_config(config);
  auto it = t.find("model_type");
  if (it == t.end() || !it->is_string()) fail(ErrorKind::Parse, "config.json has no string 'model_type'");
  std::string mt = it->get<std::string>();
  if (mt == "gemma3") mt = "gemma3_text";
  return mt;
}

cmf::ModelArch arch_from_hf(const json& config) {
  const std::string outer = config.contains("model_type") && config["model_type"].is_string()
                                ? config["model_type"].get<std::string>()
                                : std::string();
  const std::string mt = hf_model_type(config);
  if (!kFamilies.count(mt) && !kFamilies.count(outer))
    fail(ErrorKind::Unsupported,
         "model_type '{}' is not supported (supported: llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe, "
         "gemma, "
         "gemma2, gemma3, gemma3_text, phi3)",
         mt);
  if (!kFamilies.count(mt))
    fail(ErrorKind::Unsupported, "model_type '{}' (text model of '{}') is not supported", mt, outer);
  const json tj = text_config(config);
  Cfg c(tj, mt);
  cmf::ModelArch a;
  a.arch_name = mt;
  a.hidden_size = c.u32("hidden_size");
  a.num_layers = c.u32("num_hidden_layers");
  a.num_attention_heads = c.u32("num_attention_heads");
  a.num_kv_heads = c.u32_or("num_key_value_heads", a.num_attention_heads);
  a.vocab_size = c.u32("vocab_size");
  if (a.hidden_size == 0 || a.num_layers == 0 || a.num_attention_heads == 0 || a.num_kv_heads == 0 ||
      a.vocab_size == 0)
    c.refuse("hidden_size/num_hidden_layers/num_attention_heads/num_key_value_heads/vocab_size",
             "must be > 0");
  if (a.num_attention_heads % a.num_kv_heads != 0)
    c.refuse("num_key_value_heads", fmt::format("= {} does not divide num_attention_heads = {}",
                                                a.num_kv_heads, a.num_attention_heads));
  if (c.has("head_dim")) {
    a.head_dim = c.u32("head_dim");
  } else {
    if (a.hidden_size % a.num_attention_heads != 0)
      c.refuse("head_dim", "is absent and hidden_size is not a multiple of num_attention_heads");
    a.head_dim = a.hidden_size / a.num_attention_heads;
  }
  if (a.head_dim == 0) c.refuse("head_dim", "must be > 0");
  a.intermediate_size = c.u32_or("intermediate_size", 0);
  a.rms_norm_eps = c.f64_or("rms_norm_eps", 1e-6);
  a.max_position_embeddings = c.u64("max_position_embeddings");
  a.rope_theta = c.f64_or("rope_theta", 10000.0);
  // rope_parameters (transformers ≥ 4.56) carries rope_theta and the scaling in one block.
  json rope_scaling = tj.contains("rope_scaling") ? tj["rope_scaling"] : json();
  if (c.has("rope_parameters")) {
    const json& rp = *c.get("rope_parameters");
    if (!rp.is_object()) c.refuse("rope_parameters", "must be an object");
    auto theta_of = [&](const json& o, const char* what) -> std::optional<double> {
      if (!o.is_object() || !o.contains("rope_theta")) return std::nullopt;
      if (!o["rope_theta"].is_number()) c.refuse(what, "rope_theta must be a number");
      return o["rope_theta"].get<double>();
    };
    if (rp.contains("full_attention")) {
      const json& full = rp["full_attention"];
      if (auto t = theta_of(full, "rope_parameters.full_attention")) a.rope_theta = *t;
      if (rope_scaling.is_null()) rope_scaling = full;
      if (rp.contains("sliding_attention"))
        if (auto t = theta_of(rp["sliding_attention"], "rope_parameters.sliding_attention"))
          a.rope_local_base_freq = *t;
    } else {
      if (auto t = theta_of(rp, "rope_parameters")) a.rope_theta = *t;
      if (rope_scaling.is_null()) rope_scaling = rp;
    }
  }
  a.partial_rotary_factor = c.f64_or("partial_rotary_factor", 1.0);
  if (!(a.partial_rotary_factor > 0 && a.partial_rotary_factor <= 1))
    c.refuse("partial_rotary_factor", fmt::format("= {} must be in (0, 1]", a.partial_rotary_factor));
  const bool default_tie = is_gemma(mt);
  a.tie_word_embeddings = c.boolean_or("tie_word_embeddings", default_tie);

  // Activation.
  if (is_gemma(mt)) {
    std::string act = c.str_or("hidden_activation", c.str_or("hidden_act", "gelu_pytorch_tanh"));
    // transformers' Gemma forces the tanh approximation for the legacy "gelu" spelling.
    if (act == "gelu_pytorch_tanh" || act == "gelu_tanh" || act == "gelu") {
      a.hidden_act = cmf::HiddenAct::GeluTanh;
    } else {
      c.refuse("hidden_activation", fmt::format("= '{}' is not supported (gelu_pytorch_tanh)", act));
    }
    a.norm_style = cmf::NormStyle::Gemma;
    a.embed_multiplier = std::sqrt(static_cast<double>(a.hidden_size));
  } else {
    const std::string act = c.str_or("hidden_act", "silu");
    if (act != "silu" && act != "swish")
      c.refuse("hidden_act", fmt::format("= '{}' is not supported (silu)", act));
    a.hidden_act = cmf::HiddenAct::Silu;
  }

  // Biases the runtime does not apply.
  if (c.boolean_or("mlp_bias", false)) c.refuse("mlp_bias", "= true (MLP biases) is not supported");
  if ((mt == "llama" || mt == "mistral") && c.boolean_or("attention_bias", false))
    c.refuse("attention_bias", "= true (o_proj bias) is not supported");

  // RoPE scaling (after head_dim / partial_rotary_factor are known).
  if (!rope_scaling.is_null()) apply_rope_scaling(c, rope_scaling, a);
  if (c.has("rope_local_base_freq")) a.rope_local_base_freq = c.f64("rope_local_base_freq");

  // Layer schedule.
  a.layer_types.assign(a.num_layers, cmf::LayerType::FullAttention);
  std::optional<uint32_t> window;
  if (c.has("sliding_window")) window = c.u32("sliding_window");
  if (c.has("layer_types")) {
    const json& lt = *c.get("layer_types");
    if (!lt.is_array() || lt.size() != a.num_layers)
      c.refuse("layer_types",
               fmt::format("must be an array of num_hidden_layers = {} entries", a.num_layers));
    for (size_t i = 0; i < lt.size(); ++i) a.layer_types[i] = layer_type_from_hf(c, lt[i], i);
    if (is_qwen(mt) && !c.boolean_or("use_sliding_window", false))
      a.layer_types.assign(a.num_layers, cmf::LayerType::FullAttention);
  } else if (mt == "mistral" || mt == "phi3") {
    if (window) a.layer_types.assign(a.num_layers, cmf::LayerType::SlidingAttention);
  } else if (is_qwen(mt)) {
    if (c.boolean_or("use_sliding_window", false) && window) {
      const uint32_t mwl = c.u32_or("max_window_layers", a.num_layers);
      for (uint32_t i = mwl; i < a.num_layers; ++i) a.layer_types[i] = cmf::LayerType::SlidingAttention;
    }
  } else if (mt == "gemma2") {
    for (uint32_t i = 0; i < a.num_layers; ++i)
      if (i % 2 == 0) a.layer_types[i] = cmf::LayerType::SlidingAttention;
  } else if (mt == "gemma3_text") {
    const uint32_t p = c.u32_or("sliding_window_pattern", 6);
    if (p == 0) c.refuse("sliding_window_pattern", "must be > 0");
    for (uint32_t i = 0; i < a.num_layers; ++i)
      if ((i + 1) % p != 0) a.layer_types[i] = cmf::LayerType::SlidingAttention;
  }
  const bool any_sliding = std::any_of(a.layer_types.begin(), a.layer_types.end(), [](cmf::LayerType t) {
    return t == cmf::LayerType::SlidingAttention;
  });
  if (any_sliding) {
    if (!window || *window == 0)
      c.refuse("sliding_window", "is required (> 0) when layers use sliding attention");
    a.sliding_window = *window;
    // Record the pattern when the schedule is exactly "global iff (i+1) % p == 0".
    for (uint32_t p = 2; p <= a.num_layers; ++p) {
      bool ok = true;
      for (uint32_t i = 0; i < a.num_layers && ok; ++i)
        ok = (a.layer_types[i] == cmf::LayerType::SlidingAttention) == ((i + 1) % p != 0);
      if (ok) {
        a.sliding_window_pattern = p;
        break;
      }
    }
  }
  // transformers' Gemma3TextConfig default for the local (sliding) layers' RoPE base.
  if (mt == "gemma3_text" && !a.rope_local_base_freq) a.rope_local_base_freq = 10000.0;

  // Gemma-2/3 attention extras.
  if (mt == "gemma2" || mt == "gemma3_text") {
    if (c.has("query_pre_attn_scalar")) a.query_pre_attn_scalar = c.f64("query_pre_attn_scalar");
    a.attn_logit_softcapping = c.opt_f64("attn_logit_softcapping");
    a.final_logit_softcapping = c.opt_f64("final_logit_softcapping");
  } else {
    if (c.has("attn_logit_softcapping")) a.attn_logit_softcapping = c.f64("attn_logit_softcapping");
    if (c.has("final_logit_softcapping")) a.final_logit_softcapping = c.f64("final_logit_softcapping");
  }

  // MoE (spec §2.2).
  if (mt == "qwen2_moe" || mt == "qwen3_moe") {
    const uint32_t ne = c.u32("num_experts");
    if (ne > 0) {
      cmf::Moe m;
      m.num_experts = ne;
      m.top_k = c.u32("num_experts_per_tok");
      m.moe_intermediate_size = c.u32("moe_intermediate_size");
      m.norm_topk_prob = c.boolean_or("norm_topk_prob", false);
      if (m.top_k == 0 || m.top_k > ne)
        c.refuse("num_experts_per_tok", fmt::format("= {} must be in 1..num_experts ({})", m.top_k, ne));
      if (mt == "qwen2_moe") {
        const uint32_t sh = c.u32_or("shared_expert_intermediate_size", 0);
        if (sh > 0) m.shared_expert_intermediate_size = sh;
      }
      a.moe = m;
    }
  } else if (c.has("num_experts") || c.has("num_local_experts")) {
    const uint64_t ne = c.has("num_experts") ? c.u64("num_experts") : c.u64("num_local_experts");
    if (ne > 0)
      c.refuse(c.has("num_experts") ? "num_experts" : "num_local_experts", "(MoE) is not supported here");
  }

  // MTP: declared by the config (counted again from tensors by the converter).
  for (const char* k : {"num_nextn_predict_layers", "mtp_num_hidden_layers"}) {
    if (c.has(k) && c.u32(k) > 0) {
      cmf::Mtp m;
      m.num_layers = c.u32(k);
      a.mtp = m;
    }
  }
  if (a.intermediate_size == 0 && !a.moe)
    c.refuse("intermediate_size", "is required (> 0) for a dense model");
  return a;
}

namespace {

std::vector<uint32_t> ids_of(const json& v, const char* what) {
  std::vector<uint32_t> out;
  if (v.is_null()) return out;
  auto one = [&](const json& x) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > UINT32_MAX)
      fail(ErrorKind::Parse, "{}: token id {} is not a non-negative integer", what, x.dump());
    out.push_back(static_cast<uint32_t>(x.get<int64_t>()));
  };
  if (v.is_array()) {
    for (const auto& x : v) one(x);
  } else {
    one(v);
  }
  return out;
}

std::optional<uint32_t> lookup_token(const HfFiles& f, const std::string& content) {
  const json& tc = f.tokenizer_config;
  if (tc.is_object() && tc.contains("added_tokens_decoder") && tc["added_tokens_decoder"].is_object()) {
    for (auto it = tc["added_tokens_decoder"].begin(); it != tc["added_tokens_decoder"].end(); ++it) {
      if (it.value().is_object() && it.value().value("content", std::string()) == content) {
        try {
          return static_cast<uint32_t>(std::stoul(it.key()));
        } catch (const std::exception&) {
          fail(ErrorKind::Parse, "tokenizer_config.json: added_tokens_decoder key '{}' is not a token id",
               it.key());
        }
      }
    }
  }
  if (f.tokenizer_json) {
    json tj = json::parse(*f.tokenizer_json, nullptr, false);
    if (tj.is_object()) {
      if (tj.contains("added_tokens") && tj["added_tokens"].is_array())
        for (const auto& t : tj["added_tokens"])
          if (t.is_object() && t.value("content", std::string()) == content && t.contains("id") &&
              t["id"].is_number_unsigned())
            return t["id"].get<uint32_t>();
      if (tj.contains("model") && tj["model"].is_object() && tj["model"].contains("vocab") &&
          tj["model"]["vocab"].is_object()) {
        auto v = tj["model"]["vocab"].find(content);
        if (v != tj["model"]["vocab"].end() && v->is_number_unsigned()) return v->get<uint32_t>();
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<cmf::TokenizerBundle> bundle_from_hf(const HfFiles& f) {
  cmf::TokenizerBundle b;
  auto blank = [](const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](unsigned char ch) { return std::isspace(ch); });
  };
  if (f.chat_template_jinja && !blank(*f.chat_template_jinja)) {
    b.chat_template = *f.chat_template_jinja;
  } else if (f.tokenizer_config.is_object() && f.tokenizer_config.contains("chat_template")) {
    const json& t = f.tokenizer_config["chat_template"];
    if (t.is_string()) {
      if (!blank(t.get<std::string>())) b.chat_template = t.get<std::string>();
    } else if (t.is_array()) {
      const json* pick = nullptr;
      for (const auto& e : t)
        if (e.is_object() && e.value("name", std::string()) == "default") pick = &e;
      if (!pick && !t.empty()) pick = &t[0];
      if (pick && pick->is_object() && pick->contains("template") && (*pick)["template"].is_string())
        b.chat_template = (*pick)["template"].get<std::string>();
    } else if (!t.is_null()) {
      fail(ErrorKind::Parse, "tokenizer_config.json: chat_template must be a string or a list of templates");
    }
  }
  const json cfg = text_config(f.config);
  auto add = [&](const std::vector<uint32_t>& ids) {
    for (uint32_t id : ids)
      if (std::find(b.eos_token_ids.begin(), b.eos_token_ids.end(), id) == b.eos_token_ids.end())
        b.eos_token_ids.push_back(id);
  };
  if (f.generation_config.is_object() && f.generation_config.contains("eos_token_id"))
    add(ids_of(f.generation_config["eos_token_id"], "generation_config.json eos_token_id"));
  if (cfg.contains("eos_token_id")) add(ids_of(cfg["eos_token_id"], "config.json eos_token_id"));
  if (f.tokenizer_config.is_object() && f.tokenizer_config.contains("eos_token")) {
    const json& e = f.tokenizer_config["eos_token"];
    std::string content;
    if (e.is_string()) content = e.get<std::string>();
    if (e.is_object() && e.contains("content") && e["content"].is_string())
      content = e["content"].get<std::string>();
    if (!content.empty()) {
      auto id = lookup_token(f, content);
      if (id) add({*id});
    }
  }
  auto single = [&](const char* key) -> std::optional<uint32_t> {
    for (const json* src : {&f.generation_config, &cfg}) {
      if (src->is_object() && src->contains(key) && !(*src)[key].is_null()) {
        auto ids = ids_of((*src)[key], key);
        if (!ids.empty()) return ids[0];
      }
    }
    return std::nullopt;
  };
  b.bos_token_id = single("bos_token_id");
  b.pad_token_id = single("pad_token_id");
  if (!b.chat_template && b.eos_token_ids.empty() && !b.bos_token_id && !b.pad_token_id) return std::nullopt;
  return b;
}

}  // namespace cortiq::convert
