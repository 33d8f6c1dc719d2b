// AdamW, clip_grad_norm, lr_at (adamw.h).
#include "train/adamw.h"

#include <cmath>
#include <numbers>

#include "util/error.h"

namespace cortiq::train {

void AdamW::step(Params& p, const Grads& g, double lr) {
  ++t_;
  const double b1 = opt_.beta1, b2 = opt_.beta2;
  const double c1 = 1.0 - std::pow(b1, static_cast<double>(t_)),
               c2 = 1.0 - std::pow(b2, static_cast<double>(t_));
  for (auto& [name, t] : p.all()) {
    if (t.frozen) continue;
    const auto it = g.find(name);
    if (it == g.end()) continue;
    const std::vector<float>& gr = it->second;
    if (gr.size() != t.value.size())
      fail(ErrorKind::InvalidArgument, "train: gradient of '{}' has {} values, the parameter {}", name,
           gr.size(), t.value.size());
    auto& m = m_[name];
    auto& v = v_[name];
    if (m.empty()) m.assign(gr.size(), 0.0f), v.assign(gr.size(), 0.0f);
    const bool decay = opt_.decay_vectors || t.shape.size() >= 2;
    const double keep = decay ? 1.0 - lr * opt_.weight_decay : 1.0;
    for (size_t i = 0; i < gr.size(); ++i) {
      const double gi = gr[i];
      const double mi = b1 * m[i] + (1.0 - b1) * gi, vi = b2 * v[i] + (1.0 - b2) * gi * gi;
      m[i] = static_cast<float>(mi);
      v[i] = static_cast<float>(vi);
      const double pi = static_cast<double>(t.value[i]) * keep;
      t.value[i] = static_cast<float>(pi - lr * (mi / c1) / (std::sqrt(vi / c2) + opt_.eps));
    }
  }
}

double clip_grad_norm(Grads& g, double max_norm) {
  double ss = 0.0;
  for (const auto& [name, v] : g)
    for (float x : v) ss += static_cast<double>(x) * x;
  const double norm = std::sqrt(ss);
  if (max_norm > 0.0 && norm > max_norm) {
    const auto s = static_cast<float>(max_norm / norm);
    for (auto& [name, v] : g)
      for (float& x : v) x *= s;
  }
  return norm;
}

double lr_at(uint64_t step, uint64_t warmup, uint64_t total, double lr, double min_lr) {
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total || total <= warmup) return min_lr;
  const double f = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * f));
}

}  // namespace cortiq::train
