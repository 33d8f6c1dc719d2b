#include "specialize/routing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "model/test_support.h"
#include "util/error.h"

namespace cortiq::specialize {
namespace {

std::vector<float> unit(std::vector<float> v) {
  double n = 0;
  for (float x : v) n += double(x) * x;
  for (float& x : v) x = float(x / std::sqrt(n));
  return v;
}

// Orthonormal rows by Gram–Schmidt of seeded Gaussian vectors.
std::vector<std::vector<float>> orthonormal(size_t k, size_t h, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> out;
  while (out.size() < k) {
    std::vector<double> v(h);
    for (double& x : v) x = nd(g);
    for (const auto& b : out) {
      double a = 0;
      for (size_t i = 0; i < h; ++i) a += v[i] * b[i];
      for (size_t i = 0; i < h; ++i) v[i] -= a * b[i];
    }
    out.push_back(unit(std::vector<float>(v.begin(), v.end())));
  }
  return out;
}

double absdot(const float* a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < b.size(); ++i) s += double(a[i]) * b[i];
  return std::fabs(s);
}

// Closed form: samples μ ± 3u₁, μ ± 2u₂, μ ± u₃ have scatter eigenvectors u₁, u₂, u₃ (eigenvalues
// 18, 8, 2), mean μ.
TEST(Routing, PowerIterationFindsKnownAxes) {
  const size_t h = 16;
  auto u = orthonormal(3, h, 7);
  std::vector<float> mu(h);
  for (size_t i = 0; i < h; ++i) mu[i] = 0.5f + 0.1f * float(i);
  std::vector<float> phis;
  const float amp[3] = {3, 2, 1};
  for (int k = 0; k < 3; ++k)
    for (float s : {1.f, -1.f})
      for (size_t i = 0; i < h; ++i) phis.push_back(mu[i] + s * amp[k] * u[k][i]);
  FitOptions o;
  o.rank = 3;
  o.phi_layer = 4;
  cmf::SelectionDescriptor sel = fit_descriptor(phis, 6, h, o);
  EXPECT_EQ(sel.metric, "mse");
  EXPECT_EQ(sel.phi_layer, 4u);
  ASSERT_EQ(sel.rank, 3u);
  Descriptor d = decode_descriptor(sel, h);
  for (size_t i = 0; i < h; ++i) EXPECT_NEAR(d.mean[i], mu[i], 2e-3);
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(absdot(&d.basis[k * h], u[k]), 1.0, 2e-3) << k;
  // Rank is min(requested, N−1, 8): 2 samples → 1.
  o.rank = 8;
  EXPECT_EQ(fit_descriptor(std::span<const float>(phis).first(2 * h), 2, h, o).rank, 1u);
  // Default request (2).
  EXPECT_EQ(fit_descriptor(phis, 6, h, FitOptions{}).rank, 2u);
}

// numpy.linalg.eigh of a random centered scatter (tests/oracles/routing_oracle.py).
TEST(Routing, PowerIterationMatchesNumpyEigh) {
  std::ifstream f(std::string(CORTIQ_SOURCE_DIR) + "/tests/golden/routing/eig.json");
  ASSERT_TRUE(f) << "tests/golden/routing/eig.json missing";
  auto g = nlohmann::json::parse(f);
  const size_t n = g["n"], h = g["hidden"];
  std::vector<float> phis = g["phis"].get<std::vector<float>>();
  FitOptions o;
  o.rank = 4;
  Descriptor d = decode_descriptor(fit_descriptor(phis, n, h, o), h);
  ASSERT_EQ(d.rank, 4u);
  for (size_t i = 0; i < h; ++i) EXPECT_NEAR(d.mean[i], g["mean"][i].get<double>(), 5e-3);
  for (size_t k = 0; k < 4; ++k) {
    auto ev = g["eigvecs"][k].get<std::vector<float>>();
    EXPECT_NEAR(absdot(&d.basis[k * h], ev), 1.0, 2e-3) << "eigenvector " << k;
  }
  // Rows orthonormal to f16 precision.
  for (size_t a = 0; a < 4; ++a)
    for (size_t b = 0; b < 4; ++b) {
      double s = 0;
      for (size_t i = 0; i < h; ++i) s += double(d.basis[a * h + i]) * d.basis[b * h + i];
      EXPECT_NEAR(s, a == b ? 1.0 : 0.0, 2e-3);
    }
}

TEST(Routing, EnergyInSpanIsZeroAndOrthogonalIsFull) {
  const size_t h = 32;
  auto u = orthonormal(4, h, 11);
  std::vector<float> mu(h, 0.25f);
  std::vector<float> phis;
  for (int k = 0; k < 2; ++k)
    for (float s : {2.f, -2.f})
      for (size_t i = 0; i < h; ++i) phis.push_back(mu[i] + s * (k + 1) * u[k][i]);
  FitOptions o;
  o.rank = 2;
  cmf::SelectionDescriptor sel = fit_descriptor(phis, 4, h, o);
  Descriptor d = decode_descriptor(sel, h);
  // φ in μ + span(B): E = 0.
  std::vector<float> in(h), out(h);
  for (size_t i = 0; i < h; ++i) in[i] = d.mean[i] + 0.7f * u[0][i] - 1.3f * u[1][i];
  EXPECT_NEAR(routing_energy(d, in).e, 0.0, 1e-5);
  // r ⟂ span(B): E = ‖r‖² / ‖φ‖².
  double r2 = 0, p2 = 0;
  for (size_t i = 0; i < h; ++i) {
    float r = 1.5f * u[2][i] + 0.5f * u[3][i];
    out[i] = d.mean[i] + r;
    r2 += double(r) * r;
    p2 += double(out[i]) * out[i];
  }
  Energy en = routing_energy(d, out);
  EXPECT_NEAR(en.raw, r2, 1e-3 * r2);
  EXPECT_NEAR(en.e, r2 / p2, 1e-3 * r2 / p2);
  EXPECT_NEAR(r2, 2.5, 1e-4);
  // The selection overload decodes the same way.
  EXPECT_DOUBLE_EQ(routing_energy(sel, out).e, en.e);
  // Fit samples are in span: error statistics ≈ 0 (std floored at 1e-4).
  EXPECT_NEAR(*sel.err_mean, 0.0, 1e-3);
  EXPECT_GE(*sel.err_std, 1e-4);
  EXPECT_THROW(routing_energy(d, std::vector<float>(h - 1)), Error);
}

TEST(Routing, MseUnitNormalisesFirst) {
  const size_t h = 8;
  std::vector<float> phis;
  std::mt19937 g(3);
  std::normal_distribution<float> nd;
  for (int s = 0; s < 5; ++s)
    for (size_t i = 0; i < h; ++i) phis.push_back(1.0f + 0.2f * nd(g));
  FitOptions o;
  o.metric = "mse_unit";
  cmf::SelectionDescriptor sel = fit_descriptor(phis, 5, h, o);
  Descriptor d = decode_descriptor(sel, h);
  std::vector<float> a(phis.begin(), phis.begin() + h), b = a;
  for (float& x : b) x *= 37.0f;  // same direction: same energy under mse_unit
  EXPECT_NEAR(routing_energy(d, a).e, routing_energy(d, b).e,
              1e-6 * routing_energy(d, a).e);  // f32 scaling rounds
  double n2 = 0;
  for (float x : d.mean) n2 += double(x) * x;
  EXPECT_NEAR(n2, 1.0, 0.05);  // the mean of unit vectors of similar direction
}

TEST(Routing, FitRejectsBadInput) {
  std::vector<float> one(8, 1.0f);
  EXPECT_THROW(fit_descriptor(one, 1, 8, FitOptions{}), Error);  // 1 sample < 2
  EXPECT_THROW(fit_descriptor(one, 2, 8, FitOptions{}), Error);  // size mismatch
  FitOptions bad;
  bad.metric = "cosine";
  std::vector<float> two(16, 1.0f);
  two[3] = 2;
  EXPECT_THROW(fit_descriptor(two, 2, 8, bad), Error);
  two[5] = std::nanf("");
  EXPECT_THROW(fit_descriptor(two, 2, 8, FitOptions{}), Error);
  FitOptions hold;
  hold.holdout = true;
  EXPECT_THROW(fit_descriptor(std::vector<float>(16, 1.f), 2, 8, hold), Error);
}

TEST(Routing, HoldoutKeepsLastFifth) {
  const size_t h = 4, n = 10;
  std::vector<float> phis(n * h);
  for (size_t i = 0; i < phis.size(); ++i) phis[i] = float((i * 7) % 11) * 0.25f;
  FitOptions o;
  o.holdout = true;
  cmf::SelectionDescriptor sel = fit_descriptor(phis, n, h, o);
  ASSERT_EQ(sel.holdout_n, 2u);
  Descriptor d = decode_descriptor(sel, h);
  ASSERT_EQ(d.holdout.size(), 2 * h);
  for (size_t i = 0; i < 2 * h; ++i) EXPECT_EQ(d.holdout[i], phis[8 * h + i]);  // quarters are exact in f16
  // The mean is over the first 8 only.
  for (size_t i = 0; i < h; ++i) {
    double m = 0;
    for (size_t s = 0; s < 8; ++s) m += phis[s * h + i];
    EXPECT_NEAR(d.mean[i], m / 8, 2e-3);
  }
}

TEST(Routing, DecodeRejectsInconsistentDescriptors) {
  std::vector<float> phis = {1, 2, 3, 4, 2, 2, 2, 2, 0, 1, 0, 1};
  cmf::SelectionDescriptor sel = fit_descriptor(phis, 3, 4, FitOptions{});
  EXPECT_THROW(decode_descriptor(sel, 5), Error);  // wrong hidden
  auto s2 = sel;
  s2.rank = 7;
  EXPECT_THROW(decode_descriptor(s2, 4), Error);
  s2 = sel;
  s2.basis = "!!!";
  EXPECT_THROW(decode_descriptor(s2, 4), Error);
  s2 = sel;
  s2.metric = "l1";
  EXPECT_THROW(decode_descriptor(s2, 4), Error);
  s2 = sel;
  s2.rank.reset();  // derived from the basis (decision 7)
  EXPECT_EQ(decode_descriptor(s2, 4).rank, *sel.rank);
}

// Three synthetic clusters in different subspaces; each skill fitted on its cluster.
struct Clusters {
  size_t h = 24;
  std::vector<cmf::SkillRecord> recs;
  std::vector<std::vector<float>> centers;
  std::vector<std::vector<std::vector<float>>> axes;
  std::mt19937 g{42};
  std::vector<float> sample(size_t c, float spread) {
    std::normal_distribution<float> nd;
    std::vector<float> v = centers[c];
    for (const auto& a : axes[c]) {
      float t = spread * nd(g);
      for (size_t i = 0; i < h; ++i) v[i] += t * a[i];
    }
    for (size_t i = 0; i < h; ++i) v[i] += 0.01f * nd(g);
    return v;
  }
  Clusters() {
    auto u = orthonormal(9, h, 5);
    for (size_t c = 0; c < 3; ++c) {
      std::vector<float> ctr(h, 1.0f);
      for (size_t i = 0; i < h; ++i) ctr[i] += 4.0f * u[c][i];
      centers.push_back(ctr);
      axes.push_back({u[3 + 2 * c], u[4 + 2 * c]});
    }
    const char* ids[3] = {"code", "scripture", "dictionary"};
    for (size_t c = 0; c < 3; ++c) {
      std::vector<float> phis;
      for (int s = 0; s < 12; ++s) {
        auto v = sample(c, 1.0f);
        phis.insert(phis.end(), v.begin(), v.end());
      }
      FitOptions o;
      o.rank = 2;
      o.phi_layer = 2;
      cmf::SkillRecord r;
      r.id = ids[c];
      r.selection = fit_descriptor(phis, 12, h, o);
      recs.push_back(r);
    }
    cmf::SkillRecord plain;  // no selection: never routed to
    plain.id = "manual";
    recs.push_back(plain);
  }
};

TEST(Routing, ChooseSkillOnClusters) {
  Clusters cl;
  EXPECT_EQ(phi_layers(cl.recs), std::vector<uint32_t>{2});
  for (size_t c = 0; c < 3; ++c)
    for (int t = 0; t < 10; ++t) {
      PhiByLayer phis{{2, cl.sample(c, 1.0f)}};
      RouteDecision d = choose_skill(cl.recs, phis);
      ASSERT_EQ(d.scores.size(), 3u);
      ASSERT_TRUE(d.best);
      EXPECT_EQ(d.chosen, cl.recs[c].id) << d.why;
      EXPECT_FALSE(d.novel);
      EXPECT_FALSE(d.calibrated);
      EXPECT_DOUBLE_EQ(d.threshold, 0.30);
      EXPECT_NE(d.why.find(cl.recs[c].id), std::string::npos);
    }
  // Far from every cluster (a direction none spans, large): E_min > τ → backbone.
  auto u = orthonormal(12, cl.h, 5);
  std::vector<float> far(cl.h);
  for (size_t i = 0; i < cl.h; ++i) far[i] = 20.0f * u[10][i] - 15.0f * u[11][i];
  RouteDecision d = choose_skill(cl.recs, PhiByLayer{{2, far}});
  EXPECT_TRUE(d.novel) << d.why;
  EXPECT_EQ(d.chosen, "");
  EXPECT_GT(d.scores[*d.best].e, 0.30);
  EXPECT_NE(d.why.find("backbone"), std::string::npos);
  // Missing φ layer and no routable skill.
  EXPECT_THROW(choose_skill(cl.recs, PhiByLayer{{1, far}}), Error);
  RouteDecision none = choose_skill(std::span(cl.recs).subspan(3), PhiByLayer{});
  EXPECT_FALSE(none.best);
  EXPECT_EQ(none.chosen, "");
}

TEST(Routing, CalibratedNoveltyFollowsTheFormula) {
  Clusters cl;
  nlohmann::json routing = {{"temperature", 0.5}, {"novelty_theta", 0.6}};
  PhiByLayer phis{{2, cl.sample(1, 1.0f)}};
  RouteDecision d = choose_skill(cl.recs, phis, routing);
  ASSERT_TRUE(d.calibrated);
  ASSERT_TRUE(d.best);
  EXPECT_EQ(d.scores[*d.best].id, "scripture");
  // Recompute the ENGINE-NOTES §3.12 formula from the scores.
  std::vector<double> e, raw;
  for (const auto& s : d.scores) e.push_back(s.e), raw.push_back(s.raw);
  size_t b = *d.best;
  double z = 0;
  for (double r : raw) z += std::exp(-r / 0.5);
  double conf = std::exp(-raw[b] / 0.5) / z;
  double e2 = 1e300;
  for (size_t i = 0; i < e.size(); ++i)
    if (i != b) e2 = std::min(e2, e[i]);
  double margin = 1 / (1 + e[b]) - 1 / (1 + e2);
  Descriptor bd = decode_descriptor(*cl.recs[1].selection);
  double ood = 1 / (1 + std::exp(-(raw[b] - *bd.err_mean) / *bd.err_std));
  double nov = 0.5 * ood + 0.25 / (1 + 8 * margin) + 0.25 * (1 - conf);
  EXPECT_NEAR(d.novelty, nov, 1e-9);
  EXPECT_NEAR(d.scores[b].prob, conf, 1e-9);
  EXPECT_EQ(d.novel, nov > 0.6);
  EXPECT_EQ(d.chosen, d.novel ? "" : "scripture");
  // calibrated_novelty (what `skill calibrate` sets θ from) is the same number
  std::vector<SkillScore> sc = d.scores;
  std::vector<Descriptor> ds;
  for (const auto& r : cl.recs)
    if (r.selection) ds.push_back(decode_descriptor(*r.selection));
  EXPECT_NEAR(calibrated_novelty(sc, ds, 0.5), nov, 1e-9);
  EXPECT_THROW(calibrated_novelty(sc, ds, 0.0), Error);
  ds.pop_back();
  EXPECT_THROW(calibrated_novelty(sc, ds, 0.5), Error);
}

TEST(Routing, DefaultPhiLayer) {
  EXPECT_EQ(default_phi_layer(6), 4u);
  EXPECT_EQ(default_phi_layer(24), 16u);
  EXPECT_EQ(default_phi_layer(1), 0u);
  EXPECT_THROW(default_phi_layer(0), Error);
}

// φ through the model equals the mean of the residual after layer L that forward_batch's
// layer_output tap sees, and does not depend on any later layer.
TEST(Routing, ComputePhiMatchesTheLayerTap) {
  auto c = model::test::load_case("llama");
  ASSERT_TRUE(c);
  auto m = model::Model::bind(c->arch, c->src);
  const uint32_t L = 0;
  const size_t h = c->arch.hidden_size, t = c->prompt.size();
  std::vector<float> tap;
  model::Taps taps;
  taps.layer_output = [&](size_t layer, std::span<const float> hid, size_t rows) {
    if (layer != L) return;
    tap.assign(h, 0.0f);
    std::vector<double> acc(h, 0.0);
    for (size_t r = 0; r < rows; ++r)
      for (size_t i = 0; i < h; ++i) acc[i] += hid[r * h + i];
    for (size_t i = 0; i < h; ++i) tap[i] = float(acc[i] / double(rows));
  };
  model::KvCache kv(c->arch, t);
  model::SeqStep st;
  st.tokens = c->prompt;
  st.kv = &kv;
  m->forward_batch(std::span(&st, 1), &taps);
  std::vector<float> phi = compute_phi(*m, c->prompt, L);
  ASSERT_EQ(phi.size(), h);
  for (size_t i = 0; i < h; ++i) EXPECT_EQ(phi[i], tap[i]) << i;
  // A change to the last layer's FFN leaves φ after layer 0 alone; one to layer 0 changes it.
  ASSERT_GE(c->arch.num_layers, 2u);
  for (uint32_t changed : {c->arch.num_layers - 1, 0u}) {
    model::MemoryTensorSource ov;
    std::string name = "model.layers." + std::to_string(changed) + ".mlp.down_proj.weight";
    auto v = c->src.find(name);
    ASSERT_TRUE(v);
    std::vector<float> w(v->shape[0] * v->shape[1], 0.01f);
    ov.add_f32(name, v->shape, w);
    auto m2 = model::Model::create(model::Weights::with_overrides(m->weights(), ov));
    std::vector<float> phi2 = compute_phi(*m2, c->prompt, L);
    if (changed == 0)
      EXPECT_NE(phi2, phi);
    else
      EXPECT_EQ(phi2, phi);
  }
  uint32_t bad = c->arch.num_layers;
  EXPECT_THROW(compute_phi(*m, c->prompt, bad), Error);
  EXPECT_THROW(compute_phi(*m, std::vector<uint32_t>{}, L), Error);
}

}  // namespace
}  // namespace cortiq::specialize
