// Mixture-of-experts specialization (SPECIALIZATION-NOTES §7, FORMAT-NOTES §1.19): router
// statistics over a text, the cover rule, the physical expert cut (moe-defrag) and the expert mask
// (moe-mask).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "cmf/masks.h"
#include "cmf/reader.h"
#include "model/model.h"
#include "specialize/corpus.h"

namespace cortiq::specialize {

/// One MoE layer's routing statistics (§7.1), each [experts of the layer] in the file's numbering.
struct MoeLayerStats {
  std::vector<uint64_t> count;   ///< times the expert was selected (every token, prompt included)
  std::vector<double> weight;    ///< Σ routing weight it received (after top-k renorm and scaling)
  std::vector<double> saliency;  ///< Σ weight·‖expert output‖₂ (REAP's numerator); empty if unknown
};

/// Which vector the cover rule ranks by: routing-weight mass (default), selection count (REF), or
/// REAP saliency.
enum class MoeStatistic { Weight, Count, Saliency };
/// The statistic's name as the CLI and the provenance spell it: "weight", "count", "saliency".
std::string_view moe_statistic_name(MoeStatistic s) noexcept;
/// "weight" | "count" | "saliency"; Error(InvalidArgument) otherwise.
MoeStatistic parse_moe_statistic(std::string_view s);

/// Routing statistics over a text (moe-stats): per MoE layer, per expert.
struct MoeStats {
  uint64_t tokens = 0;                       ///< tokens run (0 when read from a file that has no count)
  std::map<uint32_t, MoeLayerStats> layers;  ///< by layer index; MoE layers only
  /// The ranked vector of layer `l` as doubles, or an empty vector when this file has no such
  /// statistic (REF's bare count arrays have no weight/saliency).
  std::vector<double> values(uint32_t l, MoeStatistic s) const;
};

/// Runs `chunks` (each from an empty KV cache, `batch` at a time, dense unless `variant`) and
/// accumulates every MoE layer's routing per token. `progress` gets the chunks done after each
/// call. Throws Error(InvalidArgument) for a model without MoE layers or a chunk that is empty or
/// longer than the context, and what forward_batch throws.
MoeStats collect_moe_stats(model::Model& m, std::span<const Chunk> chunks,
                           const model::Variant* variant = nullptr, size_t batch = 4,
                           const std::function<void(size_t)>& progress = {});

/// The stats as JSON: {"<layer>": {"count": [...], "weight": [...], "saliency": [...]}, ...}
/// (the §7.1 dump format).
nlohmann::json moe_stats_json(const MoeStats& s);
/// Reads the §7.1 format, REF's `{"<layer>": [counts]}`, or either under a top-level "layers" key
/// (moe-stats --json; its "tokens" read too). Throws Error(Parse) naming the key for a malformed entry
/// or vectors of different lengths.
MoeStats parse_moe_stats(const nlohmann::json& j);

/// The cover rule (§7.2) for one layer: experts by `values` descending (ties to the lower index),
/// kept until the cumulative sum ≥ cover·total (summed in that order), then at least `min_keep`
/// (top_k); returned ascending. All experts when the total is 0. Throws Error(InvalidArgument) for
/// cover outside (0, 1].
std::vector<uint32_t> cover_keep(std::span<const double> values, double cover, uint32_t min_keep);

/// Per layer of the model: the kept experts (ascending) for every MoE layer the stats cover with a
/// non-zero total; layers absent stay whole (not in the map). `experts_of(l)` = the layer's expert
/// count in the file. Throws Error(InvalidArgument) when a layer's stats length differs from its
/// expert count (naming the layer), and when the stats lack `stat` (REF counts only: use count).
std::map<uint32_t, std::vector<uint32_t>> moe_selection(const cmf::Reader& r, const MoeStats& s,
                                                        MoeStatistic stat, double cover);

/// The experts layer `l` of the file holds (router rows; 0 for a dense layer).
uint32_t experts_in_file(const cmf::Reader& r, uint32_t l);

/// What moe_defrag wrote.
struct MoeDefragResult {
  uint64_t bytes = 0;              ///< size of the written file
  std::vector<uint32_t> kept;      ///< [layers] experts kept (0 for a dense layer)
  std::vector<uint32_t> before;    ///< [layers] experts before
  std::vector<std::string> notes;  ///< masks remapped or dropped, router re-encodes
};

/// moe-defrag (§7.3, FORMAT-NOTES §1.19): per layer of `keep`, the kept experts renumbered to
/// 0…k−1 in ascending order, their tensors renamed with payloads verbatim, the router's rows (and any
/// other tensor of the router module or `mlp.expert_bias` with one row per expert) gathered in the
/// same order — f32/f16/bf16 byte for byte, other codecs decoded and re-encoded in their own codec;
/// dropped experts omitted; everything else verbatim; arch.moe.num_experts stays nominal. Existing
/// masks' expert rows are remapped through the same index map (bits of dropped experts vanish); a
/// mask left with no routable expert in a layer is dropped (said in notes). `provenance_moe` is
/// stored as provenance.moe_defrag (the caller's fields; `kept_per_layer` and the stats remapped
/// to the new numbering are added here). Output through temp + rename. Throws
/// Error(InvalidArgument) for a keep set that is empty or names an expert the layer lacks, for a
/// dense model; what the reader and writer throw.
MoeDefragResult moe_defrag_file(const cmf::Reader& src, const std::string& out,
                                const std::map<uint32_t, std::vector<uint32_t>>& keep, const MoeStats* stats,
                                nlohmann::json provenance_moe, bool progress = true);

/// The expert mask of `keep` (§7.4): FFN and head rows all ones, gates alive, experts [layers,
/// nominal experts] with a layer of `keep` restricted to its set and every other layer all ones;
/// priority Normal; sparsity = 1 − kept/(Σ experts of the restricted layers); quality null.
cmf::TaskMask expert_mask_of(const cmf::Reader& r, const std::map<uint32_t, std::vector<uint32_t>>& keep,
                             std::string name, uint32_t task_id);

/// moe-mask: the source file with `mask` added to its masks section (task_id = max existing + 1, or
/// 1); default_task kept (set to the new mask when the file had none). Throws
/// Error(InvalidArgument) when the name exists. Output through temp + rename.
void add_mask_file(const cmf::Reader& src, const std::string& out, cmf::TaskMask mask);

}  // namespace cortiq::specialize
