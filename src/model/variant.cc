#include "model/variant.h"

#include "kernels/kernels.h"
#include "model/model_impl.h"
#include "quant/row_gather.h"
#include "util/error.h"

namespace cortiq::model {

double Variant::ffn_alive_fraction() const noexcept {
  size_t alive = 0, all = 0;
  for (size_t l = 0; l < ffn_alive.size(); ++l) {
    if (ffn_alive[l].empty()) continue;
    all += ffn_alive[l].size();
    alive += ffn_index[l].size();
  }
  return all ? static_cast<double>(alive) / static_cast<double>(all) : 1.0;
}

uint64_t Variant::gathered_bytes() const noexcept {
  uint64_t n = 0;
  for (const auto& g : ffn_gathered)
    if (g) n += g->gate_bytes.size() + g->up_bytes.size();
  return n;
}

Variant open_variant(const Weights& w) {
  Variant v;
  v.name = "open";
  const size_t L = w.layers.size();
  v.layer_alive.assign(L, 1);
  v.head_alive.resize(L);
  for (size_t l = 0; l < L; ++l) v.head_alive[l].assign(w.layers[l]->n_heads, 1);
  v.ffn_alive.assign(L, {});
  v.ffn_index.assign(L, {});
  v.ffn_gathered.resize(L);
  v.ffn_scale.assign(L, {});
  return v;
}

namespace {

/// The gate/up rows of `ids` of f, or null when either codec keeps no per-row bytes.
std::unique_ptr<const GatheredFfn> gather_ffn(const FfnWeights& f, const std::vector<uint32_t>& ids) {
  if (ids.empty() || !quant::can_gather_rows(f.gate.dtype, f.gate.cols()) ||
      !quant::can_gather_rows(f.up.dtype, f.up.cols()))
    return nullptr;
  auto g = std::make_unique<GatheredFfn>();
  g->ids = ids;
  const auto take = [&](const kernels::WeightView& w, std::vector<uint8_t>& bytes, kernels::WeightView& out) {
    bytes = *quant::gather_rows(w.dtype, w.rows(), w.cols(), w.payload, ids, w.name);
    out = kernels::WeightView{w.dtype, {ids.size(), w.cols()}, bytes, w.name + "[alive rows]"};
    kernels::prepare_weight(out);
  };
  take(f.gate, g->gate_bytes, g->gate);
  take(f.up, g->up_bytes, g->up);
  return g;
}

}  // namespace

std::shared_ptr<const Variant> Model::compile_variant(const cmf::TaskMask* m,
                                                      const VariantOptions& opt) const {
  if (!m) return nullptr;
  const Weights& w = *impl_->w;
  const auto& a = w.arch;
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
  v->ffn_gathered.resize(a.num_layers);
  v->ffn_scale.assign(a.num_layers, {});
  for (uint32_t l = 0; l < a.num_layers; ++l) {
    v->layer_alive[l] = m->gate(l);
    all_open &= v->layer_alive[l] != 0;
    const LayerWeights& L = *w.layers[l];
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
    if (!L.is_moe && width && static_cast<double>(v->ffn_index[l].size()) <= opt.gather_at_most * width)
      v->ffn_gathered[l] = gather_ffn(L.ffn, v->ffn_index[l]);
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

}  // namespace cortiq::model
