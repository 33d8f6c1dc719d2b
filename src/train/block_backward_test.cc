// The block backward passes (block_backward.h) against central finite differences in double: for
// each block, L = Σ dy ⊙ f(inputs) with f evaluated here in double, and every input's analytic
// gradient compared with (L(x + ε) − L(x − ε)) / 2ε at every element.
#include "train/block_backward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace cortiq::train {
namespace {

std::vector<float> randv(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// Checks grad against central differences of loss(x) over every element of x (perturbed in double).
void check_fd(std::vector<double> x, const std::function<double(const std::vector<double>&)>& loss,
              const std::vector<float>& grad, const char* what, double tol = 2e-5) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  double scale = 1e-12;
  std::vector<double> fd(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double eps = 1e-5 * std::max(1.0, std::abs(x[i])), keep = x[i];
    x[i] = keep + eps;
    const double up = loss(x);
    x[i] = keep - eps;
    const double dn = loss(x);
    x[i] = keep;
    fd[i] = (up - dn) / (2 * eps);
    scale = std::max(scale, std::abs(fd[i]));
  }
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(grad[i], fd[i], tol * scale) << what << "[" << i << "]";
}

std::vector<double> dbl(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

double dot(const std::vector<double>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(BlockBackward, RmsNormMatchesFiniteDifferences) {
  const size_t rows = 3, n = 8;
  const double eps = 1e-6;
  auto x = randv(rows * n, 1), w = randv(n, 2), dy = randv(rows * n, 3);
  const auto f = [&](const std::vector<double>& xs, const std::vector<double>& ws) {
    std::vector<double> y(rows * n);
    for (size_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (size_t i = 0; i < n; ++i) ss += xs[r * n + i] * xs[r * n + i];
      const double inv = 1 / std::sqrt(ss / n + eps);
      for (size_t i = 0; i < n; ++i) y[r * n + i] = xs[r * n + i] * inv * ws[i];
    }
    return dot(y, dy);
  };
  std::vector<float> dx(rows * n, 0.0f), dw(n, 0.0f);
  rmsnorm_backward(x.data(), w.data(), rows, n, eps, dy.data(), dx.data(), dw.data());
  check_fd(
      dbl(x), [&](const std::vector<double>& xs) { return f(xs, dbl(w)); }, dx, "dx");
  check_fd(
      dbl(w), [&](const std::vector<double>& ws) { return f(dbl(x), ws); }, dw, "dw");
}

TEST(BlockBackward, LinearMatchesFiniteDifferences) {
  const size_t T = 3, in = 5, out = 4;
  auto W = randv(out * in, 4), x = randv(T * in, 5), b = randv(out, 6), dy = randv(T * out, 7);
  const auto f = [&](const std::vector<double>& Ws, const std::vector<double>& xs,
                     const std::vector<double>& bs) {
    std::vector<double> y(T * out);
    for (size_t t = 0; t < T; ++t)
      for (size_t o = 0; o < out; ++o) {
        double s = bs[o];
        for (size_t i = 0; i < in; ++i) s += Ws[o * in + i] * xs[t * in + i];
        y[t * out + o] = s;
      }
    return dot(y, dy);
  };
  std::vector<float> dx(T * in, 0.0f), dW(out * in, 0.0f), db(out, 0.0f);
  linear_backward(kernels::Ops(kernels::KernelConfig{kernels::MatmulMode::Exact, kernels::simd_tier()}),
                  kernels::serial_pool(), W.data(), out, in, x.data(), T, dy.data(), dx.data(), dW.data(),
                  db.data());
  check_fd(
      dbl(x), [&](const std::vector<double>& v) { return f(dbl(W), v, dbl(b)); }, dx, "dx");
  check_fd(
      dbl(W), [&](const std::vector<double>& v) { return f(v, dbl(x), dbl(b)); }, dW, "dW");
  check_fd(
      dbl(b), [&](const std::vector<double>& v) { return f(dbl(W), dbl(x), v); }, db, "db");
}

TEST(BlockBackward, RopeIsTheInverseRotation) {
  const size_t nh = 2, hd = 8;
  const auto t = kernels::make_rope(hd, 10000.0, 1.0, std::nullopt, {});
  auto x = randv(nh * hd, 8), dy = randv(nh * hd, 9);
  // L = dy · rope(x) is linear in x: its gradient is rope's transpose applied to dy.
  const auto f = [&](const std::vector<double>& xs) {
    std::vector<float> y(xs.begin(), xs.end());
    kernels::rope(y.data(), nh, hd, t, 7);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * dy[i];
    return s;
  };
  std::vector<float> d = dy;
  rope_backward(d.data(), nh, hd, t, 7);
  // f rounds to f32, so the differences use unit steps (exact for a linear map) via basis vectors.
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> e(x.size(), 0.0);
    e[i] = 1.0;
    EXPECT_NEAR(d[i], f(e), 1e-6) << i;
  }
}

TEST(BlockBackward, AttentionMatchesFiniteDifferences) {
  const size_t T = 4, nh = 4, nkv = 2, hd = 3, qd = nh * hd, kd = nkv * hd;
  const float scale = 0.7f;
  auto q = randv(T * qd, 10), k = randv(T * kd, 11), v = randv(T * kd, 12), dout = randv(T * qd, 13);
  const auto f = [&](const std::vector<double>& qs, const std::vector<double>& ks,
                     const std::vector<double>& vs) {
    std::vector<double> o(T * qd, 0.0);
    for (size_t h = 0; h < nh; ++h) {
      const size_t g = h / (nh / nkv);
      for (size_t t = 0; t < T; ++t) {
        std::vector<double> p(t + 1);
        double mx = -1e300, sum = 0;
        for (size_t j = 0; j <= t; ++j) {
          double s = 0;
          for (size_t i = 0; i < hd; ++i) s += qs[t * qd + h * hd + i] * ks[j * kd + g * hd + i];
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        for (auto& e : p) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j)
          for (size_t i = 0; i < hd; ++i) o[t * qd + h * hd + i] += p[j] / sum * vs[j * kd + g * hd + i];
      }
    }
    return dot(o, dout);
  };
  std::vector<float> dq(T * qd, 0.0f), dk(T * kd, 0.0f), dv(T * kd, 0.0f);
  attention_backward(kernels::Ops(kernels::KernelConfig{kernels::MatmulMode::Exact, kernels::simd_tier()}),
                     kernels::serial_pool(), q.data(), k.data(), v.data(), T, nh, nkv, hd, scale, dout.data(),
                     dq.data(), dk.data(), dv.data());
  check_fd(
      dbl(q), [&](const std::vector<double>& x) { return f(x, dbl(k), dbl(v)); }, dq, "dq");
  check_fd(
      dbl(k), [&](const std::vector<double>& x) { return f(dbl(q), x, dbl(v)); }, dk, "dk");
  check_fd(
      dbl(v), [&](const std::vector<double>& x) { return f(dbl(q), dbl(k), x); }, dv, "dv");
}

TEST(BlockBackward, SwigluMatchesFiniteDifferences) {
  const size_t n = 16;
  auto g = randv(n, 14, 3.0f), u = randv(n, 15), da = randv(n, 16);
  const auto f = [&](const std::vector<double>& gs, const std::vector<double>& us) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += da[i] * gs[i] / (1 + std::exp(-gs[i])) * us[i];
    return s;
  };
  std::vector<float> dg(n, 0.0f), du(n, 0.0f);
  swiglu_backward(g.data(), u.data(), n, da.data(), dg.data(), du.data());
  check_fd(
      dbl(g), [&](const std::vector<double>& x) { return f(x, dbl(u)); }, dg, "dg");
  check_fd(
      dbl(u), [&](const std::vector<double>& x) { return f(dbl(g), x); }, du, "du");
}

TEST(BlockBackward, CrossEntropyMatchesFiniteDifferencesAndSkipsIgnored) {
  const size_t T = 3, V = 7;
  auto lg = randv(T * V, 17, 2.0f);
  const std::vector<uint32_t> tgt = {3, UINT32_MAX, 0};
  const auto f = [&](const std::vector<double>& x) {
    double loss = 0;
    for (size_t t = 0; t < T; ++t) {
      if (tgt[t] == UINT32_MAX) continue;
      double mx = -1e300, s = 0;
      for (size_t j = 0; j < V; ++j) mx = std::max(mx, x[t * V + j]);
      for (size_t j = 0; j < V; ++j) s += std::exp(x[t * V + j] - mx);
      loss += mx + std::log(s) - x[t * V + tgt[t]];
    }
    return loss / 2;
  };
  std::vector<float> d(T * V);
  const double loss = cross_entropy(lg.data(), T, V, tgt, UINT32_MAX, d.data());
  EXPECT_NEAR(loss, f(dbl(lg)), 1e-12);
  check_fd(dbl(lg), f, d, "dlogits");
  for (size_t j = 0; j < V; ++j) EXPECT_EQ(d[V + j], 0.0f);
}

TEST(BlockBackward, KlToTeacherMatchesFiniteDifferences) {
  const size_t T = 3, V = 6;
  auto lg = randv(T * V, 18, 2.0f), te = randv(T * V, 19, 2.0f);
  const std::vector<uint32_t> tgt = {1, 2, UINT32_MAX};
  const auto f = [&](const std::vector<double>& x) {
    double kl = 0;
    for (size_t t = 0; t < 2; ++t) {
      double mq = -1e300, mp = -1e300, sq = 0, sp = 0;
      for (size_t j = 0; j < V; ++j)
        mq = std::max(mq, x[t * V + j]), mp = std::max(mp, double(te[t * V + j]));
      for (size_t j = 0; j < V; ++j) sq += std::exp(x[t * V + j] - mq), sp += std::exp(te[t * V + j] - mp);
      for (size_t j = 0; j < V; ++j) {
        const double lp = te[t * V + j] - mp - std::log(sp), lq = x[t * V + j] - mq - std::log(sq);
        kl += std::exp(lp) * (lp - lq);
      }
    }
    return 0.5 * kl / 2;  // weight 0.5, mean over the 2 counted rows
  };
  std::vector<float> d(T * V, 0.0f);
  EXPECT_NEAR(kl_to_teacher(lg.data(), te.data(), T, V, tgt, UINT32_MAX, 0.5, d.data()), f(dbl(lg)), 1e-12);
  check_fd(dbl(lg), f, d, "dlogits");
  std::vector<float> d0(T * V, 0.0f);  // the teacher itself: KL 0
  EXPECT_NEAR(kl_to_teacher(te.data(), te.data(), T, V, tgt, UINT32_MAX, 1.0, d0.data()), 0.0, 1e-12);
}

}  // namespace
}  // namespace cortiq::train
