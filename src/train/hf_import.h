// A Hugging Face checkpoint folder as the start of a fine-tuning (`cortiq train --init DIR`): the
// arch from config.json and every tensor decoded to f32 under its canonical name — the same
// reading `cortiq convert` does (convert/hf_config, convert/tensor_map), without the CMF file.
#pragma once

#include <string>

#include "cmf/header.h"
#include "train/params.h"

namespace cortiq::train {

/// A model read from a folder: its arch and its parameters (all trainable).
struct HfModel {
  cmf::ModelArch arch;
  Params params;
};

/// Reads `dir` (config.json, and model.safetensors, an index with its shards, or every
/// *.safetensors): arch_from_hf of the config, the tensors mapped to canonical names (tied heads
/// dropped, fused projections split) and decoded to f32 (F32/F16/BF16/F64 as convert::to_f32).
/// Throws Error(Io) when config.json or the weights are missing, Error(Parse | Unsupported) naming
/// the file, field or tensor as convert does.
HfModel read_hf_checkpoint(const std::string& dir);

}  // namespace cortiq::train
