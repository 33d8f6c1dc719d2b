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
  // per layer: gates and mixers the runtime does not run but the quantization plan names
  // (FORMAT-NOTES §1.9 force-f16 list; ENGINE-NOTES §3.1, §3.7)
  AttnGate,     ///< …self_attn.g_proj.weight (softplus output gate) [heads or heads·head_dim, hidden]
  GdnInProjA,   ///< …linear_attn.in_proj_a.weight (GatedDeltaNet) [value heads, hidden]
  GdnInProjB,   ///< …linear_attn.in_proj_b.weight [value heads, hidden]
  GdnInProjBa,  ///< …linear_attn.in_proj_ba.weight (Qwen3-Next's fused b | a, when a converter keeps it)
  // source only: HF Phi3's fused projections, which convert splits by rows (no CMF file holds them)
  FusedQkv,     ///< …self_attn.qkv_proj.weight [q + 2·kv rows, hidden] → Q | K | V
  FusedGateUp,  ///< …mlp.gate_up_proj.weight [2·intermediate, hidden] → FfnGate | FfnUp
};

/// A canonical name taken apart.
struct TensorName {
  TensorRole role;
  uint32_t layer = 0;   ///< per-layer and expert roles
  uint32_t expert = 0;  ///< expert roles
  bool mtp = false;     ///< a layer of the MTP block: `model.mtp.layers.{layer}.…` (per-layer roles only)
};

/// HF's base-model namespace: every canonical name but the head's (`lm_head.weight`) starts with it.
inline constexpr std::string_view kBaseModelPrefix = "model.";
/// The MTP block's namespace (ENGINE-NOTES §3.9), inside the base model's.
inline constexpr std::string_view kMtpPrefix = "model.mtp.";

/// The canonical name of `role` (layer / expert ignored where the role has none).
std::string tensor_name(TensorRole role, uint32_t layer = 0, uint32_t expert = 0);
/// The canonical name of `n`. Throws Error(InvalidArgument) for `mtp` on a role that is not per layer.
std::string tensor_name(const TensorName& n);
/// The HF module that holds the tensor `n`: its name without the last component
/// (`model.layers.3.self_attn.q_proj` for Q and for QBias). Another parameter of that module is
/// `tensor_module(n) + ".bias"`. Throws as tensor_name does.
std::string tensor_module(const TensorName& n);
/// The role a canonical name spells, or nullopt for a name no role spells (an unknown tensor, a
/// skill overlay: see parse_skill_name). Layer and expert indices are decimal without leading zeros.
std::optional<TensorName> parse_tensor_name(std::string_view name);
/// Whether the role is indexed by layer.
bool is_layer_role(TensorRole role) noexcept;

/// Where a name stands, read from its front alone, whether or not a role spells it whole (a bias
/// of a weight role, a tensor of an MTP layer, an unknown tensor of a known layer). Indices are
/// decimal without leading zeros, as in parse_tensor_name.
struct TensorPlace {
  bool mtp = false;                  ///< under kMtpPrefix
  std::optional<uint32_t> layer;     ///< under `model.layers.{l}.` (`model.mtp.layers.{l}.` when mtp)
  bool in_experts = false;           ///< under that layer's `mlp.experts.`, indexed or not
  std::optional<uint32_t> expert;    ///< under `mlp.experts.{e}.`
  std::optional<TensorRole> module;  ///< under tensor_module of this role (the weight role where a
                                     ///< weight and a bias share the module)
  std::string_view tail;             ///< what follows the module and its '.' ("weight", "bias", …)
};
/// The place of `name` (`tail` views `name`). Names under no role's module have no `module`.
TensorPlace tensor_place(std::string_view name);

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
