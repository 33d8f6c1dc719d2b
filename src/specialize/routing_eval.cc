#include "specialize/routing_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "cmf/append.h"
#include "cmf/writer.h"
#include "runtime/session.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::specialize {

std::vector<EvalCell> eval_routing(const std::string& model_path, const std::vector<EvalDomain>& domains,
                                   const EvalOptions& opt) {
  runtime::LoadOptions lo;
  lo.threads = opt.threads;
  runtime::LoadedModel lm = runtime::load_model(model_path, lo);
  if (!lm.tokenizer) fail(ErrorKind::InvalidArgument, "skill eval-routing: {} has no tokenizer", model_path);
  const auto& recs = lm.reader->skills();
  const std::vector<uint32_t> layers = phi_layers(recs);
  if (layers.empty())
    fail(ErrorKind::InvalidArgument, "skill eval-routing: {} has no routable skill", model_path);
  const uint32_t longest = *std::max_element(opt.lengths.begin(), opt.lengths.end());
  std::vector<EvalCell> out;
  for (const auto& d : domains) {
    if (std::none_of(recs.begin(), recs.end(), [&](const cmf::SkillRecord& r) { return r.id == d.id; }))
      fail(ErrorKind::InvalidArgument, "skill eval-routing: {} has no skill '{}'", model_path, d.id);
    std::vector<uint32_t> ids = lm.tokenizer->encode(read_file(d.file), false);
    if (ids.size() < size_t(longest) * 4)
      fail(ErrorKind::InvalidArgument, "skill eval-routing: {} has {} tokens, too few for {}-token windows",
           d.file, ids.size(), longest);
    std::mt19937_64 rng(opt.seed);
    for (uint32_t len : opt.lengths) {
      EvalCell c{d.id, len, 0, 0, 0, 0};
      std::uniform_int_distribution<size_t> pick(0, ids.size() - len);
      for (uint32_t tries = 0; c.samples < opt.samples && tries < opt.samples * 100; ++tries) {
        size_t at = pick(rng);
        std::span<const uint32_t> w(ids.data() + at, len);
        if (std::any_of(w.begin(), w.end(), [&](uint32_t t) { return lm.tokenizer->is_special(t); }))
          continue;
        PhiByLayer phis = compute_phis(*lm.model, w, layers);
        RouteDecision r = choose_skill(recs, phis, lm.reader->header().routing, opt.route);
        c.samples++;
        if (r.best && r.scores[*r.best].id == d.id) c.argmin_right++;
        if (r.chosen == d.id) c.chosen_right++;
        if (r.chosen.empty()) c.fallback++;
      }
      out.push_back(c);
    }
  }
  return out;
}

nlohmann::json Calibration::routing() const {
  return {{"temperature", temperature},
          {"novelty_theta", novelty_theta},
          {"samples", samples},
          {"target_fpr", target_fpr}};
}

