// fcd_tail (fcd.h).
#include "specialize/fcd.h"

#include <cmath>
#include <numbers>
#include <numeric>
#include <random>

#include "cmf/tensor_names.h"
#include "specialize/score.h"
#include "train/adamw.h"
#include "train/backward.h"
#include "util/error.h"

namespace cortiq::specialize {

namespace {

std::unique_ptr<model::Model> bind_exact(const cmf::ModelArch& a, const train::Params& p, size_t threads) {
  model::ModelOptions mo;
  mo.threads = threads;
  mo.kernels = kernels::KernelConfig{kernels::MatmulMode::Exact, kernels::simd_tier()};
  return model::Model::bind(a, p, mo);
}

}  // namespace

FcdResult fcd_tail(const cmf::ModelArch& arch, const train::Params& replica, const KeepSets& keep,
                   const TaskCorpus& corpus, const FcdOptions& opt, const Tick& tick) {
  if (corpus.train.empty() || corpus.select.empty())
    fail(ErrorKind::InvalidArgument, "compile: the train and select splits must not be empty");
  if (!(opt.kl >= 0.0 && opt.kl <= 1.0))
    fail(ErrorKind::InvalidArgument, "compile: --kl {} is not in [0, 1]", opt.kl);
  if (opt.eval_every == 0) fail(ErrorKind::InvalidArgument, "compile: eval_every must be ≥ 1");
  const uint32_t L = arch.num_layers;
  const uint32_t first = L - static_cast<uint32_t>(std::min<size_t>(opt.layers, L));
  train::Params student = replica;
  std::vector<std::string> names;
  for (auto& [name, p] : student.all()) p.frozen = true;
  for (uint32_t l = first; l < L; ++l)
    for (auto r : {cmf::TensorRole::FfnGate, cmf::TensorRole::FfnUp, cmf::TensorRole::FfnDown}) {
      names.push_back(cmf::tensor_name(r, l));
      student.all().at(names.back()).frozen = false;
    }
  auto teacher = bind_exact(arch, replica, opt.threads);
  auto sm = bind_exact(arch, student, opt.threads);  // FFN matrices are views of `student`: updates show
  const auto var = hard_variant(*sm, keep);
  FcdResult r;
  r.start_nll = r.best_nll = score_chunks(*sm, corpus.select, var.get()).mean();
  r.history.push_back(GatePoint{"phase A", 0, 0.0, r.start_nll, 0});
  std::vector<size_t> order(corpus.train.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(opt.seed);
  std::shuffle(order.begin(), order.end(), rng);
  train::AdamW adam(train::AdamWOptions{0.9, 0.999, 1e-8, 0.0, false});
  const size_t V = teacher->vocab_size();
  for (size_t s = 0; s < opt.steps; ++s) {
    const Chunk& c = corpus.train[order[s % order.size()]];
    const std::span<const uint32_t> cs(c);
    const auto in = cs.first(cs.size() - 1), tg = cs.subspan(1);
    std::vector<float> tl;
    train::BackwardOptions bo;
    if (opt.kl > 0) {
      tl.resize(in.size() * V);
      model::KvCache kv(arch, in.size());
      teacher->forward(in, kv, tl, model::LogitsMode::All);
      bo.teacher_logits = tl;
    }
    bo.ce_weight = 1.0 - opt.kl;
    bo.kl_weight = opt.kl;
    bo.first_layer = first;
    bo.variant = var.get();
    bo.weight_grads = train::BackwardOptions::WeightGrads::Ffn;
    train::Grads g;
    const double loss = train::lm_loss_backward(*sm, in, tg, g, bo);
    r.train_loss.push_back(loss);
    for (const auto& [name, v] : g)
      for (float x : v)
        if (!std::isfinite(x))
          fail(ErrorKind::NonFinite, "compile: phase B step {}: the gradient of '{}' is not finite", s + 1,
               name);
    train::clip_grad_norm(g, opt.clip);
    const double lr =
        opt.lr * 0.5 *
        (1.0 + std::cos(std::numbers::pi * static_cast<double>(s) / static_cast<double>(opt.steps)));
    adam.step(student, g, lr);
    if ((s + 1) % opt.eval_every == 0 || s + 1 == opt.steps) {
      const double nll = score_chunks(*sm, corpus.select, var.get()).mean();
      r.history.push_back(GatePoint{"fcd step " + std::to_string(s + 1), s + 1, 0.0, nll, 0});
      if (nll < r.best_nll) {
        r.best_nll = nll;
        r.best_step = s + 1;
        r.masters = train::Params();
        for (const auto& n : names) {
          const auto& p = student.all().at(n);
          r.masters.add(n, p.shape, p.value);
        }
      }
    }
    if (tick) {
      char note[96];
      std::snprintf(note, sizeof note, "loss %.3f · select %.3f (start %.3f)", loss, r.best_nll, r.start_nll);
      tick(note, 1);
    }
  }
  return r;
}

}  // namespace cortiq::specialize
