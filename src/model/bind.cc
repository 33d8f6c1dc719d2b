// Model::bind: every tensor resolved by its canonical name once (cmf/tensor_names), prepared for the
// kernels, shapes checked against the arch; and the compiled task masks (Variant).
#include <algorithm>
#include <cmath>
#include <map>

#include "cmf/tensor_names.h"
#include "model/model_impl.h"
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
  std::vector<std::string> missing;
  // Views prepared so far, by the payload bytes they came from: a tensor bound twice (tied
  // embeddings: embed_tokens and lm_head) is prepared, and for q4_tiled copied, once.
  std::map<const uint8_t*, WeightView> prepared{};
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
  Ffn ffn(const std::string& gate, const std::string& up, const std::string& down, uint64_t hidden) {
    Ffn f;
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
};

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;
const cmf::ModelArch& Model::arch() const noexcept {
  return impl_->arch;
}
uint32_t Model::vocab_size() const noexcept {
  return static_cast<uint32_t>(impl_->lm_head.rows());
}
kernels::ThreadPool& Model::pool() noexcept {
  return impl_->pool;
}

std::unique_ptr<Model> Model::bind(const cmf::ModelArch& a, const TensorSource& source,
                                   const ModelOptions& opt) {
  auto impl = std::make_unique<Impl>(opt.threads);
  impl->arch = a;
  const uint64_t H = a.hidden_size, hd = a.head_dim, nkv = a.num_kv_heads;
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
  impl->norm_style =
      a.norm_style == cmf::NormStyle::Gemma ? kernels::NormStyle::Gemma : kernels::NormStyle::Qwen;
  impl->embed_mult = static_cast<float>(a.embed_multiplier);

  std::optional<kernels::YarnParams> yarn;
  if (a.yarn)
    yarn = kernels::YarnParams{a.yarn->factor, static_cast<double>(a.yarn->original_max_position_embeddings),
                               a.yarn->beta_fast, a.yarn->beta_slow, a.yarn->attention_factor};
  std::vector<double> ff = a.rope_freq_factors.value_or(std::vector<double>{});
  impl->rope_global = kernels::make_rope(a.head_dim, a.rope_theta, a.partial_rotary_factor, yarn, ff);
  if (a.rope_local_base_freq)
    impl->rope_local =
        kernels::make_rope(a.head_dim, *a.rope_local_base_freq,
                           a.local_partial_rotary_factor.value_or(a.partial_rotary_factor), std::nullopt, {});

  Binder b{source, {}};
  impl->embed = b.req(name(R::Embed));
  b.check_mat(impl->embed, 0, H);
  impl->final_norm = b.req_vec(name(R::FinalNorm), H);
  if (auto lm = b.opt(name(R::Head))) {
    impl->lm_head = *lm;
    b.check_mat(impl->lm_head, 0, H);
  } else if (a.tie_word_embeddings) {
    impl->lm_head = impl->embed;
  } else {
    b.missing.push_back(name(R::Head) + " (tie_word_embeddings is false)");
  }

  const bool any_sliding_tag = std::any_of(a.layer_types.begin(), a.layer_types.end(),
                                           [](auto t) { return t == cmf::LayerType::SlidingAttention; });
  impl->layers.resize(a.num_layers);
  for (uint32_t l = 0; l < a.num_layers; ++l) {
    Layer& L = impl->layers[l];
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
    L.rope = (L.sliding && a.rope_local_base_freq) ? 1 : 0;

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
  }
  if (!b.missing.empty()) {
    std::string list;
    for (const auto& m : b.missing) list += (list.empty() ? "" : ", ") + m;
    fail(ErrorKind::Parse, "arch '{}': missing required tensor(s): {}", a.arch_name, list);
  }
  if (!quant::is_float_dtype(impl->embed.dtype) && kernels::has_kernel(impl->embed.dtype))
    impl->embed_rows.emplace(impl->embed.dtype, impl->embed.shape, impl->embed.payload, impl->embed.name);
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

}  // namespace cortiq::model
