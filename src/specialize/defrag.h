// Physical defrag (spec §11, FORMAT-NOTES §1.18, SPECIALIZATION-NOTES §4): a standalone file whose
// dense FFNs hold only their kept neurons — gate/up rows and down columns gathered from the
// dequantized source (or from trained f32 masters) and re-encoded at the new shape — and the copy
// of a file under a new header (how the quality contract enters a written file).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cmf/reader.h"
#include "specialize/keep.h"
#include "train/params.h"

namespace cortiq::specialize {

struct DefragPlan {
  KeepSets keep;  ///< [layers] ascending kept neuron ids (each layer non-empty)
  /// f32 masters by canonical name (train::Params) replacing the source values of those FFN
  /// tensors (phase B's trained tail, full width); encoded q8_row (§4 item 3: trained layers at
  /// 8-bit per-row). nullptr: none.
  const train::Params* trained = nullptr;
  /// Keys set in the header's provenance object (e.g. "specialize", "defrag"), replacing old ones.
  nlohmann::json provenance = nlohmann::json::object();
};

struct DefragResult {
  std::string path;
  uint64_t bytes = 0;              ///< size of the written file
  std::vector<uint32_t> widths;    ///< [layers] kept FFN width
  std::vector<std::string> notes;  ///< e.g. "down_proj of layer 3: q4_tiled → q8_2f (width 70)"
};

/// Writes `out` from `src` keeping plan.keep's neurons: every other tensor byte for byte (skill.*
/// overlays dropped, the skills registry cleared), the masks section dropped,
/// arch.intermediate_size = the largest kept width (nominal; the runtime reads widths from shapes).
/// A frozen FFN tensor keeps its source codec; a down_proj whose new width the codec cannot hold
/// (in % 32 ≠ 0 for vbit, vbit_ro, q4_tiled, q1, q1s, q1t, q4tp, q2tp) falls back to q8_2f. Output
/// through temp + rename (nothing under `out` on error). Throws Error(Unsupported) for a MoE model
/// or an FFN tensor without a codec, Error(InvalidArgument) for keep sets of the wrong layer count,
/// an empty layer or an id beyond the layer's width (naming the layer), what the reader and
/// writer throw.
DefragResult defrag_file(const cmf::Reader& src, const std::string& out, const DefragPlan& plan,
                         bool progress = true);

/// Copies every tensor of `src` verbatim into `out` under `header` (its section hashes are
/// regenerated), with `masks` as the masks section when given (else the source's), and the source's
/// vocab. Through temp + rename. Throws what the reader and writer throw.
void copy_with_header(const cmf::Reader& src, const std::string& out, const cmf::Header& header,
                      const std::optional<cmf::MaskCatalog>& masks = std::nullopt);

}  // namespace cortiq::specialize
