// `cortiq compile` (issue 31, SPECIALIZATION-NOTES §1–5): a model and a task corpus in, a file out —
// a standalone specialist whose FFNs keep only the neurons the task uses (physically removed), or
// the same-shape file with a new task mask — carrying its quality contract, measured through the
// runtime on the written file's tensors.
//
// Chain: tokenize and split the corpus (corpus.h) → f32 replica of the model → dense baseline on
// select and report → phase A gate search + threshold sweep (gate_search.h) → keep sets aligned
// per layer (keep.h) → phase B FCD of the tail (fcd.h; specialist only) → write a staged file
// (defrag.h, or the source with the mask) → score report on the staged file and on the source with
// the runtime (exact kernels) → the final file = the staged tensors under a header that carries the
// contract (provenance.specialize; for a mask also the mask's quality) → verify.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "specialize/corpus.h"
#include "specialize/fcd.h"
#include "specialize/gate_search.h"

namespace cortiq::specialize {

/// What compile writes: a standalone defragged file, the same-shape file plus a task mask, or that
/// mask plus phase B's trained tail as a skill (`skill.<task>.*` overlays, routing descriptor).
enum class CompileAs { Mask, Specialist, Skill };

struct CompileOptions {
  std::string model, output, task;
  std::vector<std::string> corpus;
  CompileAs as = CompileAs::Specialist;
  SplitOptions split;
  GateSearchOptions a;
  FcdOptions b;  ///< b.steps = 0: no phase B (always none for a mask; a skill needs it)
  /// Skill: prompts fitted for the routing descriptor (train chunks, decoded; at most this many).
  size_t skill_prompts = 48;
  uint32_t skill_rank = 2;  ///< the descriptor's rank (specialize/routing.h FitOptions)
  uint32_t align = 32;      ///< keep-count alignment (§4; 1 = off)
  size_t threads = 1;
  bool progress = true;  ///< progress bars (drawn only when stderr is a terminal)
  /// One line per phase result for the user (nullptr: silent).
  std::function<void(const std::string&)> log;
};

struct CompileResult {
  nlohmann::json contract;                       ///< what provenance.specialize (or the mask's extra) holds
  std::string verdict;                           ///< "better", "within noise", "worse"
  bool better = false;                           ///< the specialist beats dense on report beyond noise
  double dense_ppl = 0.0, specialist_ppl = 0.0;  ///< report split, through the runtime
  uint64_t bytes_before = 0, bytes_after = 0;    ///< input and output file sizes
  /// Phase curves for the HTML report (report.h): dense, phase A history, sweep, chosen, phase B
  /// history, per-layer widths and the intermediate size.
  nlohmann::json trace;
  std::vector<std::string> overlays;  ///< skill: the backbone names that got an overlay
};

/// Runs the chain. As a skill: the task mask (named `task`) is added to the masks, then phase B's
/// trained tail tensors (those that differ) are appended as overlays `skill.<task>.<name>` through
/// skill_add (true append, cmf/append.h) with a record {id = task, input_mask_task = task, layers,
/// selection fitted from decoded train chunks, quality, provenance.specialize = the contract}; the
/// report split is scored with that skill bound (its mask on).
/// Throws Error(InvalidArgument) when output is the input file, the task name is
/// empty or (for a mask or skill) already in the file, or not a valid skill id (skill), when phase
/// B trains nothing that beats the mask (skill: nothing to store), or the corpus is too short;
/// Error(Unsupported) naming the layer for what phase A cannot differentiate (a MoE layer, a non-SiLU
/// activation, a sliding window, an FFN width other than the arch's); Error(Io|Parse) from the files. Nothing
/// is left under `output` (nor a staged file) on an error or an interrupt.
CompileResult compile_task(const CompileOptions& opt);

/// The refusals of compile_task for a model: throws Error(Unsupported) naming the first layer the
/// gate search cannot differentiate.
void check_compilable(const model::Model& m);

/// The verdict rule of §5: better when mean Δ + 2·stderr < 0 (Δ = specialist − dense NLL per token,
/// paired over report chunks), worse when Δ − 2·stderr > 0, else within noise.
std::string verdict_of(double delta, double stderr_delta);

/// The contract (provenance.specialize or a mask's extra.specialize) as indented text lines for
/// `cortiq info` and `cortiq masks`: task and recipe, kept widths, report quality and verdict,
/// corpus files and hashes. Missing keys are shown as "?" (never throws).
std::vector<std::string> contract_lines(const nlohmann::json& c);

}  // namespace cortiq::specialize
