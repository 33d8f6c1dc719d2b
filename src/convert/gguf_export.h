// `cortiq export-gguf`: a CMF file (or shard set) → a GGUF v3 file that llama.cpp runs, written as
// llama.cpp's convert_hf_to_gguf.py writes the same model (the names and keys of gguf_model.h,
// read back by `cortiq convert model.gguf`):
// - general.architecture / name / file_type / quantization_version; `{arch}.context_length,
//   embedding_length, block_count, feed_forward_length, attention.head_count(_kv),
//   attention.key_length / value_length, attention.layer_norm_rms_epsilon, rope.freq_base`; llama:
//   vocab_size, rope.dimension_count; phi3: rope.dimension_count, rope.scaling.original_context_length,
//   attention.sliding_window; gemma2: attn_logit_softcapping, final_logit_softcapping,
//   attention.sliding_window (Gemma2Model.set_gguf_parameters); RoPE scaling: yarn and equal per-pair factors
//   (linear) as `rope.scaling.*`, other factors (llama3) as the `rope_freqs.weight` tensor;
// - a defragged specialist (FFN widths differing per layer, read from the tensor shapes) is written
//   as architecture `deci` (llama.cpp's DeciLM / Nemotron-NAS: llama's tensors, keys and Q/K
//   permutation, but each layer built with its own n_ff(il); its `llama` builds every layer with one
//   width and fails to load such a file) with `deci.feed_forward_length` an i32 array, one width per
//   layer; qwen2 / qwen3 / phi3 / gemma* with per-layer widths are refused (no such llama.cpp arch);
// - llama's Q and K rows (weights and biases) permuted as LlamaModel.permute does, phi3's Q/K/V and
//   gate/up fused into attn_qkv / ffn_up;
// - gemma / gemma2 (GemmaModel, Gemma2Model): every `*norm.weight` of a (1 + w)-style CMF
//   (norm_style gemma) written as 1 + w in f32, so llama.cpp's plain x̂·g norm computes HF's
//   x̂·(1 + w); no lm_head (llama.cpp's gemma output is token_embd: an untied file is refused);
//   gemma2's sandwich norms as post_attention_norm / ffn_norm / post_ffw_norm. gemma3 is refused
//   (llama.cpp b4748, the version compared with, has none);
// - tokenizer.ggml.* rebuilt from the embedded tokenizer.json (tokenizer_to_gguf).
// Tensor types (`type`): "" keeps each tensor's precision — f32/f16/bf16 → F32/F16/BF16 byte for
// byte, q8_row → Q8_0 and q4_block/q4_tiled → Q4_0 exactly (gguf_codec.h), any other codec → Q8_0
// re-quantized; "f32"|"f16"|"bf16"|"q8_0"|"q4_0" puts every matrix in that type (exact where the
// pair allows, else ggml's reference quantizer). 1-D tensors (norms, biases) are always F32, as in
// llama.cpp; a matrix whose rows are not whole 32-blocks falls back to F16. Every re-quantized
// tensor is measured (decoded back, compared with the CMF values) and the worst is reported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cortiq::convert {

/// What export_gguf writes (`cortiq export-gguf`).
struct ExportOptions {
  std::string input;   ///< .cmf file or shard set
  std::string output;  ///< .gguf path
  std::string type;    ///< "" (keep) or f32|f16|bf16|q8_0|q4_0
  std::string skill;   ///< skill id to apply ("" / "none": the backbone)
  std::string task;    ///< a task mask id: always refused (defrag first)
  bool progress = true;
};

/// What export_gguf wrote.
struct ExportResult {
  std::string output;
  uint64_t bytes = 0;                ///< size of the written file
  uint64_t tensors = 0;              ///< GGUF tensors written
  uint64_t exact = 0;                ///< tensors whose values are the CMF values exactly (gemma norms: 1 + w)
  uint64_t requantized = 0;          ///< tensors whose values changed (rounded to another codec)
  double max_abs_err = 0;            ///< over the re-quantized tensors: max |GGUF value − CMF value|
  double worst_rel_rms = 0;          ///< largest ‖Δ‖/‖w‖ of one re-quantized tensor
  std::string worst_tensor;          ///< the tensor with that relative error
  std::string arch;                  ///< general.architecture written
  std::vector<uint32_t> ffn_widths;  ///< [layers] FFN width per layer
  std::vector<std::string> notes;    ///< things the user should know (masks not exported, fallbacks)
};

/// Exports as described in the file comment. Throws Error(Unsupported) naming the architecture for
/// one llama.cpp has no name for here (llama, mistral → llama, qwen2, qwen3, phi3, gemma, gemma2 are
/// written; gemma3 is refused naming llama.cpp b4748) or a feature the GGUF architecture cannot carry
/// (MoE, MLA, per-layer head counts, softcapping outside gemma2, a gemma2 without both caps or with
/// another sliding schedule or query_pre_attn_scalar than llama.cpp's, an untied gemma, …), for a skill file
/// (deltas only; export its base with --skill); Error(InvalidArgument) for an unknown `type`, an
/// unknown skill (listing the known ones), any `task` (the hint: `cortiq defrag FILE --mask ID -o task.cmf`
/// first, then export the defragged file) and a skill that activates a task mask; what the reader throws. The
/// output goes through temp + rename: nothing under `output` on error.
ExportResult export_gguf(const ExportOptions& opt);

}  // namespace cortiq::convert
