// CMF v2 header JSON data model (spec §2, §6.1, §9, §10; FORMAT-NOTES §1.5, §1.10, §1.13–1.15).
//
// Parsing is strict where the Rust reference is strict: required keys must be present with the right
// JSON type, enum-like strings must use the exact spellings; every failure is Error(Parse) naming the
// key path (e.g. "header.arch.hidden_size"). Unknown keys are kept (in the `extra` members) and
// written back by serialize_header, so a rewrite never drops fields this build does not know.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cortiq::cmf {

/// Per-layer mixer kind, `arch.layer_types[i]`. Spellings: "FullAttention", "SlidingAttention",
/// "LinearAttention", "ShortConv", "Kda" (FORMAT-NOTES §1.5).
enum class LayerType : uint8_t { FullAttention, SlidingAttention, LinearAttention, ShortConv, Kda };
std::string_view layer_type_name(LayerType t) noexcept;
/// Exact-spelling parse; nullopt for anything else.
std::optional<LayerType> layer_type_from_name(std::string_view s) noexcept;

/// `arch.norm_style`: "qwen" (x̂·w, default) or "gemma" (x̂·(1+w)).
enum class NormStyle : uint8_t { Qwen, Gemma };
/// `arch.hidden_act`: "silu" (default), "gelu_tanh", "situ".
enum class HiddenAct : uint8_t { Silu, GeluTanh, Situ };
/// `arch.linear_core.kind`: "gated_delta_net" or "vmf_phase".
enum class LinearCoreKind : uint8_t { GatedDeltaNet, VmfPhase };

/// `header.quant_type` (informational; the truth is the per-tensor dtype). Spellings exactly:
/// "Q8_ROW" "Q4_BLOCK" "Q8_2F" "VBIT" "BF16" "F16" "F32".
enum class QuantType : uint8_t { Q8Row, Q4Block, Q8_2F, VBit, BF16, F16, F32 };
std::string_view quant_type_name(QuantType t) noexcept;
std::optional<QuantType> quant_type_from_name(std::string_view s) noexcept;
/// Debug-style name used by `cortiq info` ("Q8Row", "Q4Block", "Q82F", "VBit", "BF16", "F16", "F32").
std::string_view quant_type_debug_name(QuantType t) noexcept;

/// `arch.yarn` (YaRN rope scaling). factor and original_max_position_embeddings are required.
struct Yarn {
  double factor = 1.0;
  uint32_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 1.0;
  std::optional<double> mscale_all_dim;
  nlohmann::json extra = nlohmann::json::object();
};

/// `arch.mla` (DeepSeek multi-head latent attention dims).
struct Mla {
  uint32_t kv_lora_rank = 0;
  uint32_t qk_rope_head_dim = 0;
  uint32_t qk_nope_head_dim = 0;
  uint32_t v_head_dim = 0;
  std::optional<uint32_t> q_lora_rank;
  bool nope = false;
  nlohmann::json extra = nlohmann::json::object();
};

/// `arch.mtp` (multi-token-prediction head, spec §2.1).
struct Mtp {
  uint32_t num_layers = 0;
  bool share_lm_head = true;
  bool share_embed = true;
  nlohmann::json extra = nlohmann::json::object();
};

/// `arch.moe` (spec §2.2). num_experts, top_k, moe_intermediate_size are required.
struct Moe {
  uint32_t num_experts = 0;
  uint32_t top_k = 0;
  uint32_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  std::optional<uint32_t> shared_expert_intermediate_size;
  bool router_sigmoid = false;
  std::optional<double> routed_scaling_factor;
  bool router_resonance = false;
  nlohmann::json extra = nlohmann::json::object();
};

/// `arch.linear_core`. kind, num_heads, value_head_dim required.
struct LinearCore {
  LinearCoreKind kind = LinearCoreKind::GatedDeltaNet;
  uint32_t num_heads = 0;
  std::optional<uint32_t> nphase;
  uint32_t value_head_dim = 0;
  nlohmann::json extra = nlohmann::json::object();
};

