// The one owner of canonical tensor names (FORMAT-NOTES §1.6: the source model's HF names after
// canonicalization; §1.14: skill overlays are `skill.{id}.{name}`). Every place that spells a
// tensor name — binding, accounting, info, conversion, masks and defrag — goes through here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cortiq::cmf {

/// What a tensor is in the model. Per-layer roles take a layer index; expert roles a layer and an
/// expert index; the MTP block's roles (ENGINE-NOTES §3.9) live under `model.mtp.`.
enum class TensorRole : uint8_t {
  // whole model
  Embed,      ///< model.embed_tokens.weight [vocab, hidden]
  Head,       ///< lm_head.weight [vocab, hidden]
  FinalNorm,  ///< model.norm.weight [hidden]
  // per layer: norms
  InputNorm,     ///< model.layers.{l}.input_layernorm.weight
  PostAttnNorm,  ///< …post_attention_layernorm.weight
  PreFfnNorm,    ///< …pre_feedforward_layernorm.weight (Gemma 2/3 sandwich)
  PostFfnNorm,   ///< …post_feedforward_layernorm.weight
  // per layer: attention
  Q,
  K,
  V,
  O,  ///< …self_attn.{q,k,v,o}_proj.weight
  QBias,
  KBias,
  VBias,  ///< …self_attn.{q,k,v}_proj.bias
  QNorm,
  KNorm,  ///< …self_attn.{q,k}_norm.weight
  // per layer: dense FFN
  FfnGate,
  FfnUp,
  FfnDown,  ///< …mlp.{gate,up,down}_proj.weight
  // per layer: mixture of experts
  Router,  ///< …mlp.gate.weight [experts, hidden]
  ExpertGate,
  ExpertUp,
  ExpertDown,  ///< …mlp.experts.{e}.{gate,up,down}_proj.weight
  SharedGate,
  SharedUp,
  SharedDown,        ///< …mlp.shared_expert.{gate,up,down}_proj.weight
  SharedExpertGate,  ///< …mlp.shared_expert_gate.weight [1, hidden]
  // the MTP block (one)
  MtpEhProj,
  MtpEnorm,
  MtpHnorm,
  MtpNorm,  ///< model.mtp.{eh_proj,enorm,hnorm,norm}.weight
};

/// A canonical name taken apart.
struct TensorName {
  TensorRole role;
  uint32_t layer = 0;   ///< per-layer and expert roles
  uint32_t expert = 0;  ///< expert roles
};

/// The canonical name of `role` (layer / expert ignored where the role has none).
std::string tensor_name(TensorRole role, uint32_t layer = 0, uint32_t expert = 0);
/// The role a canonical name spells, or nullopt for a name no role spells (an unknown tensor, a
/// skill overlay: see parse_skill_name). Layer and expert indices are decimal without leading zeros.
std::optional<TensorName> parse_tensor_name(std::string_view name);
/// Whether the role is indexed by layer.
bool is_layer_role(TensorRole role) noexcept;

/// Which axis of an FFN tensor a neuron is — what task masks and defrag prune (spec §5): the rows
/// of gate/up ([width, hidden]), the columns of down ([hidden, width]); None for other roles.
enum class NeuronAxis : uint8_t { None, Rows, Cols };
NeuronAxis neuron_axis(TensorRole role) noexcept;

/// `skill.{id}.{name}` (FORMAT-NOTES §1.14). Throws Error(InvalidArgument) for an empty id or an id
/// holding '.', which would make the overlay name ambiguous.
std::string skill_tensor_name(std::string_view id, std::string_view name);
/// The skill id and the backbone name of an overlay name, or nullopt when `name` is none.
std::optional<std::pair<std::string, std::string>> parse_skill_name(std::string_view name);

}  // namespace cortiq::cmf
