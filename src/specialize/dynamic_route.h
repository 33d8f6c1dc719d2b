// Dynamic routing during generation (`run/serve --route-dynamic`; ENGINE-NOTES §3.12): the skill of a
// sequence is re-chosen between decode steps as its text moves from one domain to another.
//
// Every PERIOD tokens (and at the first call, right after the prompt's prefill) the router takes
// φ of the last `window` tokens of the sequence (prompt + generated) through the BACKBONE at each
// router layer (specialize::compute_phis, the same φ the static router and the descriptors use),
// folds it into an exponential moving average φ ← (1−α)·φ + α·φ_window (the first window starts
// it), and scores every routable skill on it (routing_energy). Hysteresis, ENGINE-NOTES §3.12:
// with no skill active, activate the min-E skill when its E < EON (0.62); with skill A active,
// abandon A when E_A > EOFF (0.74) — for the min-E skill if its E < EON, else the backbone — or
// switch to a rival whose E is lower than E_A by more than MARGIN (0.03) and below EON.
// CMF_ROUTE_EON / CMF_ROUTE_EOFF / CMF_ROUTE_MARGIN / CMF_ROUTE_PERIOD override the four (CLI-NOTES).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cmf/reader.h"
#include "model/model.h"
#include "runtime/session.h"
#include "specialize/routing.h"

namespace cortiq::specialize {

/// The thresholds and the φ window of dynamic routing.
struct DynamicOptions {
  double eon = 0.62;     ///< activate a skill when its E is below this
  double eoff = 0.74;    ///< abandon the active skill when its E is above this
  double margin = 0.03;  ///< switch to a rival whose E is lower by more than this
  size_t period = 8;     ///< tokens between evaluations (>= 1)
  size_t window = 32;    ///< tokens φ is taken over at each evaluation (the sequence's last ones)
  double alpha = 0.5;    ///< EMA weight of the new window's φ, in (0, 1]
  /// The defaults with CMF_ROUTE_EON/EOFF/MARGIN/PERIOD applied. Throws Error(InvalidArgument)
  /// naming the variable for a value that is not a number (PERIOD: not a count >= 1), or when
  /// EON > EOFF.
  static DynamicOptions from_env();
  /// Throws Error(InvalidArgument) naming the field for period or window 0, alpha outside (0, 1],
  /// a negative or non-finite threshold, or eon > eoff.
  void check() const;
};

/// One switch of the active skill.
struct RouteSwitch {
  size_t at = 0;         ///< sequence length (prompt + generated tokens) when it happened
  std::string from, to;  ///< skill ids; "" = the backbone
  double e = 0;          ///< E of `to` on the EMA φ (of `from` when switching to the backbone)
};

/// The per-sequence dynamic router. Not thread-safe: one sequence, one thread (the engine's).
class DynamicRouter {
 public:
  /// `backbone` must run the backbone weights the skills `records` sit on and must not run
  /// elsewhere while update() runs (the caller serialises). `start`: the skill active when
  /// generation starts ("" = the backbone); it must be one of `records` or "". Throws
  /// Error(InvalidArgument) when no record has a routing descriptor, for an unknown `start`
  /// (listing the known ids), and what opt.check() / decode_descriptor throw.
  DynamicRouter(model::Model& backbone, std::span<const cmf::SkillRecord> records, std::string start,
                DynamicOptions opt = {});
  /// Feeds the sequence so far; re-evaluates at the first call and whenever `period` tokens came
  /// since the last evaluation. Returns the skill to run from now on ("" = the backbone). Throws
  /// what compute_phis throws.
  const std::string& update(std::span<const uint32_t> seen);
  const std::string& active() const noexcept { return active_; }
  const std::vector<RouteSwitch>& switches() const noexcept { return switches_; }
  size_t evaluations() const noexcept { return evaluations_; }

 private:
  model::Model* backbone_;
  DynamicOptions opt_;
  std::vector<std::string> ids_;
  std::vector<Descriptor> descs_;
  std::vector<uint32_t> layers_;
  PhiByLayer ema_;
  std::string active_;
  std::vector<RouteSwitch> switches_;
  size_t last_eval_ = 0, evaluations_ = 0;
  bool started_ = false;
};

/// What a sequence under dynamic routing starts with: its first skill binding (Job::skill) and the
/// Job::reroute that drives the router (runtime/engine.h).
struct DynamicRoute {
  std::shared_ptr<const runtime::SkillBinding> initial;
  std::function<std::shared_ptr<const runtime::SkillBinding>(std::span<const uint32_t>)> reroute;
};

/// Wires `router` to one sequence of `lm`: bindings are made once per id with
/// runtime::make_skill_binding (the backbone's for "") and shared, so "no switch" hands back the
/// same pointer. `bind` (optional) replaces make_skill_binding (the server's shared bindings).
/// `on_switch` (optional) is called on the engine thread with each switch. Throws what
/// make_skill_binding throws for the router's start skill.
DynamicRoute make_dynamic_route(
    const runtime::LoadedModel& lm, std::shared_ptr<DynamicRouter> router,
    std::function<void(const RouteSwitch&)> on_switch = {},
    std::function<std::shared_ptr<const runtime::SkillBinding>(const std::string&)> bind = {});

}  // namespace cortiq::specialize
