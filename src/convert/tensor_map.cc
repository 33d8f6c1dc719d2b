#include "convert/tensor_map.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "cmf/tensor_names.h"
#include "util/error.h"

namespace cortiq::convert {

namespace {

using cmf::TensorName;
using cmf::TensorPlace;
using cmf::TensorRole;

bool starts_with(const std::string& s, std::string_view p) {
  return s.rfind(p, 0) == 0;
}
bool ends_with(const std::string& s, std::string_view p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

/// `tensor_module(n) + "." + tail`: another parameter of the module of `n`.
std::string in_module(const TensorName& n, std::string_view tail) {
  return cmf::tensor_module(n) + "." + std::string(tail);
}

/// Write order inside one decoder layer (of the trunk or the MTP block), by the role whose module
/// a name is under: attention → norms → FFN with MoE experts role-contiguous (spec §2.2); a
/// name under no listed module comes after them all.
constexpr TensorRole kLayerOrder[] = {
    TensorRole::InputNorm,   TensorRole::Q,          TensorRole::K,          TensorRole::V,
    TensorRole::QNorm,       TensorRole::KNorm,      TensorRole::O,          TensorRole::PostAttnNorm,
    TensorRole::PreFfnNorm,  TensorRole::Router,     TensorRole::FfnGate,    TensorRole::FfnUp,
    TensorRole::FfnDown,     TensorRole::ExpertGate, TensorRole::ExpertUp,   TensorRole::ExpertDown,
    TensorRole::SharedGate,  TensorRole::SharedUp,   TensorRole::SharedDown, TensorRole::SharedExpertGate,
    TensorRole::PostFfnNorm,
};

int layer_rank(const TensorPlace& p) {
  int r = 0;
  for (TensorRole role : kLayerOrder) {
    if (p.module == role) return r;
    ++r;
  }
  return r;
}

long index_or_minus_one(const std::optional<uint32_t>& i) {
  return i ? static_cast<long>(*i) : -1;
}

using Key = std::tuple<int, long, int, long, std::string>;

/// embed → trunk layers by index → final norm → head → MTP block (its own tensors by name, then its
/// layers) → anything else by name.
Key order_key(const std::string& n) {
  const TensorPlace p = cmf::tensor_place(n);
  const long expert = index_or_minus_one(p.expert);
  if (p.module == TensorRole::Embed && p.tail == "weight") return {0, 0, 0, 0, n};
  if (p.layer && !p.mtp) return {1, *p.layer, layer_rank(p), expert, n};
  if (p.module == TensorRole::FinalNorm) return {2, 0, 0, 0, n};
  if (p.module == TensorRole::Head) return {3, 0, 0, 0, n};
  if (p.mtp) return {4, index_or_minus_one(p.layer), p.layer ? layer_rank(p) : 0, expert, n};
  return {5, 0, 0, 0, n};
}

/// Qwen3-Next's names of the MTP block's own tensors (`mtp.fc.*`, …, under kMtpPrefix once the
/// prefix is canonical) and the roles CMF names them by (FORMAT-NOTES §1.5, CLI-NOTES convert).
constexpr std::pair<std::string_view, TensorRole> kMtpSourceModules[] = {
    {"fc", TensorRole::MtpEhProj},
    {"pre_fc_norm_embedding", TensorRole::MtpEnorm},
    {"pre_fc_norm_hidden", TensorRole::MtpHnorm},
};

StTensor row_slice(const StTensor& t, uint64_t row_begin, uint64_t rows) {
  StTensor v = t;
  const uint64_t row_elems = t.shape.size() >= 2 ? t.numel / t.shape[0] : 1;
  const size_t es = st_dtype_size(t.dtype);
  v.shape[0] = rows;
  v.numel = rows * row_elems;
  v.data = t.data.subspan(row_begin * row_elems * es, v.numel * es);
  return v;
}

}  // namespace

bool write_order_less(const std::string& a, const std::string& b) {
  return order_key(a) < order_key(b);
}

std::string canonical_name(const std::string& source) {
  std::string n = source;
  const std::string base(cmf::kBaseModelPrefix), head = cmf::tensor_module({TensorRole::Head}) + ".";
  // the towers of multimodal checkpoints, at the top or in the base model
  for (std::string_view tower : {"vision_tower.", "multi_modal_projector.", "vision_model."})
    if (starts_with(n, tower) || starts_with(n, base + std::string(tower))) return "";
  if (ends_with(n, "rotary_emb.inv_freq")) return "";
  // multimodal wrappers around the text model: `language_model.` + a canonical name (the base
  // model's or the head's), or the base model's `language_model.` (newer transformers)
  constexpr std::string_view kWrapper = "language_model.";
  const std::string wrapped_base = base + std::string(kWrapper);
  if (starts_with(n, kWrapper) && (n.compare(kWrapper.size(), base.size(), base) == 0 ||
                                   n.compare(kWrapper.size(), head.size(), head) == 0))
    n = n.substr(kWrapper.size());
  else if (starts_with(n, wrapped_base))
    n = base + n.substr(wrapped_base.size());
  // the MTP block outside the base model (`mtp.*`) moves in, and its own tensors take CMF's names
  const std::string_view mtp_outside = cmf::kMtpPrefix.substr(base.size());
  if (starts_with(n, mtp_outside)) n = base + n;
  if (starts_with(n, cmf::kMtpPrefix)) {
    for (const auto& [src, role] : kMtpSourceModules) {
      const std::string from = std::string(cmf::kMtpPrefix) + std::string(src) + ".";
      if (starts_with(n, from)) n = cmf::tensor_module({role}) + "." + n.substr(from.size());
    }
  }
  return n;
}

TensorMapping map_tensors(const Checkpoint& ckpt, const cmf::ModelArch& arch) {
  TensorMapping m;
  const uint64_t hd = arch.head_dim;
  const uint64_t q_rows = static_cast<uint64_t>(arch.num_attention_heads) * hd;
  const uint64_t kv_rows = static_cast<uint64_t>(arch.num_kv_heads) * hd;
  std::set<long> mtp_layers;
  std::set<std::string> seen;
  auto add = [&](std::string name, const StTensor& src, const StTensor* origin) {
    if (!seen.insert(name).second)
      fail(ErrorKind::Parse, "tensor '{}' (from '{}') is produced twice by the name mapping", name,
           origin->name);
    MappedTensor t;
    t.name = std::move(name);
    t.shape = src.shape;
    t.src = src;
    t.origin = origin;
    m.tensors.push_back(std::move(t));
  };
  const std::string head_name = cmf::tensor_name(TensorRole::Head),
                    embed_name = cmf::tensor_name(TensorRole::Embed);
  for (const StTensor* t : ckpt.tensors()) {
    std::string n = canonical_name(t->name);
    if (n.empty()) {
      m.dropped.push_back(t->name);
      continue;
    }
    const TensorPlace p = cmf::tensor_place(n);
    if (p.mtp) {
      m.has_mtp = true;
      if (p.layer) mtp_layers.insert(*p.layer);
    }
    if (n == head_name && arch.tie_word_embeddings) {
      m.dropped.push_back(t->name);
      continue;
    }
    const auto role = p.module;
    // the FFN projections are the roles with a neuron axis (gate/up/down, dense, expert, shared)
    const bool mlp_role =
        role && (cmf::neuron_axis(*role) != cmf::NeuronAxis::None || role == TensorRole::FusedGateUp);
    if (p.tail == "bias" && (role == TensorRole::O || mlp_role))
      fail(ErrorKind::Unsupported,
           "tensor '{}': biases on o_proj / MLP projections are not supported by the runtime", t->name);
    if (p.in_experts && !p.expert)
      fail(ErrorKind::Unsupported,
           "tensor '{}': packed (3-D) expert banks are not supported; expected per-expert '{}'", t->name,
           cmf::tensor_name(TensorRole::ExpertGate, p.layer.value_or(0), 0));
    // the tensor of role `r` in the layer (of the trunk or the MTP block) `n` is in
    auto sibling = [&](TensorRole r) { return TensorName{r, p.layer.value_or(0), 0, p.mtp}; };
    if (role == TensorRole::FusedQkv && (p.tail == "weight" || p.tail == "bias")) {
      if (t->shape.empty() || t->shape[0] != q_rows + 2 * kv_rows)
        fail(ErrorKind::Parse, "tensor '{}': fused qkv has {} rows, the arch needs {} (q) + 2·{} (k, v)",
             t->name, t->shape.empty() ? 0 : t->shape[0], q_rows, kv_rows);
      add(in_module(sibling(TensorRole::Q), p.tail), row_slice(*t, 0, q_rows), t);
      add(in_module(sibling(TensorRole::K), p.tail), row_slice(*t, q_rows, kv_rows), t);
      add(in_module(sibling(TensorRole::V), p.tail), row_slice(*t, q_rows + kv_rows, kv_rows), t);
      continue;
    }
    if (role == TensorRole::FusedGateUp && p.tail == "weight") {
      if (t->shape.size() != 2 || t->shape[0] % 2 != 0)
        fail(ErrorKind::Parse, "tensor '{}': fused gate_up must be 2-D with an even number of rows", t->name);
      const uint64_t inter = t->shape[0] / 2;
      add(cmf::tensor_name(sibling(TensorRole::FfnGate)), row_slice(*t, 0, inter), t);
      add(cmf::tensor_name(sibling(TensorRole::FfnUp)), row_slice(*t, inter, inter), t);
      continue;
    }
    add(n, *t, t);
  }
  // The decoder layers must be the config's: every index below num_hidden_layers has tensors and
  // none above (a config that disagrees with its checkpoint would otherwise give a file that
  // fails to load, or one that carries dead layers).
  std::vector<const MappedTensor*> first_of_layer(arch.num_layers, nullptr);
  for (const auto& t : m.tensors) {
    const TensorPlace p = cmf::tensor_place(t.name);
    if (!p.layer || p.mtp) continue;
    const uint32_t li = *p.layer;
    if (li >= arch.num_layers)
      fail(ErrorKind::Parse,
           "tensor '{}' belongs to layer {}, but config.json says num_hidden_layers = {} (layers 0..{})",
           t.origin ? t.origin->name : t.name, li, arch.num_layers, arch.num_layers - 1);
    if (!first_of_layer[li]) first_of_layer[li] = &t;
  }
  for (size_t l = 0; l < first_of_layer.size(); ++l)
    if (!first_of_layer[l])
      fail(ErrorKind::Parse,
           "config.json says num_hidden_layers = {}, but the checkpoint has no tensor of layer {}",
           arch.num_layers, l);
  // Required tensors.
  const MappedTensor* embed = nullptr;
  bool has_head = false;
  for (const auto& t : m.tensors) {
    if (t.name == embed_name) embed = &t;
    if (t.name == head_name) has_head = true;
  }
  if (!embed) fail(ErrorKind::Parse, "checkpoint has no '{}'", embed_name);
  if (embed->shape.size() != 2 || embed->shape[0] != arch.vocab_size || embed->shape[1] != arch.hidden_size)
    fail(ErrorKind::Parse, "tensor '{}' has shape [{}], config says [vocab_size {}, hidden_size {}]",
         embed_name, fmt::join(embed->shape, ", "), arch.vocab_size, arch.hidden_size);
  if (!arch.tie_word_embeddings && !has_head)
    fail(ErrorKind::Parse, "checkpoint has no '{}' and tie_word_embeddings is false", head_name);
  m.mtp_layers = m.has_mtp ? std::max<uint32_t>(1, static_cast<uint32_t>(mtp_layers.size())) : 0;
  std::stable_sort(m.tensors.begin(), m.tensors.end(), [](const MappedTensor& a, const MappedTensor& b) {
    return write_order_less(a.name, b.name);
  });
  return m;
}

}  // namespace cortiq::convert