/// `arch.g3n` (Gemma-3n extras). All integer fields required; activation_sparsity default [].
struct G3n {
  uint32_t altup_num_inputs = 0;
  uint32_t laurel_rank = 0;
  uint32_t ple_dim = 0;
  uint32_t ple_vocab = 0;
  uint32_t num_kv_shared_layers = 0;
  std::vector<double> activation_sparsity;
  nlohmann::json extra = nlohmann::json::object();
};

/// `header.arch` (FORMAT-NOTES §1.5). Plain members without std::optional are either required
/// (first block) or have the documented default and are always serialized; std::optional members
/// are omitted when absent (linear_conv_kernel_dim / linear_num_key_heads / linear_num_value_heads
/// are written as null, as the reference does). HF names: hidden_size, intermediate_size, ...
struct ModelArch {
  // required
  std::string arch_name;
  uint32_t hidden_size = 0;
  uint32_t intermediate_size = 0;
  uint32_t num_layers = 0;
  uint32_t num_attention_heads = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t vocab_size = 0;
  std::vector<LayerType> layer_types;
  double rms_norm_eps = 1e-6;
  uint64_t max_position_embeddings = 0;
  // optional with defaults
  NormStyle norm_style = NormStyle::Qwen;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  double partial_rotary_factor = 1.0;
  HiddenAct hidden_act = HiddenAct::Silu;
  double embed_multiplier = 1.0;
  bool attn_v_norm = false;
  uint32_t num_loops = 1;
  bool loop_final_norm = false;
  // optional
  std::optional<Yarn> yarn;
  /// [num_layers], each > 0 and divisible by num_kv_heads (validated at parse).
  std::optional<std::vector<uint32_t>> attention_heads_per_layer;
  std::optional<double> query_pre_attn_scalar;
  std::optional<uint32_t> sliding_window;
  std::optional<uint32_t> sliding_window_pattern;
  std::optional<double> rope_local_base_freq;
  std::optional<double> local_partial_rotary_factor;
  std::optional<uint32_t> global_head_dim;
  std::optional<uint32_t> num_global_kv_heads;
  std::optional<double> global_partial_rotary_factor;
  std::optional<double> final_logit_softcapping;
  std::optional<double> attn_logit_softcapping;
  std::optional<Mla> mla;
  std::optional<double> activation_situ_beta;
  std::optional<double> activation_situ_linear_beta;
  std::optional<Mtp> mtp;
  std::optional<Moe> moe;
  std::optional<LinearCore> linear_core;
  std::optional<nlohmann::json> head_clusters;  ///< kept verbatim (layout not specified)
  std::optional<uint32_t> linear_conv_kernel_dim;
  std::optional<uint32_t> linear_num_key_heads;
  std::optional<uint32_t> linear_num_value_heads;
  std::optional<uint32_t> linear_key_head_dim;
  std::optional<uint32_t> linear_value_head_dim;
  std::optional<std::vector<double>> rope_freq_factors;
  std::optional<double> logit_multiplier;
  std::optional<G3n> g3n;
  std::optional<double> kda_gate_lower_bound;
  /// Unknown arch keys, written back verbatim.
  nlohmann::json extra = nlohmann::json::object();
};

/// `header.tokenizer_config` chat bundle (spec §6.1, FORMAT-NOTES §1.13).
struct TokenizerBundle {
  std::optional<std::string> chat_template;
  std::vector<uint32_t> eos_token_ids;
  std::optional<uint32_t> bos_token_id;
  std::optional<uint32_t> pad_token_id;
  nlohmann::json extra = nlohmann::json::object();
};

