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
};

constexpr std::string_view kLayers = "model.layers.", kExperts = "mlp.experts.", kSkill = "skill.";

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

}  // namespace

std::string tensor_name(TensorRole role, uint32_t layer, uint32_t expert) {
  const Entry& e = entry(role);
  switch (e.scope) {
    case Scope::Model:
      return std::string(e.text);
    case Scope::Layer:
      return std::string(kLayers) + std::to_string(layer) + "." + std::string(e.text);
    case Scope::Expert:
      return std::string(kLayers) + std::to_string(layer) + "." + std::string(kExperts) +
             std::to_string(expert) + "." + std::string(e.text);
  }
  return {};
}

std::optional<TensorName> parse_tensor_name(std::string_view name) {
  for (const Entry& e : kNames)
    if (e.scope == Scope::Model && e.text == name) return TensorName{e.role};
  if (name.substr(0, kLayers.size()) != kLayers) return std::nullopt;
  name.remove_prefix(kLayers.size());
  const auto layer = take_index(name);
  if (!layer) return std::nullopt;
  Scope scope = Scope::Layer;
  uint32_t expert = 0;
  if (name.substr(0, kExperts.size()) == kExperts) {
    std::string_view rest = name.substr(kExperts.size());
    if (const auto e = take_index(rest)) {
      scope = Scope::Expert;
      expert = *e;
      name = rest;
    }
  }
  for (const Entry& e : kNames)
    if (e.scope == scope && e.text == name) return TensorName{e.role, *layer, expert};
  return std::nullopt;
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
