// The attention block: input norm, q/k/v with biases, q/k norms and RoPE, the KV append, causal
// (optionally sliding-window) attention with per-row alive heads, o_proj and the residual.
#include <algorithm>
#include <cmath>

#include "kernels/elementwise.h"
#include "model/blocks.h"
#include "util/error.h"

namespace cortiq::model {

void attention_block(const BlockEnv& env, const LayerWeights& L, size_t R, Activations& ws, KeptLayer* kept) {
  const auto& a = env.arch;
  const auto norm_style = env.norm_style;
  kernels::ThreadPool& pool = env.pool;
  const size_t Hd = a.hidden_size, hd = a.head_dim, nkv = a.num_kv_heads;
  const size_t nh = L.n_heads, qd = nh * hd, kd = nkv * hd, qrows = L.out_gate ? 2 * qd : qd;
  float* h = ws.h.data();
  float* n = ws.n.data();
  const size_t* row_pos = ws.row_pos.data();
  for (size_t r = 0; r < R; ++r)
    kernels::rmsnorm(h + r * Hd, L.input_norm.data(), Hd, a.rms_norm_eps, norm_style, n + r * Hd);
  if (kept) {
    kept->h_in.assign(h, h + R * Hd);
    kept->x_attn.assign(n, n + R * Hd);
  }
  float* qraw = grow(ws.qraw, R * qrows);
  float* k = grow(ws.k, R * kd);
  float* v = grow(ws.v, R * kd);
  float* q = grow(ws.q, R * qd);
  float* gate = L.out_gate ? grow(ws.gate, R * qd) : nullptr;
  const kernels::WeightView* qkv[] = {&L.q, &L.k, &L.v};
  float* const qkv_out[] = {qraw, k, v};
  env.ops.matmul_multi(qkv, n, R, qkv_out, pool);  // one pool hand-off for Q, K and V
  const kernels::RopeTable& rt = *L.rope;
  for (size_t r = 0; r < R; ++r) {
    float* qr = qraw + r * qrows;
    float* kt = k + r * kd;
    float* vt = v + r * kd;
    if (!L.q_bias.empty()) {
      kernels::add_bias_rows(qr, L.q_bias.data(), 1, qrows);
      kernels::add_bias_rows(kt, L.k_bias.data(), 1, kd);
      kernels::add_bias_rows(vt, L.v_bias.data(), 1, kd);
    }
    float* qt = q + r * qd;
    if (L.out_gate)
      kernels::split_q_gate(qr, nh, hd, qt, gate + r * qd);
    else
      std::copy(qr, qr + qd, qt);
    if (!L.q_norm.empty())
      for (size_t hh = 0; hh < nh; ++hh)
        kernels::rmsnorm(qt + hh * hd, L.q_norm.data(), hd, a.rms_norm_eps, norm_style, qt + hh * hd);
    if (!L.k_norm.empty())
      for (size_t hh = 0; hh < nkv; ++hh)
        kernels::rmsnorm(kt + hh * hd, L.k_norm.data(), hd, a.rms_norm_eps, norm_style, kt + hh * hd);
    const int64_t pos = static_cast<int64_t>(row_pos[r]);
    kernels::rope(qt, nh, hd, rt, pos);
    kernels::rope(kt, nkv, hd, rt, pos);
    ws.row_kv[r]->store(row_pos[r], kt, vt);
  }
  if (kept) {
    kept->q.assign(q, q + R * qd);
    kept->k.assign(k, k + R * kd);
    kept->v.assign(v, v + R * kd);
  }
  kernels::AttentionParams ap;
  ap.n_heads = nh;
  ap.n_kv_heads = nkv;
  ap.head_dim = hd;
  ap.scale = static_cast<float>(
      1.0 / std::sqrt(a.query_pre_attn_scalar ? *a.query_pre_attn_scalar : static_cast<double>(hd)));
  ap.softcap = a.attn_logit_softcapping ? static_cast<float>(*a.attn_logit_softcapping) : 0.0f;
  KvLayer* const* row_kv = ws.row_kv.data();
  const uint8_t* const* row_heads = ws.row_heads.data();
  float* att = grow(ws.att, R * qd);
  // Work items are (row, kv head) pairs, row-major: decode (R = 1) still spreads its kv heads over
  // the pool. Each pair writes only its own heads' rows of `att`, computed with the same
  // arithmetic whatever the split, so the result does not depend on the thread count.
  const size_t window = L.sliding ? *a.sliding_window : 0;
  auto body = [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1;) {
      const size_t r = i / nkv, g0 = i % nkv, g1 = std::min(nkv, g0 + (i1 - i));
      const size_t end = row_pos[r] + 1;
      const size_t begin = window && window < end ? end - window : 0;
      env.ops.attention(q + r * qd, row_kv[r]->view(), begin, end, ap, row_heads[r], att + r * qd, g0, g1);
      i += g1 - g0;
    }
  };
  // A one-reference closure fits std::function's small buffer: no allocation per call.
  pool.parallel_for(R * nkv, [&body](size_t i0, size_t i1) { body(i0, i1); });
  if (L.out_gate) kernels::sigmoid_gate_inplace(att, gate, R * qd);
  if (kept) kept->att.assign(att, att + R * qd);
  float* tmp = ws.tmp.data();
  env.ops.matmul(L.o, att, R, tmp, pool);
  for (size_t r = 0; r < R; ++r) {
    float* at = tmp + r * Hd;
    if (L.sandwich) kernels::rmsnorm(at, L.post_attn_norm.data(), Hd, a.rms_norm_eps, norm_style, at);
    float* ht = h + r * Hd;
    kernels::add_inplace(ht, at, Hd);
    kernels::rmsnorm(ht, L.sandwich ? L.pre_ffn_norm.data() : L.post_attn_norm.data(), Hd, a.rms_norm_eps,
                     norm_style, n + r * Hd);
  }
  if (kept) {
    kept->h_mid.assign(h, h + R * Hd);
    kept->x_ffn.assign(n, n + R * Hd);
  }
}

}  // namespace cortiq::model
