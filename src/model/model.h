// The transformer forward pass on the CPU (ENGINE-NOTES §3.1–3.8, §3.11, §3.14; spec §2, §2.2, §5).
//
// Life cycle: Model::bind(arch, source) binds the Weights (weights.h: every tensor resolved by name
// ONCE, operators per layer decided from tensor presence, every matrix checked for a kernel, the
// small vectors copied to f32) and gives them a thread pool and activations. Then forward() runs
// any number of positions (prefill: T > 1, decode: T = 1) into a KvCache. The pass is embed ·
// run_layers(begin, end) · head, each callable alone (begin / run_layers / finish). A task mask is compiled
// once into a Variant (compile_variant) that a sequence carries; it is consulted in exactly three places: the
// layer loop (gates), attention (heads) and the FFN (neurons, routable experts).
//
// Supported families (layer_types FullAttention / SlidingAttention): llama, mistral, qwen2, qwen3,
// gemma, gemma2, gemma3, phi3 (split q/k/v and gate/up), qwen2_moe, qwen3_moe. Other mixers
// (LinearAttention, ShortConv, Kda, MLA, g3n, num_loops > 1) are refused at bind with
// Error(Unsupported).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cmf/header.h"
#include "cmf/masks.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "model/activations.h"
#include "model/kv_cache.h"
#include "model/tensor_source.h"
#include "model/variant.h"
#include "model/weights.h"

namespace cortiq::model {

/// Bind-time options.
struct ModelOptions {
  size_t threads = 1;  ///< kernel thread pool size (0 = hardware concurrency)
  /// Matmul mode and SIMD tier of the model's kernel table (kernels/ops.h), fixed at create;
  /// unset = the process-wide settings at that moment (kernels::KernelConfig::current()).
  std::optional<kernels::KernelConfig> kernels = std::nullopt;
};

/// Which logits forward() produces.
enum class LogitsMode { Last, All, None };

/// One sequence's share of a Model::forward_batch call: run `tokens` (T >= 1; 1 for decode, more
/// for a prefill or prefill chunk) at positions kv->size() .. kv->size()+T−1 of its own KV cache,
/// and write the LAST position's logits [vocab] into `logits` — or, with `all_logits`, every
/// position's logits [T, vocab] (what forward(..., LogitsMode::All) asks for). An empty `logits`
/// span = no logits (e.g. a prefill chunk that is not the prompt's last). `kv` must be non-null
/// and distinct per step.
struct SeqStep {
  std::span<const uint32_t> tokens;
  KvCache* kv = nullptr;
  std::span<float> logits;
  bool all_logits = false;           ///< logits of all T positions [T, vocab] instead of the last [vocab]
  const Variant* variant = nullptr;  ///< this sequence's compiled task mask (nullptr = dense)
  /// This sequence's weights (nullptr = the model's): another Weights of the same arch, normally
  /// Weights::with_overrides of the model's (a skill). A layer whose LayerWeights object is the same
  /// for every row runs once for all of them (one matmul per weight, read once per step); a layer
  /// the steps bind differently runs once per distinct LayerWeights over that group's rows. The
  /// embedding, final norm and lm_head are taken from each step's weights. `variant` must be
  /// compiled for these weights (gathered FFN rows are copies of them).
  const Weights* weights = nullptr;
};

/// Callbacks between blocks of a forward pass (nullptr members cost nothing). `hidden` is the
/// residual stream [R, hidden_size] of all R rows of the call (the steps' tokens stacked in order).
struct Taps {
  /// After decoder layer `layer` (its residual adds done; a layer a row's variant skips leaves
  /// that row as it was).
  std::function<void(size_t layer, std::span<const float> hidden, size_t rows)> layer_output;
  /// After the last layer, before the final norm.
  std::function<void(std::span<const float> hidden, size_t rows)> final_hidden;
};

/// Threading and memory: a Model runs one forward()/forward_batch() at a time — it is NOT safe to
/// call from several threads at once (its kernel thread pool is not re-entrant and the forward
/// pass uses scratch owned by the model). Callers serialize: the
/// server runs every step on its single engine thread; distinct Model objects are independent.
/// Inside a call the work is spread over the model's thread pool (matmul rows; attention over
/// (token, kv head) pairs) with results independent of the thread count. The scratch buffers
/// (activations, q/k/v, attention output, FFN intermediates, MoE routing) only grow, so a steady
/// decode loop allocates nothing in the model layer.
class Model {
 public:
  /// Binds `arch` to the tensors of `source` (kept by reference: must outlive the model). Each
  /// tensor goes through kernels::prepare_weight once (a tensor bound twice, as a tied embedding
  /// is, shares one prepared view): q4_tiled ones are copied into q4_block layout in huge pages the
  /// model owns, and source.release() gets their original bytes back piece by piece.
  /// Throws Error(Unsupported) for a layer type / feature this runtime does not execute or a
  /// dtype without a kernel (naming the tensor), Error(Parse) naming every missing required tensor
  /// or a tensor with an inconsistent shape.
  static std::unique_ptr<Model> bind(const cmf::ModelArch& arch, const TensorSource& source,
                                     const ModelOptions& opt = {});
  /// A model over weights bound before (shared, e.g. Weights::with_overrides of another model's).
  static std::unique_ptr<Model> create(std::shared_ptr<const Weights> weights, const ModelOptions& opt = {});
  ~Model();

