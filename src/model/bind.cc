// Weights::bind and Weights::with_overrides: every tensor resolved by its canonical name once
// (cmf/tensor_names), prepared for the kernels, shapes checked against the arch.
#include <algorithm>
#include <cmath>
#include <map>

#include "cmf/tensor_names.h"
#include "model/weights.h"
#include "util/error.h"

namespace cortiq::model {

using R = cmf::TensorRole;
constexpr auto name = [](R role, uint32_t layer = 0, uint32_t expert = 0) {
  return cmf::tensor_name(role, layer, expert);
};

namespace {

std::vector<float> decode_vector(const WeightView& w) {
  std::vector<float> v(w.numel());
  kernels::decode_rows(w, 0, w.rows(), v.data());
  return v;
}

struct Binder {
  const TensorSource& src;
  // Views prepared so far, by the payload bytes they came from: a tensor bound twice (tied
  // embeddings: embed_tokens and lm_head; a layer an overlay re-binds) is prepared, and for
  // q4_tiled copied, once.
  std::map<const uint8_t*, WeightView>& prepared;
  std::vector<std::string> missing{};
  HugeArena arena{};  // the q4_tiled copies (views keep their buffers alive)

  // Found tensors are prepared for the kernels (kernels::prepare_weight: per-row values derived
  // once; q4_tiled re-laid out as q4_block, the source's pages handed back as they are copied).
  std::optional<WeightView> opt(const std::string& name) {
    auto w = src.find(name);
    if (!w || w->payload.empty()) return w;
    const uint8_t* key = w->payload.data();
    if (auto it = prepared.find(key); it != prepared.end() && it->second.shape == w->shape) {
      WeightView v = it->second;
      v.name = w->name;
      return v;
    }
    kernels::prepare_weight(*w, {[this](std::span<const uint8_t> b) { src.release(b); }, &arena});
    prepared.insert_or_assign(key, *w);
    return w;
  }
  WeightView req(const std::string& name) {
    auto w = opt(name);
    if (!w) {
      missing.push_back(name);
      return WeightView{quant::DType::F32, {}, {}, name};
    }
    return *w;
  }
  // A matrix [rows, cols] with a kernel; rows == 0 / cols == 0 means "any".
  void check_mat(const WeightView& w, uint64_t rows, uint64_t cols) {
    if (w.shape.empty()) return;  // missing, reported later
    kernels::check_weight(w);
    if ((rows && w.rows() != rows) || (cols && w.cols() != cols))
      fail(ErrorKind::Parse, "tensor '{}': shape [{}, {}] but the arch implies [{}, {}]", w.name, w.rows(),
           w.cols(), rows ? std::to_string(rows) : "*", cols ? std::to_string(cols) : "*");
  }
  std::vector<float> vec(const WeightView& w, uint64_t n) {
    if (w.shape.empty()) return {};
    kernels::check_weight(w);
    if (w.numel() != n) fail(ErrorKind::Parse, "tensor '{}': {} elements, expected {}", w.name, w.numel(), n);
    return decode_vector(w);
  }
  std::vector<float> req_vec(const std::string& name, uint64_t n) { return vec(req(name), n); }
  std::vector<float> opt_vec(const std::string& name, uint64_t n) {
    auto w = opt(name);
    return w ? vec(*w, n) : std::vector<float>{};
  }
  FfnWeights ffn(const std::string& gate, const std::string& up, const std::string& down, uint64_t hidden) {
    FfnWeights f;
    f.gate = req(gate);
    f.up = req(up);
    f.down = req(down);
    if (!f.gate.shape.empty()) {
      f.width = f.gate.rows();
      check_mat(f.gate, 0, hidden);
      check_mat(f.up, f.width, hidden);
      check_mat(f.down, hidden, f.width);
    }
    return f;
  }
  void throw_missing(const cmf::ModelArch& a) const {
    if (missing.empty()) return;
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    fail(ErrorKind::Parse, "arch '{}': missing required tensor(s): {}", a.arch_name, list);
  }
};

/// Looks a name up in `first`, then in `second` (an overlay over the base's source).
class LayeredSource : public TensorSource {
 public:
  LayeredSource(const TensorSource& first, const TensorSource& second) : a_(first), b_(second) {}
  std::optional<WeightView> find(std::string_view name) const override {
    if (auto w = a_.find(name)) return w;
    return b_.find(name);
  }
  // Only overlay tensors are prepared afresh (base's are in Weights::prepared already).
  void release(std::span<const uint8_t> bytes) const override { a_.release(bytes); }
  std::vector<std::string> names() const override { return b_.names(); }

