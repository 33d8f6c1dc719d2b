// A trained model as a Hugging Face checkpoint folder (issue 29 item 3's output): config.json
// (LlamaForCausalLM), model.safetensors (f32), and the tokenizer's tokenizer.json and
// tokenizer_config.json — what `cortiq convert` and transformers' from_pretrained read.
#pragma once

#include <optional>
#include <string>

#include "cmf/header.h"
#include "train/params.h"

namespace cortiq::train {

/// Writes `dir` (created): config.json with the HF LlamaConfig fields of `arch` (model_type
/// "llama", hidden_act "silu", torch_dtype "float32", eos_token_id when given), model.safetensors
/// with every parameter (each file through a temporary renamed into place), and, when
/// `tokenizer_json` is set, a copy of it and a tokenizer_config.json naming `eos_token`.
/// Throws Error(Io) when a file cannot be written or the tokenizer read.
void write_hf_checkpoint(const std::string& dir, const cmf::ModelArch& arch, const Params& params,
                         const std::optional<std::string>& tokenizer_json = std::nullopt,
                         std::optional<uint32_t> eos_token_id = std::nullopt,
                         const std::string& eos_token = "<|endoftext|>");

}  // namespace cortiq::train
