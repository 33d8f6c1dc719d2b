// Shared fixtures of the attention kernel tests (simd_attention_test.cc, simd_avx2_attention_test.cc):
// a random GQA case (heads, head_dim, key range, f16/f32 KV, softcap, outliers, dead heads) and the
// KV layer view and parameters that attention_ref and the SIMD kernels take. Header-only; included by
// *_test.cc files only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
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

/// Checks `got` (a SIMD kernel's output for `c`, `d`) against attention_ref row by row: dead heads
/// and nk == 0 give zeros; every other element is finite and within Σ_j w_j·|v_jd|·(E_j + Ē + kRel)
/// of the reference, E_j = (score_steps + 8)·u·scale·Σ_d |q_d·k_jd| (score_steps: the f32 FMA steps
/// of one score in the kernel; each test file derives the bound and kRel for its tier).
inline void check_against_ref(const Case& c, const Data& d, const std::vector<float>& got, double score_steps,
                              double kRel) {
  const size_t hd = c.hd, group = c.n_heads / c.n_kv, nk = c.end - c.begin;
  std::vector<float> ref(c.n_heads * hd, kSentinel);
  attention_ref(d.q.data(), d.view, c.begin, c.end, d.p, d.alive.data(), ref.data());
  size_t checked = 0;
  for (size_t h = 0; h < c.n_heads; ++h) {
    const size_t g = h / group;
    if (!d.alive[h] || nk == 0) {
      for (size_t i = 0; i < hd; ++i) ASSERT_EQ(got[h * hd + i], 0.0f) << "head " << h;
      continue;
    }
    std::vector<double> s(nk), e(nk), w(nk);
    double mx = -INFINITY;
    for (size_t j = 0; j < nk; ++j) {
      double dot = 0.0, absdot = 0.0;
      for (size_t i = 0; i < hd; ++i) {
        const double x = static_cast<double>(d.q[h * hd + i]) * d.kf[(g * c.cap + c.begin + j) * hd + i];
        dot += x;
        absdot += std::fabs(x);
      }
      s[j] = dot * d.p.scale;
      if (c.softcap > 0.0f) s[j] = c.softcap * std::tanh(s[j] / c.softcap);
      e[j] = (score_steps + 8.0) * kU * d.p.scale * absdot;
      mx = std::max(mx, s[j]);
    }
    double sum = 0.0, ebar = 0.0;
    for (size_t j = 0; j < nk; ++j) sum += (w[j] = std::exp(s[j] - mx));
    for (size_t j = 0; j < nk; ++j) ebar += (w[j] /= sum) * e[j];
    for (size_t i = 0; i < hd; ++i) {
      double tol = 0.0;
      for (size_t j = 0; j < nk; ++j)
        tol += w[j] * std::fabs(d.vf[(g * c.cap + c.begin + j) * hd + i]) * (e[j] + ebar + kRel);
      const double r = ref[h * hd + i], x = got[h * hd + i];
      ASSERT_TRUE(std::isfinite(x)) << "head " << h << " dim " << i;
      ASSERT_LE(std::fabs(x - r), tol) << "head " << h << " dim " << i << " ref " << r << " simd " << x;
      ++checked;
    }
  }
  EXPECT_GT(checked + (nk == 0 ? 1 : 0) + c.dead.size(), 0u);
}

}  // namespace cortiq::kernels::attention_test
