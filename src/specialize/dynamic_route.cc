#include "specialize/dynamic_route.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>

#include "util/error.h"

namespace cortiq::specialize {

namespace {

/// $name as a finite number, or `def` when unset. Throws Error(InvalidArgument) naming the variable.
double env_number(const char* name, double def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v, &end);
  if (errno || end == v || *end || !std::isfinite(x))
    fail(ErrorKind::InvalidArgument, "{}='{}' is not a number", name, v);
  return x;
}

}  // namespace

DynamicOptions DynamicOptions::from_env() {
  DynamicOptions o;
  o.eon = env_number("CMF_ROUTE_EON", o.eon);
  o.eoff = env_number("CMF_ROUTE_EOFF", o.eoff);
  o.margin = env_number("CMF_ROUTE_MARGIN", o.margin);
  const double p = env_number("CMF_ROUTE_PERIOD", static_cast<double>(o.period));
  if (p < 1 || p != std::floor(p) || p > 1e6)
    fail(ErrorKind::InvalidArgument, "CMF_ROUTE_PERIOD={} is not a count >= 1", p);
  o.period = static_cast<size_t>(p);
  o.check();
  return o;
}

void DynamicOptions::check() const {
  if (period == 0) fail(ErrorKind::InvalidArgument, "dynamic routing: period must be >= 1");
  if (window == 0) fail(ErrorKind::InvalidArgument, "dynamic routing: window must be >= 1");
  if (!(alpha > 0 && alpha <= 1))
    fail(ErrorKind::InvalidArgument, "dynamic routing: alpha {} is not in (0, 1]", alpha);
  for (auto [name, v] : {std::pair{"eon (CMF_ROUTE_EON)", eon}, std::pair{"eoff (CMF_ROUTE_EOFF)", eoff},
                         std::pair{"margin (CMF_ROUTE_MARGIN)", margin}})
    if (!std::isfinite(v) || v < 0)
      fail(ErrorKind::InvalidArgument, "dynamic routing: {} = {} must be >= 0", name, v);
  if (eon > eoff)
    fail(ErrorKind::InvalidArgument, "dynamic routing: EON {} above EOFF {} (no hysteresis band)", eon, eoff);
}

DynamicRouter::DynamicRouter(model::Model& backbone, std::span<const cmf::SkillRecord> records,
                             std::string start, DynamicOptions opt)
    : backbone_(&backbone), opt_(opt), active_(std::move(start)) {
  opt_.check();
  const size_t hidden = backbone.arch().hidden_size;
  bool start_known = active_.empty();
  std::string known;
  for (const auto& rec : records) {
    known += (known.empty() ? "" : ", ") + rec.id;
    if (rec.id == active_) start_known = true;
    if (!rec.selection) continue;
    try {
      descs_.push_back(decode_descriptor(*rec.selection, hidden));
    } catch (const Error& e) {
      fail(e.kind(), "skill '{}': {}", rec.id, e.message());
    }
    ids_.push_back(rec.id);
  }
  if (!start_known)
    fail(ErrorKind::InvalidArgument, "--route-dynamic: unknown start skill '{}' (skills: {})", active_,
         known.empty() ? "none" : known);
  if (ids_.empty())
    fail(ErrorKind::InvalidArgument, "--route-dynamic: no skill of this file has a routing descriptor ({})",
         known.empty() ? "it has no skills" : known);
  layers_ = phi_layers(records);
}

const std::string& DynamicRouter::update(std::span<const uint32_t> seen) {
  if (seen.empty()) return active_;
  if (started_ && seen.size() < last_eval_ + opt_.period) return active_;
  started_ = true;
  last_eval_ = seen.size();
  ++evaluations_;
  const auto win = seen.last(std::min(seen.size(), opt_.window));
  const PhiByLayer now = compute_phis(*backbone_, win, layers_, nullptr);
  for (const auto& [layer, phi] : now) {
    auto it = ema_.find(layer);
    if (it == ema_.end()) {
      ema_[layer] = phi;
      continue;
    }
    for (size_t i = 0; i < phi.size(); ++i)
      it->second[i] = static_cast<float>((1 - opt_.alpha) * it->second[i] + opt_.alpha * phi[i]);
  }
  std::vector<double> e(ids_.size());
  size_t best = 0;
  for (size_t i = 0; i < ids_.size(); ++i) {
    e[i] = routing_energy(descs_[i], ema_.at(descs_[i].phi_layer)).e;
    if (e[i] < e[best]) best = i;
  }
  std::string next = active_;
  double e_next = e[best];
  if (active_.empty()) {
    if (e[best] < opt_.eon) next = ids_[best];
  } else {
    const size_t cur = static_cast<size_t>(std::find(ids_.begin(), ids_.end(), active_) - ids_.begin());
    // an active skill without a descriptor (an explicit --skill) cannot be scored: E = +inf
    const double e_cur = cur < ids_.size() ? e[cur] : INFINITY;
    if (e_cur > opt_.eoff) {
      next = e[best] < opt_.eon ? ids_[best] : std::string();
      if (next.empty()) e_next = e_cur;
    } else if (best != cur && e[best] < e_cur - opt_.margin && e[best] < opt_.eon) {
      next = ids_[best];
    }
  }
  if (next != active_) {
    switches_.push_back({seen.size(), active_, next, e_next});
    active_ = std::move(next);
  }
  return active_;
}

DynamicRoute make_dynamic_route(
    const runtime::LoadedModel& lm, std::shared_ptr<DynamicRouter> router,
    std::function<void(const RouteSwitch&)> on_switch,
    std::function<std::shared_ptr<const runtime::SkillBinding>(const std::string&)> bind) {
  using Binding = std::shared_ptr<const runtime::SkillBinding>;
  auto cache = std::make_shared<std::map<std::string, Binding>>();
  const runtime::LoadedModel* lmp = &lm;
  auto get = [cache, lmp, bind](const std::string& id) -> Binding {
    auto it = cache->find(id);
    if (it != cache->end()) return it->second;
    return (*cache)[id] = bind ? bind(id) : runtime::make_skill_binding(*lmp, id);
  };
  DynamicRoute out;
  out.initial = get(router->active());
  out.reroute = [router, get, on_switch](std::span<const uint32_t> seen) -> Binding {
    const size_t before = router->switches().size();
    const std::string& id = router->update(seen);
    if (on_switch && router->switches().size() > before) on_switch(router->switches().back());
    return get(id);
  };
  return out;
}

}  // namespace cortiq::specialize
