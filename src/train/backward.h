// The backward pass of a whole model (issue 29 item 1): the forward runs as inference runs it
// (model::Model with kept activations, exact kernels), then each block's backward
// (block_backward.h) in reverse over what it kept — llm.c's shape, no training forward of its own.
//
// Covered: the llama family as model/ runs it — token embedding, RMSNorm (Qwen style), q/k/v/o
// with optional q/k/v biases (qwen2) and per-head q/k norms (qwen3), RoPE (any table: llama3
// factors, YaRN scale, partial rotary), causal full attention with GQA, SwiGLU FFN, tied or untied
// lm_head, next-token cross-entropy. Everything else is refused by name (check_trainable).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"

namespace cortiq::train {

/// Gradients by canonical tensor name (cmf/tensor_names), each the shape of its tensor, row-major
/// f32. Entries are created zeroed when first written; a tied lm_head's gradient is added to the
/// embedding's entry.
using Grads = std::map<std::string, std::vector<float>>;

/// Throws Error(Unsupported) naming the first feature of `m` the backward pass does not cover
/// (MoE, sliding windows, sandwich or Gemma norms, GeGLU, softcaps, logit or embedding multipliers,
/// the attention output gate, a non-f32 weight — naming the tensor), and Error(InvalidArgument)
/// when `m` does not run exact kernels (kernels::MatmulMode::Exact: the int8-activation forward is
/// not the function being differentiated).
void check_trainable(const model::Model& m);

/// The mean next-token cross-entropy of `tokens` under `m` (row t predicts tokens[t+1], T−1 rows,
/// nats per token), and its gradient with respect to every weight of `m`, added into `grads`. The
/// forward is m.forward_batch on a fresh KV cache with kept activations. Throws as check_trainable,
/// and Error(InvalidArgument) for fewer than 2 tokens or more than the arch's context.
double lm_loss_backward(model::Model& m, std::span<const uint32_t> tokens, Grads& grads);

/// The same with inputs and targets apart: row t of `inputs` predicts targets[t] (kIgnore: not
/// counted), so a window of seq_len + 1 tokens trains seq_len positions of context seq_len.
/// Throws Error(InvalidArgument) for empty inputs, a size mismatch or no counted target.
inline constexpr uint32_t kIgnore = UINT32_MAX;
double lm_loss_backward(model::Model& m, std::span<const uint32_t> inputs, std::span<const uint32_t> targets,
                        Grads& grads);

/// The loss of lm_loss_backward alone: the forward (nothing kept) and the cross-entropy.
double lm_loss(model::Model& m, std::span<const uint32_t> inputs, std::span<const uint32_t> targets);

}  // namespace cortiq::train
