// The FFN blocks: dense SwiGLU/GeGLU with per-row task-mask neurons, and mixture of experts with
// per-row routable experts (spec §2.2, ENGINE-NOTES §3.8); then the sandwich norm and the residual.
#include <algorithm>
#include <cmath>

#include "kernels/elementwise.h"
#include "model/blocks.h"
#include "model/variant.h"
#include "util/error.h"

namespace cortiq::model {

namespace {

/// g, u [T, width] = gate·x, up·x, where a row whose variant gathered this layer (gathered[t]) reads
/// only its alive rows of gate/up (the dead neurons' values are 0, which the mask gives them anyway).
/// Rows are computed in groups that share a GatheredFfn (or the full matrices), one matmul a group:
/// a row's product does not depend on the other rows of the call, so this equals one full call on
/// every alive neuron bit for bit.
void project_gathered(const BlockEnv& env, const FfnWeights& f, const GatheredFfn* const* gathered,
                      const float* x, size_t T, float* g, float* u, Activations& ws) {
  const size_t W = f.width, Hd = f.gate.cols();
  ws.ffn_done.assign(T, 0);
  for (size_t t0 = 0; t0 < T; ++t0) {
    if (ws.ffn_done[t0]) continue;
    const GatheredFfn* gf = gathered[t0];
    ws.ffn_rows.clear();
    for (size_t t = t0; t < T; ++t)
      if (!ws.ffn_done[t] && gathered[t] == gf) {
        ws.ffn_rows.push_back(t);
        ws.ffn_done[t] = 1;
      }
    const size_t n = ws.ffn_rows.size(), K = gf ? gf->ids.size() : W;
    const float* xs = x;
    if (n != T) {
      float* xb = grow(ws.ffn_x, n * Hd);
      kernels::gather_rows_f32(x, ws.ffn_rows, Hd, xb);
      xs = xb;
    }
    float* cg = grow(ws.ffn_cg, n * K);
    float* cu = grow(ws.ffn_cu, n * K);
    const kernels::WeightView* gu[] = {gf ? &gf->gate : &f.gate, gf ? &gf->up : &f.up};
    float* const gu_out[] = {cg, cu};
    env.ops.matmul_multi(gu, xs, n, gu_out, env.pool);
    if (!gf) {
      kernels::scatter_rows_f32(cg, ws.ffn_rows, W, g);
      kernels::scatter_rows_f32(cu, ws.ffn_rows, W, u);
      continue;
    }
    for (size_t j = 0; j < n; ++j) {
      const size_t t = ws.ffn_rows[j];
      kernels::expand_cols(cg + j * K, gf->ids, W, g + t * W);
      kernels::expand_cols(cu + j * K, gf->ids, W, u + t * W);
    }
  }
}

/// out[T, hidden] = down(act(gate·x) · up·x) for T rows of x; `alive` (nullable, [T]) gives each
/// row's alive-neuron bytes (nullptr = all), `gathered` (nullable, [T]) its gathered gate/up rows
/// (nullptr = the full matrices; ignored while intermediates are kept, which want every neuron).
void dense_ffn(const BlockEnv& env, const FfnWeights& f, const uint8_t* const* alive,
               const GatheredFfn* const* gathered, const float* const* scale, const float* x, size_t T,
               float* out, Activations& ws, KeptLayer* kept) {
  const size_t W = f.width;
  float* g = grow(ws.ffn_g, T * W);
  float* u = grow(ws.ffn_u, T * W);
  if (!kept && gathered && std::any_of(gathered, gathered + T, [](const GatheredFfn* p) { return p; })) {
    project_gathered(env, f, gathered, x, T, g, u, ws);
  } else {
    const kernels::WeightView* gu[] = {&f.gate, &f.up};
    float* const gu_out[] = {g, u};
    env.ops.matmul_multi(gu, x, T, gu_out, env.pool);  // one pool hand-off for both projections
  }
  if (kept) {
    kept->gate.assign(g, g + T * W);
    kept->up.assign(u, u + T * W);
  }
  for (size_t t = 0; t < T; ++t) {
    float* gt = g + t * W;
    if (env.arch.hidden_act == cmf::HiddenAct::GeluTanh)
      kernels::geglu(gt, u + t * W, gt, W);
    else
      env.ops.swiglu(gt, u + t * W, gt, W);
    if (const uint8_t* a = alive ? alive[t] : nullptr) kernels::zero_dead(gt, a, W);
    if (const float* sc = scale ? scale[t] : nullptr) kernels::mul_inplace(gt, sc, W);
  }
  if (kept) kept->act.assign(g, g + T * W);
  env.ops.matmul(f.down, g, T, out, env.pool);
}

void moe_ffn(const BlockEnv& env, const LayerWeights& L, const float* xs, size_t T, float* outs,
             Activations& ws) {
  // spec §2.2 / ENGINE-NOTES §3.8: softmax over the routable experts (all of them unless a task
  // mask restricts the set, spec §5), top-k by probability with ties to the lower index, optional
  // renormalization of the kept k, shared expert weighted by sigmoid(shared_expert_gate·x).
  // Routing is per token; the router logits of all T tokens come from one matmul (== T matvecs).
  const auto& arch = env.arch;
  const size_t E = L.moe.experts.size(), Hd = arch.hidden_size;
  float* all_logits = grow(ws.moe_logits, T * E);
  env.ops.matmul(L.moe.router, xs, T, all_logits, env.pool);
  double* p = grow(ws.moe_p, E);
  float* pf = grow(ws.moe_pf, E);
  float* y = grow(ws.moe_y, Hd);
  std::vector<size_t>& cand = ws.moe_cand;
  const kernels::MoeRouting routing{arch.moe->top_k, arch.moe->norm_topk_prob,
                                    arch.moe->routed_scaling_factor.value_or(1.0)};
  if (ws.record_routes) {
    ws.route_off.assign(T + 1, 0);
    ws.routes.clear();
  }
  for (size_t t = 0; t < T; ++t) {
    const float* x = xs + t * Hd;
    const float* logits = all_logits + t * E;
    float* out = outs + t * Hd;
    const std::vector<uint8_t>* allow = ws.row_experts[t];
    cand.clear();
    for (size_t e = 0; e < E; ++e)
      if (!allow || (e < allow->size() && (*allow)[e])) cand.push_back(e);
    std::fill(out, out + Hd, 0.0f);
    kernels::moe_route(logits, cand, routing, p, pf, ws.moe_route);
    for (const auto& [e, wf] : ws.moe_route) {
      dense_ffn(env, L.moe.experts[e], nullptr, nullptr, nullptr, x, 1, y, ws, nullptr);
      kernels::axpy_inplace(out, wf, y, Hd);
      if (ws.record_routes) {
        double ss = 0.0;
        for (size_t d = 0; d < Hd; ++d) ss += static_cast<double>(y[d]) * y[d];
        ws.routes.push_back({static_cast<uint32_t>(e), wf, static_cast<float>(std::sqrt(ss))});
      }
    }
    if (ws.record_routes) ws.route_off[t + 1] = ws.routes.size();
    if (L.moe.shared) {
      dense_ffn(env, *L.moe.shared, nullptr, nullptr, nullptr, x, 1, y, ws, nullptr);
      const float gw =
          L.moe.shared_gate.empty() ? 1.0f : kernels::sigmoid_dot(L.moe.shared_gate.data(), x, Hd);
      kernels::axpy_inplace(out, gw, y, Hd);
    }
  }
}

}  // namespace

void ffn_block(const BlockEnv& env, const LayerWeights& L, size_t R, Activations& ws, KeptLayer* kept) {
  const size_t Hd = env.arch.hidden_size;
  float* n = ws.n.data();
  float* tmp = ws.tmp.data();
  if (L.is_moe)
    moe_ffn(env, L, n, R, tmp, ws);
  else
    dense_ffn(env, L.ffn, ws.row_neurons.data(), ws.row_gathered.data(), ws.row_scale.data(), n, R, tmp, ws,
              kept);
  float* h = ws.h.data();
  for (size_t r = 0; r < R; ++r) {
    float* ft = tmp + r * Hd;
    if (L.sandwich)
      kernels::rmsnorm(ft, L.post_ffn_norm.data(), Hd, env.arch.rms_norm_eps, env.norm_style, ft);
    float* ht = h + r * Hd;
    kernels::add_inplace(ht, ft, Hd);
  }
}

}  // namespace cortiq::model
