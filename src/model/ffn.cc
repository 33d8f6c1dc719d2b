// The FFN blocks: dense SwiGLU/GeGLU with per-row task-mask neurons, and mixture of experts with
// per-row routable experts (spec §2.2, ENGINE-NOTES §3.8).
#include <algorithm>
#include <cmath>

#include "model/model_impl.h"
#include "util/error.h"

namespace cortiq::model {

template <class Alive>
void Model::Impl::dense_ffn(const Ffn& f, const Alive& alive, const float* x, size_t T, float* out) {
  const size_t W = f.width;
  float* g = grow(ws.ffn_g, T * W);
  float* u = grow(ws.ffn_u, T * W);
  const kernels::WeightView* gu[] = {&f.gate, &f.up};
  float* const gu_out[] = {g, u};
  kernels::matmul_multi(gu, x, T, gu_out, pool);  // one pool hand-off for both projections
  for (size_t t = 0; t < T; ++t) {
    float* gt = g + t * W;
    if (arch.hidden_act == cmf::HiddenAct::GeluTanh)
      kernels::geglu(gt, u + t * W, gt, W);
    else
      kernels::swiglu(gt, u + t * W, gt, W);
    if (const uint8_t* a = alive(t))
      for (size_t i = 0; i < W; ++i)
        if (!a[i]) gt[i] = 0.0f;
  }
  kernels::matmul(f.down, g, T, out, pool);
}

void Model::Impl::moe_forward(const Layer& L, size_t li, const float* xs, size_t T, float* outs) {
  // spec §2.2 / ENGINE-NOTES §3.8: softmax over the routable experts (all of them unless a task
  // mask restricts the set, spec §5), top-k by probability with ties to the lower index, optional
  // renormalization of the kept k, shared expert weighted by sigmoid(shared_expert_gate·x).
  // Routing is per token; the router logits of all T tokens come from one matmul (== T matvecs).
  const size_t E = L.moe.experts.size(), Hd = arch.hidden_size;
  float* all_logits = grow(ws.moe_logits, T * E);
  kernels::matmul(L.moe.router, xs, T, all_logits, pool);
  const auto dense = [](size_t) -> const uint8_t* { return nullptr; };
  double* p = grow(ws.moe_p, E);
  float* pf = grow(ws.moe_pf, E);
  float* y = grow(ws.moe_y, Hd);
  std::vector<size_t>& cand = ws.moe_cand;
  for (size_t t = 0; t < T; ++t) {
    const float* x = xs + t * Hd;
    const float* logits = all_logits + t * E;
    float* out = outs + t * Hd;
    const Variant* var = ws.row_var[t];  // xs holds the call's rows 0..T-1
    const std::vector<uint8_t>* allow = var && !var->expert_alive.empty() ? &var->expert_alive[li] : nullptr;
    cand.clear();
    for (size_t e = 0; e < E; ++e)
      if (!allow || (e < allow->size() && (*allow)[e])) cand.push_back(e);
    std::fill(out, out + Hd, 0.0f);
    if (!cand.empty()) {
      double mx = -INFINITY;
      for (size_t e : cand) mx = std::max(mx, static_cast<double>(logits[e]));
      double sum = 0.0;
      for (size_t e : cand) sum += (p[e] = std::exp(static_cast<double>(logits[e]) - mx));
      for (size_t e : cand) pf[e] = static_cast<float>(p[e] / sum);
      const size_t k = std::min<size_t>(arch.moe->top_k, cand.size());
      // Top k by probability, ties to the lower expert index (cand is ascending, so this total
      // order gives the same first k as a stable sort by probability; no temporary buffer).
      std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(k), cand.end(),
                        [&](size_t i, size_t j) { return pf[i] > pf[j] || (pf[i] == pf[j] && i < j); });
      double ksum = 0.0;
      for (size_t i = 0; i < k; ++i) ksum += pf[cand[i]];
      const double scaling = arch.moe->routed_scaling_factor.value_or(1.0);
      for (size_t i = 0; i < k; ++i) {
        const size_t e = cand[i];
        double w = pf[e];
        if (arch.moe->norm_topk_prob) w /= ksum;
        const float wf = static_cast<float>(w * scaling);
        dense_ffn(L.moe.experts[e], dense, x, 1, y);
        for (size_t d = 0; d < Hd; ++d) out[d] += wf * y[d];
      }
    }
    if (L.moe.shared) {
      dense_ffn(*L.moe.shared, dense, x, 1, y);
      float gw = 1.0f;
      if (!L.moe.shared_gate.empty()) {
        double s = 0.0;
        for (size_t d = 0; d < Hd; ++d) s += static_cast<double>(L.moe.shared_gate[d]) * x[d];
        gw = static_cast<float>(1.0 / (1.0 + std::exp(-s)));
      }
      for (size_t d = 0; d < Hd; ++d) out[d] += gw * y[d];
    }
  }
}

void Model::Impl::ffn_forward(const Layer& L, size_t li, const float* x, size_t T, float* out) {
  if (L.is_moe) {
    moe_forward(L, li, x, T, out);
    return;
  }
  const Variant* const* var = ws.row_var.data();
  dense_ffn(
      L.ffn,
      [var, li](size_t t) -> const uint8_t* {
        return var[t] && !var[t]->ffn_alive[li].empty() ? var[t]->ffn_alive[li].data() : nullptr;
      },
      x, T, out);
}

}  // namespace cortiq::model
