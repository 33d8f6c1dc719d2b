#include "specialize/routing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "util/base64.h"
#include "util/error.h"
#include "util/half.h"

namespace cortiq::specialize {
namespace {

constexpr uint32_t kMaxRank = 8;  // FORMAT-NOTES §1.14

std::string f16_base64(std::span<const float> v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h = f32_to_f16(v[i]);
    b[2 * i] = uint8_t(h & 0xff);
    b[2 * i + 1] = uint8_t(h >> 8);
  }
  return base64_encode(b);
}

std::vector<float> f16_from_base64(const std::string& text, const char* field) {
  std::vector<uint8_t> b;
  try {
    b = base64_decode(text);
  } catch (const Error& e) {
    fail(ErrorKind::Parse, "selection.{}: {}", field, e.message());
  }
  if (b.size() % 2)
    fail(ErrorKind::Parse, "selection.{}: {} bytes is not a whole number of f16 values", field, b.size());
  std::vector<float> v(b.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = f16_to_f32(uint16_t(b[2 * i] | (b[2 * i + 1] << 8)));
  return v;
}

bool known_metric(const std::string& m) {
  return m == "mse" || m == "mse_unit";
}

// φ as the metric sees it (unit L2 norm for mse_unit).
std::vector<double> metric_phi(const std::string& metric, std::span<const float> phi) {
  std::vector<double> x(phi.begin(), phi.end());
  if (metric == "mse_unit") {
    double n2 = 0;
    for (double v : x) n2 += v * v;
    if (n2 > 0) {
      double inv = 1.0 / std::sqrt(n2);
      for (double& v : x) v *= inv;
    }
  }
  return x;
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

}  // namespace

uint32_t default_phi_layer(uint32_t num_layers) {
  if (num_layers == 0) fail(ErrorKind::InvalidArgument, "default_phi_layer: the model has no layers");
  return std::min(2 * num_layers / 3, num_layers - 1);
}

Descriptor decode_descriptor(const cmf::SelectionDescriptor& sel, size_t hidden) {
  Descriptor d;
  if (!known_metric(sel.metric))
    fail(ErrorKind::Parse, "selection.metric: unknown metric \"{}\" (mse, mse_unit)", sel.metric);
  d.metric = sel.metric;
  d.phi_layer = sel.phi_layer;
  d.mean = f16_from_base64(sel.mean, "mean");
  if (hidden == 0) hidden = d.mean.size();
  if (hidden == 0 || d.mean.size() != hidden)
    fail(ErrorKind::Parse, "selection.mean: {} values, the model's hidden size is {}", d.mean.size(), hidden);
  d.basis = f16_from_base64(sel.basis, "basis");
  if (d.basis.size() % hidden)
    fail(ErrorKind::Parse, "selection.basis: {} values is not a multiple of hidden {}", d.basis.size(),
         hidden);
  uint32_t derived = uint32_t(d.basis.size() / hidden);
  if (sel.rank && *sel.rank != derived)
    fail(ErrorKind::Parse, "selection.rank: {} but the basis holds {} rows of {}", *sel.rank, derived,
         hidden);
  d.rank = derived;
  d.err_mean = sel.err_mean;
  d.err_std = sel.err_std;
  if (sel.holdout) {
    d.holdout = f16_from_base64(*sel.holdout, "holdout");
    if (d.holdout.size() % hidden)
      fail(ErrorKind::Parse, "selection.holdout: {} values is not a multiple of hidden {}", d.holdout.size(),
           hidden);
    if (sel.holdout_n && *sel.holdout_n != d.holdout.size() / hidden)
      fail(ErrorKind::Parse, "selection.holdout_n: {} but the holdout holds {} rows", *sel.holdout_n,
           d.holdout.size() / hidden);
  }
  return d;
}

Energy routing_energy(const Descriptor& d, std::span<const float> phi) {
  const size_t h = d.hidden();
  if (phi.size() != h)
    fail(ErrorKind::InvalidArgument, "routing_energy: φ has {} values, the descriptor {}", phi.size(), h);
  std::vector<double> x = metric_phi(d.metric, phi);
  double phi2 = 0, r2 = 0;
  for (size_t i = 0; i < h; ++i) {
    phi2 += x[i] * x[i];
    x[i] -= d.mean[i];  // x is r from here on
    r2 += x[i] * x[i];
  }
  double proj = 0;
  for (uint32_t k = 0; k < d.rank; ++k) {
    const float* b = d.basis.data() + size_t(k) * h;
    double p = 0;
    for (size_t i = 0; i < h; ++i) p += b[i] * x[i];
    proj += p * p;
  }
  Energy en;
  en.raw = std::max(r2 - proj, 0.0);
  en.e = phi2 > 0 ? en.raw / phi2 : std::numeric_limits<double>::infinity();
  return en;
}

Energy routing_energy(const cmf::SelectionDescriptor& sel, std::span<const float> phi) {
  return routing_energy(decode_descriptor(sel, phi.size()), phi);
}

cmf::SelectionDescriptor fit_descriptor(std::span<const float> phis, size_t n, size_t hidden,
                                        const FitOptions& opt) {
  if (hidden == 0) fail(ErrorKind::InvalidArgument, "fit_descriptor: hidden size 0");
  if (phis.size() != n * hidden)
    fail(ErrorKind::InvalidArgument, "fit_descriptor: {} values for {} samples of {}", phis.size(), n,
         hidden);
  if (!known_metric(opt.metric))
    fail(ErrorKind::InvalidArgument, "fit_descriptor: unknown metric \"{}\" (mse, mse_unit)", opt.metric);
  for (size_t i = 0; i < phis.size(); ++i)
    if (!std::isfinite(phis[i]))
      fail(ErrorKind::InvalidArgument, "fit_descriptor: sample {} has a non-finite φ value", i / hidden);
  size_t n_hold = 0;
  if (opt.holdout) {
    if (n < 3)
      fail(ErrorKind::InvalidArgument, "fit_descriptor: a holdout needs at least 3 samples, got {}", n);
    n_hold = std::clamp<size_t>(n / 5, 1, n - 2);
  }
  const size_t nfit = n - n_hold;
  if (nfit < std::max<uint32_t>(opt.min_samples, 1))
    fail(ErrorKind::InvalidArgument, "fit_descriptor: {} fit samples, at least {} needed", nfit,
         opt.min_samples);

  // Samples as the metric sees them.
  std::vector<double> x(n * hidden);
  for (size_t s = 0; s < n; ++s) {
    std::vector<double> v = metric_phi(opt.metric, phis.subspan(s * hidden, hidden));
    std::copy(v.begin(), v.end(), x.begin() + s * hidden);
  }
  std::vector<double> mu(hidden, 0.0);
  for (size_t s = 0; s < nfit; ++s)
    for (size_t i = 0; i < hidden; ++i) mu[i] += x[s * hidden + i];
  for (double& v : mu) v /= double(nfit);
  std::vector<double> c(nfit * hidden);
  for (size_t s = 0; s < nfit; ++s)
    for (size_t i = 0; i < hidden; ++i) c[s * hidden + i] = x[s * hidden + i] - mu[i];

  const uint32_t want =
      std::min<uint32_t>({opt.rank, uint32_t(std::min<size_t>(nfit - 1, kMaxRank)), kMaxRank});
  std::vector<std::vector<double>> basis;
  std::vector<double> v(hidden), w(hidden), coef(nfit);
  for (uint32_t k = 0; k < want; ++k) {
    std::fill(v.begin(), v.end(), 1.0);
    bool ok = true;
    for (uint32_t it = 0; it < std::max<uint32_t>(opt.iterations, 1); ++it) {
      std::fill(w.begin(), w.end(), 0.0);
      for (size_t s = 0; s < nfit; ++s) {
        const double* cs = &c[s * hidden];
        double a = 0;
        for (size_t i = 0; i < hidden; ++i) a += cs[i] * v[i];
        for (size_t i = 0; i < hidden; ++i) w[i] += a * cs[i];
      }
      for (const auto& b : basis) {  // removes rounding only: the deflated c_i are ⟂ b already
        double a = 0;
        for (size_t i = 0; i < hidden; ++i) a += w[i] * b[i];
        for (size_t i = 0; i < hidden; ++i) w[i] -= a * b[i];
      }
      double nw = 0;
      for (double t : w) nw += t * t;
      nw = std::sqrt(nw);
      if (!(nw > 1e-30)) {
        ok = false;
        break;
      }
      for (size_t i = 0; i < hidden; ++i) v[i] = w[i] / nw;
    }
    if (!ok) break;  // the samples span fewer directions than asked
    basis.push_back(v);
    for (size_t s = 0; s < nfit; ++s) {
      double* cs = &c[s * hidden];
      double a = 0;
      for (size_t i = 0; i < hidden; ++i) a += cs[i] * v[i];
      for (size_t i = 0; i < hidden; ++i) cs[i] -= a * v[i];
    }
  }

  cmf::SelectionDescriptor sel;
  sel.metric = opt.metric;
  sel.phi_layer = opt.phi_layer;
  std::vector<float> tmp(mu.begin(), mu.end());
  sel.mean = f16_base64(tmp);
  tmp.clear();
  for (const auto& b : basis) tmp.insert(tmp.end(), b.begin(), b.end());
  sel.basis = f16_base64(tmp);
  sel.rank = uint32_t(basis.size());
  if (n_hold) {
    sel.holdout = f16_base64(phis.subspan(nfit * hidden, n_hold * hidden));
    sel.holdout_n = uint32_t(n_hold);
  }
  // Error statistics with the descriptor exactly as stored (f16 mean and basis).
  Descriptor d = decode_descriptor(sel, hidden);
  double sum = 0, sum2 = 0;
  for (size_t s = 0; s < nfit; ++s) {
    double raw = routing_energy(d, phis.subspan(s * hidden, hidden)).raw;
    sum += raw;
    sum2 += raw * raw;
  }
  double m = sum / double(nfit);
  sel.err_mean = m;
  sel.err_std = std::max(std::sqrt(std::max(sum2 / double(nfit) - m * m, 0.0)), 1e-4);
  return sel;
}

std::vector<uint32_t> phi_layers(std::span<const cmf::SkillRecord> records) {
  std::set<uint32_t> s;
  for (const auto& r : records)
    if (r.selection) s.insert(r.selection->phi_layer);
  return {s.begin(), s.end()};
}

double calibrated_novelty(std::vector<SkillScore>& scores, std::span<const Descriptor> descs,
                          double temperature) {
  if (scores.empty() || scores.size() != descs.size() || !(temperature > 0))
    fail(ErrorKind::InvalidArgument, "calibrated_novelty: {} scores, {} descriptors, T = {}", scores.size(),
         descs.size(), temperature);
  size_t b1 = 0;
  for (size_t i = 1; i < scores.size(); ++i)
    if (scores[i].e < scores[b1].e) b1 = i;
  double e2 = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < scores.size(); ++i)
    if (i != b1) e2 = std::min(e2, scores[i].e);
  double mn = std::numeric_limits<double>::infinity(), z = 0;
  for (const auto& s : scores) mn = std::min(mn, s.raw);
  for (auto& s : scores) z += (s.prob = std::exp(-(s.raw - mn) / temperature));
  for (auto& s : scores) s.prob /= z;
  const double conf = scores[b1].prob;
  const double margin = 1.0 / (1.0 + scores[b1].e) - (std::isfinite(e2) ? 1.0 / (1.0 + e2) : 0.0);
  const Descriptor& bd = descs[b1];
  const double ood = (bd.err_mean && bd.err_std && *bd.err_std > 0)
                         ? sigmoid((scores[b1].raw - *bd.err_mean) / *bd.err_std)
                         : 0.5;
  return 0.5 * ood + 0.25 / (1.0 + 8.0 * margin) + 0.25 * (1.0 - conf);
}

RouteDecision choose_skill(std::span<const cmf::SkillRecord> records, const PhiByLayer& phis,
                           const std::optional<nlohmann::json>& routing, const RouteOptions& opt) {
  RouteDecision d;
  std::vector<Descriptor> descs;
  for (const auto& r : records) {
    if (!r.selection) continue;
    auto it = phis.find(r.selection->phi_layer);
    if (it == phis.end())
      fail(ErrorKind::InvalidArgument, "choose_skill: no φ for layer {} (skill '{}')", r.selection->phi_layer,
           r.id);
    Descriptor desc;
    try {
      desc = decode_descriptor(*r.selection, it->second.size());
    } catch (const Error& e) {
      fail(e.kind(), "skill '{}': {}", r.id, e.message());
    }
    Energy en = routing_energy(desc, it->second);
    d.scores.push_back({r.id, desc.phi_layer, en.e, en.raw, 0.0});
    descs.push_back(std::move(desc));
  }
  if (d.scores.empty()) {
    d.why = "no skill of this file has a selection descriptor: backbone";
    return d;
  }
  size_t b1 = 0;
  for (size_t i = 1; i < d.scores.size(); ++i)
    if (d.scores[i].e < d.scores[b1].e) b1 = i;
  d.best = b1;
  const double e1 = d.scores[b1].e;
  double e2 = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < d.scores.size(); ++i)
    if (i != b1) e2 = std::min(e2, d.scores[i].e);

