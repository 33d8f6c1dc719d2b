// The block backward passes (block_backward.h).
#include "train/block_backward.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/transpose.h"

namespace cortiq::train {

void rmsnorm_backward(const float* x, const float* w, size_t rows, size_t n, double eps, const float* dy,
                      float* dx, float* dw) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float* gr = dy + r * n;
    double ss = 0.0;
    for (size_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    double dot = 0.0;  // Σ w·dy·x
    for (size_t i = 0; i < n; ++i) dot += (w ? w[i] : 1.0) * static_cast<double>(gr[i]) * xr[i];
    const double c = inv * inv * inv * dot / static_cast<double>(n);
    for (size_t i = 0; i < n; ++i) {
      if (dx) dx[r * n + i] += static_cast<float>(inv * (w ? w[i] : 1.0) * gr[i] - c * xr[i]);
      if (dw) dw[i] += static_cast<float>(static_cast<double>(gr[i]) * xr[i] * inv);
    }
  }
}

namespace {

/// out [cols, rows] = the transpose of a [rows, cols].
void transpose(const float* a, size_t rows, size_t cols, std::vector<float>& out) {
  out.resize(rows * cols);
  kernels::transpose_f32(a, rows, cols, out.data());
}

kernels::WeightView f32_view(const std::vector<float>& v, uint64_t rows, uint64_t cols) {
  return kernels::WeightView{
      quant::DType::F32,
      {rows, cols},
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), 4 * v.size()),
      "train.transposed"};
}

}  // namespace

void linear_backward(const kernels::Ops& ops, kernels::ThreadPool& pool, const float* W, size_t out,
                     size_t in, const float* x, size_t T, const float* dy, float* dx, float* dW, float* db,
                     const float* xt) {
  thread_local std::vector<float> a, b, tmp;
  if (dx) {
    transpose(W, out, in, a);  // Wᵀ [in, out]
    tmp.resize(T * in);
    ops.matmul(f32_view(a, in, out), dy, T, tmp.data(), pool);  // [T, in] = dy [T, out] · (Wᵀ)ᵀ
    for (size_t i = 0; i < T * in; ++i) dx[i] += tmp[i];
  }
  if (dW) {
    if (!xt) {
      transpose(x, T, in, a);  // xᵀ [in, T]
      xt = a.data();
    }
    transpose(dy, T, out, b);  // dyᵀ [out, T]
    tmp.resize(out * in);
    const kernels::WeightView xtv{quant::DType::F32,
                                  {in, T},
                                  std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(xt), 4 * in * T),
                                  "train.transposed"};
    ops.matmul(xtv, b.data(), out, tmp.data(), pool);  // [out, in] = dyᵀ · x
    for (size_t i = 0; i < out * in; ++i) dW[i] += tmp[i];
  }
  if (db)
    for (size_t o = 0; o < out; ++o) {
      double s = 0.0;
      for (size_t t = 0; t < T; ++t) s += dy[t * out + o];
      db[o] += static_cast<float>(s);
    }
}

void rope_backward(float* d, size_t n_heads, size_t head_dim, const kernels::RopeTable& t, int64_t pos) {
  const size_t half = t.rotary_dim / 2;
  const float fpos = static_cast<float>(pos);
  for (size_t i = 0; i < half; ++i) {
    const float ang = fpos * t.inv_freq[i];  // the forward's angle and factors, exactly
    const float c = static_cast<float>(std::cos(static_cast<double>(ang))) * t.scale;
    const float s = static_cast<float>(std::sin(static_cast<double>(ang))) * t.scale;
    for (size_t h = 0; h < n_heads; ++h) {
      float* v = d + h * head_dim;
      const float a = v[i], b = v[i + half];
      v[i] = a * c + b * s;
      v[i + half] = b * c - a * s;
    }
  }
}

