// Elementwise ops against scalar oracles written here (element by element, from the definitions).
#include "kernels/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace cortiq::kernels {
namespace {

std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

TEST(Elementwise, BiasResidualScaleAxpy) {
  const size_t R = 3, C = 37;
  auto x = randv(R * C, 1), b = randv(C, 2), y = randv(R * C, 3);
  auto xb = x;
  add_bias_rows(xb.data(), b.data(), R, C);
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < C; ++c) EXPECT_EQ(xb[r * C + c], x[r * C + c] + b[c]);
  auto ys = y;
  add_inplace(ys.data(), x.data(), R * C);
  for (size_t i = 0; i < R * C; ++i) EXPECT_EQ(ys[i], y[i] + x[i]);
  auto xs = x;
  scale_inplace(xs.data(), R * C, 1.7f);
  for (size_t i = 0; i < R * C; ++i) EXPECT_EQ(xs[i], x[i] * 1.7f);
  auto ya = y;
  axpy_inplace(ya.data(), -0.3f, x.data(), R * C);
  for (size_t i = 0; i < R * C; ++i) {
    const float prod = -0.3f * x[i];  // one rounding for the product, one for the sum
    EXPECT_EQ(ya[i], y[i] + prod);
  }
}

TEST(Elementwise, SplitQGateAndSigmoidGate) {
  const size_t nh = 3, hd = 4;
  std::vector<float> qraw(nh * 2 * hd);
  for (size_t i = 0; i < qraw.size(); ++i) qraw[i] = static_cast<float>(i);
  std::vector<float> q(nh * hd), g(nh * hd);
  split_q_gate(qraw.data(), nh, hd, q.data(), g.data());
  for (size_t h = 0; h < nh; ++h)
    for (size_t d = 0; d < hd; ++d) {
      EXPECT_EQ(q[h * hd + d], static_cast<float>(h * 8 + d));
      EXPECT_EQ(g[h * hd + d], static_cast<float>(h * 8 + 4 + d));
    }
  auto x = randv(50, 4), gate = randv(50, 5, 4.0f);
  auto xg = x;
  sigmoid_gate_inplace(xg.data(), gate.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const long double s = 1.0L / (1.0L + std::exp(-static_cast<long double>(gate[i])));
    EXPECT_NEAR(xg[i], x[i] * static_cast<double>(s), 1e-6 * std::fabs(x[i]) + 1e-30);
  }
  float one = 2.0f, zero = 0.0f;
  sigmoid_gate_inplace(&one, &zero, 1);
  EXPECT_EQ(one, 1.0f);  // sigmoid(0) = 1/2 exactly
}

TEST(Elementwise, ZeroDeadFirstNonFiniteGatherScatter) {
  auto x = randv(10, 6);
  const uint8_t alive[10] = {1, 0, 1, 1, 0, 0, 1, 0, 1, 1};
  auto z = x;
  zero_dead(z.data(), alive, 10);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(z[i], alive[i] ? x[i] : 0.0f);
  EXPECT_EQ(first_non_finite(x.data(), 10), npos);
  x[7] = std::numeric_limits<float>::infinity();
  x[8] = std::nanf("");
  EXPECT_EQ(first_non_finite(x.data(), 10), 7u);
  EXPECT_EQ(first_non_finite(x.data() + 8, 2), 0u);
  EXPECT_EQ(first_non_finite(x.data(), 0), npos);
  const size_t C = 3;
  auto m = randv(5 * C, 7);
  const std::vector<size_t> rows = {4, 0, 2};
  std::vector<float> g(rows.size() * C), back(5 * C, -1.0f);
  gather_rows_f32(m.data(), rows, C, g.data());
  for (size_t j = 0; j < rows.size(); ++j)
    for (size_t c = 0; c < C; ++c) EXPECT_EQ(g[j * C + c], m[rows[j] * C + c]);
  scatter_rows_f32(g.data(), rows, C, back.data());
  for (size_t r = 0; r < 5; ++r)
    for (size_t c = 0; c < C; ++c) EXPECT_EQ(back[r * C + c], (r == 1 || r == 3) ? -1.0f : m[r * C + c]);
}

// Oracle: a full softmax over the candidates in long double, a stable sort by the f32
// probabilities, then the weights as the definition states.
TEST(Elementwise, MoeRouteMatchesADirectOracle) {
  const size_t E = 9;
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 0.1f, 3.0f, -4.0f, 0.5f, 1.0f};
  for (bool norm : {false, true})
    for (size_t k : {1u, 2u, 4u, 20u}) {
      std::vector<size_t> cand = {0, 1, 3, 4, 5, 7, 8};  // 2 and 6 masked off
      const auto c0 = cand;
      MoeRouting r{k, norm, 2.5};
      std::vector<double> p(E);
      std::vector<float> pf(E);
      std::vector<std::pair<size_t, float>> out;
      moe_route(logits.data(), cand, r, p.data(), pf.data(), out);
      long double mx = -INFINITY, sum = 0;
      for (size_t e : c0) mx = std::max<long double>(mx, logits[e]);
      for (size_t e : c0) sum += std::exp(static_cast<long double>(logits[e]) - mx);
      std::vector<std::pair<float, size_t>> order;
      for (size_t e : c0)
        order.emplace_back(static_cast<float>(std::exp(static_cast<long double>(logits[e]) - mx) / sum), e);
      std::stable_sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first > b.first; });
      const size_t kk = std::min(k, c0.size());
      ASSERT_EQ(out.size(), kk);
      long double ks = 0;
      for (size_t i = 0; i < kk; ++i) ks += order[i].first;
      for (size_t i = 0; i < kk; ++i) {
        EXPECT_EQ(out[i].first, order[i].second) << "k " << k << " i " << i;
        const long double w = (norm ? order[i].first / ks : order[i].first) * 2.5L;
        EXPECT_NEAR(out[i].second, static_cast<double>(w), 1e-6 * static_cast<double>(w));
      }
      if (kk >= 3) {  // the tie between experts 1 and 3 goes to the lower id
        EXPECT_EQ(out[0].first, 5u);
        EXPECT_EQ(out[1].first, 1u);
        EXPECT_EQ(out[2].first, 3u);
      }
    }
  std::vector<size_t> none;
  std::vector<double> p(E);
  std::vector<float> pf(E);
  std::vector<std::pair<size_t, float>> out = {{1, 1.0f}};
  moe_route(logits.data(), none, MoeRouting{}, p.data(), pf.data(), out);
  EXPECT_TRUE(out.empty());
}

TEST(Elementwise, SigmoidDot) {
  auto w = randv(100, 8, 0.1f), x = randv(100, 9);
  long double s = 0;
  for (size_t i = 0; i < 100; ++i) s += static_cast<long double>(w[i]) * x[i];
  const double want = static_cast<double>(1.0L / (1.0L + std::exp(-s)));
  EXPECT_NEAR(sigmoid_dot(w.data(), x.data(), 100), want, 1e-7);
  EXPECT_EQ(sigmoid_dot(w.data(), x.data(), 0), 0.5f);
}

TEST(Elementwise, ExpandColsSpreadsACompactRow) {
  const std::vector<float> x = {1.5f, -2.0f, 3.0f};
  const std::vector<uint32_t> idx = {0, 4, 6};
  std::vector<float> y(7, 9.0f);
  expand_cols(x.data(), idx, 7, y.data());
  EXPECT_EQ(y, (std::vector<float>{1.5f, 0, 0, 0, -2.0f, 0, 3.0f}));
}

}  // namespace
}  // namespace cortiq::kernels
