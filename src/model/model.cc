#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include "cmf/tensor_names.h"
#include "quant/codec.h"
#include "util/error.h"
#include "util/half.h"
#include "util/line_vec.h"

namespace cortiq::model {

using kernels::WeightView;
using R = cmf::TensorRole;
constexpr auto name = [](R role, uint32_t layer = 0, uint32_t expert = 0) {
  return cmf::tensor_name(role, layer, expert);
};

// ---------------------------------------------------------------------------------------------
// KvCache

KvCache::KvCache(const cmf::ModelArch& arch, size_t capacity, bool f16)
    : capacity_(capacity), n_layers_(arch.num_layers), f16_(f16), head_dim_(arch.head_dim) {
  kv_dim_.assign(n_layers_, arch.num_kv_heads);
  for (size_t l = 0; l < n_layers_; ++l) {
    const size_t n = kv_dim_[l] * capacity_ * head_dim_;
    if (f16_) {
      k16_.emplace_back(n);
      v16_.emplace_back(n);
    } else {
      k32_.emplace_back(n);
      v32_.emplace_back(n);
    }
  }
}

void KvCache::truncate(size_t n) {
  if (n > size_) fail(ErrorKind::InvalidArgument, "KV cache truncate to {} > size {}", n, size_);
  size_ = n;
}

size_t KvCache::bytes() const noexcept {
  size_t b = 0;
  for (size_t l = 0; l < n_layers_; ++l) b += 2 * kv_dim_[l] * capacity_ * head_dim_ * (f16_ ? 2 : 4);
  return b;
}

kernels::KvLayerView KvCache::layer_view(size_t layer) const {
  if (f16_) return {k16_[layer].data(), v16_[layer].data(), true, capacity_};
  return {k32_[layer].data(), v32_[layer].data(), false, capacity_};
}

void KvCache::store(size_t layer, size_t pos, const float* k, const float* v) {
  for (size_t h = 0; h < kv_dim_[layer]; ++h) {
    const size_t base = (h * capacity_ + pos) * head_dim_;
    for (size_t d = 0; d < head_dim_; ++d) {
      if (f16_) {
        k16_[layer][base + d] = f32_to_f16(k[h * head_dim_ + d]);
        v16_[layer][base + d] = f32_to_f16(v[h * head_dim_ + d]);
      } else {
        k32_[layer][base + d] = k[h * head_dim_ + d];
        v32_[layer][base + d] = v[h * head_dim_ + d];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bound weights

namespace {

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

}  // namespace

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

// ---------------------------------------------------------------------------------------------
// Masks

std::shared_ptr<const Variant> Model::compile_variant(const cmf::TaskMask* m) const {
  const Impl& I = *impl_;
  if (!m) return nullptr;
  const auto& a = I.arch;
  if (m->layer_gates.cols() != a.num_layers || m->heads.rows() != a.num_layers ||
      m->heads.cols() != a.num_attention_heads || m->ffn.rows() < a.num_layers)
    fail(ErrorKind::InvalidArgument, "task mask '{}': bit shapes disagree with the arch", m->name);
  auto v = std::make_shared<Variant>();
  v->name = m->name;
  bool all_open = true;
  v->layer_alive.assign(a.num_layers, 1);
  v->head_alive.assign(a.num_layers, {});
  v->ffn_alive.assign(a.num_layers, {});
  v->ffn_index.assign(a.num_layers, {});
  for (uint32_t l = 0; l < a.num_layers; ++l) {
    v->layer_alive[l] = m->gate(l);
    all_open &= v->layer_alive[l] != 0;
    const Layer& L = I.layers[l];
    v->head_alive[l].assign(L.n_heads, 1);
    for (uint32_t h = 0; h < L.n_heads && h < m->heads.cols(); ++h) {
      v->head_alive[l][h] = m->heads.get(l, h);
      all_open &= v->head_alive[l][h] != 0;
    }
    const uint32_t width = m->ffn.cols();
    v->ffn_alive[l].assign(width, 1);
    for (uint32_t i = 0; i < width; ++i) {
      v->ffn_alive[l][i] = m->ffn.get(l, i);
      all_open &= v->ffn_alive[l][i] != 0;
      if (v->ffn_alive[l][i]) v->ffn_index[l].push_back(i);
    }
    if (!L.is_moe && width < L.ffn.width)
      fail(ErrorKind::InvalidArgument, "task mask '{}': FFN rows have {} bits, layer {} has {} neurons",
           m->name, width, l, L.ffn.width);
  }
  if (m->experts) {
    if (!a.moe || m->experts->rows() != a.num_layers)
      fail(ErrorKind::InvalidArgument, "task mask '{}': expert fields disagree with the arch", m->name);
    v->expert_alive.assign(a.num_layers, {});
    for (uint32_t l = 0; l < a.num_layers; ++l) {
      v->expert_alive[l].assign(m->experts->cols(), 1);
      for (uint32_t e = 0; e < m->experts->cols(); ++e) {
        v->expert_alive[l][e] = m->experts->get(l, e);
        all_open &= v->expert_alive[l][e] != 0;
      }
    }
  }
  if (all_open) return nullptr;  // dropped: identical math, fast path (ENGINE-NOTES §3.11)
  return v;
}

// ---------------------------------------------------------------------------------------------
// Forward
//
// One layer body (Impl::run) serves both entry points: forward() is one SeqStep. Rows of the
// batch are the stacked tokens of all steps, [R = Σ T_i, ·]; every linear layer is one
// kernels::matmul over the R rows (bit-identical to R matvecs), so a row's result does not depend
// on which other rows share the call.

template <class Alive>
void Model::Impl::dense_ffn(const Ffn& f, const Alive& alive, const float* x, size_t T, float* out) {
  const size_t W = f.width;
  float* g = grow(ws.ffn_g, T * W);
  float* u = grow(ws.ffn_u, T * W);
  const kernels::WeightView* gu[] = {&f.gate, &f.up};
  float* const gu_out[] = {g, u};
  kernels::matmul_multi(gu, x, T, gu_out, pool);  // one pool hand-off for both projections
  for (size_t t = 0; t < T; ++t) {
    float* gt = g + t * W;
    if (arch.hidden_act == cmf::HiddenAct::GeluTanh)
      kernels::geglu(gt, u + t * W, gt, W);
    else
      kernels::swiglu(gt, u + t * W, gt, W);
    if (const uint8_t* a = alive(t))
      for (size_t i = 0; i < W; ++i)
        if (!a[i]) gt[i] = 0.0f;
  }
  kernels::matmul(f.down, g, T, out, pool);
}

void Model::Impl::moe_forward(const Layer& L, size_t li, const float* xs, size_t T, float* outs) {
  // spec §2.2 / ENGINE-NOTES §3.8: softmax over the routable experts (all of them unless a task
  // mask restricts the set, spec §5), top-k by probability with ties to the lower index, optional
  // renormalization of the kept k, shared expert weighted by sigmoid(shared_expert_gate·x).
  // Routing is per token; the router logits of all T tokens come from one matmul (== T matvecs).
  const size_t E = L.moe.experts.size(), Hd = arch.hidden_size;
  float* all_logits = grow(ws.moe_logits, T * E);
  kernels::matmul(L.moe.router, xs, T, all_logits, pool);
  const auto dense = [](size_t) -> const uint8_t* { return nullptr; };
  double* p = grow(ws.moe_p, E);
  float* pf = grow(ws.moe_pf, E);
  float* y = grow(ws.moe_y, Hd);
  std::vector<size_t>& cand = ws.moe_cand;
  for (size_t t = 0; t < T; ++t) {
    const float* x = xs + t * Hd;
    const float* logits = all_logits + t * E;
    float* out = outs + t * Hd;
    const Variant* var = ws.row_var[t];  // xs holds the call's rows 0..T-1
    const std::vector<uint8_t>* allow = var && !var->expert_alive.empty() ? &var->expert_alive[li] : nullptr;
    cand.clear();
    for (size_t e = 0; e < E; ++e)
      if (!allow || (e < allow->size() && (*allow)[e])) cand.push_back(e);
    std::fill(out, out + Hd, 0.0f);
    if (!cand.empty()) {
      double mx = -INFINITY;
      for (size_t e : cand) mx = std::max(mx, static_cast<double>(logits[e]));
      double sum = 0.0;
      for (size_t e : cand) sum += (p[e] = std::exp(static_cast<double>(logits[e]) - mx));
      for (size_t e : cand) pf[e] = static_cast<float>(p[e] / sum);
      const size_t k = std::min<size_t>(arch.moe->top_k, cand.size());
      // Top k by probability, ties to the lower expert index (cand is ascending, so this total
      // order gives the same first k as a stable sort by probability; no temporary buffer).
      std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(k), cand.end(),
                        [&](size_t i, size_t j) { return pf[i] > pf[j] || (pf[i] == pf[j] && i < j); });
      double ksum = 0.0;
      for (size_t i = 0; i < k; ++i) ksum += pf[cand[i]];
      const double scaling = arch.moe->routed_scaling_factor.value_or(1.0);
      for (size_t i = 0; i < k; ++i) {
        const size_t e = cand[i];
        double w = pf[e];
        if (arch.moe->norm_topk_prob) w /= ksum;
        const float wf = static_cast<float>(w * scaling);
        dense_ffn(L.moe.experts[e], dense, x, 1, y);
        for (size_t d = 0; d < Hd; ++d) out[d] += wf * y[d];
      }
    }
    if (L.moe.shared) {
      dense_ffn(*L.moe.shared, dense, x, 1, y);
      float gw = 1.0f;
      if (!L.moe.shared_gate.empty()) {
        double s = 0.0;
        for (size_t d = 0; d < Hd; ++d) s += static_cast<double>(L.moe.shared_gate[d]) * x[d];
        gw = static_cast<float>(1.0 / (1.0 + std::exp(-s)));
      }
      for (size_t d = 0; d < Hd; ++d) out[d] += gw * y[d];
    }
  }
}

void Model::Impl::ffn_forward(const Layer& L, size_t li, const float* x, size_t T, float* out) {
  if (L.is_moe) {
    moe_forward(L, li, x, T, out);
    return;
  }
  const Variant* const* var = ws.row_var.data();
  dense_ffn(
      L.ffn,
      [var, li](size_t t) -> const uint8_t* {
        return var[t] && !var[t]->ffn_alive[li].empty() ? var[t]->ffn_alive[li].data() : nullptr;
      },
      x, T, out);
}

void Model::Impl::attention_block(const Layer& L, size_t li, std::span<const SeqStep> steps, size_t R) {
  const auto& a = arch;
  const size_t Hd = a.hidden_size, hd = a.head_dim, nkv = a.num_kv_heads;
  const size_t nh = L.n_heads, qd = nh * hd, kd = nkv * hd, qrows = L.out_gate ? 2 * qd : qd;
  float* h = ws.h.data();
  float* n = ws.n.data();
  const size_t* row_seq = ws.row_seq.data();
  const size_t* row_pos = ws.row_pos.data();
  for (size_t r = 0; r < R; ++r)
    kernels::rmsnorm(h + r * Hd, L.input_norm.data(), Hd, a.rms_norm_eps, norm_style, n + r * Hd);
  float* qraw = grow(ws.qraw, R * qrows);
  float* k = grow(ws.k, R * kd);
  float* v = grow(ws.v, R * kd);
  float* q = grow(ws.q, R * qd);
  float* gate = L.out_gate ? grow(ws.gate, R * qd) : nullptr;
  const kernels::WeightView* qkv[] = {&L.q, &L.k, &L.v};
  float* const qkv_out[] = {qraw, k, v};
  kernels::matmul_multi(qkv, n, R, qkv_out, pool);  // one pool hand-off for Q, K and V
  const auto& rt = L.rope ? rope_local : rope_global;
  for (size_t r = 0; r < R; ++r) {
    float* qr = qraw + r * qrows;
    float* kt = k + r * kd;
    float* vt = v + r * kd;
    if (!L.q_bias.empty()) {
      for (size_t i = 0; i < qrows; ++i) qr[i] += L.q_bias[i];
      for (size_t i = 0; i < kd; ++i) kt[i] += L.k_bias[i];
      for (size_t i = 0; i < kd; ++i) vt[i] += L.v_bias[i];
    }
    float* qt = q + r * qd;
    if (L.out_gate) {
      for (size_t hh = 0; hh < nh; ++hh) {
        std::copy(qr + hh * 2 * hd, qr + hh * 2 * hd + hd, qt + hh * hd);
        std::copy(qr + hh * 2 * hd + hd, qr + hh * 2 * hd + 2 * hd, gate + r * qd + hh * hd);
      }
    } else {
      std::copy(qr, qr + qd, qt);
    }
    if (!L.q_norm.empty())
      for (size_t hh = 0; hh < nh; ++hh)
        kernels::rmsnorm(qt + hh * hd, L.q_norm.data(), hd, a.rms_norm_eps, norm_style, qt + hh * hd);
    if (!L.k_norm.empty())
      for (size_t hh = 0; hh < nkv; ++hh)
        kernels::rmsnorm(kt + hh * hd, L.k_norm.data(), hd, a.rms_norm_eps, norm_style, kt + hh * hd);
    const int64_t pos = static_cast<int64_t>(row_pos[r]);
    kernels::rope(qt, nh, hd, rt, pos);
    kernels::rope(kt, nkv, hd, rt, pos);
    steps[row_seq[r]].kv->store(li, row_pos[r], kt, vt);
  }
  kernels::AttentionParams ap;
  ap.n_heads = nh;
  ap.n_kv_heads = nkv;
  ap.head_dim = hd;
  ap.scale = static_cast<float>(
      1.0 / std::sqrt(a.query_pre_attn_scalar ? *a.query_pre_attn_scalar : static_cast<double>(hd)));
  ap.softcap = a.attn_logit_softcapping ? static_cast<float>(*a.attn_logit_softcapping) : 0.0f;
  const Variant* const* row_var = ws.row_var.data();
  float* att = grow(ws.att, R * qd);
  // Work items are (row, kv head) pairs, row-major: decode (R = 1) still spreads its kv heads over
  // the pool. Each pair writes only its own heads' rows of `att`, computed with the same
  // arithmetic whatever the split, so the result does not depend on the thread count.
  const size_t window = L.sliding ? *a.sliding_window : 0;
  auto body = [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1;) {
      const size_t r = i / nkv, g0 = i % nkv, g1 = std::min(nkv, g0 + (i1 - i));
      const size_t end = row_pos[r] + 1;
      const size_t begin = window && window < end ? end - window : 0;
      const uint8_t* heads = row_var[r] ? row_var[r]->head_alive[li].data() : nullptr;
      kernels::attention(q + r * qd, steps[row_seq[r]].kv->layer_view(li), begin, end, ap, heads,
                         att + r * qd, g0, g1);
      i += g1 - g0;
    }
  };
  // A one-reference closure fits std::function's small buffer: no allocation per call.
  pool.parallel_for(R * nkv, [&body](size_t i0, size_t i1) { body(i0, i1); });
  if (L.out_gate)
    for (size_t i = 0; i < R * qd; ++i)
      att[i] *= static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(gate[i]))));
  float* tmp = ws.tmp.data();
  kernels::matmul(L.o, att, R, tmp, pool);
  for (size_t r = 0; r < R; ++r) {
    float* at = tmp + r * Hd;
    if (L.sandwich) kernels::rmsnorm(at, L.post_attn_norm.data(), Hd, a.rms_norm_eps, norm_style, at);
    float* ht = h + r * Hd;
    for (size_t d = 0; d < Hd; ++d) ht[d] += at[d];
    kernels::rmsnorm(ht, L.sandwich ? L.pre_ffn_norm.data() : L.post_attn_norm.data(), Hd, a.rms_norm_eps,
                     norm_style, n + r * Hd);
  }
}