void attention_backward(const kernels::Ops& ops, kernels::ThreadPool& pool, const float* q, const float* k,
                        const float* v, size_t T, size_t n_heads, size_t n_kv_heads, size_t head_dim,
                        float scale, const float* dout, float* dq, float* dk, float* dv) {
  const size_t hd = head_dim, group = n_heads / n_kv_heads, qd = n_heads * hd, kd = n_kv_heads * hd;
  // Per head, as matrices: S = Q·Kᵀ, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q, dV = Pᵀ·dO, each product
  // one ops.matmul (Y = X·Wᵀ with W [rows, cols]).
  std::vector<float> qh(T * hd), kg(T * hd), vg(T * hd), doh(T * hd), kgt(hd * T), qht(hd * T), doht(hd * T);
  std::vector<float> P(T * T), dP(T * T), dS(T * T), PT(T * T), dST(T * T), tmp(T * hd);
  const auto view = [](const std::vector<float>& m, uint64_t rows, uint64_t cols) {
    return kernels::WeightView{
        quant::DType::F32,
        {rows, cols},
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(m.data()), 4 * m.size()),
        "train.attention"};
  };
  const auto slice = [T, hd](const float* src, size_t stride, size_t off, std::vector<float>& out) {
    for (size_t t = 0; t < T; ++t)
      std::copy(src + t * stride + off, src + t * stride + off + hd, out.begin() + t * hd);
  };
  for (size_t g = 0; g < n_kv_heads; ++g) {
    slice(k, kd, g * hd, kg);
    slice(v, kd, g * hd, vg);
    transpose(kg.data(), T, hd, kgt);
    for (size_t h = g * group; h < (g + 1) * group; ++h) {
      slice(q, qd, h * hd, qh);
      slice(dout, qd, h * hd, doh);
      ops.matmul(view(kg, T, hd), qh.data(), T, P.data(), pool);    // S [T, T]
      ops.matmul(view(vg, T, hd), doh.data(), T, dP.data(), pool);  // dP [T, T]
      for (size_t t = 0; t < T; ++t) {  // causal softmax (max-shifted, double sums) and dS
        float* pr = P.data() + t * T;
        double mx = -INFINITY, sum = 0.0, pdp = 0.0;
        for (size_t j = 0; j <= t; ++j) mx = std::max(mx, static_cast<double>(pr[j]) * scale);
        std::vector<double> e(t + 1);
        for (size_t j = 0; j <= t; ++j) sum += (e[j] = std::exp(static_cast<double>(pr[j]) * scale - mx));
        for (size_t j = 0; j <= t; ++j) {
          e[j] /= sum;
          pdp += e[j] * dP[t * T + j];
        }
        for (size_t j = 0; j < T; ++j) {
          const double pj = j <= t ? e[j] : 0.0;
          pr[j] = static_cast<float>(pj);
          dS[t * T + j] = static_cast<float>(j <= t ? pj * (dP[t * T + j] - pdp) * scale : 0.0);
        }
      }
      transpose(P.data(), T, T, PT);
      transpose(dS.data(), T, T, dST);
      ops.matmul(view(kgt, hd, T), dS.data(), T, tmp.data(), pool);  // dQ [T, hd] = dS · K
      for (size_t t = 0; t < T; ++t)
        for (size_t i = 0; i < hd; ++i) dq[t * qd + h * hd + i] += tmp[t * hd + i];
      transpose(qh.data(), T, hd, qht);
      ops.matmul(view(qht, hd, T), dST.data(), T, tmp.data(), pool);  // dK [T, hd] = dSᵀ · Q
      for (size_t t = 0; t < T; ++t)
        for (size_t i = 0; i < hd; ++i) dk[t * kd + g * hd + i] += tmp[t * hd + i];
      transpose(doh.data(), T, hd, doht);
      ops.matmul(view(doht, hd, T), PT.data(), T, tmp.data(), pool);  // dV [T, hd] = Pᵀ · dO
      for (size_t t = 0; t < T; ++t)
        for (size_t i = 0; i < hd; ++i) dv[t * kd + g * hd + i] += tmp[t * hd + i];
    }
  }
}

void swiglu_backward(const float* g, const float* u, size_t n, const float* da, float* dg, float* du) {
  for (size_t i = 0; i < n; ++i) {
    const double x = g[i], sig = 1.0 / (1.0 + std::exp(-x)), silu = x * sig;
    dg[i] += static_cast<float>(da[i] * static_cast<double>(u[i]) * sig * (1.0 + x * (1.0 - sig)));
    du[i] += static_cast<float>(da[i] * silu);
  }
}

double cross_entropy(const float* logits, size_t T, size_t vocab, std::span<const uint32_t> targets,
                     uint32_t ignore, float* dlogits) {
  size_t N = 0;
  for (size_t t = 0; t < T; ++t) N += targets[t] != ignore;
  double loss = 0.0;
  for (size_t t = 0; t < T; ++t) {
    const float* lr = logits + t * vocab;
    float* dr = dlogits + t * vocab;
    if (targets[t] == ignore) {
      std::fill(dr, dr + vocab, 0.0f);
      continue;
    }
    const double mx = *std::max_element(lr, lr + vocab);
    double sum = 0.0;
    for (size_t j = 0; j < vocab; ++j) sum += std::exp(lr[j] - mx);
    const double lse = mx + std::log(sum);
    loss += lse - lr[targets[t]];
    for (size_t j = 0; j < vocab; ++j)
      dr[j] = static_cast<float>((std::exp(lr[j] - lse) - (j == targets[t] ? 1.0 : 0.0)) /
                                 static_cast<double>(N));
  }
  return N ? loss / static_cast<double>(N) : 0.0;
}

double kl_to_teacher(const float* logits, const float* teacher, size_t T, size_t vocab,
                     std::span<const uint32_t> targets, uint32_t ignore, double weight, float* dlogits) {
  size_t N = 0;
  for (size_t t = 0; t < T; ++t) N += targets[t] != ignore;
  if (!N) return 0.0;
  const auto lse = [vocab](const float* x) {
    const double mx = *std::max_element(x, x + vocab);
    double s = 0.0;
    for (size_t j = 0; j < vocab; ++j) s += std::exp(x[j] - mx);
    return mx + std::log(s);
  };
  double kl = 0.0;
  for (size_t t = 0; t < T; ++t) {
    if (targets[t] == ignore) continue;
    const float* x = logits + t * vocab;
    const float* y = teacher + t * vocab;
    const double lq = lse(x), lp = lse(y);
    for (size_t j = 0; j < vocab; ++j) {
      const double logp = y[j] - lp, logq = x[j] - lq, p = std::exp(logp);
      kl += p * (logp - logq);
      dlogits[t * vocab + j] += static_cast<float>(weight * (std::exp(logq) - p) / static_cast<double>(N));
    }
  }
  return weight * kl / static_cast<double>(N);
}

}  // namespace cortiq::train
