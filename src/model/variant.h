// A task mask compiled for one bound model (spec §5, ENGINE-NOTES §3.11): what a sequence that runs
// under it computes. A Variant belongs to a sequence, not to the model: every sequence of one
// Model::forward_batch step may carry its own (or none), and the weights stay shared and untouched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cortiq::model {

/// Per-layer liveness, unpacked to bytes (1 = alive). Built by Model::compile_variant, immutable
/// after; shareable across sequences and threads.
struct Variant {
  std::string name;                                ///< the task mask's name
  std::vector<uint8_t> layer_alive;                ///< [layers]; 0 = the layer is skipped (residual only)
  std::vector<std::vector<uint8_t>> head_alive;    ///< [layers][n_heads of the layer]
  std::vector<std::vector<uint8_t>> ffn_alive;     ///< [layers][intermediate width]; empty row = all alive
  std::vector<std::vector<uint32_t>> ffn_index;    ///< [layers] ascending ids of the alive neurons
  std::vector<std::vector<uint8_t>> expert_alive;  ///< [layers][experts]; empty = every expert routable

  /// Alive FFN neurons over all FFN neurons of the dense layers (1 for a mask that keeps them all).
  double ffn_alive_fraction() const noexcept;
};

}  // namespace cortiq::model
