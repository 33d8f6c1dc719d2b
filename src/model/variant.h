// A task mask compiled for one bound model (spec §5, ENGINE-NOTES §3.11): what a sequence that runs
// under it computes. A Variant belongs to a sequence, not to the model: every sequence of one
// Model::forward_batch step may carry its own (or none), and the weights stay shared and untouched.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/weight_view.h"

namespace cortiq::model {

/// One dense layer's gate and up rows of its alive neurons only, copied once when the variant is
/// compiled (quant::gather_rows, byte for byte): a sequence under the variant reads these instead of
/// the full matrices, so a mask that keeps a fraction f of a layer reads f of its gate/up bytes. The
/// products equal the full matrices' rows bit for bit (Variant.GatheredFfnEqualsMaskedFull).
struct GatheredFfn {
  std::vector<uint32_t> ids;  ///< [alive] ascending neuron ids (rows of gate/up)
  std::vector<uint8_t> gate_bytes, up_bytes;
  kernels::WeightView gate, up;  ///< [alive, hidden], prepared; payloads in the bytes above
};

/// How Model::compile_variant builds a variant.
struct VariantOptions {
  /// A dense layer whose alive FFN fraction is at most this gets a GatheredFfn when its gate/up
  /// codec allows (quant::can_gather_rows); above it (or 0 ≤ this < fraction) the layer computes
  /// every neuron and zeroes the dead ones. Negative: never gather.
  double gather_at_most = 0.5;
};

/// Per-layer liveness, unpacked to bytes (1 = alive). Built by Model::compile_variant, immutable
/// after; shareable across sequences and threads.
struct Variant {
  std::string name;                                ///< the task mask's name
  std::vector<uint8_t> layer_alive;                ///< [layers]; 0 = the layer is skipped (residual only)
  std::vector<std::vector<uint8_t>> head_alive;    ///< [layers][n_heads of the layer]
  std::vector<std::vector<uint8_t>> ffn_alive;     ///< [layers][intermediate width]; empty row = all alive
  std::vector<std::vector<uint32_t>> ffn_index;    ///< [layers] ascending ids of the alive neurons
  std::vector<std::vector<uint8_t>> expert_alive;  ///< [layers][experts]; empty = every expert routable
  std::vector<std::unique_ptr<const GatheredFfn>> ffn_gathered;  ///< [layers]; null = full gate/up read
  /// [layers][width] soft neuron gates: a dense layer's FFN activation is multiplied by them after
  /// the mask's zeroing (the L1-gated mask search, SPECIALIZATION-NOTES §2); an empty row = 1.
  /// Set by a trainer on a variant from open_variant (never by compile_variant).
  std::vector<std::vector<float>> ffn_scale;

  /// Alive FFN neurons over all FFN neurons of the dense layers (1 for a mask that keeps them all).
  double ffn_alive_fraction() const noexcept;
  /// Bytes the variant's gathered gate/up rows hold (what it costs in memory beyond the weights).
  uint64_t gathered_bytes() const noexcept;
};

struct Weights;
/// A variant with everything open, sized for `w` (every layer, head and neuron alive, no gather, no
/// scales): the start of a variant a trainer fills in (ffn_scale).
Variant open_variant(const Weights& w);

}  // namespace cortiq::model
