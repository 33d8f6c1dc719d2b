// Shared fixtures of the attention kernel tests (simd_attention_test.cc, simd_avx2_attention_test.cc):
// a random GQA case (heads, head_dim, key range, f16/f32 KV, softcap, outliers, dead heads) and the
// KV layer view and parameters that attention_ref and the SIMD kernels take. Header-only; included by
// *_test.cc files only.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "util/half.h"

namespace cortiq::kernels::attention_test {

inline constexpr double kU = 1.0 / (1 << 24);  // f32 unit roundoff
inline constexpr float kSentinel = 12345.0f;   // marks output rows that must stay untouched

struct Case {
  size_t n_heads = 14, n_kv = 2, hd = 64, cap = 64, begin = 0, end = 64;
  bool f16 = false;
  float softcap = 0.0f;
  float q_sigma = 1.0f;       // query magnitude: large values make huge score ranges (exp underflow)
  size_t outliers = 0;        // number of K/V elements (and q elements) set to ±64
  std::vector<uint8_t> dead;  // dead query heads
  uint32_t seed = 1;
};

inline std::string name(const Case& c) {
  return "heads=" + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv) + " hd=" + std::to_string(c.hd) +
         " keys=[" + std::to_string(c.begin) + "," + std::to_string(c.end) +
         ") cap=" + std::to_string(c.cap) + (c.f16 ? " f16" : " f32") +
         " softcap=" + std::to_string(c.softcap) + " qsigma=" + std::to_string(c.q_sigma) +
         " outliers=" + std::to_string(c.outliers);
}

struct Data {
  std::vector<float> q, kf, vf;  // kf/vf: the f32 values the kernels see (f16-rounded when f16)
  std::vector<uint16_t> kh, vh;
  std::vector<uint8_t> alive;
  KvLayerView view;
  AttentionParams p;
};

inline Data make(const Case& c) {
  Data d;
  std::mt19937 rng(c.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t kvn = c.n_kv * c.cap * c.hd;
  d.q.resize(c.n_heads * c.hd);
  for (float& x : d.q) x = nd(rng) * c.q_sigma;
  d.kf.resize(kvn);
  d.vf.resize(kvn);
  for (float& x : d.kf) x = nd(rng);
  for (float& x : d.vf) x = nd(rng);
  std::uniform_int_distribution<size_t> pick(0, kvn - 1), pickq(0, d.q.size() - 1);
  for (size_t i = 0; i < c.outliers; ++i) {
    d.kf[pick(rng)] = (i % 2 ? 64.0f : -64.0f);
    d.vf[pick(rng)] = (i % 3 ? 64.0f : -64.0f);
    d.q[pickq(rng)] = (i % 2 ? -64.0f : 64.0f);
  }
  if (c.f16) {
    d.kh.resize(kvn);
    d.vh.resize(kvn);
    for (size_t i = 0; i < kvn; ++i) {
      d.kh[i] = f32_to_f16(d.kf[i]);
      d.vh[i] = f32_to_f16(d.vf[i]);
      d.kf[i] = f16_to_f32(d.kh[i]);
      d.vf[i] = f16_to_f32(d.vh[i]);
    }
    d.view.k = d.kh.data();
    d.view.v = d.vh.data();
  } else {
    d.view.k = d.kf.data();
    d.view.v = d.vf.data();
  }
  d.view.f16 = c.f16;
  d.view.capacity = c.cap;
  d.p.n_heads = c.n_heads;
  d.p.n_kv_heads = c.n_kv;
  d.p.head_dim = c.hd;
  d.p.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  d.p.softcap = c.softcap;
  d.alive.assign(c.n_heads, 1);
  for (uint8_t h : c.dead) d.alive[h] = 0;
  return d;
}

}  // namespace cortiq::kernels::attention_test
