// Source checkpoint tensors → the CMF tensor set: canonical HF names (FORMAT-NOTES §1.6),
// multimodal prefixes removed, fused projections split, tied heads dropped, and a deterministic
// write order (embed → layers by index, inside a layer attention → norms → FFN with MoE experts
// role-contiguous (all gate_proj, then all up_proj, then all down_proj; spec §2.2) → final norm →
// lm_head → MTP block → anything else by name).
// Canonical names and the roles that order them come from cmf/tensor_names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cmf/header.h"
#include "convert/safetensors.h"

namespace cortiq::convert {

/// One tensor to write. `src` is a view of exactly this tensor's source elements: for split
/// tensors (phi3 `qkv_proj`, `gate_up_proj`) a contiguous row range of the fused source, with
/// `src.shape` set to the output shape and `src.name` kept as the fused source name.
struct MappedTensor {
  std::string name;             ///< canonical name in the CMF file
  std::vector<uint64_t> shape;  ///< row-major `[out, in]` for matrices
  StTensor src;
  const StTensor* origin = nullptr;  ///< the source tensor (for releasing its pages)
};

/// The mapped set plus what the mapping learned.
struct TensorMapping {
  std::vector<MappedTensor> tensors;  ///< in write order
  uint32_t mtp_layers = 0;            ///< distinct `model.mtp.layers.{i}` found (≥1 if any MTP tensor)
  bool has_mtp = false;
  std::vector<std::string> dropped;  ///< source names deliberately not written (tied lm_head, vision…)
};

/// Maps the checkpoint for `arch` (from arch_from_hf). Throws Error(Parse) naming the tensor when
/// a required tensor is missing (model.embed_tokens.weight; lm_head.weight when not tied), when
/// the embedding is not `[vocab_size, hidden_size]`, or when a fused tensor's rows do not match
/// the arch; Error(Unsupported) naming the tensor for weights the runtime would ignore
/// (o_proj / MLP biases, packed 3-D expert banks).
TensorMapping map_tensors(const Checkpoint& ckpt, const cmf::ModelArch& arch);

/// The write order of canonical tensor names (the order map_tensors returns): true when `a` is
/// written before `b`.
bool write_order_less(const std::string& a, const std::string& b);

/// The canonical-name part of the mapping alone (prefix strip, MTP renames); "" = drop.
std::string canonical_name(const std::string& source_name);

}  // namespace cortiq::convert
