#include "cmf/tensor_names.h"

#include <array>

#include "util/error.h"

namespace cortiq::cmf {

namespace {

enum class Scope : uint8_t { Model, Layer, Expert };

struct Entry {
  TensorRole role;
  Scope scope;
  std::string_view text;  ///< the whole name (Model) or what follows the layer / expert prefix
};

constexpr std::array kNames = {
    Entry{TensorRole::Embed, Scope::Model, "model.embed_tokens.weight"},
    Entry{TensorRole::Head, Scope::Model, "lm_head.weight"},
    Entry{TensorRole::FinalNorm, Scope::Model, "model.norm.weight"},
    Entry{TensorRole::InputNorm, Scope::Layer, "input_layernorm.weight"},
    Entry{TensorRole::PostAttnNorm, Scope::Layer, "post_attention_layernorm.weight"},
    Entry{TensorRole::PreFfnNorm, Scope::Layer, "pre_feedforward_layernorm.weight"},
    Entry{TensorRole::PostFfnNorm, Scope::Layer, "post_feedforward_layernorm.weight"},
    Entry{TensorRole::Q, Scope::Layer, "self_attn.q_proj.weight"},
    Entry{TensorRole::K, Scope::Layer, "self_attn.k_proj.weight"},
    Entry{TensorRole::V, Scope::Layer, "self_attn.v_proj.weight"},
    Entry{TensorRole::O, Scope::Layer, "self_attn.o_proj.weight"},
    Entry{TensorRole::QBias, Scope::Layer, "self_attn.q_proj.bias"},
    Entry{TensorRole::KBias, Scope::Layer, "self_attn.k_proj.bias"},
    Entry{TensorRole::VBias, Scope::Layer, "self_attn.v_proj.bias"},
    Entry{TensorRole::QNorm, Scope::Layer, "self_attn.q_norm.weight"},
    Entry{TensorRole::KNorm, Scope::Layer, "self_attn.k_norm.weight"},
    Entry{TensorRole::FfnGate, Scope::Layer, "mlp.gate_proj.weight"},
    Entry{TensorRole::FfnUp, Scope::Layer, "mlp.up_proj.weight"},
    Entry{TensorRole::FfnDown, Scope::Layer, "mlp.down_proj.weight"},
    Entry{TensorRole::Router, Scope::Layer, "mlp.gate.weight"},
    Entry{TensorRole::ExpertGate, Scope::Expert, "gate_proj.weight"},
    Entry{TensorRole::ExpertUp, Scope::Expert, "up_proj.weight"},
    Entry{TensorRole::ExpertDown, Scope::Expert, "down_proj.weight"},
    Entry{TensorRole::SharedGate, Scope::Layer, "mlp.shared_expert.gate_proj.weight"},
    Entry{TensorRole::SharedUp, Scope::Layer, "mlp.shared_expert.up_proj.weight"},
    Entry{TensorRole::SharedDown, Scope::Layer, "mlp.shared_expert.down_proj.weight"},
    Entry{TensorRole::SharedExpertGate, Scope::Layer, "mlp.shared_expert_gate.weight"},
    Entry{TensorRole::MtpEhProj, Scope::Model, "model.mtp.eh_proj.weight"},
    Entry{TensorRole::MtpEnorm, Scope::Model, "model.mtp.enorm.weight"},
    Entry{TensorRole::MtpHnorm, Scope::Model, "model.mtp.hnorm.weight"},
    Entry{TensorRole::MtpNorm, Scope::Model, "model.mtp.norm.weight"},
    Entry{TensorRole::AttnGate, Scope::Layer, "self_attn.g_proj.weight"},
    Entry{TensorRole::GdnInProjA, Scope::Layer, "linear_attn.in_proj_a.weight"},
    Entry{TensorRole::GdnInProjB, Scope::Layer, "linear_attn.in_proj_b.weight"},
    Entry{TensorRole::GdnInProjBa, Scope::Layer, "linear_attn.in_proj_ba.weight"},
    Entry{TensorRole::FusedQkv, Scope::Layer, "self_attn.qkv_proj.weight"},
    Entry{TensorRole::FusedGateUp, Scope::Layer, "mlp.gate_up_proj.weight"},
};

constexpr std::string_view kLayers = "model.layers.", kExperts = "mlp.experts.", kSkill = "skill.";
constexpr std::string_view kMtpLayers = "layers.";  ///< the MTP block's layers, after kMtpPrefix

const Entry& entry(TensorRole role) {
  for (const Entry& e : kNames)
    if (e.role == role) return e;
  fail(ErrorKind::InvalidArgument, "tensor role {} has no name", static_cast<int>(role));
}

/// A decimal index without leading zeros (as the names are written) followed by '.', taken off
/// the front of `s`.
std::optional<uint32_t> take_index(std::string_view& s) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < s.size() && i < 10 && s[i] >= '0' && s[i] <= '9')
    v = v * 10 + static_cast<uint64_t>(s[i++] - '0');
  if (i == 0 || i >= s.size() || s[i] != '.' || (i > 1 && s[0] == '0') || v > UINT32_MAX) return std::nullopt;
  s.remove_prefix(i + 1);
  return static_cast<uint32_t>(v);
}