/// `skills[].selection` (FORMAT-NOTES §1.14): routing subspace. mean/basis/holdout are base64 of
/// little-endian f16 arrays (mean: [hidden], basis: [rank, hidden], holdout: [holdout_n, hidden]).
/// `rank` is derived from the basis length when absent (decision 7); writers always store it.
struct SelectionDescriptor {
  std::string metric = "mse";
  uint32_t phi_layer = 0;
  std::string mean;   ///< base64 f16
  std::string basis;  ///< base64 f16
  std::optional<uint32_t> rank;
  std::optional<double> err_mean;
  std::optional<double> err_std;
  std::optional<std::string> holdout;
  std::optional<uint32_t> holdout_n;
  nlohmann::json extra = nlohmann::json::object();
};

/// One `header.skills[]` record (spec §9, §9.1; FORMAT-NOTES §1.14).
struct SkillRecord {
  std::string id;  ///< required
  std::optional<std::string> name;
  std::vector<uint32_t> layers;
  std::optional<SelectionDescriptor> selection;
  std::optional<std::string> input_mask_task;
  std::optional<nlohmann::json> quality;
  /// 16 lowercase hex digits of the base file's directory hash (envelope 0x78); raises SKILL_FILE.
  std::optional<std::string> base_dir_hash;
  std::optional<nlohmann::json> base_arch;
  std::optional<std::string> task;
  std::optional<nlohmann::json> provenance;
  nlohmann::json extra = nlohmann::json::object();
};

/// `header.section_hashes`: raw hex strings as stored (validated by verify(), not at parse, so a
/// malformed value is reported as a problem rather than failing open).
struct SectionHashes {
  std::optional<std::string> masks, vocab, index;
  nlohmann::json extra = nlohmann::json::object();
  bool empty() const noexcept { return !masks && !vocab && !index; }
};

/// `header.shard` = {no, count}, 1-based (spec §10).
struct ShardInfo {
  uint32_t no = 1;
  uint32_t count = 1;
};

/// The whole header JSON.
struct Header {
  std::string format = "cmf";
  uint32_t version = 2;
  ModelArch arch;
  QuantType quant_type = QuantType::F16;
  nlohmann::json provenance;  ///< null when absent
  std::optional<TokenizerBundle> tokenizer_config;
  SectionHashes section_hashes;  ///< omitted on write when empty
  std::vector<SkillRecord> skills;
  std::optional<ShardInfo> shard;
  std::optional<nlohmann::json> calibration;  ///< {temperature, ece_before?, ece_after?}
  std::optional<nlohmann::json> routing;      ///< {temperature, novelty_theta, samples, target_fpr}
  /// Unknown top-level keys, written back verbatim.
  nlohmann::json extra = nlohmann::json::object();
};

/// Parses header JSON bytes (UTF-8). Throws Error(Parse) for invalid JSON, a missing required key,
/// a wrong JSON type, an out-of-range integer, or an unknown enum spelling; the message names the
/// key path and the offending value.
Header parse_header(std::span<const uint8_t> json_bytes);
Header parse_header(std::string_view json_text);
/// Parses an already-decoded JSON value (same rules as parse_header).
Header header_from_json(const nlohmann::json& j);

/// The header as a JSON object (unknown fields merged back; absent optionals omitted).
nlohmann::json header_to_json(const Header& h);
/// Compact serialization (no whitespace) of header_to_json(h).
std::string serialize_header(const Header& h);

/// Arch alone (for skill export comparisons, tools). Same rules as parse_header; `path` prefixes
/// error messages.
ModelArch arch_from_json(const nlohmann::json& j, std::string_view path = "arch");
nlohmann::json arch_to_json(const ModelArch& a);

/// Lowercase zero-padded 16-digit hex of a u64 ("%016x"), as used by section_hashes/base_dir_hash.
std::string hex16(uint64_t v);
/// Parses exactly 16 hex digits (either case); nullopt otherwise.
std::optional<uint64_t> parse_hex16(std::string_view s) noexcept;

}  // namespace cortiq::cmf
