// Phase B of task compilation (SPECIALIZATION-NOTES §3, OURS): the last `layers` layers' FFN
// (gate/up/down, f32 masters from the replica) fine-tuned with the hard mask on, loss
// (1 − kl)·CE + kl·KL(p_teacher ‖ p_student), the teacher being the dense replica (no mask);
// Adam with a cosine schedule to 0, global-norm clip; every eval_every steps the select split is
// scored and the best step kept — the phase-A result being the initial best, so a phase B that
// never improves changes nothing. kl = 0 is the reference's CE-only variant.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"
#include "specialize/gate_search.h"
#include "train/params.h"

namespace cortiq::specialize {

struct FcdOptions {
  size_t layers = 4;   ///< trainable tail (clamped to the model's layers)
  size_t steps = 120;  ///< 0 = no phase B
  size_t eval_every = 30;
  double lr = 1e-5;  ///< peak; × 0.5·(1 + cos(π·s/steps))
  double kl = 0.7;   ///< KL weight; CE weight = 1 − kl
  double clip = 1.0;
  uint64_t seed = 2;  ///< train-order shuffle
  size_t threads = 1;
};

struct FcdResult {
  double start_nll = 0.0, best_nll = 0.0;  ///< select, nats per token, under the hard mask
  size_t best_step = 0;                    ///< 0 = the start (nothing trained is used)
  std::vector<GatePoint> history;
  std::vector<double> train_loss;
  /// The best step's trained FFN tensors (full width, dead neurons included), empty when
  /// best_step == 0.
  train::Params masters;
};

/// Runs phase B on `replica` (f32, every tensor; not modified). Throws what the backward throws and
/// Error(InvalidArgument) for an empty train or select split, kl outside [0, 1] or eval_every == 0.
FcdResult fcd_tail(const cmf::ModelArch& arch, const train::Params& replica, const KeepSets& keep,
                   const TaskCorpus& corpus, const FcdOptions& opt, const Tick& tick = {});

}  // namespace cortiq::specialize
