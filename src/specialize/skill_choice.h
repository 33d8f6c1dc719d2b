// Choosing a loaded file's skill from a prompt (ENGINE-NOTES §3.12; SPECIALIZATION-NOTES §6.4):
// what `run`, `ppl` and `serve` do with `--skill auto`, `--blend auto`, and — for run and serve —
// with no skill flag at all on a file whose skills carry routing descriptors.
//
// φ of the prompt's first ≤ 128 tokens is taken through the BACKBONE (dense), the decision is
// specialize::choose_skill (routing.h): min routing energy E, and — unlike the reference, which
// always takes the min-E skill — the backbone when the router is not confident (calibrated novelty
// > θ, else E_min > τ = 0.30). The chosen skill is bound with runtime::bind_skill / bind_blend.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "specialize/routing.h"

namespace cortiq::specialize {

/// Prompt tokens routing looks at (ENGINE-NOTES §3.12: the first ≤ 128).
inline constexpr size_t kRouteTokens = 128;

/// `--blend auto` temperature: weights softmax(−E/0.4) over the top 2 (ENGINE-NOTES §3.12).
inline constexpr double kBlendAutoTemperature = 0.4;

/// The routing decision for `prompt` (its first kRouteTokens tokens) over lm's skills, φ through
/// `lm.backbone` run dense (lm.model when no skill is bound, else a model made for it). Throws
/// Error(InvalidArgument) for an empty prompt, and what compute_phis / choose_skill throw. A file without
/// routable skills gives a decision with no scores (best = nullopt, chosen "").
RouteDecision route_prompt(runtime::LoadedModel& lm, std::span<const uint32_t> prompt);

/// route_prompt with the backbone model given: `backbone` must run the backbone weights of `r`'s
/// file (the server keeps one for routing, apart from its engine's). Throws as route_prompt.
RouteDecision route_on(model::Model& backbone, const cmf::Reader& r, std::span<const uint32_t> prompt);

/// The `--blend auto` terms of a decision: the two lowest-E skills (one when only one is routable),
/// weights softmax(−E/0.4). Throws Error(InvalidArgument) when no skill is routable.
std::vector<runtime::BlendTerm> auto_blend(const RouteDecision& d);

/// Binds what `opt` leaves to routing, on `lm` as load_model returned it (the backbone bound):
/// `--blend auto` → auto_blend; `--skill auto`, or no --skill/--blend when `route_by_default` and
/// the file has routable skills → the chosen skill, or the backbone when the router is not
/// confident. Returns the line to print on stderr ("routed to skill: X (E = …)", "routed to
/// backbone (novelty: …)", "blend auto: a 0.62, b 0.38"), or "" when nothing was routed. An empty
/// `prompt` routes nothing (""), except with an explicit auto, which throws Error(InvalidArgument).
std::string bind_routed(runtime::LoadedModel& lm, const runtime::LoadOptions& opt,
                        std::span<const uint32_t> prompt, bool route_by_default);

}  // namespace cortiq::specialize
