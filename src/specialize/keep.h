// Neuron keep sets (SPECIALIZATION-NOTES §2.5, §2.6, §4): from gate logits to hard masks, the
// threshold sweep's per-layer cuts, alignment of each layer's kept count, and the task mask that
// carries a keep set.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cmf/masks.h"

namespace cortiq::specialize {

/// [layers][width] gate logits m (σ(m) is the soft gate).
using Logits = std::vector<std::vector<float>>;
/// [layers] ascending kept neuron ids.
using KeepSets = std::vector<std::vector<uint32_t>>;

/// The hard mask of `logits`: neuron j of layer l kept iff σ(m) > tau, i.e. m > logit(tau).
KeepSets keep_by_threshold(const Logits& logits, double tau = 0.5);

/// Kept neurons over all neurons (widths from `logits`).
double kept_fraction(const KeepSets& k, const Logits& logits);

/// The sweep's cut (§2.6): layer l keeps its width − round(pruned_l · factor) highest-logit
/// neurons (at least 1, at most the width), pruned_l = the pruned count of `base` in that layer —
/// the checkpoint's per-layer proportions scaled to another global sparsity. Ties in the ranking go
/// to the lower neuron id.
KeepSets scaled_cut(const Logits& logits, const KeepSets& base, double factor);

/// §4: each layer's count n ← max(n, 1), then ⌈n/align⌉·align capped at its width; the extra
/// neurons are the highest-logit pruned ones (a kept neuron stays kept). align ≤ 1: only the
/// max(n, 1). Returns the new sets; `resurrected` (when given) gets how many neurons were added.
KeepSets align_keep(const Logits& logits, const KeepSets& k, uint32_t align, uint64_t* resurrected = nullptr);

/// A task mask (legacy layout, every head and layer open) keeping exactly `k`'s FFN neurons;
/// sparsity = 1 − kept/all. Throws Error(InvalidArgument) when k has a layer count other than the
/// arch's, an id ≥ intermediate_size, or an empty layer (naming it).
cmf::TaskMask mask_of(const cmf::ModelArch& arch, const KeepSets& k, std::string name, uint32_t task_id);

/// The keep sets of a mask's FFN rows (legacy layout). Throws Error(InvalidArgument) naming the
/// first layer the mask empties, and Error(Unsupported) for a per-pass (LOOP_MASKS) mask or one that
/// closes a head or a layer (a defrag removes FFN neurons only).
KeepSets keep_of(const cmf::ModelArch& arch, const cmf::TaskMask& m);

}  // namespace cortiq::specialize
