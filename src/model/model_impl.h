// Internal to model/: a Model is its shared weights, its thread pool and its own activations.
// Nothing outside src/model/ includes it.
#pragma once

#include <memory>
#include <span>

#include "model/activations.h"
#include "model/blocks.h"
#include "model/model.h"
#include "model/weights.h"

namespace cortiq::model {

struct Model::Impl {
  std::shared_ptr<const Weights> w;
  kernels::Ops ops;  // chosen once, at create
  kernels::ThreadPool pool;
  Activations act;    // used when a call brings none
  Activations group;  // one group's rows of a layer the steps bind differently (SeqStep::weights)

  Impl(std::shared_ptr<const Weights> weights, const kernels::Ops& o, size_t threads)
      : w(std::move(weights)), ops(o), pool(threads) {}
  BlockEnv env() { return BlockEnv{w->arch, w->norm_style, ops, pool}; }
};

}  // namespace cortiq::model