  double temp = 0, theta = 0;
  if (routing && routing->is_object() && routing->contains("temperature") &&
      routing->contains("novelty_theta") && (*routing)["temperature"].is_number() &&
      (*routing)["novelty_theta"].is_number()) {
    temp = (*routing)["temperature"].get<double>();
    theta = (*routing)["novelty_theta"].get<double>();
    d.calibrated = temp > 0;
  }
  std::string table;
  for (const auto& s : d.scores) table += fmt::format("{}{}={:.4f}", table.empty() ? "" : ", ", s.id, s.e);
  if (d.calibrated) {
    d.novelty = calibrated_novelty(d.scores, descs, temp);
    const double conf = d.scores[b1].prob;
    const double margin = 1.0 / (1.0 + e1) - (std::isfinite(e2) ? 1.0 / (1.0 + e2) : 0.0);
    d.threshold = theta;
    d.novel = d.novelty > theta;
    d.why = fmt::format("E: {}; best '{}' (p={:.3f}, margin {:.4f}); novelty {:.3f} {} θ {:.3f}", table,
                        d.scores[b1].id, conf, margin, d.novelty, d.novel ? ">" : "<=", theta);
  } else {
    d.threshold = opt.tau;
    d.novel = e1 > opt.tau;
    d.why = fmt::format("E: {}; best '{}' E={:.4f} {} τ {:.2f} (uncalibrated)", table, d.scores[b1].id, e1,
                        d.novel ? ">" : "<=", opt.tau);
  }
  if (d.novel)
    d.why += ": novel prompt, backbone";
  else
    d.chosen = d.scores[b1].id;
  return d;
}

