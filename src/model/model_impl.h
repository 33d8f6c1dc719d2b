// Internal to model/: the bound weights of one model (per-layer structs of prepared views and f32
// vectors) and Model::Impl, shared by the binder (bind.cc), the blocks (attention.cc, ffn.cc) and
// the forward pass (forward.cc). Nothing outside src/model/ includes it.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "kernels/kernels.h"
#include "model/model.h"
#include "quant/codec.h"
#include "util/line_vec.h"

namespace cortiq::model {

using kernels::WeightView;

namespace detail {

struct Ffn {
  WeightView gate, up, down;
  uint64_t width = 0;  // intermediate neurons (rows of gate)
};

struct Moe {
  WeightView router;
  std::vector<Ffn> experts;
  std::optional<Ffn> shared;
  std::vector<float> shared_gate;  // [hidden], empty when absent
};

struct Layer {
  uint32_t n_heads = 0;
  bool sliding = false;
  int rope = 0;  // 0 = global table, 1 = local table
  std::vector<float> input_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm;
  bool sandwich = false;
  WeightView q, k, v, o;
  bool out_gate = false;  // q_proj rows == 2·nh·hd: per head [q(hd); gate(hd)]
  std::vector<float> q_bias, k_bias, v_bias, q_norm, k_norm;
  bool is_moe = false;
  Ffn ffn;
  Moe moe;
};

}  // namespace detail

using detail::Ffn;
using detail::Layer;
using detail::Moe;

struct Model::Impl {
  cmf::ModelArch arch;
  kernels::ThreadPool pool;
  WeightView embed, lm_head;
  // Quantized embedding: parsed once at bind, so a token's row costs O(hidden) (quant::decode_rows
  // re-parses the tensor: O(rows) for vbit, O(outliers) for q1s, per token).
  std::optional<quant::RowDecoder> embed_rows;
  std::vector<float> final_norm;
  std::vector<Layer> layers;
  kernels::RopeTable rope_global, rope_local;
  kernels::NormStyle norm_style = kernels::NormStyle::Qwen;
  float embed_mult = 1.0f;

  // Grow-only scratch of the forward pass (see "Threading and memory" in model.h): every buffer
  // is resized only when a call needs more than any call before, so a steady decode loop does not
  // allocate. Contents do not carry over between calls.
  struct Workspace {
    std::vector<size_t> row_seq, row_pos;          // [R] step index / KV position of each row
    LineVec<float> h, n, tmp;                      // [R, hidden]: residual, normed, block output
    LineVec<float> qraw, k, v, q, gate, att;       // attention projections and output
    LineVec<float> ffn_g, ffn_u;                   // [T, intermediate]
    std::vector<float> moe_logits, moe_pf, moe_y;  // router logits [T, E], probs [E], expert out
    std::vector<double> moe_p;                     // [E]
    std::vector<size_t> moe_cand;                  // routable experts
    std::vector<float> logits;                     // [rows, vocab] when several steps want logits
    std::vector<const Variant*> row_var;           // [R] each row's variant (nullptr = dense)
    std::vector<size_t> dead_rows;                 // rows whose variant skips the current layer
    std::vector<float> dead_h;                     // [dead rows, hidden]: their residual, kept
  } ws;

  explicit Impl(size_t threads) : pool(threads) {}

  // The whole forward pass over validated steps (forward() and forward_batch() share it).
  void run(std::span<const SeqStep> steps, const Taps* taps);
  // Input norm → q/k/v → RoPE → KV append → attention → o_proj → residual; leaves the FFN input
  // (post-attention norm) in ws.n. R = total rows of `steps`.
  void attention_block(const Layer& L, size_t li, std::span<const SeqStep> steps, size_t R);
  void ffn_forward(const Layer& L, size_t li, const float* x, size_t T, float* out);
  /// `alive(t)`: row t's alive-neuron bytes, or nullptr for all.
  template <class Alive>
  void dense_ffn(const Ffn& f, const Alive& alive, const float* x, size_t T, float* out);
  void moe_forward(const Layer& L, size_t li, const float* x, size_t T, float* out);
};

}  // namespace cortiq::model
