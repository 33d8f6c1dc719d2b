// The skill router: fitting a skill's selection descriptor from prompts, the routing energy of a
// prompt against it, and the choice among a file's skills with the backbone fallback.
//
// Sources: FORMAT-NOTES §1.14 (descriptor fields, the fit) and decision 7 (E normalised by ‖φ‖²);
// ENGINE-NOTES §3.12 (energy, calibrated novelty, the uncalibrated threshold τ = 0.30);
// SPECIALIZATION-NOTES §6 (φ, fit, error statistics, holdout).
//
// φ (the descriptor input) = mean over a prompt's positions of the residual stream AFTER decoder
// layer `phi_layer` (layers 0…phi_layer run, 0-based), computed through the model the caller
// gives (the backbone at routing time). The default phi_layer is ⌊2·num_layers/3⌋ (REF; for a
// 6-layer model: 4, i.e. after the fifth layer). Metric "mse" uses φ as is; "mse_unit" scales φ to
// unit L2 norm before everything (fit and query).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cmf/header.h"
#include "model/model.h"

namespace cortiq::specialize {

/// REF's default router layer: ⌊2·num_layers/3⌋ (0-based; φ is the state after it), capped at
/// num_layers − 1. Throws Error(InvalidArgument) for num_layers == 0.
uint32_t default_phi_layer(uint32_t num_layers);

/// A SelectionDescriptor with its base64 f16 arrays decoded to f32.
struct Descriptor {
  std::string metric = "mse";  ///< "mse" | "mse_unit"
  uint32_t phi_layer = 0;
  uint32_t rank = 0;
  std::vector<float> mean;                  ///< [hidden]
  std::vector<float> basis;                 ///< [rank, hidden], rows orthonormal (to f16 precision)
  std::optional<double> err_mean, err_std;  ///< raw residual statistics over the fit samples
  std::vector<float> holdout;               ///< [holdout_n, hidden] (empty when none)
  size_t hidden() const noexcept { return mean.size(); }
};

/// Decodes `sel`. `hidden` = the model's hidden size (0 = take it from the mean). rank = sel.rank,
/// else basis length / hidden (decision 7). Throws Error(Parse) naming the field for bad base64,
/// a length that is not a multiple of 2·hidden, a mean of the wrong length, a rank disagreeing with
/// the basis, an unknown metric, or holdout_n disagreeing with the holdout array.
Descriptor decode_descriptor(const cmf::SelectionDescriptor& sel, size_t hidden = 0);

/// Fitting options (`skill add --rank --phi-layer --metric --holdout`).
struct FitOptions {
  uint32_t rank = 2;           ///< requested rank; used = min(rank, N−1, 8) (FORMAT-NOTES §1.14)
  uint32_t phi_layer = 0;      ///< stored in the descriptor (the φ rows must come from this layer)
  std::string metric = "mse";  ///< "mse" | "mse_unit"
  uint32_t iterations = 50;    ///< power-iteration steps per basis vector (REF: 50)
  /// Keep the last clamp(N/5, 1, N−2) samples out of the fit and store them as `holdout`
  /// (SPECIALIZATION-NOTES §6.3). Needs N >= 3.
  bool holdout = false;
  uint32_t min_samples = 2;  ///< fewer fit samples than this → Error(InvalidArgument)
};

/// Fits a descriptor to φ samples `phis` [n, hidden] (row-major) — FORMAT-NOTES §1.14 /
/// SPECIALIZATION-NOTES §6.2: μ = mean φ_i; c_i = φ_i − μ; for k < rank: v ← all-ones,
/// `iterations` × v ← normalize(Σ_i (c_i·v) c_i) (re-orthogonalised against earlier rows, which
/// only removes rounding), store v, deflate c_i ← c_i − (c_i·v) v. A direction whose deflated
/// samples are all zero ends the basis early (rank = the vectors found). err_mean / err_std: mean
/// and std (floor 1e-4) of the RAW residual ‖r − BBᵀr‖² (r = φ − μ, with the f16-rounded μ and B
/// as stored) over the fit samples — what ENGINE-NOTES §3.12's novelty standardises.
/// Throws Error(InvalidArgument) for hidden == 0, phis.size() != n·hidden, fewer than
/// opt.min_samples fit samples (or < 3 samples with holdout), an unknown metric, or a non-finite φ.
cmf::SelectionDescriptor fit_descriptor(std::span<const float> phis, size_t n, size_t hidden,
                                        const FitOptions& opt);

/// The routing energy and its numerator for one φ.
struct Energy {
  double e = 0;  ///< E = raw / ‖φ‖² (decision 7), in [0, 1] up to rounding for metric mse_unit
  double raw = 0;  ///< (‖r‖² − Σ_k (b_k·r)²)₊, r = φ − mean (φ unit-normalised first for mse_unit)
};
/// ENGINE-NOTES §3.12. `phi` [hidden] must be taken after d.phi_layer. Throws
/// Error(InvalidArgument) when phi.size() != d.hidden(); a zero φ gives e = +inf.
Energy routing_energy(const Descriptor& d, std::span<const float> phi);
/// Decodes then evaluates (throws as decode_descriptor and the overload above).
Energy routing_energy(const cmf::SelectionDescriptor& sel, std::span<const float> phi);

/// One skill's score in a routing decision.
struct SkillScore {
  std::string id;
  uint32_t phi_layer = 0;
  double e = 0, raw = 0;
  double prob = 0;  ///< calibrated softmax(−raw/T) probability (0 when uncalibrated)
};

/// Thresholds of the decision (ENGINE-NOTES §3.12 / SPECIALIZATION-NOTES §6.4).
struct RouteOptions {
  double tau = 0.30;  ///< uncalibrated: novel iff E_min > tau
};

/// What choose_skill decided.
struct RouteDecision {
  std::vector<SkillScore> scores;  ///< routable skills (with a selection), in record order
  std::optional<size_t> best;      ///< index into scores of the min-E skill (nullopt: none routable)
  bool novel = false;              ///< the router is not confident: run the backbone
  bool calibrated = false;         ///< header.routing {temperature, novelty_theta} was used
  double novelty = 0;              ///< calibrated novelty score (calibrated only)
  double threshold = 0;            ///< θ (calibrated) or τ (uncalibrated) the decision compared against
  /// The skill to run: scores[*best].id unless novel or none routable, then "" (the backbone).
  std::string chosen;
  std::string why;  ///< one human line for `explain` / stderr
};

/// The calibrated novelty of one routing decision (ENGINE-NOTES §3.12): `scores` (raw and e of
/// every routable skill) and `descs` (their descriptors) in the same order; fills each score's
/// prob = softmax(−raw/T) and returns 0.5·σ((raw₁ − err_mean)/err_std) + 0.25/(1+8·margin) +
/// 0.25·(1 − prob₁) for the min-E skill (σ term 0.5 without err stats; margin as choose_skill).
/// Throws Error(InvalidArgument) for empty scores, sizes that differ, or T <= 0.
double calibrated_novelty(std::vector<SkillScore>& scores, std::span<const Descriptor> descs,
                          double temperature);

/// φ per router layer: layer → [hidden].
using PhiByLayer = std::map<uint32_t, std::vector<float>>;

/// Routes among `records` (skills without `selection` are skipped). `phis` must hold a φ for every
/// routable skill's phi_layer. Scores every routable skill, picks min E. Novelty:
/// * `routing` (header.routing) with numeric `temperature` and `novelty_theta` → calibrated:
///   prob = softmax(−raw/T); margin = 1/(1+e₁) − 1/(1+e₂) over the two smallest E (e₂ = +inf with
///   one skill → margin 1/(1+e₁)); confidence = prob of the best; novelty = 0.5·σ((raw₁ −
///   err_mean)/err_std) + 0.25/(1+8·margin) + 0.25·(1−confidence) (the σ term is 0.5 when the
///   best skill has no err stats); novel iff novelty > θ;
/// * otherwise novel iff E_min > opt.tau (0.30).
/// Throws Error(InvalidArgument) when a routable skill's phi_layer has no φ in `phis`, and what
/// decode_descriptor throws (naming the skill id).
RouteDecision choose_skill(std::span<const cmf::SkillRecord> records, const PhiByLayer& phis,
                           const std::optional<nlohmann::json>& routing = std::nullopt,
                           const RouteOptions& opt = {});

/// The φ layers `records`' routable skills need (sorted, unique).
std::vector<uint32_t> phi_layers(std::span<const cmf::SkillRecord> records);

/// φ of `tokens` through `m` for each layer of `layers` (each < num_layers): one prefill of the
/// tokens (positions 0…T−1, a fresh f32 KV cache) through layers 0…max(layers), and for each L
/// the mean over the T positions of the residual stream after layer L (un-normalised; mse_unit
/// normalisation happens in routing_energy / fit_descriptor). `variant`: a task mask to run under
/// (nullptr = dense). Throws Error(InvalidArgument) for empty tokens, an empty `layers`, a layer
/// >= num_layers, more tokens than max_position_embeddings (when known), and what
/// Model::begin/run_layers throw.
PhiByLayer compute_phis(model::Model& m, std::span<const uint32_t> tokens, std::span<const uint32_t> layers,
                        const model::Variant* variant = nullptr);
/// compute_phis for one layer.
std::vector<float> compute_phi(model::Model& m, std::span<const uint32_t> tokens, uint32_t phi_layer,
                               const model::Variant* variant = nullptr);

}  // namespace cortiq::specialize
