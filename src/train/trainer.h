// The training loop (issue 29 item 3, the library half): a llama-architecture model from a config
// or from existing weights, random windows of a token stream, gradient accumulation, AdamW with
// warmup + cosine and clipping, validation, and checkpoints that resume bit-identically.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cmf/header.h"
#include "train/adamw.h"
#include "train/params.h"

namespace cortiq::train {

/// The shape of a model trained from scratch (HF LlamaConfig names).
struct LlamaConfig {
  uint32_t hidden_size = 256, num_hidden_layers = 6, num_attention_heads = 8, num_key_value_heads = 4;
  uint32_t intermediate_size = 768, vocab_size = 4096, max_position_embeddings = 256;
  double rms_norm_eps = 1e-5, rope_theta = 10000.0;
  bool tie_word_embeddings = true;
};

/// The ModelArch of `c` (arch "llama", head_dim = hidden / heads, every layer full attention).
/// Throws Error(InvalidArgument) when the heads do not divide hidden_size, the KV heads do not
/// divide the heads, or a size is 0.
cmf::ModelArch llama_arch(const LlamaConfig& c);

/// Fresh weights for `a` (HF LlamaPreTrainedModel._init_weights): every matrix N(0, 0.02²), norms
/// 1, from std::mt19937_64(seed) in the order of the canonical names.
Params init_params(const cmf::ModelArch& a, uint64_t seed);

struct TrainOptions {
  uint64_t steps = 1000;   ///< optimizer steps in all (the schedule's length)
  uint32_t batch = 8;      ///< sequences per step (gradient accumulation over them)
  uint32_t seq_len = 128;  ///< tokens per sequence (≤ the context)
  double lr = 1e-3, min_lr = 1e-4;
  uint64_t warmup = 50;
  double clip = 1.0;  ///< global gradient-norm bound (≤ 0: none)
  AdamWOptions adamw;
  uint64_t seed = 1;  ///< the window sampler's seed
  size_t threads = 1;
};

/// One run's state: parameters, optimizer, sampler. step() is deterministic given the state, so a
/// run saved and loaded continues exactly as an uninterrupted one (Trainer.ResumeIsBitIdentical).
class Trainer {
 public:
  /// Throws Error(InvalidArgument) for seq_len > the context, batch == 0, or every parameter
  /// frozen. Frozen parameters (Param::frozen, e.g. from Params::set_trainable) get no gradient and
  /// no update; when the embedding is frozen the backward stops at the lowest layer holding a
  /// trainable tensor (BackwardOptions::first_layer).
  Trainer(cmf::ModelArch arch, Params params, TrainOptions opt);

  /// One optimizer step on `batch` windows of seq_len + 1 tokens drawn uniformly from `train`
  /// (each window predicts its tokens 1..seq_len); returns the mean loss of the windows (nats per
  /// token). Throws Error(InvalidArgument) when `train` is shorter than a window, Error(NonFinite)
  /// naming the step and the parameter when a gradient is NaN or ±Inf (the parameters are not
  /// touched then).
  double step(std::span<const uint32_t> train);

  /// Mean loss over consecutive non-overlapping windows of `tokens` (at most max_windows of them;
  /// 0 = all): nats per predicted token. Throws Error(InvalidArgument) when none fits.
  double evaluate(std::span<const uint32_t> tokens, size_t max_windows = 0);

  /// Writes the state to `dir` (created): params.safetensors, optimizer.safetensors (m., v.) and
  /// trainer.json (step, options, sampler state, frozen parameters), each through a temporary
  /// renamed into place.
  void save(const std::string& dir) const;
  /// The state save() wrote. Throws Error(Io | Parse) naming the file.
  static Trainer load(const std::string& dir);

  uint64_t step_count() const noexcept { return opt_.steps(); }
  const Params& params() const noexcept { return params_; }
  const cmf::ModelArch& arch() const noexcept { return arch_; }
  const TrainOptions& options() const noexcept { return o_; }
  double last_grad_norm() const noexcept { return grad_norm_; }
  /// The layer the backward stops at: 0, or the lowest layer with a trainable tensor when the
  /// embedding is frozen (the layer count when no layer tensor is trainable).
  size_t first_layer() const noexcept { return first_layer_; }

 private:
  cmf::ModelArch arch_;
  Params params_;
  TrainOptions o_;
  AdamW opt_;
  std::mt19937_64 rng_;
  double grad_norm_ = 0.0;
  size_t first_layer_ = 0;
};

}  // namespace cortiq::train
