// Routing accuracy on held-out text: what `cortiq skill eval-routing` measures (issue 30: routing
// accuracy on 16/32/64-token prompts drawn from each domain's test split).
#pragma once

#include <cstdint>
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

}  // namespace cortiq::specialize
