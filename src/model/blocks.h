// The blocks of a decoder layer (internal to model/): each gets the layer's weights, the call's
// activations and, through Activations::row_*, each row's KV layer and alive heads / neurons /
// experts for this layer — never a layer index. forward.cc composes them.
#pragma once

#include <cstddef>

#include "cmf/header.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "model/activations.h"
#include "model/weights.h"

namespace cortiq::model {

/// What every block reads besides its layer: the arch, the norm style, the model's kernel table
/// and its thread pool.
struct BlockEnv {
  const cmf::ModelArch& arch;
  kernels::NormStyle norm_style;
  const kernels::Ops& ops;
  kernels::ThreadPool& pool;
};

/// Input norm → q/k/v (+ biases, q/k norms, RoPE at each row's position) → KV append into each
/// row's act.row_kv[r] → causal (optionally sliding-window) attention with act.row_heads[r] →
/// output gate → o_proj → (sandwich norm) → residual add into act.h; leaves the FFN input norm's
/// output in act.n. R = rows of the call. `kept` (nullable) receives the layer's intermediates.
void attention_block(const BlockEnv& env, const LayerWeights& L, size_t R, Activations& act, KeptLayer* kept);

/// The FFN of act.n (dense SwiGLU/GeGLU with act.row_neurons[r], or MoE with act.row_experts[r])
/// → (sandwich norm) → residual add into act.h. `kept` as above (dense layers).
void ffn_block(const BlockEnv& env, const LayerWeights& L, size_t R, Activations& act, KeptLayer* kept);

}  // namespace cortiq::model