 private:
  const TensorSource& a_;
  const TensorSource& b_;
};

void check_arch(const cmf::ModelArch& a) {
  if (a.mla)
    fail(ErrorKind::Unsupported, "arch '{}': MLA attention is not supported by this runtime", a.arch_name);
  if (a.g3n) fail(ErrorKind::Unsupported, "arch '{}': Gemma-3n stacks are not supported", a.arch_name);
  if (a.num_loops != 1)
    fail(ErrorKind::Unsupported, "arch '{}': num_loops {} is not supported", a.arch_name, a.num_loops);
  if (a.global_head_dim)
    fail(ErrorKind::Unsupported, "arch '{}': global_head_dim is not supported", a.arch_name);
  if (a.hidden_act == cmf::HiddenAct::Situ)
    fail(ErrorKind::Unsupported, "arch '{}': hidden_act situ is not supported", a.arch_name);
  if (a.moe && a.moe->router_sigmoid)
    fail(ErrorKind::Unsupported, "arch '{}': sigmoid routers are not supported", a.arch_name);
  if (a.layer_types.size() != a.num_layers)
    fail(ErrorKind::Parse, "arch: layer_types has {} entries, num_layers is {}", a.layer_types.size(),
         a.num_layers);
  if (a.num_kv_heads == 0 || a.head_dim == 0 || a.hidden_size == 0)
    fail(ErrorKind::Parse, "arch: hidden_size, head_dim and num_kv_heads must be > 0");
}

/// Embedding, head and final norm.
void bind_globals(Weights& w, Binder& b) {
  const cmf::ModelArch& a = w.arch;
  const uint64_t H = a.hidden_size;
  w.embed = b.req(name(R::Embed));
  b.check_mat(w.embed, 0, H);
  w.final_norm = b.req_vec(name(R::FinalNorm), H);
  if (auto lm = b.opt(name(R::Head))) {
    w.lm_head = *lm;
    b.check_mat(w.lm_head, 0, H);
  } else if (a.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    b.missing.push_back(name(R::Head) + " (tie_word_embeddings is false)");
  }
  w.embed_rows.reset();
  if (!quant::is_float_dtype(w.embed.dtype) && kernels::has_kernel(w.embed.dtype) && !w.embed.shape.empty())
    w.embed_rows.emplace(w.embed.dtype, w.embed.shape, w.embed.payload, w.embed.name);
}

/// Layer l of `a`; `rope` = {global, local} tables.
std::shared_ptr<const LayerWeights> bind_layer(const cmf::ModelArch& a, uint32_t l, Binder& b,
                                               const std::shared_ptr<const kernels::RopeTable> (&rope)[2]) {
  const uint64_t H = a.hidden_size, hd = a.head_dim, nkv = a.num_kv_heads;
  const bool any_sliding_tag = std::any_of(a.layer_types.begin(), a.layer_types.end(),
                                           [](auto t) { return t == cmf::LayerType::SlidingAttention; });
  auto out = std::make_shared<LayerWeights>();
  LayerWeights& L = *out;
  const auto lt = a.layer_types[l];
  if (lt != cmf::LayerType::FullAttention && lt != cmf::LayerType::SlidingAttention)
    fail(ErrorKind::Unsupported, "layer {}: layer type {} is not supported by this runtime", l,
         cmf::layer_type_name(lt));
  L.n_heads = a.attention_heads_per_layer ? (*a.attention_heads_per_layer)[l] : a.num_attention_heads;
  if (L.n_heads == 0 || L.n_heads % nkv != 0)
    fail(ErrorKind::Parse, "layer {}: {} attention heads not divisible by num_kv_heads {}", l, L.n_heads,
         nkv);
  L.sliding = lt == cmf::LayerType::SlidingAttention;
  if (!any_sliding_tag && a.sliding_window_pattern && *a.sliding_window_pattern > 0)
    L.sliding = (l + 1) % *a.sliding_window_pattern != 0;
  if (L.sliding && !a.sliding_window)
    fail(ErrorKind::Parse, "layer {} is SlidingAttention but arch.sliding_window is absent", l);
  L.rope = rope[(L.sliding && a.rope_local_base_freq) ? 1 : 0];

  const uint64_t qd = L.n_heads * hd, kd = nkv * hd;
  L.input_norm = b.req_vec(name(R::InputNorm, l), H);
  L.post_attn_norm = b.req_vec(name(R::PostAttnNorm, l), H);
  L.pre_ffn_norm = b.opt_vec(name(R::PreFfnNorm, l), H);
  L.sandwich = !L.pre_ffn_norm.empty();
  if (L.sandwich) L.post_ffn_norm = b.req_vec(name(R::PostFfnNorm, l), H);

  L.q = b.req(name(R::Q, l));
  L.k = b.req(name(R::K, l));
  L.v = b.req(name(R::V, l));
  L.o = b.req(name(R::O, l));
  if (!L.q.shape.empty()) {
    L.out_gate = L.q.rows() == 2 * qd;
    b.check_mat(L.q, L.out_gate ? 2 * qd : qd, H);
  }
  b.check_mat(L.k, kd, H);
  b.check_mat(L.v, kd, H);
  b.check_mat(L.o, H, qd);
  if (b.opt(name(R::QBias, l)) || b.opt(name(R::KBias, l)) || b.opt(name(R::VBias, l))) {
    L.q_bias = b.req_vec(name(R::QBias, l), L.out_gate ? 2 * qd : qd);
    L.k_bias = b.req_vec(name(R::KBias, l), kd);
    L.v_bias = b.req_vec(name(R::VBias, l), kd);
  }
  L.q_norm = b.opt_vec(name(R::QNorm, l), hd);
  L.k_norm = b.opt_vec(name(R::KNorm, l), hd);

  if (auto router = b.opt(name(R::Router, l))) {
    if (!a.moe) fail(ErrorKind::Parse, "tensor '{}' present but arch.moe is absent", router->name);
    L.is_moe = true;
    L.moe.router = *router;
    b.check_mat(L.moe.router, 0, H);
    for (uint32_t e = 0;; ++e) {
      if (!b.opt(name(R::ExpertGate, l, e))) break;
      L.moe.experts.push_back(
          b.ffn(name(R::ExpertGate, l, e), name(R::ExpertUp, l, e), name(R::ExpertDown, l, e), H));
    }
    if (L.moe.experts.empty()) b.missing.push_back(name(R::ExpertGate, l, 0));
    if (L.moe.router.rows() != L.moe.experts.size())
      fail(ErrorKind::Parse, "tensor '{}': {} router rows but {} experts present", L.moe.router.name,
           L.moe.router.rows(), L.moe.experts.size());
    if (b.opt(name(R::SharedGate, l))) {
      L.moe.shared = b.ffn(name(R::SharedGate, l), name(R::SharedUp, l), name(R::SharedDown, l), H);
      L.moe.shared_gate = b.opt_vec(name(R::SharedExpertGate, l), H);
    }
  } else {
    L.ffn = b.ffn(name(R::FfnGate, l), name(R::FfnUp, l), name(R::FfnDown, l), H);
  }
  return out;
}

}  // namespace

std::shared_ptr<const Weights> Weights::bind(const cmf::ModelArch& a, const TensorSource& source) {
  check_arch(a);
  auto w = std::make_shared<Weights>();
  w->arch = a;
  w->source = &source;
  w->norm_style =
      a.norm_style == cmf::NormStyle::Gemma ? kernels::NormStyle::Gemma : kernels::NormStyle::Qwen;
  w->embed_mult = static_cast<float>(a.embed_multiplier);

  std::optional<kernels::YarnParams> yarn;
  if (a.yarn)
    yarn = kernels::YarnParams{a.yarn->factor, static_cast<double>(a.yarn->original_max_position_embeddings),
                               a.yarn->beta_fast, a.yarn->beta_slow, a.yarn->attention_factor};
  const std::vector<double> ff = a.rope_freq_factors.value_or(std::vector<double>{});
  std::shared_ptr<const kernels::RopeTable> rope[2];
  rope[0] = std::make_shared<kernels::RopeTable>(
      kernels::make_rope(a.head_dim, a.rope_theta, a.partial_rotary_factor, yarn, ff));
  rope[1] = a.rope_local_base_freq
                ? std::make_shared<kernels::RopeTable>(kernels::make_rope(
                      a.head_dim, *a.rope_local_base_freq,
                      a.local_partial_rotary_factor.value_or(a.partial_rotary_factor), std::nullopt, {}))
                : std::make_shared<kernels::RopeTable>();

  Binder b{source, w->prepared};
  bind_globals(*w, b);
  w->layers.resize(a.num_layers);
  for (uint32_t l = 0; l < a.num_layers; ++l) w->layers[l] = bind_layer(a, l, b, rope);
  b.throw_missing(a);
  return w;
}

std::shared_ptr<const Weights> Weights::with_overrides(std::shared_ptr<const Weights> base,
                                                       const TensorSource& overlay) {
  const cmf::ModelArch& a = base->arch;
  std::vector<uint8_t> touched(a.num_layers, 0);
  bool globals = false;
  for (const std::string& n : overlay.names()) {
    const auto tn = cmf::parse_tensor_name(n);
    if (!tn || (cmf::is_layer_role(tn->role) && tn->layer >= a.num_layers) ||
        (!cmf::is_layer_role(tn->role) && tn->role != R::Embed && tn->role != R::Head &&
         tn->role != R::FinalNorm))
      fail(ErrorKind::InvalidArgument, "weight overlay: '{}' is not a tensor of this {}-layer '{}' model", n,
           a.num_layers, a.arch_name);
    if (cmf::is_layer_role(tn->role))
      touched[tn->layer] = 1;
    else
      globals = true;
  }
  auto w = std::make_shared<Weights>(*base);
  // The overlay is consulted first; base's source stays the source of every other tensor. The
  // layered source lives as long as the result (its layers' views borrow through it only at bind).
  const LayeredSource layered(overlay, *base->source);
  Binder b{layered, w->prepared};
  if (globals) bind_globals(*w, b);
  for (uint32_t l = 0; l < a.num_layers; ++l) {
    if (!touched[l]) continue;
    const std::shared_ptr<const kernels::RopeTable> rope[2] = {base->layers[l]->rope, base->layers[l]->rope};
    w->layers[l] = bind_layer(a, l, b, rope);
  }
  b.throw_missing(a);
  return w;
}

}  // namespace cortiq::model
