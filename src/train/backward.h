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

/// What the compile path asks of a backward pass (SPECIALIZATION-NOTES §2–3).
struct BackwardOptions {
  /// loss = ce_weight · CE + kl_weight · KL(teacher ‖ model), both means over the counted rows;
  /// teacher_logits [T, vocab] (the dense teacher's, for FCD) must be given when kl_weight ≠ 0.
  double ce_weight = 1.0, kl_weight = 0.0;
  std::span<const float> teacher_logits;
  /// Layers below this get no gradient, nor does the embedding as the input (a tied head's gradient
  /// still goes to its tensor): the backward stops at the first trainable layer (fine-tuning the
  /// last layers).
  size_t first_layer = 0;
  /// false: the truncated gradient of §2.2 — the residual's gradient skips the attention branches
  /// (q/k/v/o, their biases and norms and the input norms get none).
  bool through_attention = true;
  /// The forward runs under this variant (nullptr = dense): its FFN neuron masks zero their
  /// neurons' gradients and its soft gates (Variant::ffn_scale) scale the FFN activation; a variant
  /// that closes a layer or a head is refused (Error(Unsupported)).
  const model::Variant* variant = nullptr;
  /// When set, gets the gradient of every soft gate the variant has: [layers][width] (resized;
  /// rows of layers without gates stay empty), added into.
  std::vector<std::vector<float>>* ffn_scale_grad = nullptr;
  /// Which weight gradients go into `grads` (the input gradients are computed either way): All;
  /// Ffn = only the gate/up/down matrices of the layers from first_layer on (FCD's trainables);
  /// None = no weight gradient (the gate search trains only the soft gates). Skipping a weight's
  /// gradient skips its dW product, the largest being the head's [vocab, hidden].
  enum class WeightGrads { All, Ffn, None } weight_grads = WeightGrads::All;
};

/// lm_loss_backward(inputs, targets) under `opt`. Throws as it, and Error(InvalidArgument) for
/// teacher logits of the wrong size or first_layer > the layers.
double lm_loss_backward(model::Model& m, std::span<const uint32_t> inputs, std::span<const uint32_t> targets,
                        Grads& grads, const BackwardOptions& opt);

/// The loss of lm_loss_backward alone: the forward (nothing kept) and the cross-entropy.
double lm_loss(model::Model& m, std::span<const uint32_t> inputs, std::span<const uint32_t> targets);

}  // namespace cortiq::train