Calibration calibrate_routing(const std::string& model_path, const std::vector<EvalDomain>& domains,
                              const CalibrateOptions& opt) {
  if (domains.empty()) fail(ErrorKind::InvalidArgument, "skill calibrate: no --domain ID=FILE given");
  if (!(opt.fpr > 0 && opt.fpr < 1))
    fail(ErrorKind::InvalidArgument, "skill calibrate: --fpr {} is not in (0, 1)", opt.fpr);
  if (opt.length == 0 || opt.samples == 0)
    fail(ErrorKind::InvalidArgument, "skill calibrate: --tokens and --samples must be >= 1");
  runtime::LoadOptions lo;
  lo.threads = opt.threads;
  runtime::LoadedModel lm = runtime::load_model(model_path, lo);
  if (!lm.tokenizer) fail(ErrorKind::InvalidArgument, "skill calibrate: {} has no tokenizer", model_path);
  const auto& recs = lm.reader->skills();
  const std::vector<uint32_t> layers = phi_layers(recs);
  if (layers.empty())
    fail(ErrorKind::InvalidArgument, "skill calibrate: {} has no routable skill", model_path);
  // scores of each window: routable skills in record order (choose_skill's order), raw and E
  std::vector<std::vector<SkillScore>> rows;
  std::vector<size_t> truth;
  for (const auto& d : domains) {
    size_t k = 0, idx = SIZE_MAX;
    for (const auto& r : recs)
      if (r.selection) {
        if (r.id == d.id) idx = k;
        ++k;
      }
    if (idx == SIZE_MAX)
      fail(ErrorKind::InvalidArgument, "skill calibrate: --domain {}: {} has no routable skill '{}'", d.id,
           model_path, d.id);
    std::vector<uint32_t> ids = lm.tokenizer->encode(read_file(d.file), false);
    if (ids.size() < size_t(opt.length) * 4)
      fail(ErrorKind::InvalidArgument,
           "skill calibrate: --domain {}: {} has {} tokens, too few for {}-token windows", d.id, d.file,
           ids.size(), opt.length);
    std::mt19937_64 rng(opt.seed);
    std::uniform_int_distribution<size_t> pick(0, ids.size() - opt.length);
    uint32_t got = 0;
    for (uint32_t tries = 0; got < opt.samples && tries < opt.samples * 100; ++tries) {
      std::span<const uint32_t> w(ids.data() + pick(rng), opt.length);
      if (std::any_of(w.begin(), w.end(), [&](uint32_t t) { return lm.tokenizer->is_special(t); })) continue;
      RouteDecision r = choose_skill(recs, compute_phis(*lm.model, w, layers));
      rows.push_back(std::move(r.scores));
      truth.push_back(idx);
      ++got;
    }
  }
  // T: grid 1e-3·1.15^k ≤ 1e6, mean NLL of the true skill under softmax(−raw/T)
  auto nll_at = [&](double t) {
    double sum = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      double mn = std::numeric_limits<double>::infinity(), z = 0;
      for (const auto& s : rows[i]) mn = std::min(mn, s.raw);
      for (const auto& s : rows[i]) z += std::exp(-(s.raw - mn) / t);
      sum += (rows[i][truth[i]].raw - mn) / t + std::log(z);
    }
    return sum / static_cast<double>(rows.size());
  };
  Calibration c;
  c.samples = static_cast<uint32_t>(rows.size());
  c.target_fpr = opt.fpr;
  c.nll = std::numeric_limits<double>::infinity();
  for (double t = 1e-3; t <= 1e6; t *= 1.15)
    if (const double v = nll_at(t); v < c.nll) {
      c.nll = v;
      c.temperature = t;
    }
  // θ: the (1−fpr) quantile of the in-scope novelty scores at T (choose_skill computes them)
  std::vector<double> nov;
  // novelty from the scores with choose_skill's own formula (calibrated_novelty)
  std::vector<Descriptor> descs;
  for (const auto& r : recs)
    if (r.selection) descs.push_back(decode_descriptor(*r.selection, lm.model->arch().hidden_size));
  for (size_t i = 0; i < rows.size(); ++i) {
    nov.push_back(calibrated_novelty(rows[i], descs, c.temperature));
    size_t b = 0;
    for (size_t k = 1; k < rows[i].size(); ++k)
      if (rows[i][k].e < rows[i][b].e) b = k;
    if (b == truth[i]) ++c.argmin_right;
  }
  std::vector<double> sorted = nov;
  std::sort(sorted.begin(), sorted.end());
  const size_t at = static_cast<size_t>(std::lround(double(sorted.size() - 1) * (1.0 - opt.fpr)));
  c.novelty_theta = std::min(sorted[at] + 1e-4, 0.999);
  for (size_t i = 0; i < rows.size(); ++i) {
    size_t b = 0;
    for (size_t k = 1; k < rows[i].size(); ++k)
      if (rows[i][k].e < rows[i][b].e) b = k;
    if (b == truth[i] && nov[i] <= c.novelty_theta) ++c.chosen_right;
  }
  return c;
}

void write_routing(const std::string& input, const nlohmann::json& routing, const std::string& output) {
  cmf::Reader r = cmf::Reader::open(input);
  if (r.is_skill_file())
    fail(ErrorKind::Unsupported, "skill calibrate: {} is a SKILL_FILE; calibrate the file it is applied to",
         input);
  cmf::Header h = r.header();
  h.routing = routing;
  if (output.empty()) {
    cmf::append_in_place(input, h, {}, {});
    return;
  }
  cmf::Writer w(output);
  if (!r.masks_bytes().empty()) w.set_masks_raw({r.masks_bytes().begin(), r.masks_bytes().end()});
  if (!r.vocab().empty()) w.set_vocab({r.vocab().begin(), r.vocab().end()});
  for (const auto& t : r.tensors()) w.add_tensor(t.name, t.dtype, t.shape, r.payload(t));
  w.finish(std::move(h));
}

}  // namespace cortiq::specialize
