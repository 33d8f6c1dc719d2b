// Header JSON parse/serialize (FORMAT-NOTES §1.5).
#include "cmf/header.h"

#include <array>
#include <utility>

#include "cmf/json_util.h"
#include "util/error.h"

namespace cortiq::cmf {

using detail::json;
using detail::merge_extra;
using detail::Obj;

namespace {

constexpr std::array<std::string_view, 5> kLayerTypeNames = {"FullAttention", "SlidingAttention",
                                                             "LinearAttention", "ShortConv", "Kda"};
constexpr std::array<std::string_view, 7> kQuantNames = {"Q8_ROW", "Q4_BLOCK", "Q8_2F", "VBIT",
                                                         "BF16",   "F16",      "F32"};
constexpr std::array<std::string_view, 7> kQuantDebug = {"Q8Row", "Q4Block", "Q82F", "VBit",
                                                         "BF16",  "F16",     "F32"};

template <typename E, size_t N>
E enum_from(Obj& o, const json& v, std::string_view key, const std::array<std::string_view, N>& names) {
  std::string s = o.str(v, key);
  for (size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  std::string allowed;
  for (auto n : names) allowed += fmt::format("{}\"{}\"", allowed.empty() ? "" : ", ", n);
  fail(ErrorKind::Parse, "{}: unknown value \"{}\" (expected one of {})", o.key_path(key), s, allowed);
}

constexpr std::array<std::string_view, 2> kNormStyles = {"qwen", "gemma"};
constexpr std::array<std::string_view, 3> kActs = {"silu", "gelu_tanh", "situ"};
constexpr std::array<std::string_view, 2> kLinearKinds = {"gated_delta_net", "vmf_phase"};

template <typename T>
void put_opt(json& j, const char* k, const std::optional<T>& v) {
  if (v) j[k] = *v;
}

}  // namespace

std::string_view layer_type_name(LayerType t) noexcept {
  return kLayerTypeNames[static_cast<size_t>(t)];
}
std::optional<LayerType> layer_type_from_name(std::string_view s) noexcept {
  for (size_t i = 0; i < kLayerTypeNames.size(); ++i)
    if (kLayerTypeNames[i] == s) return static_cast<LayerType>(i);
  return std::nullopt;
}
std::string_view quant_type_name(QuantType t) noexcept {
  return kQuantNames[static_cast<size_t>(t)];
}
std::string_view quant_type_debug_name(QuantType t) noexcept {
  return kQuantDebug[static_cast<size_t>(t)];
}
std::optional<QuantType> quant_type_from_name(std::string_view s) noexcept {
  for (size_t i = 0; i < kQuantNames.size(); ++i)
    if (kQuantNames[i] == s) return static_cast<QuantType>(i);
  return std::nullopt;
}

std::string hex16(uint64_t v) {
  return fmt::format("{:016x}", v);
}

std::optional<uint64_t> parse_hex16(std::string_view s) noexcept {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

// ---------------------------------------------------------------- arch

ModelArch arch_from_json(const json& j, std::string_view path) {
  Obj o(j, std::string(path));
  ModelArch a;
  a.arch_name = o.req_str("arch_name");
  a.hidden_size = o.req_u32("hidden_size");
  a.intermediate_size = o.req_u32("intermediate_size");
  a.num_layers = o.req_u32("num_layers");
  a.num_attention_heads = o.req_u32("num_attention_heads");
  a.num_kv_heads = o.req_u32("num_kv_heads");
  a.head_dim = o.req_u32("head_dim");
  a.vocab_size = o.req_u32("vocab_size");
  {
    const json& lt = o.req("layer_types");
    if (!lt.is_array()) fail(ErrorKind::Parse, "{}: expected an array", o.key_path("layer_types"));
    for (size_t i = 0; i < lt.size(); ++i)
      a.layer_types.push_back(
          enum_from<LayerType>(o, lt[i], fmt::format("layer_types[{}]", i), kLayerTypeNames));
  }
  a.rms_norm_eps = o.req_f64("rms_norm_eps");
  a.max_position_embeddings = o.req_u64("max_position_embeddings");
  if (auto* v = o.get("norm_style")) a.norm_style = enum_from<NormStyle>(o, *v, "norm_style", kNormStyles);
  a.rope_theta = o.f64_or("rope_theta", 10000.0);
  a.tie_word_embeddings = o.bool_or("tie_word_embeddings", false);
  a.partial_rotary_factor = o.f64_or("partial_rotary_factor", 1.0);
  if (auto* v = o.get("hidden_act")) a.hidden_act = enum_from<HiddenAct>(o, *v, "hidden_act", kActs);
  a.embed_multiplier = o.f64_or("embed_multiplier", 1.0);
  a.attn_v_norm = o.bool_or("attn_v_norm", false);
  a.num_loops = o.u32_or("num_loops", 1);
  a.loop_final_norm = o.bool_or("loop_final_norm", false);
  if (auto* v = o.get("yarn")) {
    Obj y(*v, o.key_path("yarn"));
    Yarn r;
    r.factor = y.req_f64("factor");
    r.original_max_position_embeddings = y.req_u32("original_max_position_embeddings");
    r.beta_fast = y.f64_or("beta_fast", 32.0);
    r.beta_slow = y.f64_or("beta_slow", 1.0);
    r.attention_factor = y.f64_or("attention_factor", 1.0);
    r.mscale_all_dim = y.opt_f64("mscale_all_dim");
    r.extra = y.rest();
    a.yarn = std::move(r);
  }
  if (auto* v = o.get("attention_heads_per_layer")) {
    auto hp = o.u32_array(*v, "attention_heads_per_layer");
    if (hp.size() != a.num_layers)
      fail(ErrorKind::Parse, "{}: length {} != num_layers {}", o.key_path("attention_heads_per_layer"),
           hp.size(), a.num_layers);
    for (size_t i = 0; i < hp.size(); ++i)
      if (hp[i] == 0 || a.num_kv_heads == 0 || hp[i] % a.num_kv_heads != 0)
        fail(ErrorKind::Parse, "{}[{}]: {} heads is not a positive multiple of num_kv_heads {}",
             o.key_path("attention_heads_per_layer"), i, hp[i], a.num_kv_heads);
    a.attention_heads_per_layer = std::move(hp);
  }
  a.query_pre_attn_scalar = o.opt_f64("query_pre_attn_scalar");
  a.sliding_window = o.opt_u32("sliding_window");
  a.sliding_window_pattern = o.opt_u32("sliding_window_pattern");
  a.rope_local_base_freq = o.opt_f64("rope_local_base_freq");
  a.local_partial_rotary_factor = o.opt_f64("local_partial_rotary_factor");
  a.global_head_dim = o.opt_u32("global_head_dim");
  a.num_global_kv_heads = o.opt_u32("num_global_kv_heads");
  a.global_partial_rotary_factor = o.opt_f64("global_partial_rotary_factor");
  a.final_logit_softcapping = o.opt_f64("final_logit_softcapping");
  a.attn_logit_softcapping = o.opt_f64("attn_logit_softcapping");
  if (auto* v = o.get("mla")) {
    Obj m(*v, o.key_path("mla"));
    Mla r;
    r.kv_lora_rank = m.req_u32("kv_lora_rank");
    r.qk_rope_head_dim = m.req_u32("qk_rope_head_dim");
    r.qk_nope_head_dim = m.req_u32("qk_nope_head_dim");
    r.v_head_dim = m.req_u32("v_head_dim");
    r.q_lora_rank = m.opt_u32("q_lora_rank");
    r.nope = m.bool_or("nope", false);
    r.extra = m.rest();
    a.mla = std::move(r);
  }
  a.activation_situ_beta = o.opt_f64("activation_situ_beta");
  a.activation_situ_linear_beta = o.opt_f64("activation_situ_linear_beta");
  if (auto* v = o.get("mtp")) {
    Obj m(*v, o.key_path("mtp"));
    Mtp r;
    r.num_layers = m.req_u32("num_layers");
    r.share_lm_head = m.bool_or("share_lm_head", true);
    r.share_embed = m.bool_or("share_embed", true);
    r.extra = m.rest();
    a.mtp = std::move(r);
  }
  if (auto* v = o.get("moe")) {
    Obj m(*v, o.key_path("moe"));
    Moe r;
    r.num_experts = m.req_u32("num_experts");
    r.top_k = m.req_u32("top_k");
    r.moe_intermediate_size = m.req_u32("moe_intermediate_size");
    r.norm_topk_prob = m.bool_or("norm_topk_prob", false);
    r.shared_expert_intermediate_size = m.opt_u32("shared_expert_intermediate_size");
    r.router_sigmoid = m.bool_or("router_sigmoid", false);
    r.routed_scaling_factor = m.opt_f64("routed_scaling_factor");
    r.router_resonance = m.bool_or("router_resonance", false);
    r.extra = m.rest();
    a.moe = std::move(r);
  }
  if (auto* v = o.get("linear_core")) {
    Obj m(*v, o.key_path("linear_core"));
    LinearCore r;
    r.kind = enum_from<LinearCoreKind>(m, m.req("kind"), "kind", kLinearKinds);
    r.num_heads = m.req_u32("num_heads");
    r.nphase = m.opt_u32("nphase");
    r.value_head_dim = m.req_u32("value_head_dim");
    r.extra = m.rest();
    a.linear_core = std::move(r);
  }
  a.head_clusters = o.opt_json("head_clusters");
  a.linear_conv_kernel_dim = o.opt_u32("linear_conv_kernel_dim");
  a.linear_num_key_heads = o.opt_u32("linear_num_key_heads");
  a.linear_num_value_heads = o.opt_u32("linear_num_value_heads");
  a.linear_key_head_dim = o.opt_u32("linear_key_head_dim");
  a.linear_value_head_dim = o.opt_u32("linear_value_head_dim");
  if (auto* v = o.get("rope_freq_factors")) a.rope_freq_factors = o.f64_array(*v, "rope_freq_factors");
  a.logit_multiplier = o.opt_f64("logit_multiplier");
  if (auto* v = o.get("g3n")) {
    Obj m(*v, o.key_path("g3n"));
    G3n r;
    r.altup_num_inputs = m.req_u32("altup_num_inputs");
    r.laurel_rank = m.req_u32("laurel_rank");
    r.ple_dim = m.req_u32("ple_dim");
    r.ple_vocab = m.req_u32("ple_vocab");
    r.num_kv_shared_layers = m.req_u32("num_kv_shared_layers");
    if (auto* s = m.get("activation_sparsity"))
      r.activation_sparsity = m.f64_array(*s, "activation_sparsity");
    r.extra = m.rest();
    a.g3n = std::move(r);
  }
  a.kda_gate_lower_bound = o.opt_f64("kda_gate_lower_bound");
  a.extra = o.rest();
  return a;
}

json arch_to_json(const ModelArch& a) {
  json j = json::object();
  j["arch_name"] = a.arch_name;
  j["hidden_size"] = a.hidden_size;
  j["intermediate_size"] = a.intermediate_size;
  j["num_layers"] = a.num_layers;
  j["num_attention_heads"] = a.num_attention_heads;
  j["num_kv_heads"] = a.num_kv_heads;
  j["head_dim"] = a.head_dim;
  j["vocab_size"] = a.vocab_size;
  json lt = json::array();
  for (auto t : a.layer_types) lt.push_back(std::string(layer_type_name(t)));
  j["layer_types"] = std::move(lt);
  j["rms_norm_eps"] = a.rms_norm_eps;
  j["max_position_embeddings"] = a.max_position_embeddings;
  j["norm_style"] = std::string(kNormStyles[static_cast<size_t>(a.norm_style)]);
  j["rope_theta"] = a.rope_theta;
  j["tie_word_embeddings"] = a.tie_word_embeddings;
  j["partial_rotary_factor"] = a.partial_rotary_factor;
  j["hidden_act"] = std::string(kActs[static_cast<size_t>(a.hidden_act)]);
  j["embed_multiplier"] = a.embed_multiplier;
  j["attn_v_norm"] = a.attn_v_norm;
  j["num_loops"] = a.num_loops;
  j["loop_final_norm"] = a.loop_final_norm;
  if (a.yarn) {
    json y = {{"factor", a.yarn->factor},
              {"original_max_position_embeddings", a.yarn->original_max_position_embeddings},
              {"beta_fast", a.yarn->beta_fast},
              {"beta_slow", a.yarn->beta_slow},
              {"attention_factor", a.yarn->attention_factor}};
    put_opt(y, "mscale_all_dim", a.yarn->mscale_all_dim);
    merge_extra(y, a.yarn->extra);
    j["yarn"] = std::move(y);
  }
  put_opt(j, "attention_heads_per_layer", a.attention_heads_per_layer);
  put_opt(j, "query_pre_attn_scalar", a.query_pre_attn_scalar);
  put_opt(j, "sliding_window", a.sliding_window);
  put_opt(j, "sliding_window_pattern", a.sliding_window_pattern);
  put_opt(j, "rope_local_base_freq", a.rope_local_base_freq);
  put_opt(j, "local_partial_rotary_factor", a.local_partial_rotary_factor);
  put_opt(j, "global_head_dim", a.global_head_dim);
  put_opt(j, "num_global_kv_heads", a.num_global_kv_heads);
  put_opt(j, "global_partial_rotary_factor", a.global_partial_rotary_factor);
  put_opt(j, "final_logit_softcapping", a.final_logit_softcapping);
  put_opt(j, "attn_logit_softcapping", a.attn_logit_softcapping);
  if (a.mla) {
    json m = {{"kv_lora_rank", a.mla->kv_lora_rank},
              {"qk_rope_head_dim", a.mla->qk_rope_head_dim},
              {"qk_nope_head_dim", a.mla->qk_nope_head_dim},
              {"v_head_dim", a.mla->v_head_dim},
              {"nope", a.mla->nope}};
    put_opt(m, "q_lora_rank", a.mla->q_lora_rank);
    merge_extra(m, a.mla->extra);
    j["mla"] = std::move(m);
  }
  put_opt(j, "activation_situ_beta", a.activation_situ_beta);
  put_opt(j, "activation_situ_linear_beta", a.activation_situ_linear_beta);
  if (a.mtp) {
    json m = {{"num_layers", a.mtp->num_layers},
              {"share_lm_head", a.mtp->share_lm_head},
              {"share_embed", a.mtp->share_embed}};
    merge_extra(m, a.mtp->extra);
    j["mtp"] = std::move(m);
  }
  if (a.moe) {
    json m = {{"num_experts", a.moe->num_experts},
              {"top_k", a.moe->top_k},
              {"moe_intermediate_size", a.moe->moe_intermediate_size},
              {"norm_topk_prob", a.moe->norm_topk_prob},
              {"router_sigmoid", a.moe->router_sigmoid},
              {"router_resonance", a.moe->router_resonance}};
    put_opt(m, "shared_expert_intermediate_size", a.moe->shared_expert_intermediate_size);
    put_opt(m, "routed_scaling_factor", a.moe->routed_scaling_factor);
    merge_extra(m, a.moe->extra);
    j["moe"] = std::move(m);
  }
  if (a.linear_core) {
    json m = {{"kind", std::string(kLinearKinds[static_cast<size_t>(a.linear_core->kind)])},
              {"num_heads", a.linear_core->num_heads},
              {"value_head_dim", a.linear_core->value_head_dim}};
    put_opt(m, "nphase", a.linear_core->nphase);
    merge_extra(m, a.linear_core->extra);
    j["linear_core"] = std::move(m);
  }
  put_opt(j, "head_clusters", a.head_clusters);
  // The reference serializes these three as null when absent.
  j["linear_conv_kernel_dim"] = a.linear_conv_kernel_dim ? json(*a.linear_conv_kernel_dim) : json(nullptr);
  j["linear_num_key_heads"] = a.linear_num_key_heads ? json(*a.linear_num_key_heads) : json(nullptr);
  j["linear_num_value_heads"] = a.linear_num_value_heads ? json(*a.linear_num_value_heads) : json(nullptr);
  put_opt(j, "linear_key_head_dim", a.linear_key_head_dim);
  put_opt(j, "linear_value_head_dim", a.linear_value_head_dim);
  put_opt(j, "rope_freq_factors", a.rope_freq_factors);
  put_opt(j, "logit_multiplier", a.logit_multiplier);
  if (a.g3n) {
    json m = {{"altup_num_inputs", a.g3n->altup_num_inputs},
              {"laurel_rank", a.g3n->laurel_rank},
              {"ple_dim", a.g3n->ple_dim},
              {"ple_vocab", a.g3n->ple_vocab},
              {"num_kv_shared_layers", a.g3n->num_kv_shared_layers},
              {"activation_sparsity", a.g3n->activation_sparsity}};
    merge_extra(m, a.g3n->extra);
    j["g3n"] = std::move(m);
  }
  put_opt(j, "kda_gate_lower_bound", a.kda_gate_lower_bound);
  merge_extra(j, a.extra);
  return j;
}

// ---------------------------------------------------------------- header

namespace {

SelectionDescriptor selection_from_json(const json& j, const std::string& path) {
  Obj o(j, path);
  SelectionDescriptor s;
  s.metric = o.req_str("metric");
  s.phi_layer = o.req_u32("phi_layer");
  s.mean = o.req_str("mean");
  s.basis = o.req_str("basis");
  s.rank = o.opt_u32("rank");
  s.err_mean = o.opt_f64("err_mean");
  s.err_std = o.opt_f64("err_std");
  s.holdout = o.opt_str("holdout");
  s.holdout_n = o.opt_u32("holdout_n");
  s.extra = o.rest();
  return s;
}

json selection_to_json(const SelectionDescriptor& s) {
  json j = {{"metric", s.metric}, {"phi_layer", s.phi_layer}, {"mean", s.mean}, {"basis", s.basis}};
  put_opt(j, "rank", s.rank);
  put_opt(j, "err_mean", s.err_mean);
  put_opt(j, "err_std", s.err_std);
  put_opt(j, "holdout", s.holdout);
  put_opt(j, "holdout_n", s.holdout_n);
  merge_extra(j, s.extra);
  return j;
}

SkillRecord skill_from_json(const json& j, const std::string& path) {
  Obj o(j, path);
  SkillRecord r;
  r.id = o.req_str("id");
  r.name = o.opt_str("name");
  if (auto* v = o.get("layers")) r.layers = o.u32_array(*v, "layers");
  if (auto* v = o.get("selection")) r.selection = selection_from_json(*v, o.key_path("selection"));
  r.input_mask_task = o.opt_str("input_mask_task");
  r.quality = o.opt_json("quality");
  r.base_dir_hash = o.opt_str("base_dir_hash");
  r.base_arch = o.opt_json("base_arch");
  r.task = o.opt_str("task");
  r.provenance = o.opt_json("provenance");
  r.extra = o.rest();
  return r;
}

json skill_to_json(const SkillRecord& r) {
  json j = {{"id", r.id}, {"layers", r.layers}};
  put_opt(j, "name", r.name);
  if (r.selection) j["selection"] = selection_to_json(*r.selection);
  put_opt(j, "input_mask_task", r.input_mask_task);
  put_opt(j, "quality", r.quality);
  put_opt(j, "base_dir_hash", r.base_dir_hash);
  put_opt(j, "base_arch", r.base_arch);
  put_opt(j, "task", r.task);
  put_opt(j, "provenance", r.provenance);
  merge_extra(j, r.extra);
  return j;
}

}  // namespace

Header header_from_json(const json& j) {
  Obj o(j, "header");
  Header h;
  h.format = o.opt_str("format").value_or("cmf");
  h.version = o.req_u32("version");
  h.arch = arch_from_json(o.req("arch"), "header.arch");
  h.quant_type = enum_from<QuantType>(o, o.req("quant_type"), "quant_type", kQuantNames);
  if (auto* v = o.get("provenance")) h.provenance = *v;
  if (auto* v = o.get("tokenizer_config")) {
    Obj t(*v, o.key_path("tokenizer_config"));
    TokenizerBundle b;
    b.chat_template = t.opt_str("chat_template");
    if (auto* e = t.get("eos_token_ids")) b.eos_token_ids = t.u32_array(*e, "eos_token_ids");
    b.bos_token_id = t.opt_u32("bos_token_id");
    b.pad_token_id = t.opt_u32("pad_token_id");
    b.extra = t.rest();
    h.tokenizer_config = std::move(b);
  }
  if (auto* v = o.get("section_hashes")) {
    Obj s(*v, o.key_path("section_hashes"));
    h.section_hashes.masks = s.opt_str("masks");
    h.section_hashes.vocab = s.opt_str("vocab");
    h.section_hashes.index = s.opt_str("index");
    h.section_hashes.extra = s.rest();
  }
  if (auto* v = o.get("skills")) {
    if (!v->is_array()) fail(ErrorKind::Parse, "header.skills: expected an array");
    for (size_t i = 0; i < v->size(); ++i)
      h.skills.push_back(skill_from_json((*v)[i], fmt::format("header.skills[{}]", i)));
  }
  if (auto* v = o.get("shard")) {
    Obj s(*v, o.key_path("shard"));
    ShardInfo si;
    si.no = s.req_u32("no");
    si.count = s.req_u32("count");
    if (si.count == 0 || si.no == 0 || si.no > si.count)
      fail(ErrorKind::Parse, "header.shard: invalid {{no: {}, count: {}}}", si.no, si.count);
    h.shard = si;
  }
  h.calibration = o.opt_json("calibration");
  h.routing = o.opt_json("routing");
  h.extra = o.rest();
  return h;
}

Header parse_header(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(ErrorKind::Parse, "header: not valid JSON ({} bytes)", text.size());
  return header_from_json(j);
}

Header parse_header(std::span<const uint8_t> bytes) {
  return parse_header(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

json header_to_json(const Header& h) {
  json j = json::object();
  j["format"] = h.format;
  j["version"] = h.version;
  j["arch"] = arch_to_json(h.arch);
  j["quant_type"] = std::string(quant_type_name(h.quant_type));
  if (!h.provenance.is_null()) j["provenance"] = h.provenance;
  if (h.tokenizer_config) {
    const auto& b = *h.tokenizer_config;
    json t = {{"eos_token_ids", b.eos_token_ids}};
    put_opt(t, "chat_template", b.chat_template);
    put_opt(t, "bos_token_id", b.bos_token_id);
    put_opt(t, "pad_token_id", b.pad_token_id);
    merge_extra(t, b.extra);
    j["tokenizer_config"] = std::move(t);
  }
  if (!h.section_hashes.empty() || !h.section_hashes.extra.empty()) {
    json s = json::object();
    put_opt(s, "masks", h.section_hashes.masks);
    put_opt(s, "vocab", h.section_hashes.vocab);
    put_opt(s, "index", h.section_hashes.index);
    merge_extra(s, h.section_hashes.extra);
    j["section_hashes"] = std::move(s);
  }
  json sk = json::array();
  for (const auto& r : h.skills) sk.push_back(skill_to_json(r));
  j["skills"] = std::move(sk);
  if (h.shard) j["shard"] = {{"no", h.shard->no}, {"count", h.shard->count}};
  put_opt(j, "calibration", h.calibration);
  put_opt(j, "routing", h.routing);
  merge_extra(j, h.extra);
  return j;
}

std::string serialize_header(const Header& h) {
  try {
    return header_to_json(h).dump();
  } catch (const json::exception& e) {
    fail(ErrorKind::InvalidArgument, "header: cannot serialize ({})", e.what());
  }
}

}  // namespace cortiq::cmf
