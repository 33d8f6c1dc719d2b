// search_gates (gate_search.h).
#include "specialize/gate_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "specialize/score.h"
#include "train/backward.h"
#include "util/error.h"

namespace cortiq::specialize {

namespace {

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

}  // namespace

std::shared_ptr<const model::Variant> hard_variant(const model::Model& m, const KeepSets& k) {
  const cmf::TaskMask mask = mask_of(m.arch(), k, "compile", 0);
  model::VariantOptions vo;
  vo.gather_at_most = -1.0;  // compute and zero: no row copies per evaluation
  return m.compile_variant(&mask, vo);
}

GateSearchResult search_gates(model::Model& m, const TaskCorpus& corpus, const GateSearchOptions& opt,
                              const Tick& tick) {
  if (corpus.train.empty() || corpus.select.empty())
    fail(ErrorKind::InvalidArgument, "compile: the train and select splits must not be empty");
  if (opt.eval_every == 0) fail(ErrorKind::InvalidArgument, "compile: eval_every must be ≥ 1");
  const auto& w = *m.weights();
  const size_t L = w.layers.size();
  GateSearchResult r;
  Logits logits(L);
  size_t all = 0;
  for (size_t l = 0; l < L; ++l) {
    logits[l].assign(w.layers[l]->ffn.width, static_cast<float>(opt.init_logit));
    all += w.layers[l]->ffn.width;
  }
  const double IL = static_cast<double>(all);  // I·L (one width for every layer)

  const auto score = [&](const KeepSets& k) {
    auto v = hard_variant(m, k);
    return score_chunks(m, corpus.select, v.get()).mean();
  };
  KeepSets dense(L);
  for (size_t l = 0; l < L; ++l) {
    dense[l].resize(logits[l].size());
    std::iota(dense[l].begin(), dense[l].end(), 0u);
  }
  r.dense_select_nll = score(dense);
  r.chosen = GatePoint{"dense", 0, 1.0, r.dense_select_nll, 0};
  r.history.push_back(r.chosen);
  r.logits = logits;
  r.keep = dense;
  // Whether `p` replaces `cur` as the choice: the lower select loss (ties keep `cur`); under a
  // target sparsity a point reaching it beats one that does not (the dense start never reaches
  // it), and among points short of it the sparser stands in.
  const auto beats = [&](const GatePoint& p, const GatePoint& cur) {
    if (opt.target_sparsity <= 0.0) return p.select_nll < cur.select_nll;
    const bool pr = 1.0 - p.kept >= opt.target_sparsity,
               cr = cur.step > 0 && 1.0 - cur.kept >= opt.target_sparsity;
    if (pr != cr) return pr;
    if (pr) return p.select_nll < cur.select_nll;
    return cur.step == 0 || p.kept < cur.kept;
  };
  KeepSets best_keep_of_checkpoint;  // the chosen checkpoint's hard mask (sweep base)

  std::vector<size_t> order(corpus.train.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(opt.seed);
  std::shuffle(order.begin(), order.end(), rng);

  model::Variant var = model::open_variant(w);
  std::vector<std::vector<double>> mom1(L), mom2(L);
  for (size_t l = 0; l < L; ++l) mom1[l].assign(logits[l].size(), 0.0), mom2[l].assign(logits[l].size(), 0.0);
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  size_t evals = 0;
  uint64_t alive_before = all;
  for (size_t s = 0; s < opt.steps; ++s) {
    const double lambda = (opt.l1_base + opt.l1_step * static_cast<double>(evals)) * opt.l1_mult;
    for (size_t l = 0; l < L; ++l) {
      var.ffn_scale[l].resize(logits[l].size());
      for (size_t j = 0; j < logits[l].size(); ++j)
        var.ffn_scale[l][j] = static_cast<float>(sigmoid(logits[l][j]));
    }
    const Chunk& c = corpus.train[order[s % order.size()]];
    const std::span<const uint32_t> cs(c);
    train::BackwardOptions bo;
    bo.variant = &var;
    bo.through_attention = opt.through_attention;
    bo.weight_grads = train::BackwardOptions::WeightGrads::None;
    std::vector<std::vector<float>> ds;
    bo.ffn_scale_grad = &ds;
    train::Grads unused;
    double loss = train::lm_loss_backward(m, cs.first(cs.size() - 1), cs.subspan(1), unused, bo);
    // dL/dm = (δ·a + λ/(I·L))·σ(1 − σ), then the global-norm clip over all logits
    std::vector<std::vector<double>> g(L);
    double norm2 = 0.0, pen = 0.0;
    for (size_t l = 0; l < L; ++l) {
      g[l].resize(logits[l].size());
      for (size_t j = 0; j < logits[l].size(); ++j) {
        const double sg = var.ffn_scale[l][j];
        pen += sg;
        const double d = (ds.size() > l && !ds[l].empty() ? ds[l][j] : 0.0) + lambda / IL;
        g[l][j] = d * sg * (1.0 - sg);
        norm2 += g[l][j] * g[l][j];
      }
    }
    loss += lambda / IL * pen;
    r.train_loss.push_back(loss);
    if (!std::isfinite(norm2))
      fail(ErrorKind::NonFinite, "compile: phase A step {}: the gate gradient is not finite", s + 1);
    const double norm = std::sqrt(norm2);
    const double k = opt.clip > 0 && norm > opt.clip ? opt.clip / norm : 1.0;
    const double t = static_cast<double>(s + 1);
    const double c1 = 1.0 - std::pow(b1, t), c2 = 1.0 - std::pow(b2, t);
    for (size_t l = 0; l < L; ++l)
      for (size_t j = 0; j < logits[l].size(); ++j) {
        const double gj = g[l][j] * k;
        mom1[l][j] = b1 * mom1[l][j] + (1.0 - b1) * gj;
        mom2[l][j] = b2 * mom2[l][j] + (1.0 - b2) * gj * gj;
        logits[l][j] -= static_cast<float>(opt.lr * (mom1[l][j] / c1) / (std::sqrt(mom2[l][j] / c2) + eps));
      }
    if ((s + 1) % opt.eval_every == 0 || s + 1 == opt.steps) {
      ++evals;
      const KeepSets hk = keep_by_threshold(logits, opt.tau);
      GatePoint p{"step " + std::to_string(s + 1), s + 1, kept_fraction(hk, logits), 0.0, 0};
      uint64_t alive = 0;
      for (const auto& row : hk) alive += row.size();
      p.closed = alive_before > alive ? alive_before - alive : 0;
      alive_before = alive;
      bool empty_layer = false;
      for (const auto& row : hk) empty_layer = empty_layer || row.empty();
      // a mask that empties a layer is scored with that layer's best neuron kept (alignment keeps ≥ 1)
      p.select_nll = score(empty_layer ? align_keep(logits, hk, 1) : hk);
      r.history.push_back(p);
      const bool wins = beats(p, r.chosen);
      if (wins) {
        r.chosen = p;
        r.logits = logits;
        r.keep = empty_layer ? align_keep(logits, hk, 1) : hk;
        best_keep_of_checkpoint = r.keep;
      }
    }
    if (tick) {
      char note[96];
      std::snprintf(note, sizeof note, "loss %.3f · best %s %.3f", loss, r.chosen.what.c_str(),
                    r.chosen.select_nll);
      tick(note, 1);
    }
  }
  // §2.6: the sweep around the chosen checkpoint (skipped when the dense model is the best)
  if (r.chosen.step > 0) {
    const GatePoint base = r.chosen;
    for (double f : opt.sweep) {
      const KeepSets k = scaled_cut(r.logits, best_keep_of_checkpoint, f);
      char what[32];
      std::snprintf(what, sizeof what, "sweep x%.2f", f);
      GatePoint p{what, base.step, kept_fraction(k, r.logits), score(k), 0};
      r.sweep.push_back(p);
      // beats (lowest, or reaching the target sparsity first); exact ties → the sparser
      if (beats(p, r.chosen) || (p.select_nll == r.chosen.select_nll && p.kept < r.chosen.kept)) {
        r.chosen = p;
        r.keep = k;
      }
    }
  }
  return r;
}

}  // namespace cortiq::specialize