/// `name` taken apart at its front: the layer and expert prefixes, and what follows them.
struct Split {
  bool mtp = false;
  std::optional<uint32_t> layer;
  bool in_experts = false;
  std::optional<uint32_t> expert;
  Scope scope = Scope::Model;
  std::string_view rest;  ///< the whole name (Model scope) or what follows the layer / expert prefix
};

Split split(std::string_view name) {
  Split s;
  s.rest = name;
  std::string_view r = name, layers = kLayers;
  if (r.starts_with(kMtpPrefix)) {
    s.mtp = true;
    r.remove_prefix(kMtpPrefix.size());
    layers = kMtpLayers;
  }
  if (!r.starts_with(layers)) return s;
  r.remove_prefix(layers.size());
  s.layer = take_index(r);
  if (!s.layer) return s;
  s.scope = Scope::Layer;
  s.rest = r;
  if (!r.starts_with(kExperts)) return s;
  s.in_experts = true;
  r.remove_prefix(kExperts.size());
  s.expert = take_index(r);
  if (!s.expert) return s;
  s.scope = Scope::Expert;
  s.rest = r;
  return s;
}

/// The text of `e` without its last component ("self_attn.q_proj" of "self_attn.q_proj.weight").
std::string_view module_text(const Entry& e) {
  return e.text.substr(0, e.text.rfind('.'));
}

/// `text` (the entry's, or its module's) under the layer / expert / MTP prefix of `n`.
std::string spell(const Entry& e, const TensorName& n, std::string_view text) {
  if (n.mtp && e.scope == Scope::Model)
    fail(ErrorKind::InvalidArgument, "tensor role {} is not per layer: it has no MTP-layer name",
         static_cast<int>(e.role));
  std::string s = n.mtp ? std::string(kMtpPrefix) + std::string(kMtpLayers) : std::string(kLayers);
  switch (e.scope) {
    case Scope::Model:
      return std::string(text);
    case Scope::Layer:
      return s + std::to_string(n.layer) + "." + std::string(text);
    case Scope::Expert:
      return s + std::to_string(n.layer) + "." + std::string(kExperts) + std::to_string(n.expert) + "." +
             std::string(text);
  }
  return {};
}

}  // namespace

std::string tensor_name(TensorRole role, uint32_t layer, uint32_t expert) {
  return tensor_name(TensorName{role, layer, expert});
}

std::string tensor_name(const TensorName& n) {
  const Entry& e = entry(n.role);
  return spell(e, n, e.text);
}

std::string tensor_module(const TensorName& n) {
  const Entry& e = entry(n.role);
  return spell(e, n, module_text(e));
}

std::optional<TensorName> parse_tensor_name(std::string_view name) {
  const Split s = split(name);
  if (s.mtp && s.scope != Scope::Model) return std::nullopt;  // an MTP layer's tensor: tensor_place
  for (const Entry& e : kNames)
    if (e.scope == s.scope && e.text == s.rest)
      return TensorName{e.role, s.layer.value_or(0), s.expert.value_or(0)};
  return std::nullopt;
}

TensorPlace tensor_place(std::string_view name) {
  const Split s = split(name);
  TensorPlace p{s.mtp, s.layer, s.in_experts, s.expert, std::nullopt, {}};
  for (const Entry& e : kNames) {
    const std::string_view m = module_text(e);
    if (e.scope == s.scope && s.rest.size() > m.size() && s.rest.starts_with(m) && s.rest[m.size()] == '.') {
      p.module = e.role;
      p.tail = s.rest.substr(m.size() + 1);
      break;
    }
  }
  return p;
}

bool is_layer_role(TensorRole role) noexcept {
  for (const Entry& e : kNames)
    if (e.role == role) return e.scope != Scope::Model;
  return false;
}

NeuronAxis neuron_axis(TensorRole role) noexcept {
  switch (role) {
    case TensorRole::FfnGate:
    case TensorRole::FfnUp:
    case TensorRole::ExpertGate:
    case TensorRole::ExpertUp:
    case TensorRole::SharedGate:
    case TensorRole::SharedUp:
      return NeuronAxis::Rows;
    case TensorRole::FfnDown:
    case TensorRole::ExpertDown:
    case TensorRole::SharedDown:
      return NeuronAxis::Cols;
    default:
      return NeuronAxis::None;
  }
}

std::string skill_tensor_name(std::string_view id, std::string_view name) {
  if (id.empty() || id.find('.') != std::string_view::npos)
    fail(ErrorKind::InvalidArgument, "skill id '{}': must be non-empty and hold no '.'", id);
  return std::string(kSkill) + std::string(id) + "." + std::string(name);
}

std::optional<std::pair<std::string, std::string>> parse_skill_name(std::string_view name) {
  if (name.substr(0, kSkill.size()) != kSkill) return std::nullopt;
  name.remove_prefix(kSkill.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot + 1 == name.size()) return std::nullopt;
  return std::pair<std::string, std::string>(name.substr(0, dot), name.substr(dot + 1));
}

}  // namespace cortiq::cmf
