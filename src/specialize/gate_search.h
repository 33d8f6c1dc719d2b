// Phase A of task compilation (SPECIALIZATION-NOTES §2): L1-regularized soft neuron gates σ(m) on
// every layer's SwiGLU activation, trained with Adam on the train chunks while the weights stay
// frozen; every `eval_every` steps the hard mask (σ(m) > τ) is scored on the select chunks and the
// best kept, the dense model being the initial best (OURS §1 step 5a); then a forward-only
// threshold sweep around the best checkpoint (OURS §2.6).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"
#include "specialize/corpus.h"
#include "specialize/keep.h"

namespace cortiq::specialize {

struct GateSearchOptions {
  size_t steps = 240;      ///< optimizer steps, one train chunk each
  size_t eval_every = 30;  ///< binarize and score select every this many steps (and after the last)
  double lr = 0.1;         ///< Adam (β 0.9 / 0.999, ε 1e-8, no weight decay, bias-corrected)
  double clip = 1.0;       ///< global-norm clip over all logits (≤ 0: none)
  /// λ_k = (l1_base + l1_step·k)·l1_mult, k = evaluations done so far; the penalty is
  /// λ/(I·L)·Σσ(m) (§2.2–2.3).
  double l1_base = 0.01, l1_step = 0.005, l1_mult = 1.0;
  double tau = 0.5;                                    ///< hard threshold on σ(m)
  double init_logit = 2.0;                             ///< m₀ (σ = 0.881)
  bool through_attention = false;                      ///< false: REF's truncated gradient (§2.2)
  std::vector<double> sweep = {0.5, 0.75, 1.25, 1.5};  ///< sparsity factors of the sweep (§2.6)
  uint64_t seed = 1;                                   ///< train-order shuffle
  /// REF `--target-sparsity p`: only checkpoints (and sweep cuts) with sparsity ≥ p compete, the
  /// dense model not among them; when none reaches p, the sparsest checkpoint is chosen. 0 = off.
  double target_sparsity = 0.0;
};

/// One scored mask.
struct GatePoint {
  std::string what;  ///< "dense", "step 30", "sweep x1.25"
  size_t step = 0;
  double kept = 1.0;        ///< kept FFN fraction
  double select_nll = 0.0;  ///< nats per token on select
  uint64_t closed = 0;      ///< neurons closed since the previous evaluation (checkpoints only)
};

struct GateSearchResult {
  Logits logits;     ///< the best checkpoint's logits (the start logits when dense won)
  KeepSets keep;     ///< the chosen hard keep sets (after the sweep, before alignment)
  GatePoint chosen;  ///< what was chosen (dense when no mask beat it)
  double dense_select_nll = 0.0;
  std::vector<GatePoint> history, sweep;
  std::vector<double> train_loss;  ///< [steps] the soft model's CE + penalty
};

/// Progress callback: (phase text, units done since the last call).
using Tick = std::function<void(const std::string& note, size_t done)>;

/// Runs phase A on `m`, a model bound to f32 weights with exact kernels (train::check_trainable),
/// every layer a dense SwiGLU FFN of one width. Scores are score_chunks means. `tick` is called
/// after each step (note = "step s loss x kept y"). Throws what the backward throws, and
/// Error(InvalidArgument) for an empty train or select split or eval_every == 0.
GateSearchResult search_gates(model::Model& m, const TaskCorpus& corpus, const GateSearchOptions& opt,
                              const Tick& tick = {});

/// The variant of `m` that keeps exactly `k` (nullptr when it keeps everything).
std::shared_ptr<const model::Variant> hard_variant(const model::Model& m, const KeepSets& k);

}  // namespace cortiq::specialize
