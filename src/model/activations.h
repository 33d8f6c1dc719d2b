// The activations of one forward pass, as named buffers (llm.c keeps its activations as one plain
// struct of named tensors): what the blocks read and write, and — when asked — a copy of each
// layer's intermediate values kept for a backward pass or for calibration.
//
// Rows are the stacked tokens of every sequence of the call, [R = Σ T_i, ·], row-major. Buffers only
// grow, so a steady decode loop allocates nothing; contents do not carry over between calls (except
// `kept`, which holds the last call's layers until the next call that keeps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/kv_cache.h"
#include "util/line_vec.h"

namespace cortiq::model {

struct Variant;
struct GatheredFfn;
struct LayerWeights;

/// One layer's values of the last forward pass, kept when Activations::keep is set. Shapes per row
/// of the call: [R, ·] with the widths given.
struct KeptLayer {
  std::vector<float> h_in;      ///< [R, hidden] residual entering the layer
  std::vector<float> x_attn;    ///< [R, hidden] input norm's output (q/k/v input)
  std::vector<float> q;         ///< [R, n_heads·head_dim] queries after q-norm and RoPE
  std::vector<float> k, v;      ///< [R, n_kv_heads·head_dim] what was stored in the KV cache (before f16)
  std::vector<float> att;       ///< [R, n_heads·head_dim] attention output (after the output gate)
  std::vector<float> h_mid;     ///< [R, hidden] residual after the attention branch
  std::vector<float> x_ffn;     ///< [R, hidden] FFN input (post-attention / pre-FFN norm)
  std::vector<float> gate, up;  ///< [R, width] gate and up projections (dense FFN layers)
  std::vector<float> act;       ///< [R, width] act(gate)·up with the task mask applied (down's input)
};

/// The named buffers of a forward pass.
struct Activations {
  // Per row of the call (filled by the embedding step).
  std::vector<size_t> row_seq, row_pos;     ///< [R] step index / absolute position of each row
  std::vector<const Variant*> row_var;      ///< [R] each row's variant (nullptr = dense)
  std::vector<KvLayer*> row_kv;             ///< [R] the current layer's cache of each row's sequence
  std::vector<const uint8_t*> row_heads;    ///< [R] the current layer's alive heads (nullptr = all)
  std::vector<const uint8_t*> row_neurons;  ///< [R] the current layer's alive FFN neurons (nullptr = all)
  std::vector<const GatheredFfn*>
      row_gathered;                     ///< [R] the current layer's gathered gate/up (nullptr = full)
  std::vector<const float*> row_scale;  ///< [R] the current layer's soft neuron gates (nullptr = 1)
  std::vector<const std::vector<uint8_t>*> row_experts;  ///< [R] routable experts (nullptr = all)
  // The residual stream and the blocks' intermediates.
  LineVec<float> h, n, tmp;                         ///< [R, hidden]: residual, normed, block output
  LineVec<float> qraw, k, v, q, gate, att;          ///< attention projections and output
  LineVec<float> ffn_g, ffn_u;                      ///< [R, intermediate]
  LineVec<float> ffn_x, ffn_cg, ffn_cu;             ///< one gathered group: its input rows, compact gate/up
  std::vector<size_t> ffn_rows;                     ///< the rows of that group
  std::vector<uint8_t> ffn_done;                    ///< [R] rows whose gate/up are computed
  std::vector<float> moe_logits, moe_pf, moe_y;     ///< router logits [R, E], probs [E], expert out [hidden]
  std::vector<double> moe_p;                        ///< [E]
  std::vector<size_t> moe_cand;                     ///< routable experts of the current row
  std::vector<std::pair<size_t, float>> moe_route;  ///< the current row's (expert, weight) pairs
  std::vector<float> logits;                        ///< [rows, vocab] when several steps want logits
  std::vector<size_t> dead_rows;                    ///< rows whose variant skips the current layer
  std::vector<float> dead_h;                        ///< [dead rows, hidden]: their residual, kept
  std::vector<const LayerWeights*> row_layer;       ///< [R] the current layer's weights of each row
  std::vector<size_t> group_rows;                   ///< rows of one weights group (SeqStep::weights)

  /// Record the routing of every MoE layer (moe-stats, SPECIALIZATION-NOTES §7.1): when set, each
  /// MoE FFN run on these activations rewrites `routes` with its rows' selections — row r's are
  /// routes[route_off[r] .. route_off[r+1]), in selection order. Valid for the layer just run (read
  /// them from Taps::layer_output); rows of a layer split by SeqStep::weights groups are not recorded
  /// (they run on per-group activations). Off: no cost.
  struct RouteSel {
    uint32_t expert = 0;    ///< index among the layer's experts
    float weight = 0.0f;    ///< the routing weight it received (after top-k renormalization and scaling)
    float out_norm = 0.0f;  ///< ‖expert output‖₂ for that row (before weighting)
  };
  bool record_routes = false;
  std::vector<size_t> route_off;  ///< [R + 1]
  std::vector<RouteSel> routes;

  /// Keep every layer's intermediates of the next passes in `kept` ([layers]; a layer no row runs
  /// keeps nothing). Off: no copy, no cost.
  bool keep = false;
  std::vector<KeptLayer> kept;
};

}  // namespace cortiq::model
