// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", 2019) with the update order
// of torch.optim.AdamW, global-norm gradient clipping, and the learning-rate schedule of the
// trainer (linear warmup, cosine decay to a floor).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "train/backward.h"
#include "train/params.h"

namespace cortiq::train {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;  ///< decoupled: p ← p − lr·wd·p, on every parameter of rank ≥ 2
  /// Applied to rank-1 tensors (norms, biases) too when true (torch's default applies it to all).
  bool decay_vectors = true;
};

/// The optimizer state: step count and the first / second moments per parameter.
class AdamW {
 public:
  explicit AdamW(AdamWOptions opt = {}) : opt_(opt) {}

  /// One step with learning rate lr (torch.optim.AdamW, in double per element): t ← t + 1;
  /// p ← p·(1 − lr·wd); m ← β1·m + (1 − β1)·g; v ← β2·v + (1 − β2)·g²;
  /// p ← p − lr·(m / (1 − β1ᵗ)) / (sqrt(v / (1 − β2ᵗ)) + eps). Frozen parameters and those without
  /// a gradient are left alone. Throws Error(InvalidArgument) when a gradient's size differs from its
  /// parameter's.
  void step(Params& p, const Grads& g, double lr);

  uint64_t steps() const noexcept { return t_; }
  /// First / second moments by name (for checkpoints).
  std::map<std::string, std::vector<float>>& m() noexcept { return m_; }
  std::map<std::string, std::vector<float>>& v() noexcept { return v_; }
  void set_steps(uint64_t t) noexcept { t_ = t; }

 private:
  AdamWOptions opt_;
  uint64_t t_ = 0;
  std::map<std::string, std::vector<float>> m_, v_;
};

/// Scales every gradient by min(1, max_norm / ‖g‖₂) (the global L2 norm over all of them, in
/// double) and returns ‖g‖₂ before scaling. max_norm ≤ 0: no clipping (the norm is still returned).
double clip_grad_norm(Grads& g, double max_norm);

/// The learning rate at `step` (0-based): lr·(step+1)/warmup during warmup, then cosine from lr to
/// min_lr over the remaining steps up to `total`, min_lr after.
double lr_at(uint64_t step, uint64_t warmup, uint64_t total, double lr, double min_lr);

}  // namespace cortiq::train
