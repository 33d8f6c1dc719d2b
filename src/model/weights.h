// The bound weights of one model: per-layer structs of prepared kernel views and f32 vectors,
// immutable after bind and shared by every sequence, thread and Model that reads them (gemma.cpp
// keeps weights apart from activations and execution in the same way).
//
// Weights::bind resolves every tensor by its canonical name once (cmf/tensor_names), prepares it for
// the kernels and checks its shape against the arch. Weights::with_overrides gives weights that
// replace some tensors (a skill's overlay, a fine-tuned f32 tail) and share every untouched layer
// with the base: an overlay costs the memory of the layers it touches, not of the model.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "cmf/header.h"
#include "kernels/kernels.h"
#include "model/tensor_source.h"
#include "quant/codec.h"

namespace cortiq::model {

using kernels::WeightView;

/// A SwiGLU / GeGLU FFN: gate and up [width, hidden], down [hidden, width].
struct FfnWeights {
  WeightView gate, up, down;
  uint64_t width = 0;  ///< intermediate neurons (rows of gate)
};

/// A mixture-of-experts FFN (spec §2.2): router [experts, hidden], the experts, an optional shared
/// expert weighted by sigmoid(shared_gate·x).
struct MoeWeights {
  WeightView router;
  std::vector<FfnWeights> experts;
  std::optional<FfnWeights> shared;
  std::vector<float> shared_gate;  ///< [hidden], empty when absent
};

/// One decoder layer, everything a block needs to run it (no index into shared arrays).
struct LayerWeights {
  uint32_t n_heads = 0;
  bool sliding = false;                            ///< sliding-window attention (arch.sliding_window)
  std::shared_ptr<const kernels::RopeTable> rope;  ///< this layer's rotary table (global or local)
  std::vector<float> input_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm;  ///< [hidden] each
  bool sandwich = false;  ///< Gemma 2/3: pre/post FFN norms
  WeightView q, k, v, o;  ///< q [nh·hd or 2·nh·hd, hidden], k/v [nkv·hd, hidden], o [hidden, nh·hd]
  bool out_gate = false;  ///< q_proj rows == 2·nh·hd: per head [q(hd); gate(hd)]
  std::vector<float> q_bias, k_bias, v_bias, q_norm, k_norm;
  bool is_moe = false;
  FfnWeights ffn;
  MoeWeights moe;
};

/// The whole model's weights. Shared (std::shared_ptr<const Weights>) and never mutated after bind.
struct Weights {
  cmf::ModelArch arch;
  WeightView embed, lm_head;  ///< [vocab, hidden] each (the same view when tied)
  /// Quantized embedding parsed once, so a token's row costs O(hidden) (quant::decode_rows
  /// re-parses the tensor per call: O(rows) for vbit, O(outliers) for q1s).
  std::optional<quant::RowDecoder> embed_rows;
  std::vector<float> final_norm;                            ///< [hidden]
  std::vector<std::shared_ptr<const LayerWeights>> layers;  ///< [num_layers]
  kernels::NormStyle norm_style = kernels::NormStyle::Qwen;
  float embed_mult = 1.0f;
  const TensorSource* source = nullptr;  ///< where the tensors came from (outlives the weights)
  /// Prepared views by the payload bytes they came from (a tied tensor, or a tensor an overlay
  /// re-binds with, is prepared once).
  std::map<const uint8_t*, WeightView> prepared;

  /// Binds `arch` to the tensors of `source` (kept by reference: must outlive the weights). Each
  /// tensor goes through kernels::prepare_weight once (q4_tiled is copied into q4_block layout and
  /// source.release() gets the original bytes back piece by piece).
  /// Throws Error(Unsupported) for a layer type / feature this runtime does not execute or a dtype
  /// without a kernel (naming the tensor), Error(Parse) naming every missing required tensor or a
  /// tensor with an inconsistent shape.
  static std::shared_ptr<const Weights> bind(const cmf::ModelArch& arch, const TensorSource& source);

  /// Weights equal to `base` except for the tensors `overlay` holds under canonical names (every
  /// name of overlay.names()): each layer that any of them belongs to is bound again from overlay
  /// first, then base's source; every other layer is the same shared object as in base. The
  /// embedding, head and final norm are replaced the same way. `overlay` must outlive the result.
  /// Throws Error(InvalidArgument) for an overlay name that is no canonical tensor name of this
  /// arch, and what bind throws for a replacement of the wrong shape or dtype.
  static std::shared_ptr<const Weights> with_overrides(std::shared_ptr<const Weights> base,
                                                       const TensorSource& overlay);
};

}  // namespace cortiq::model