  const cmf::ModelArch& arch() const noexcept;
  uint32_t vocab_size() const noexcept;
  /// The weights this model runs (shareable with other models).
  const std::shared_ptr<const Weights>& weights() const noexcept;

  /// Runs tokens (positions kv.size() .. kv.size()+T−1), appends their K/V, advances kv.size().
  /// logits: [vocab] (Last), [T, vocab] (All) or empty (None); T == 0 does nothing. Throws
  /// Error(InvalidArgument) when the cache would overflow, `logits` is shorter than the mode needs,
  /// or a token id is >= the embedding rows (nothing is touched then); Error(NonFinite) when a
  /// position whose logits are wanted reaches the lm_head with a NaN/±Inf hidden state (a corrupt
  /// weight; the KV cache has advanced by then). A prefill (T > 1) runs each
  /// weight as ONE kernels::matmul over all T tokens. Same code path as forward_batch with one
  /// SeqStep (all_logits = mode == All), hence bit-identical to it.
  void forward(std::span<const uint32_t> tokens, KvCache& kv, std::span<float> logits,
               LogitsMode mode = LogitsMode::Last, const Variant* variant = nullptr);

  /// Continuous batching: runs every step in ONE pass over the weights — each linear layer
  /// (q/k/v/o projections, MLP gate/up/down, lm_head) is a single kernels::matmul over the stacked
  /// rows of all sequences [Σ T_i, cols]; RoPE, the KV append and attention run per sequence at its
  /// own positions against its own cache; MoE layers route per token as in forward(). The result
  /// for each sequence is bit-identical to forward(step.tokens, *step.kv, step.logits, Last)
  /// (kernels::matmul is bit-identical to n matvecs). Each step runs under its own variant: steps
  /// with different task masks share the step, each row computing exactly what it would alone
  /// (a layer a row's variant skips is computed for the batch and discarded for that row). `taps`
  /// (optional) are called between blocks. `act` (optional) holds the pass's activations (the
  /// model's own when null): with act->keep, every layer's intermediates stay in act->kept. All
  /// steps are validated before any
  /// KV cache is touched; throws Error(InvalidArgument) for an empty token list, a null or
  /// repeated KV cache, a cache overflow, a token id >= the embedding rows, or a logits span
  /// that is non-empty but shorter than vocab (T·vocab with all_logits); Error(NonFinite) as
  /// forward() (after the caches have advanced). Steps with their own `weights` (SeqStep::weights)
  /// get the same bit-identity: each row computes what a model over its weights computes alone;
  /// Error(InvalidArgument) when a step's weights have another hidden size, layer count or
  /// vocabulary. Activations::keep keeps nothing for a layer the steps bind differently.
  void forward_batch(std::span<const SeqStep> steps, const Taps* taps = nullptr, Activations* act = nullptr);

  /// The pieces of forward_batch, for a caller that runs part of the model (the hidden state after
  /// layer L for routing, a trainer's tail, an MTP block): begin() validates the steps as
  /// forward_batch does and writes the embeddings into act.h [R, hidden]; run_layers(b, e) runs
  /// layers b..e−1 on act.h, storing each layer's K/V at the rows' positions; finish() calls the
  /// final-hidden tap, advances every KV cache by its step's tokens and writes the wanted logits.
  /// forward_batch = begin · run_layers(0, num_layers) · finish, bit for bit. Between begin and
  /// finish the steps and act must not change. Throws as forward_batch; run_layers
  /// Error(InvalidArgument) for b > e or e > num_layers.
  void begin(std::span<const SeqStep> steps, Activations& act);
  void run_layers(size_t begin, size_t end, std::span<const SeqStep> steps, Activations& act,
                  const Taps* taps = nullptr);
  void finish(std::span<const SeqStep> steps, Activations& act, const Taps* taps = nullptr);

  /// Compiles a task mask for this model, once: nullptr for none, and for a mask with every bit
  /// open (dropped, ENGINE-NOTES §3.11 — the result is identical either way). Throws
  /// Error(InvalidArgument) when the mask's shapes disagree with the arch or a layer's width.
  /// Layers at most opt.gather_at_most alive get their alive gate/up rows copied (GatheredFfn):
  /// the same results, fewer weight bytes read per token, Variant::gathered_bytes more memory.
  std::shared_ptr<const Variant> compile_variant(const cmf::TaskMask* mask,
                                                 const VariantOptions& opt = {}) const;
  /// Thread pool used by the kernels.
  /// The kernel table every matmul, attention and activation of this model uses.
  const kernels::Ops& ops() const noexcept;
  kernels::ThreadPool& pool() noexcept;

  struct Impl;

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cortiq::model
