// Scalar reference of causal GQA attention (kernels.h attention_ref): scores and weighted sums in
// double. The parity oracle of simd_attention (AVX-512) and simd_avx2_attention (AVX2), and the
// kernel of the Reference mode and the Scalar tier.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernels.h"
#include "util/half.h"

namespace cortiq::kernels {

void attention_ref(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
                   const AttentionParams& p, const uint8_t* head_alive, float* out, size_t kv_head_begin,
                   size_t kv_head_end) {
  const size_t hd = p.head_dim, group = p.n_heads / p.n_kv_heads, nk = key_end - key_begin;
  thread_local std::vector<double> sc;
  thread_local std::vector<double> acc;
  sc.resize(nk);
  acc.resize(hd);
  auto kval = [&](const void* base, size_t kvh, size_t pos, size_t d) -> float {
    const size_t idx = (kvh * kv.capacity + pos) * hd + d;
    if (kv.f16) return f16_to_f32(static_cast<const uint16_t*>(base)[idx]);
    return static_cast<const float*>(base)[idx];
  };
  const size_t h_end = std::min(kv_head_end, p.n_kv_heads) * group;
  for (size_t h = kv_head_begin * group; h < h_end; ++h) {
    float* o = out + h * hd;
    if ((head_alive && !head_alive[h]) || nk == 0) {
      std::fill(o, o + hd, 0.0f);
      continue;
    }
    const size_t kvh = h / group;
    const float* qh = q + h * hd;
    double mx = -INFINITY;
    for (size_t j = 0; j < nk; ++j) {
      double s = 0.0;
      for (size_t d = 0; d < hd; ++d) s += static_cast<double>(qh[d]) * kval(kv.k, kvh, key_begin + j, d);
      float sf = static_cast<float>(s) * p.scale;
      if (p.softcap > 0.0f)
        sf = static_cast<float>(p.softcap * std::tanh(static_cast<double>(sf) / p.softcap));
      sc[j] = sf;
      mx = std::max(mx, sc[j]);
    }
    double sum = 0.0;
    for (size_t j = 0; j < nk; ++j) {
      sc[j] = std::exp(sc[j] - mx);
      sum += sc[j];
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    for (size_t j = 0; j < nk; ++j) {
      const double wj = sc[j] / sum;
      for (size_t d = 0; d < hd; ++d) acc[d] += wj * kval(kv.v, kvh, key_begin + j, d);
    }
    for (size_t d = 0; d < hd; ++d) o[d] = static_cast<float>(acc[d]);
  }
}

}  // namespace cortiq::kernels
