#include "specialize/skill_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace cortiq::specialize {

RouteDecision route_on(model::Model& backbone, const cmf::Reader& r, std::span<const uint32_t> prompt) {
  if (prompt.empty()) fail(ErrorKind::InvalidArgument, "routing needs a prompt (it has no tokens)");
  const auto& records = r.skills();
  const std::vector<uint32_t> layers = phi_layers(records);
  if (layers.empty()) return choose_skill(records, {}, r.header().routing);
  const auto toks = prompt.first(std::min(prompt.size(), kRouteTokens));
  const PhiByLayer phis = compute_phis(backbone, toks, layers, nullptr);
  return choose_skill(records, phis, r.header().routing);
}

RouteDecision route_prompt(runtime::LoadedModel& lm, std::span<const uint32_t> prompt) {
  std::unique_ptr<model::Model> own;
  model::Model* m = lm.model.get();
  if (m->weights() != lm.backbone) {
    own = model::Model::create(lm.backbone, lm.model_options);
    m = own.get();
  }
  return route_on(*m, *lm.reader, prompt);
}

std::vector<runtime::BlendTerm> auto_blend(const RouteDecision& d) {
  if (d.scores.empty())
    fail(ErrorKind::InvalidArgument, "--blend auto: no skill of this file has a routing descriptor");
  std::vector<size_t> idx(d.scores.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return d.scores[a].e < d.scores[b].e; });
  idx.resize(std::min<size_t>(2, idx.size()));
  // softmax(−E/T) over the chosen, shifted by the smallest E for range
  const double e0 = d.scores[idx[0]].e;
  std::vector<runtime::BlendTerm> out;
  double sum = 0.0;
  for (size_t i : idx) {
    const double w = std::exp(-(d.scores[i].e - e0) / kBlendAutoTemperature);
    out.push_back({d.scores[i].id, w});
    sum += w;
  }
  for (auto& t : out) t.weight /= sum;
  return out;
}

std::string bind_routed(runtime::LoadedModel& lm, const runtime::LoadOptions& opt,
                        std::span<const uint32_t> prompt, bool route_by_default) {
  const bool explicit_task = !opt.task.empty() && opt.task != "general";
  if (opt.blend == "auto") {
    const RouteDecision d = route_prompt(lm, prompt);
    const auto terms = auto_blend(d);
    runtime::bind_blend(lm, terms, explicit_task);
    std::string s;
    for (const auto& t : terms) {
      double e = 0;
      for (const auto& sc : d.scores)
        if (sc.id == t.id) e = sc.e;
      s += fmt::format("{}{} {:.2f} (E = {:.4f})", s.empty() ? "" : ", ", t.id, t.weight, e);
    }
    return "blend auto: " + s;
  }
  const bool auto_skill = opt.skill == "auto";
  if (!auto_skill && !(opt.skill.empty() && opt.blend.empty() && route_by_default)) return "";
  if (phi_layers(lm.reader->skills()).empty()) {
    if (auto_skill)
      fail(ErrorKind::InvalidArgument, "--skill auto: no skill of this file has a routing descriptor ({})",
           runtime::skill_ids(*lm.reader));
    return "";
  }
  if (prompt.empty()) {
    if (auto_skill) fail(ErrorKind::InvalidArgument, "--skill auto needs a prompt to route on");
    return "";
  }
  const RouteDecision d = route_prompt(lm, prompt);
  if (d.chosen.empty()) {
    runtime::bind_skill(lm, "", explicit_task);
    return fmt::format("routed to backbone (novelty: {})", d.why);
  }
  runtime::bind_skill(lm, d.chosen, explicit_task);
  return fmt::format("routed to skill: {} (E = {:.4f})", d.chosen, d.scores[*d.best].e);
}

}  // namespace cortiq::specialize
