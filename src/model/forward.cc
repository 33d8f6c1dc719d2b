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
    for (size_t t = 0; t < steps[s].tokens.size(); ++t, ++r) {
      row_seq[r] = s;
      row_pos[r] = start + t;
      act.row_var[r] = steps[s].variant;
      if (w.embed_rows)
        w.embed_rows->decode(steps[s].tokens[t], 1, std::span<float>(h + r * Hd, Hd));
      else
        kernels::decode_rows(w.embed, steps[s].tokens[t], 1, h + r * Hd);
      if (w.embed_mult != 1.0f) kernels::scale_inplace(h + r * Hd, Hd, w.embed_mult);
    }
  }
  if (act.keep) act.kept.assign(w.layers.size(), KeptLayer{});
}

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
  for (size_t li = begin; li < end; ++li) {
    const LayerWeights& L = *w.layers[li];
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
    KeptLayer* kept = act.keep && li < act.kept.size() ? &act.kept[li] : nullptr;
    attention_block(env, L, R, act, kept);
    ffn_block(env, L, R, act, kept);
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
  size_t cnt = 0, wanting = 0, only = 0;
  for (size_t s = 0, r0 = 0; s < S; ++s) {
    const size_t T = steps[s].tokens.size();
    if (!steps[s].logits.empty()) {
      const size_t first = steps[s].all_logits ? 0 : T - 1;
      for (size_t t = first; t < T; ++t, ++cnt)
        kernels::rmsnorm(h + (r0 + t) * Hd, w.final_norm.data(), Hd, a.rms_norm_eps, w.norm_style,
                         n + cnt * Hd);
      ++wanting;
      only = s;
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
  // One step wanting logits (forward(), or a batch with one finishing prefill): write in place.
  float* lg = wanting == 1 ? steps[only].logits.data() : grow(act.logits, cnt * V);
  impl_->ops.matmul(w.lm_head, n, cnt, lg, impl_->pool);
  const float lm = a.logit_multiplier ? static_cast<float>(*a.logit_multiplier) : 1.0f;
  if (lm != 1.0f) kernels::scale_inplace(lg, cnt * V, lm);
  if (a.final_logit_softcapping)
    kernels::softcap(lg, cnt * V, static_cast<float>(*a.final_logit_softcapping));
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