PhiByLayer compute_phis(model::Model& m, std::span<const uint32_t> tokens, std::span<const uint32_t> layers,
                        const model::Variant* variant) {
  const cmf::ModelArch& a = m.arch();
  if (tokens.empty()) fail(ErrorKind::InvalidArgument, "compute_phis: empty prompt");
  if (layers.empty()) fail(ErrorKind::InvalidArgument, "compute_phis: no layer asked");
  uint32_t last = 0;
  for (uint32_t l : layers) {
    if (l >= a.num_layers)
      fail(ErrorKind::InvalidArgument, "compute_phis: phi_layer {} >= num_layers {}", l, a.num_layers);
    last = std::max(last, l);
  }
  if (a.max_position_embeddings && tokens.size() > a.max_position_embeddings)
    fail(ErrorKind::InvalidArgument, "compute_phis: {} tokens, the model's context is {}", tokens.size(),
         a.max_position_embeddings);
  model::KvCache kv(a, tokens.size());
  model::SeqStep step;
  step.tokens = tokens;
  step.kv = &kv;
  step.variant = variant;
  model::Activations act;
  std::span<const model::SeqStep> steps(&step, 1);
  m.begin(steps, act);
  const size_t h = a.hidden_size, t = tokens.size();
  PhiByLayer out;
  for (uint32_t l = 0; l <= last; ++l) {
    m.run_layers(l, l + 1, steps, act);
    if (std::find(layers.begin(), layers.end(), l) == layers.end()) continue;
    std::vector<double> acc(h, 0.0);
    for (size_t r = 0; r < t; ++r)
      for (size_t i = 0; i < h; ++i) acc[i] += act.h[r * h + i];
    std::vector<float> phi(h);
    for (size_t i = 0; i < h; ++i) phi[i] = float(acc[i] / double(t));
    out[l] = std::move(phi);
  }
  return out;
}

std::vector<float> compute_phi(model::Model& m, std::span<const uint32_t> tokens, uint32_t phi_layer,
                               const model::Variant* variant) {
  uint32_t l = phi_layer;
  return std::move(compute_phis(m, tokens, std::span<const uint32_t>(&l, 1), variant)[phi_layer]);
}

}  // namespace cortiq::specialize
