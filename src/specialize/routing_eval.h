// Routing accuracy on held-out text: what `cortiq skill eval-routing` measures (issue 30: routing
// accuracy on 16/32/64-token prompts drawn from each domain's test split).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "specialize/routing.h"

namespace cortiq::specialize {

/// One domain: the skill id it should route to and a text file to draw prompts from.
struct EvalDomain {
  std::string id, file;
};

/// Options of eval_routing.
struct EvalOptions {
  std::vector<uint32_t> lengths = {16, 32, 64};  ///< prompt lengths in tokens
  uint32_t samples = 32;                         ///< prompts per (domain, length)
  uint64_t seed = 1;
  RouteOptions route;
  size_t threads = 0;
};

/// Accuracy of one (domain, length) cell.
struct EvalCell {
  std::string id;
  uint32_t length = 0;
  uint32_t samples = 0;
  uint32_t argmin_right = 0;  ///< min-E skill == id
  uint32_t chosen_right = 0;  ///< decision (with the novelty fallback) == id
  uint32_t fallback = 0;      ///< decided "backbone"
};

/// Draws `samples` windows of each length from each domain's file — the text tokenized raw (no
/// BOS), windows at positions from a seeded std::mt19937_64, skipping any window that holds a
/// special token (e.g. the `<|endoftext|>` document separator) — computes their φ through the
/// backbone of `model_path` and routes with choose_skill over the file's skills. Throws
/// Error(InvalidArgument) for a domain id that is no skill of the file or a file too short for the
/// longest window, and what loading and routing throw.
std::vector<EvalCell> eval_routing(const std::string& model_path, const std::vector<EvalDomain>& domains,
                                   const EvalOptions& opt);

/// Options of calibrate_routing (`skill calibrate`).
struct CalibrateOptions {
  uint32_t length = 32;   ///< window length in tokens
  uint32_t samples = 48;  ///< windows per domain
  uint64_t seed = 5;
  double fpr = 0.05;  ///< in-domain windows allowed above θ (SPECIALIZATION-NOTES §6.3), in (0, 1)
  size_t threads = 0;
};

/// What calibrate_routing found: the `header.routing` object and how routing does with it.
struct Calibration {
  double temperature = 0;    ///< T of softmax(−raw/T)
  double novelty_theta = 0;  ///< θ
  uint32_t samples = 0;      ///< windows used (all domains)
  double target_fpr = 0;
  double nll = 0;                               ///< mean −log p(true skill) at T
  uint32_t argmin_right = 0, chosen_right = 0;  ///< over the windows, with θ applied
  /// {"temperature", "novelty_theta", "samples", "target_fpr"} (FORMAT-NOTES §1.3 header.routing).
  nlohmann::json routing() const;
};

/// Router calibration from held-out text (SPECIALIZATION-NOTES §6.3, with windows of held-out text
/// in place of the descriptors' holdout φ): draws windows as eval_routing does from each domain's
/// file (held-out text: not the descriptor's fit prompts; the testbed uses the val split), takes
/// raw routing errors of every routable skill on each, then T = argmin over the grid
/// 1e-3·1.15^k ≤ 1e6 of Σ −log softmax(−raw/T)[true skill], and θ = the sorted novelty scores
/// (choose_skill's formula at T) at index round((n−1)·(1−fpr)), + 1e-4, capped at 0.999.
/// Throws Error(InvalidArgument) for no domain, a domain that is no routable skill of the file, a
/// file too short (as eval_routing), fpr outside (0, 1), and what loading and φ throw.
Calibration calibrate_routing(const std::string& model_path, const std::vector<EvalDomain>& domains,
                              const CalibrateOptions& opt);

/// Writes `routing` as header.routing of `input`: in place by true append when `output` is ""
/// (cmf::append_in_place, old bytes never move), else a new file at `output` (atomic). Throws
/// Error(Unsupported) for a SKILL_FILE and what the reader / writer throw.
void write_routing(const std::string& input, const nlohmann::json& routing, const std::string& output);

}  // namespace cortiq::specialize