void Model::Impl::run(std::span<const SeqStep> steps, const Taps* taps) {
  const auto& a = arch;
  const size_t S = steps.size(), Hd = a.hidden_size, V = lm_head.rows();
  size_t R = 0;
  for (const SeqStep& st : steps) R += st.tokens.size();
  size_t* row_seq = grow(ws.row_seq, R);
  size_t* row_pos = grow(ws.row_pos, R);
  float* h = grow(ws.h, R * Hd);
  float* n = grow(ws.n, R * Hd);
  float* tmp = grow(ws.tmp, R * Hd);
  ws.row_var.resize(R);
  for (size_t s = 0, r = 0; s < S; ++s) {
    const size_t start = steps[s].kv->size();
    for (size_t t = 0; t < steps[s].tokens.size(); ++t, ++r) {
      row_seq[r] = s;
      row_pos[r] = start + t;
      ws.row_var[r] = steps[s].variant;
      if (embed_rows)
        embed_rows->decode(steps[s].tokens[t], 1, std::span<float>(h + r * Hd, Hd));
      else
        kernels::decode_rows(embed, steps[s].tokens[t], 1, h + r * Hd);
      if (embed_mult != 1.0f)
        for (size_t d = 0; d < Hd; ++d) h[r * Hd + d] *= embed_mult;
    }
  }

  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& L = layers[li];
    // A layer a row's variant skips passes its residual through (§3.11): the layer runs for the
    // batch, and those rows get their residual back afterwards (rows never mix, so the others are
    // what they would be alone). No row alive: the layer is not run at all.
    ws.dead_rows.clear();
    for (size_t r = 0; r < R; ++r)
      if (ws.row_var[r] && !ws.row_var[r]->layer_alive[li]) ws.dead_rows.push_back(r);
    if (ws.dead_rows.size() == R) {
      if (taps && taps->layer_output) taps->layer_output(li, std::span<const float>(h, R * Hd), R);
      continue;
    }
    if (!ws.dead_rows.empty()) {
      ws.dead_h.resize(ws.dead_rows.size() * Hd);
      for (size_t i = 0; i < ws.dead_rows.size(); ++i)
        std::copy_n(h + ws.dead_rows[i] * Hd, Hd, ws.dead_h.begin() + static_cast<std::ptrdiff_t>(i * Hd));
    }
    attention_block(L, li, steps, R);
    ffn_forward(L, li, n, R, tmp);
    for (size_t r = 0; r < R; ++r) {
      float* ft = tmp + r * Hd;
      if (L.sandwich) kernels::rmsnorm(ft, L.post_ffn_norm.data(), Hd, a.rms_norm_eps, norm_style, ft);
      float* ht = h + r * Hd;
      for (size_t d = 0; d < Hd; ++d) ht[d] += ft[d];
    }
    for (size_t i = 0; i < ws.dead_rows.size(); ++i)
      std::copy_n(ws.dead_h.begin() + static_cast<std::ptrdiff_t>(i * Hd), Hd, h + ws.dead_rows[i] * Hd);
    if (taps && taps->layer_output) taps->layer_output(li, std::span<const float>(h, R * Hd), R);
  }
  if (taps && taps->final_hidden) taps->final_hidden(std::span<const float>(h, R * Hd), R);
  for (const SeqStep& st : steps) st.kv->set_size(st.kv->size() + st.tokens.size());

  // lm_head: one matmul over the wanted rows of every step (its last row, or all its rows).
  size_t cnt = 0, wanting = 0, only = 0;
  for (size_t s = 0, r0 = 0; s < S; ++s) {
    const size_t T = steps[s].tokens.size();
    if (!steps[s].logits.empty()) {
      const size_t first = steps[s].all_logits ? 0 : T - 1;
      for (size_t t = first; t < T; ++t, ++cnt)
        kernels::rmsnorm(h + (r0 + t) * Hd, final_norm.data(), Hd, a.rms_norm_eps, norm_style, n + cnt * Hd);
      ++wanting;
      only = s;
    }
    r0 += T;
  }
  if (cnt == 0) return;
  // A NaN or ±Inf here would turn every logit into NaN and greedy decoding into token 0 forever:
  // refuse loudly instead (a flipped weight byte, an overflowing checkpoint). Hd floats per row.
  for (size_t i = 0; i < cnt; ++i)
    for (size_t d = 0; d < Hd; ++d)
      if (!std::isfinite(n[i * Hd + d]))
        fail(ErrorKind::NonFinite,
             "the final hidden state of output row {} is {} (component {}): a weight of this file is "
             "corrupt or out of range; `cortiq verify` checks every tensor's hash",
             i, n[i * Hd + d], d);
  // One step wanting logits (forward(), or a batch with one finishing prefill): write in place.
  float* lg = wanting == 1 ? steps[only].logits.data() : grow(ws.logits, cnt * V);
  kernels::matmul(lm_head, n, cnt, lg, pool);
  const float lm = a.logit_multiplier ? static_cast<float>(*a.logit_multiplier) : 1.0f;
  if (lm != 1.0f)
    for (size_t i = 0; i < cnt * V; ++i) lg[i] *= lm;
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
  Impl& I = *impl_;
  const size_t T = tokens.size(), V = I.lm_head.rows(), start = kv.size();
  if (T == 0) return;
  if (start + T > kv.capacity())
    fail(ErrorKind::InvalidArgument, "context overflow: {} positions requested, KV capacity is {}", start + T,
         kv.capacity());
  const size_t need = mode == LogitsMode::All ? T * V : mode == LogitsMode::Last ? V : 0;
  if (logits.size() < need)
    fail(ErrorKind::InvalidArgument, "logits buffer has {} floats, {} needed", logits.size(), need);
  for (uint32_t id : tokens)
    if (id >= I.embed.rows())
      fail(ErrorKind::InvalidArgument, "token id {} >= embedding rows {}", id, I.embed.rows());
  const SeqStep step{tokens, &kv, logits.first(need), mode == LogitsMode::All, variant};
  I.run(std::span<const SeqStep>(&step, 1), nullptr);
}

void Model::forward_batch(std::span<const SeqStep> steps, const Taps* taps) {
  Impl& I = *impl_;
  const size_t S = steps.size(), V = I.lm_head.rows();
  if (S == 0) return;
  // Validate everything first: a failing batch leaves every KV cache untouched.
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
      if (id >= I.embed.rows())
        fail(ErrorKind::InvalidArgument, "token id {} >= embedding rows {} (step {})", id, I.embed.rows(), s);
  }
  I.run(steps, taps);
}

}  // namespace cortiq::model
