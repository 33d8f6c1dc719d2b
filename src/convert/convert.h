// `cortiq convert` (HF safetensors checkpoint → CMF), `requant` (CMF → CMF with another
// quantization plan, through dequantization) and `compact` (tight rewrite).
//
// Resources (issue 4): tensors are streamed — each is read from the mmap, converted to f32,
// encoded and handed to the streaming cmf::Writer; at most `threads + 1` tensors are in flight
// (their f32 values and payloads), so peak memory ≈ the few largest tensors being encoded plus a
// fixed overhead, not the model size. Source pages are released (MADV_DONTNEED) once a tensor is
// written. Encoding runs on `threads` workers; payloads are written strictly in the mapping's
// order, so the output is byte-identical for any thread count. The output goes through temp +
// rename (cmf::Writer): on any error nothing is left under the output name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cmf/masks.h"
#include "convert/plan.h"

namespace cortiq::convert {

/// Options of convert_checkpoint.
struct ConvertOptions {
  std::string model_dir;         ///< HF model directory (config.json + safetensors)
  std::string output;            ///< output .cmf path (shards: `{stem}-{no:05}-of-{count:05}.cmf`)
  QuantPlan plan;                ///< --quant / --quant-rule / --mean-bits
  uint64_t shard_max_bytes = 0;  ///< --shard-max-gb · 10^9; 0 = one file
  unsigned threads = 0;          ///< encoder threads; 0 = all cores
  /// Keep NaN/±Inf in tensors stored as f32/f16/bf16 (integer codecs always refuse them).
  bool allow_nonfinite = false;
  bool progress = true;  ///< draw a progress bar (only when stderr is a terminal)
  /// Store no chat template. Without it a template (chat_template.jinja, tokenizer_config.json or
  /// GGUF tokenizer.chat_template) that does not parse is refused, naming line and column.
  bool no_chat_template = false;
  /// GGUF input: each tensor keeps its source precision instead of `plan` (F32 → f32, F16 → f16,
  /// BF16 → bf16, Q4_0 → q4_block copied exactly, Q8_0 and every other quantized type → q8_row,
  /// the codec that loses least; 1-D quantized tensors → f16 by the plan's shape rule).
  bool keep_source_precision = false;
};

/// What a conversion wrote.
struct ConvertResult {
  std::vector<std::string> outputs;   ///< the file(s) written
  uint64_t input_bytes = 0;           ///< source tensor bytes read
  uint64_t tensors = 0;               ///< tensors written
  std::vector<std::string> warnings;  ///< e.g. "no tokenizer.json: ..." (the CLI prints them)
  /// Tensors of an already quantized source (a quantized GGUF type, a CMF codec other than
  /// f32/f16/bf16) encoded again into another codec: measured after encoding (decoded back and
  /// compared with the source's values). A warning states them.
  uint64_t requantized = 0;
  double requant_max_abs = 0;    ///< max |new − source| over those tensors
  double requant_worst_rel = 0;  ///< largest ‖new − source‖ / ‖source‖ of one of them
  std::string requant_worst;     ///< that tensor
};

/// Converts an HF checkpoint. Throws Error(Io) (missing directory / config.json / safetensors,
/// write failures), Error(Parse) (malformed JSON or safetensors, missing/mis-shaped tensors),
/// Error(Unsupported) (model_type or config feature, naming both), Error(InvalidArgument)
/// (non-finite or unrepresentable values, naming the tensor and element). No output on error.
ConvertResult convert_checkpoint(const ConvertOptions& opt);

/// The --quant spelling that keeps a GGUF tensor's precision (ConvertOptions::keep_source_precision):
/// "f32", "f16", "bf16", "q4" for Q4_0 (copied exactly), "q8" for Q8_0 and every other ggml type.
std::string source_precision_quant(uint32_t ggml_type);

/// Options of requant_file.
struct RequantOptions {
  std::string input, output;
  QuantPlan plan;
  unsigned threads = 0;
  bool allow_nonfinite = false;
  bool progress = true;
};

/// Re-encodes every tensor of a CMF file (or shard set) under `plan` (same decision rules as
/// convert). A tensor whose chosen dtype equals its stored dtype, and every u8 tensor, is copied
/// verbatim (no second quantization); the rest is decoded to f32 and encoded. Header (arch,
/// tokenizer_config, skills, calibration, routing, provenance + a `requant` record), masks and
/// vocab are carried over. Throws like convert, plus the reader's open errors.
ConvertResult requant_file(const RequantOptions& opt);

/// Rewrites a CMF file tightly: every tensor payload copied verbatim in directory order, header,
/// masks and vocab carried over, section hashes regenerated, no sparse index (decision 4).
ConvertResult compact_file(const std::string& input, const std::string& output, bool progress = true);

/// compact_file with the masks section replaced by `masks` (encoded against the input's arch):
/// how task masks found by a compile, or made for a benchmark, enter a file. Throws
/// Error(InvalidArgument) when a mask's bit shapes disagree with the arch, else like compact_file.
ConvertResult write_with_masks(const std::string& input, const std::string& output,
                               const cmf::MaskCatalog& masks, bool progress = true);

}  // namespace cortiq::convert
