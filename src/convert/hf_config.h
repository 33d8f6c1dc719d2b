// Hugging Face `config.json` (+ `generation_config.json`, `tokenizer_config.json`,
// `chat_template.jinja`) → the CMF header's `arch` and `tokenizer_config` chat bundle
// (spec §2, §2.1, §2.2, §6.1; FORMAT-NOTES §1.5, §1.13, decision 13; CLI-NOTES §2.1 build_arch).
//
// Supported `model_type`s: llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe, gemma, gemma2,
// gemma3 (multimodal wrapper; its `text_config` is used), gemma3_text, phi3. Anything a family's
// config asks for that the arch cannot represent (or the runtime cannot run) is refused with
// Error(Unsupported) naming the model_type and the field — never converted silently wrong.
//
// RoPE scaling representation (the runtime applies it; ENGINE-NOTES §3.5):
//   * `rope_freq_factors` [rotary/2] divide the base inverse frequencies per pair index i:
//       inv_freq[i] = 1 / (rope_theta^(2i/rotary) · rope_freq_factors[i]),  rotary = rotated dims.
//     They apply to the layers that use `rope_theta` (all layers, or the global ones when
//     `rope_local_base_freq` is set: local layers keep unscaled local frequencies).
//   * rope_scaling `llama3` → rope_freq_factors from the Meta/HF three-band rule
//     (transformers `_compute_llama3_parameters`): wavelen_i = 2π/inv_freq_i; wavelen_i <
//     orig/high_freq_factor → 1; wavelen_i > orig/low_freq_factor → factor; otherwise
//     s = (orig/wavelen_i − low)/(high − low) and the factor is 1/((1 − s)/factor + s).
//   * rope_scaling `linear` (position interpolation, positions ÷ factor) → every entry = factor
//     (identical to dividing every inverse frequency by factor).
//   * rope_scaling `yarn` → `arch.yarn` (attention_factor default per transformers:
//     0.1·ln(factor)+1, or get_mscale(factor, mscale)/get_mscale(factor, mscale_all_dim)).
//   * rope_scaling `dynamic` (dynamic NTK) is identical to no scaling up to
//     max_position_embeddings, which the arch keeps as the context limit; recorded, no change.
//   * `longrope`/`su`/`mrope`/anything else is refused.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cmf/header.h"

namespace cortiq::convert {

/// The JSON side files of an HF model directory. `config` is required; the others are null /
/// nullopt when the file is absent.
struct HfFiles {
  std::string dir;
  nlohmann::json config;                           ///< config.json
  nlohmann::json generation_config;                ///< generation_config.json or null
  nlohmann::json tokenizer_config;                 ///< tokenizer_config.json or null
  std::optional<std::string> chat_template_jinja;  ///< chat_template.jinja (raw text) if present
  std::optional<std::string> tokenizer_json;       ///< tokenizer.json bytes, verbatim
  /// tokenizer_json was built from tokenizer.model (no tokenizer.json; convert/sentencepiece.h)
  bool tokenizer_from_model = false;
};

/// Reads the side files of `dir`. Without tokenizer.json, a SentencePiece tokenizer.model is read
/// and its tokenizer.json built as transformers' LlamaConverter does (sentencepiece.h). Throws
/// Error(Io) when config.json is missing, Error(Parse) naming the file when any present JSON file
/// (or the tokenizer.model) is malformed, Error(Unsupported) for a non-BPE tokenizer.model.
HfFiles read_hf_files(const std::string& dir);

/// The text-model config: `config.text_config` when present (multimodal wrappers such as
/// gemma3), else `config` itself. Keys absent from text_config fall back to the top level for
/// tie_word_embeddings / eos / bos / pad ids.
nlohmann::json text_config(const nlohmann::json& config);

/// The effective model_type of the text model (e.g. "gemma3_text" for a gemma3 wrapper).
/// Throws Error(Parse) when config.json has no string `model_type`.
std::string hf_model_type(const nlohmann::json& config);

/// Builds the header arch from a full config.json. `arch_name` is the text model_type.
/// Throws Error(Unsupported) ("model_type 'X': field 'Y' ...") for unknown families and for
/// features the format/runtime cannot represent; Error(Parse) for missing/ill-typed required
/// fields (hidden_size, num_hidden_layers, ...).
cmf::ModelArch arch_from_hf(const nlohmann::json& config);

/// Builds the chat bundle (FORMAT-NOTES §1.13, decision 13): chat_template from a non-blank
/// chat_template.jinja, else tokenizer_config.chat_template (a string, or a list of
/// {name, template} from which "default" — else the first — is taken); eos_token_ids =
/// generation_config ids ∪ config ids ∪ the id of tokenizer_config.eos_token (looked up in
/// added_tokens_decoder, then tokenizer.json added_tokens/model.vocab), in that order without
/// duplicates; bos/pad from generation_config, else config. Returns nullopt when nothing is known.
std::optional<cmf::TokenizerBundle> bundle_from_hf(const HfFiles& files);

/// llama3 rope_freq_factors for `rotary` rotated dims (see the file comment). All arguments are
/// the config's; returns rotary/2 factors ≥ 1.
std::vector<double> llama3_freq_factors(double rope_theta, uint32_t rotary, double factor,
                                        double low_freq_factor, double high_freq_factor,
                                        double original_max_position_embeddings);

/// Number of rotated dims per head: max(2, int(head_dim · partial_rotary_factor)) (ENGINE-NOTES §3.5).
uint32_t rotary_dims(uint32_t head_dim, double partial_rotary_factor);

}  // namespace cortiq::convert
