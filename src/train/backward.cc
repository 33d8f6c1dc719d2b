// lm_loss_backward (backward.h): forward with kept activations, then the head, the layers in
// reverse and the embedding.
#include "train/backward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cmf/tensor_names.h"
#include "kernels/ops.h"
#include "kernels/transpose.h"
#include "train/block_backward.h"
#include "util/error.h"

namespace cortiq::train {

namespace {

using cmf::TensorRole;
using kernels::WeightView;

/// The f32 values of a bound weight (the trainer's weights are f32).
const float* f32_of(const WeightView& w) {
  if (w.dtype != quant::DType::F32)
    fail(ErrorKind::Unsupported, "train: tensor '{}' is {}; the backward pass needs f32 weights", w.name,
         quant::dtype_name(w.dtype));
  if (reinterpret_cast<uintptr_t>(w.payload.data()) % alignof(float) != 0)
    fail(ErrorKind::Unsupported, "train: tensor '{}' is not 4-byte aligned", w.name);
  return reinterpret_cast<const float*>(w.payload.data());
}

/// The zeroed-on-creation gradient entry of `name`, n floats.
float* grad(Grads& g, const std::string& name, size_t n) {
  auto& v = g[name];
  if (v.empty()) v.assign(n, 0.0f);
  if (v.size() != n)
    fail(ErrorKind::InvalidArgument, "train: gradient '{}' holds {} values, {} needed", name, v.size(), n);
  return v.data();
}

}  // namespace

void check_trainable(const model::Model& m) {
  const model::Weights& w = *m.weights();
  const auto& a = w.arch;
  const auto no = [](const char* what) {
    fail(ErrorKind::Unsupported, "train: the backward pass does not cover {}", what);
  };
  if (a.moe) no("mixture-of-experts layers");
  if (w.norm_style != kernels::NormStyle::Qwen) no("Gemma-style (1 + w) norms");
  if (a.hidden_act == cmf::HiddenAct::GeluTanh) no("GeGLU (gelu_tanh) FFNs");
  if (a.attn_logit_softcapping || a.final_logit_softcapping) no("logit softcapping");
  if (a.logit_multiplier && *a.logit_multiplier != 1.0) no("a logit multiplier");
  if (w.embed_mult != 1.0f) no("an embedding multiplier");
  for (const auto& L : w.layers) {
    if (L->is_moe) no("mixture-of-experts layers");
    if (L->sliding) no("sliding-window attention");
    if (L->sandwich) no("sandwich norms");
    if (L->out_gate) no("the attention output gate");
    for (const WeightView* v : {&L->q, &L->k, &L->v, &L->o, &L->ffn.gate, &L->ffn.up, &L->ffn.down})
      f32_of(*v);
  }
  f32_of(w.embed);
  f32_of(w.lm_head);
  if (m.ops().config().mode != kernels::MatmulMode::Exact)
    fail(ErrorKind::InvalidArgument,
         "train: the model must run exact kernels (ModelOptions::kernels mode Exact)");
}

double lm_loss_backward(model::Model& m, std::span<const uint32_t> tokens, Grads& g) {
  if (tokens.size() < 2)
    fail(ErrorKind::InvalidArgument, "train: a sequence needs at least 2 tokens, got {}", tokens.size());
  std::vector<uint32_t> targets(tokens.begin() + 1, tokens.end());
  targets.push_back(kIgnore);
  return lm_loss_backward(m, tokens, targets, g);
}

namespace {
double loss_impl(model::Model& m, std::span<const uint32_t> tokens, std::span<const uint32_t> targets,
                 Grads* gp, const BackwardOptions& opt);
}  // namespace

double lm_loss_backward(model::Model& m, std::span<const uint32_t> tokens, std::span<const uint32_t> targets,
                        Grads& g) {
  return loss_impl(m, tokens, targets, &g, {});
}

double lm_loss_backward(model::Model& m, std::span<const uint32_t> tokens, std::span<const uint32_t> targets,
                        Grads& g, const BackwardOptions& opt) {
  return loss_impl(m, tokens, targets, &g, opt);
}

double lm_loss(model::Model& m, std::span<const uint32_t> tokens, std::span<const uint32_t> targets) {
  return loss_impl(m, tokens, targets, nullptr, {});
}

namespace {
double loss_impl(model::Model& m, std::span<const uint32_t> tokens, std::span<const uint32_t> targets,
                 Grads* gp, const BackwardOptions& opt) {
  check_trainable(m);
  const model::Weights& w = *m.weights();
  const auto& a = w.arch;
  const size_t T = tokens.size(), H = a.hidden_size, V = w.lm_head.rows(), hd = a.head_dim,
               nkv = a.num_kv_heads;
  if (T == 0 || targets.size() != T)
    fail(ErrorKind::InvalidArgument, "train: {} inputs and {} targets", T, targets.size());
  if (std::all_of(targets.begin(), targets.end(), [](uint32_t x) { return x == kIgnore; }))
    fail(ErrorKind::InvalidArgument, "train: no target to predict");
  for (uint32_t x : targets)
    if (x != kIgnore && x >= V) fail(ErrorKind::InvalidArgument, "train: target id {} >= vocab {}", x, V);
  if (a.max_position_embeddings && T > a.max_position_embeddings)
    fail(ErrorKind::InvalidArgument, "train: {} tokens exceed the context of {}", T,
         a.max_position_embeddings);

  // Forward, keeping every layer's intermediates and the final hidden state.
  model::KvCache kv(a, T);
  std::vector<float> logits(T * V), h_final;
  model::Activations act;
  act.keep = gp != nullptr;
  model::Taps taps;
  taps.final_hidden = [&](std::span<const float> h, size_t) { h_final.assign(h.begin(), h.end()); };
  const model::Variant* var = opt.variant;
  if (var) {
    for (size_t l = 0; l < var->layer_alive.size(); ++l) {
      if (!var->layer_alive[l]) fail(ErrorKind::Unsupported, "train: the variant closes layer {}", l);
      for (uint8_t h : var->head_alive[l])
        if (!h) fail(ErrorKind::Unsupported, "train: the variant closes a head of layer {}", l);
    }
    if (!var->expert_alive.empty()) fail(ErrorKind::Unsupported, "train: the variant restricts experts");
  }
  if (var && opt.ffn_scale_grad) opt.ffn_scale_grad->resize(w.layers.size());
  const model::SeqStep step{tokens, &kv, logits, true, var};
  m.forward_batch(std::span<const model::SeqStep>(&step, 1), &taps, &act);

  // Loss and the head.
  std::vector<float> dlogits(T * V);
  if (opt.first_layer > w.layers.size())
    fail(ErrorKind::InvalidArgument, "train: first_layer {} > {} layers", opt.first_layer, w.layers.size());
  double loss = cross_entropy(logits.data(), T, V, targets, kIgnore, dlogits.data());
  if (opt.ce_weight != 1.0) {
    loss *= opt.ce_weight;
    for (float& d : dlogits) d *= static_cast<float>(opt.ce_weight);
  }
  if (opt.kl_weight != 0.0) {
    if (opt.teacher_logits.size() != T * V)
      fail(ErrorKind::InvalidArgument, "train: teacher logits hold {} values, {} needed",
           opt.teacher_logits.size(), T * V);
    loss += kl_to_teacher(logits.data(), opt.teacher_logits.data(), T, V, targets, kIgnore, opt.kl_weight,
                          dlogits.data());
  }
  if (!gp) return loss;
  Grads& g = *gp;
  using WG = BackwardOptions::WeightGrads;
  const bool all_w = opt.weight_grads == WG::All, ffn_w = opt.weight_grads != WG::None;
  // The gradient entry of a weight, or null when opt.weight_grads leaves it out.
  const auto wgrad = [&](bool wanted, const std::string& name, size_t n) -> float* {
    return wanted ? grad(g, name, n) : nullptr;
  };
  std::vector<float> n(T * H), dn(T * H, 0.0f), dh(T * H, 0.0f);
  for (size_t t = 0; t < T; ++t)
    kernels::rmsnorm(h_final.data() + t * H, w.final_norm.data(), H, a.rms_norm_eps, w.norm_style,
                     n.data() + t * H);
  const bool tied = w.lm_head.payload.data() == w.embed.payload.data();
  const std::string head_name = cmf::tensor_name(tied ? TensorRole::Embed : TensorRole::Head);
  linear_backward(m.ops(), m.pool(), f32_of(w.lm_head), V, H, n.data(), T, dlogits.data(), dn.data(),
                  wgrad(all_w, head_name, V * H), nullptr);
  rmsnorm_backward(h_final.data(), w.final_norm.data(), T, H, a.rms_norm_eps, dn.data(), dh.data(),
                   wgrad(all_w, cmf::tensor_name(TensorRole::FinalNorm), H));

  // The layers in reverse: dh is the gradient of the residual leaving the layer.
  for (size_t li = w.layers.size(); li-- > opt.first_layer;) {
    const model::LayerWeights& L = *w.layers[li];
    const model::KeptLayer& K = act.kept[li];
    const auto l = static_cast<uint32_t>(li);
    const size_t W = L.ffn.width, nh = L.n_heads, qd = nh * hd, kd = nkv * hd;
    const auto name = [l](TensorRole r) { return cmf::tensor_name(r, l); };
    // FFN: h_out = h_mid + down·(silu(gate·x) ⊙ up·x), x = rms(h_mid)·post_attn_norm
    std::vector<float> dact(T * W, 0.0f), dgate(T * W, 0.0f), dup(T * W, 0.0f), dx(T * H, 0.0f);
    linear_backward(m.ops(), m.pool(), f32_of(L.ffn.down), H, W, K.act.data(), T, dh.data(), dact.data(),
                    wgrad(ffn_w, name(TensorRole::FfnDown), H * W), nullptr);
    // The variant's soft gates and neuron mask act on the activation: act' = act ⊙ alive ⊙ scale.
    const std::vector<uint8_t>* alive = var && !var->ffn_alive[li].empty() ? &var->ffn_alive[li] : nullptr;
    const std::vector<float>* sc =
        var && li < var->ffn_scale.size() && !var->ffn_scale[li].empty() ? &var->ffn_scale[li] : nullptr;
    if (sc) {
      if (opt.ffn_scale_grad) {
        auto& ds = (*opt.ffn_scale_grad)[li];
        if (ds.empty()) ds.assign(W, 0.0f);
        for (size_t i = 0; i < W; ++i) {
          if (alive && !(*alive)[i]) continue;
          double s = 0.0;
          for (size_t t = 0; t < T; ++t) {
            const double gv = K.gate[t * W + i];
            s += dact[t * W + i] * gv / (1.0 + std::exp(-gv)) * K.up[t * W + i];
          }
          ds[i] += static_cast<float>(s);
        }
      }
      for (size_t t = 0; t < T; ++t)
        for (size_t i = 0; i < W; ++i) dact[t * W + i] *= (*sc)[i];
    }
    if (alive)
      for (size_t t = 0; t < T; ++t)
        for (size_t i = 0; i < W; ++i)
          if (!(*alive)[i]) dact[t * W + i] = 0.0f;
    swiglu_backward(K.gate.data(), K.up.data(), T * W, dact.data(), dgate.data(), dup.data());
    // The input of gate/up (then of q/k/v), transposed once for both; only weight gradients read it.
    std::vector<float> xt(ffn_w ? H * T : 0);
    if (ffn_w) kernels::transpose_f32(K.x_ffn.data(), T, H, xt.data());
    linear_backward(m.ops(), m.pool(), f32_of(L.ffn.gate), W, H, K.x_ffn.data(), T, dgate.data(), dx.data(),
                    wgrad(ffn_w, name(TensorRole::FfnGate), W * H), nullptr, xt.data());
    linear_backward(m.ops(), m.pool(), f32_of(L.ffn.up), W, H, K.x_ffn.data(), T, dup.data(), dx.data(),
                    wgrad(ffn_w, name(TensorRole::FfnUp), W * H), nullptr, xt.data());
    rmsnorm_backward(K.h_mid.data(), L.post_attn_norm.data(), T, H, a.rms_norm_eps, dx.data(), dh.data(),
                     wgrad(all_w, name(TensorRole::PostAttnNorm), H));
    if (!opt.through_attention) continue;  // truncated: dh_in = dh_mid
    // Attention: h_mid = h_in + o·attn(rope(norm(q·x + bq)), rope(norm(k·x + bk)), v·x + bv)
    std::vector<float> datt(T * qd, 0.0f), dq(T * qd, 0.0f), dk(T * kd, 0.0f), dv(T * kd, 0.0f);
    linear_backward(m.ops(), m.pool(), f32_of(L.o), H, qd, K.att.data(), T, dh.data(), datt.data(),
                    wgrad(all_w, name(TensorRole::O), H * qd), nullptr);
    const float scale = static_cast<float>(
        1.0 / std::sqrt(a.query_pre_attn_scalar ? *a.query_pre_attn_scalar : static_cast<double>(hd)));
    attention_backward(m.ops(), m.pool(), K.q.data(), K.k.data(), K.v.data(), T, nh, nkv, hd, scale,
                       datt.data(), dq.data(), dk.data(), dv.data());
    for (size_t t = 0; t < T; ++t) {
      rope_backward(dq.data() + t * qd, nh, hd, *L.rope, static_cast<int64_t>(t));
      rope_backward(dk.data() + t * kd, nkv, hd, *L.rope, static_cast<int64_t>(t));
    }
    const bool bias = !L.q_bias.empty();
    // q/k norms: the pre-norm projections are recomputed (one matmul each), not kept.
    const auto norm_back = [&](const WeightView& proj, const std::vector<float>& b,
                               const std::vector<float>& nw, size_t rows, TensorRole role,
                               std::vector<float>& d) {
      if (nw.empty()) return;
      std::vector<float> lin(T * rows), dlin(T * rows, 0.0f);
      m.ops().matmul(proj, K.x_attn.data(), T, lin.data(), m.pool());
      if (!b.empty())
        for (size_t t = 0; t < T; ++t)
          for (size_t i = 0; i < rows; ++i) lin[t * rows + i] += b[i];
      rmsnorm_backward(lin.data(), nw.data(), T * rows / hd, hd, a.rms_norm_eps, d.data(), dlin.data(),
                       wgrad(all_w, name(role), hd));
      d.swap(dlin);
    };
    norm_back(L.q, L.q_bias, L.q_norm, qd, TensorRole::QNorm, dq);
    norm_back(L.k, L.k_bias, L.k_norm, kd, TensorRole::KNorm, dk);
    std::fill(dx.begin(), dx.end(), 0.0f);
    if (all_w) kernels::transpose_f32(K.x_attn.data(), T, H, xt.data());
    linear_backward(m.ops(), m.pool(), f32_of(L.q), qd, H, K.x_attn.data(), T, dq.data(), dx.data(),
                    wgrad(all_w, name(TensorRole::Q), qd * H),
                    bias && all_w ? grad(g, name(TensorRole::QBias), qd) : nullptr, xt.data());
    linear_backward(m.ops(), m.pool(), f32_of(L.k), kd, H, K.x_attn.data(), T, dk.data(), dx.data(),
                    wgrad(all_w, name(TensorRole::K), kd * H),
                    bias && all_w ? grad(g, name(TensorRole::KBias), kd) : nullptr, xt.data());
    linear_backward(m.ops(), m.pool(), f32_of(L.v), kd, H, K.x_attn.data(), T, dv.data(), dx.data(),
                    wgrad(all_w, name(TensorRole::V), kd * H),
                    bias && all_w ? grad(g, name(TensorRole::VBias), kd) : nullptr, xt.data());
    rmsnorm_backward(K.h_in.data(), L.input_norm.data(), T, H, a.rms_norm_eps, dx.data(), dh.data(),
                     wgrad(all_w, name(TensorRole::InputNorm), H));
  }
  if (opt.first_layer > 0 || !all_w) return loss;
  // The embedding: row tokens[t] received h[t].
  float* de = grad(g, cmf::tensor_name(TensorRole::Embed), w.embed.rows() * H);
  for (size_t t = 0; t < T; ++t)
    for (size_t i = 0; i < H; ++i) de[tokens[t] * H + i] += dh[t * H + i];
  return loss;
}

}  // namespace

}  // namespace cortiq::train
