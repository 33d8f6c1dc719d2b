// A GGUF model (llama.cpp's format) seen as the HF checkpoint it came from, for `cortiq convert
// model.gguf`: the config.json its metadata stands for, the HF name of each tensor, and the row
// order of Q/K that llama.cpp's converter changed.
//
// Sources: llama.cpp gguf-py/gguf/constants.py (the `{arch}.*` keys and `blk.N.*` tensor names),
// convert_hf_to_gguf.py LlamaModel.permute (the Q/K rows of the llama architecture are reordered
// for llama.cpp's adjacent-pair RoPE; qwen2 keeps HF's order, its RoPE is the NeoX one).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "convert/gguf.h"

namespace cortiq::convert {

/// A GGUF `general.architecture` convert_gguf takes and the HF class its config.json names ("deci",
/// llama.cpp's per-layer-width llama that export-gguf writes for defragged files, reads back as llama).
struct GgufArchitecture {
  std::string_view gguf;      ///< general.architecture (also the HF model_type)
  std::string_view hf_class;  ///< config.json "architectures"
};
inline constexpr GgufArchitecture kGgufArchitectureTable[] = {
    {"llama", "LlamaForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"},
    {"phi3", "Phi3ForCausalLM"},   {"gemma", "GemmaForCausalLM"}, {"gemma2", "Gemma2ForCausalLM"},
    {"deci", "LlamaForCausalLM"}};
/// The `gguf` names of kGgufArchitectureTable joined with ", " ("llama, qwen2, …"), for messages.
std::string gguf_architectures();

/// The HF config.json a GGUF's metadata stands for (model_type — "llama" for "deci" —, hidden_size,
/// intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, rms_norm_eps,
/// rope_theta, max_position_embeddings, vocab_size, tie_word_embeddings (no `output.weight`), bos/eos ids),
/// to be read by arch_from_hf, and rope_scaling (rope_scaling_from_gguf). Throws Error(Unsupported) naming
/// `general.architecture` for other architectures and naming the key for features it cannot carry (RoPE
/// scaling other than linear, yarn and llama3's factors tensor; a `deci` file with head counts differing per
/// layer or a layer without attention (head_count_kv 0); sliding windows outside phi3 and gemma2). gemma2
/// gets what llama.cpp b4748 runs: `{arch}.attn_logit_softcapping` / `final_logit_softcapping` (default 50 /
/// 30), `attention.sliding_window` (default 4096) on the even layers, query_pre_attn_scalar = head_dim
/// (hidden/heads with 46 layers); gemma and gemma2 get hidden_activation gelu_pytorch_tanh. Their norm
/// weights are llama.cpp's 1 + w: the caller keeps them and runs them as plain x̂·g norms (convert_gguf sets
/// norm_style qwen); Error(Parse) naming the key when a required one is missing or not a number.
nlohmann::json hf_config_from_gguf(const GgufFile& f);

/// config.json's `rope_scaling` for the RoPE scaling keys of GGUF `metadata` (architecture `arch`),
/// as llama.cpp's convert_hf_to_gguf.py writes them from it: `{arch}.rope.scaling.type` "linear" or
/// "yarn" with `.factor` (and for yarn `.original_context_length`; without it the context length
/// applies), or the older `{arch}.rope.scale_linear` factor. nullopt without scaling (no type,
/// "none", a linear factor of 1). Throws Error(Unsupported) naming the key for another type, and
/// for the yarn keys `attn_factor`, `yarn_beta_fast`, `yarn_beta_slow` unless they hold llama.cpp's
/// defaults (1, 32, 1): how they map onto HF's attention_factor / beta_* is not pinned down by a
/// converter we can check against. Throws Error(Parse) naming the key for a missing or non-positive
/// factor.
std::optional<nlohmann::json> rope_scaling_from_gguf(const nlohmann::json& metadata, const std::string& arch);

/// The HF tensor name of a GGUF tensor of a model of GGUF architecture `arch` (kGgufArchitectureTable):
/// `token_embd.weight` → `model.embed_tokens.weight`, `blk.3.attn_q.weight` →
/// `model.layers.3.self_attn.q_proj.weight`, `output.weight` → `lm_head.weight`, … ; phi3's fused
/// `attn_qkv` / `ffn_up` → `self_attn.qkv_proj` / `mlp.gate_up_proj` (HF's Phi3 names); "" for
/// `rope_freqs.weight` (it goes into the arch as rope_freq_factors); gemma2's `post_attention_norm`,
/// `ffn_norm`, `post_ffw_norm` → `post_attention_layernorm`, `pre_feedforward_layernorm`,
/// `post_feedforward_layernorm`. Throws Error(Unsupported)
/// naming any other tensor.
std::string hf_name_from_gguf(std::string_view gguf_name, std::string_view arch = "");

/// Undoes convert_hf_to_gguf's LlamaModel.permute on the rows of a Q or K projection (weight
/// `[heads·head_dim, cols]` row-major, or a bias with cols = 1): GGUF row h·hd + 2j + i holds HF row
/// h·hd + i·hd/2 + j (h < heads, i < 2, j < hd/2). `heads` is num_attention_heads for Q and
/// num_key_value_heads for K. Throws Error(Parse) when rows is not heads × an even head_dim.
void unpermute_qk_rows(std::span<float> w, uint64_t rows, uint64_t cols, uint32_t heads,
                       std::string_view tensor);

}  // namespace cortiq::convert
