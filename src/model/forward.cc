// The forward pass as a composition of blocks: embed (begin), the layers (run_layers: attention,
// FFN, residuals; a layer a row's variant skips passes its residual through), taps, and finish (the
// final norm and the lm_head).
//
// Rows of the call are the stacked tokens of all steps, [R = Σ T_i, ·]; every linear layer is one
// kernels::matmul over the R rows (bit-identical to R matvecs), so a row's result does not depend
// on which other rows share the call.

#include <algorithm>
#include <cmath>

#include "kernels/elementwise.h"
#include "model/model_impl.h"
#include "util/error.h"

namespace cortiq::model {

namespace {
size_t total_rows(std::span<const SeqStep> steps) {
  size_t R = 0;
  for (const SeqStep& st : steps) R += st.tokens.size();
  return R;
}
}  // namespace

void Model::begin(std::span<const SeqStep> steps, Activations& act) {
  const Weights& w = *impl_->w;
  const size_t S = steps.size(), Hd = w.arch.hidden_size, V = w.lm_head.rows();
  // Validate everything first: a failing call leaves every KV cache untouched.
  for (size_t s = 0; s < S; ++s) {
    const SeqStep& st = steps[s];
    if (!st.kv) fail(ErrorKind::InvalidArgument, "forward_batch: step {} has no KV cache", s);
    if (st.tokens.empty()) fail(ErrorKind::InvalidArgument, "forward_batch: step {} has no tokens", s);
    for (size_t j = 0; j < s; ++j)
      if (steps[j].kv == st.kv)
        fail(ErrorKind::InvalidArgument, "forward_batch: steps {} and {} share one KV cache", j, s);
    const size_t start = st.kv->size();
    if (start + st.tokens.size() > st.kv->capacity())
      fail(ErrorKind::InvalidArgument,
           "context overflow: {} positions requested, KV capacity is {} (step {})", start + st.tokens.size(),
           st.kv->capacity(), s);
    const size_t need = st.all_logits ? st.tokens.size() * V : V;
    if (!st.logits.empty() && st.logits.size() < need)
      fail(ErrorKind::InvalidArgument, "logits buffer has {} floats, {} needed (step {})", st.logits.size(),
           need, s);
    if (const Weights* sw = st.weights;
        sw && sw != &w &&
        (sw->arch.hidden_size != w.arch.hidden_size || sw->layers.size() != w.layers.size() ||
         sw->lm_head.rows() != V || sw->embed.rows() != w.embed.rows()))
      fail(ErrorKind::InvalidArgument,
           "forward_batch: step {} has weights of another shape (hidden {}, {} layers, vocab {}) than the "
           "model's (hidden {}, {} layers, vocab {})",
           s, sw->arch.hidden_size, sw->layers.size(), sw->lm_head.rows(), w.arch.hidden_size,
           w.layers.size(), V);
    for (uint32_t id : st.tokens)
      if (id >= w.embed.rows())
        fail(ErrorKind::InvalidArgument, "token id {} >= embedding rows {} (step {})", id, w.embed.rows(), s);
  }
  const size_t R = total_rows(steps);
  size_t* row_seq = grow(act.row_seq, R);
  size_t* row_pos = grow(act.row_pos, R);
  float* h = grow(act.h, R * Hd);
  grow(act.n, R * Hd);
  grow(act.tmp, R * Hd);
  act.row_var.resize(R);
  for (size_t s = 0, r = 0; s < S; ++s) {
    const size_t start = steps[s].kv->size();
    const Weights& sw = steps[s].weights ? *steps[s].weights : w;
    for (size_t t = 0; t < steps[s].tokens.size(); ++t, ++r) {
      row_seq[r] = s;
      row_pos[r] = start + t;
      act.row_var[r] = steps[s].variant;
      if (sw.embed_rows)
        sw.embed_rows->decode(steps[s].tokens[t], 1, std::span<float>(h + r * Hd, Hd));
      else
        kernels::decode_rows(sw.embed, steps[s].tokens[t], 1, h + r * Hd);
      if (sw.embed_mult != 1.0f) kernels::scale_inplace(h + r * Hd, Hd, sw.embed_mult);
    }
  }
  if (act.keep) act.kept.assign(w.layers.size(), KeptLayer{});
}

namespace {
/// A layer the steps bind differently (SeqStep::weights): its rows, grouped by the LayerWeights they
/// run (act.row_layer), each group gathered into `g`, run through the layer alone and scattered
/// back into act.h — bit-identical per row to running the group alone (kernels::matmul contract).
void run_layer_groups(const BlockEnv& env, size_t R, Activations& act, Activations& g) {
  const size_t Hd = env.arch.hidden_size;
  std::vector<size_t>& rows = act.group_rows;
  for (size_t r0 = 0; r0 < R; ++r0) {
    const LayerWeights* P = act.row_layer[r0];
    bool seen = false;
    for (size_t r = 0; r < r0 && !seen; ++r) seen = act.row_layer[r] == P;
    if (seen) continue;
    rows.clear();
    for (size_t r = r0; r < R; ++r)
      if (act.row_layer[r] == P) rows.push_back(r);
    const size_t G = rows.size();
    g.row_pos.resize(G);
    g.row_kv.resize(G);
    g.row_heads.resize(G);
    g.row_neurons.resize(G);
    g.row_gathered.resize(G);
    g.row_scale.resize(G);
    g.row_experts.resize(G);
    for (size_t i = 0; i < G; ++i) {
      const size_t r = rows[i];
      g.row_pos[i] = act.row_pos[r];
      g.row_kv[i] = act.row_kv[r];
      g.row_heads[i] = act.row_heads[r];
      g.row_neurons[i] = act.row_neurons[r];
      g.row_gathered[i] = act.row_gathered[r];
      g.row_scale[i] = act.row_scale[r];
      g.row_experts[i] = act.row_experts[r];
    }
    kernels::gather_rows_f32(act.h.data(), rows, Hd, grow(g.h, G * Hd));
    grow(g.n, G * Hd);
    grow(g.tmp, G * Hd);
    attention_block(env, *P, G, g, nullptr);
    ffn_block(env, *P, G, g, nullptr);
    kernels::scatter_rows_f32(g.h.data(), rows, Hd, act.h.data());
  }
}
}  // namespace

void Model::run_layers(size_t begin, size_t end, std::span<const SeqStep> steps, Activations& act,
                       const Taps* taps) {
  const Weights& w = *impl_->w;
  if (begin > end || end > w.layers.size())
    fail(ErrorKind::InvalidArgument, "run_layers({}, {}): the model has {} layers", begin, end,
         w.layers.size());
  const size_t R = total_rows(steps), Hd = w.arch.hidden_size;
  const BlockEnv env = impl_->env();
  act.row_kv.resize(R);
  act.row_heads.resize(R);
  act.row_neurons.resize(R);
  act.row_gathered.resize(R);
  act.row_scale.resize(R);
  act.row_experts.resize(R);
  act.row_layer.resize(R);
  for (size_t li = begin; li < end; ++li) {
    // Each row's weights for this layer: the step's own (a skill) or the model's. Untouched layers
    // of a skill are the model's object, so the common case is one group.
    bool mixed = false;
    for (size_t r = 0; r < R; ++r) {
      const Weights* sw = steps[act.row_seq[r]].weights;
      act.row_layer[r] = sw ? sw->layers[li].get() : w.layers[li].get();
      mixed = mixed || act.row_layer[r] != act.row_layer[0];
    }
    const LayerWeights& L = R ? *act.row_layer[0] : *w.layers[li];
    float* h = act.h.data();
    // A layer a row's variant skips passes its residual through (§3.11): the layer runs for the
    // batch, and those rows get their residual back afterwards (rows never mix, so the others are
    // what they would be alone). No row alive: the layer is not run at all.
    act.dead_rows.clear();
    for (size_t r = 0; r < R; ++r) {
      const Variant* v = act.row_var[r];
      if (v && !v->layer_alive[li]) act.dead_rows.push_back(r);
      act.row_kv[r] = &steps[act.row_seq[r]].kv->layer(li);
      act.row_heads[r] = v ? v->head_alive[li].data() : nullptr;
      act.row_neurons[r] = v && !v->ffn_alive[li].empty() ? v->ffn_alive[li].data() : nullptr;
      act.row_gathered[r] = v ? v->ffn_gathered[li].get() : nullptr;
      act.row_scale[r] =
          v && li < v->ffn_scale.size() && !v->ffn_scale[li].empty() ? v->ffn_scale[li].data() : nullptr;
      act.row_experts[r] = v && !v->expert_alive.empty() ? &v->expert_alive[li] : nullptr;
    }
    if (act.dead_rows.size() == R) {
      if (taps && taps->layer_output) taps->layer_output(li, std::span<const float>(h, R * Hd), R);
      continue;
    }
    if (!act.dead_rows.empty()) {
      act.dead_h.resize(act.dead_rows.size() * Hd);
      kernels::gather_rows_f32(h, act.dead_rows, Hd, act.dead_h.data());
    }
    if (mixed) {
      run_layer_groups(env, R, act, impl_->group);
    } else {
      KeptLayer* kept = act.keep && li < act.kept.size() ? &act.kept[li] : nullptr;
      attention_block(env, L, R, act, kept);
      ffn_block(env, L, R, act, kept);
    }
    kernels::scatter_rows_f32(act.dead_h.data(), act.dead_rows, Hd, h);
    if (taps && taps->layer_output) taps->layer_output(li, std::span<const float>(h, R * Hd), R);
  }
}

void Model::finish(std::span<const SeqStep> steps, Activations& act, const Taps* taps) {
  const Weights& w = *impl_->w;
  const auto& a = w.arch;
  const size_t S = steps.size(), Hd = a.hidden_size, V = w.lm_head.rows(), R = total_rows(steps);
  float* h = act.h.data();
  float* n = act.n.data();
  if (taps && taps->final_hidden) taps->final_hidden(std::span<const float>(h, R * Hd), R);
  for (const SeqStep& st : steps) st.kv->set_size(st.kv->size() + st.tokens.size());

  // lm_head: one matmul over the wanted rows of every step (its last row, or all its rows).
  // Steps with their own weights (SeqStep::weights) take their final norm and lm_head from them;
  // steps whose heads differ get one matmul each.
  auto own = [&](size_t s) -> const Weights& { return steps[s].weights ? *steps[s].weights : w; };
  size_t cnt = 0, wanting = 0, only = 0;
  const kernels::WeightView* head = nullptr;
  bool one_head = true;
  for (size_t s = 0, r0 = 0; s < S; ++s) {
    const size_t T = steps[s].tokens.size();
    if (!steps[s].logits.empty()) {
      const Weights& sw = own(s);
      const size_t first = steps[s].all_logits ? 0 : T - 1;
      for (size_t t = first; t < T; ++t, ++cnt)
        kernels::rmsnorm(h + (r0 + t) * Hd, sw.final_norm.data(), Hd, a.rms_norm_eps, w.norm_style,
                         n + cnt * Hd);
      ++wanting;
      only = s;
      if (!head) head = &sw.lm_head;
      one_head = one_head && sw.lm_head.payload.data() == head->payload.data();
    }
    r0 += T;
  }
  if (cnt == 0) return;
  // A NaN or ±Inf here would turn every logit into NaN and greedy decoding into token 0 forever:
  // refuse loudly instead (a flipped weight byte, an overflowing checkpoint). Hd floats per row.
  if (const size_t bad = kernels::first_non_finite(n, cnt * Hd); bad != kernels::npos)
    fail(ErrorKind::NonFinite,
         "the final hidden state of output row {} is {} (component {}): a weight of this file is "
         "corrupt or out of range; `cortiq verify` checks every tensor's hash",
         bad / Hd, n[bad], bad % Hd);
  const float lm = a.logit_multiplier ? static_cast<float>(*a.logit_multiplier) : 1.0f;
  auto post = [&](float* lg, size_t rows) {
    if (lm != 1.0f) kernels::scale_inplace(lg, rows * V, lm);
    if (a.final_logit_softcapping)
      kernels::softcap(lg, rows * V, static_cast<float>(*a.final_logit_softcapping));
  };
  if (!one_head) {  // one matmul per step, straight into its logits
    for (size_t s = 0, i = 0; s < S; ++s) {
      if (steps[s].logits.empty()) continue;
      const size_t rows = steps[s].all_logits ? steps[s].tokens.size() : 1;
      impl_->ops.matmul(own(s).lm_head, n + i * Hd, rows, steps[s].logits.data(), impl_->pool);
      post(steps[s].logits.data(), rows);
      i += rows;
    }
    return;
  }
  // One step wanting logits (forward(), or a batch with one finishing prefill): write in place.
  float* lg = wanting == 1 ? steps[only].logits.data() : grow(act.logits, cnt * V);
  impl_->ops.matmul(*head, n, cnt, lg, impl_->pool);
  post(lg, cnt);
  if (wanting == 1) return;
  for (size_t s = 0, i = 0; s < S; ++s) {
    if (steps[s].logits.empty()) continue;
    const size_t rows = steps[s].all_logits ? steps[s].tokens.size() : 1;
    std::copy(lg + i * V, lg + (i + rows) * V, steps[s].logits.begin());
    i += rows;
  }
}

void Model::forward(std::span<const uint32_t> tokens, KvCache& kv, std::span<float> logits, LogitsMode mode,
                    const Variant* variant) {
  const size_t T = tokens.size(), V = impl_->w->lm_head.rows(), start = kv.size();
  if (T == 0) return;
  if (start + T > kv.capacity())
    fail(ErrorKind::InvalidArgument, "context overflow: {} positions requested, KV capacity is {}", start + T,
         kv.capacity());
  const size_t need = mode == LogitsMode::All ? T * V : mode == LogitsMode::Last ? V : 0;
  if (logits.size() < need)
    fail(ErrorKind::InvalidArgument, "logits buffer has {} floats, {} needed", logits.size(), need);
  for (uint32_t id : tokens)
    if (id >= impl_->w->embed.rows())
      fail(ErrorKind::InvalidArgument, "token id {} >= embedding rows {}", id, impl_->w->embed.rows());
  const SeqStep step{tokens, &kv, logits.first(need), mode == LogitsMode::All, variant};
  forward_batch(std::span<const SeqStep>(&step, 1));
}

void Model::forward_batch(std::span<const SeqStep> steps, const Taps* taps, Activations* act) {
  if (steps.empty()) return;
  Activations& A = act ? *act : impl_->act;
  begin(steps, A);
  run_layers(0, impl_->w->layers.size(), steps, A, taps);
  finish(steps, A, taps);
}

}  // namespace cortiq::model
