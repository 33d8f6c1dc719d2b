#include "convert/tensor_map.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <tuple>

#include "util/error.h"

namespace cortiq::convert {

namespace {

bool starts_with(const std::string& s, std::string_view p) {
  return s.rfind(p, 0) == 0;
}
bool ends_with(const std::string& s, std::string_view p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
bool contains(const std::string& s, std::string_view p) {
  return s.find(p) != std::string::npos;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
}

// Parses the integer after `prefix` in `s` ("model.layers.12.x" with prefix "model.layers." → 12).
long index_after(const std::string& s, std::string_view prefix) {
  size_t p = s.find(prefix);
  if (p == std::string::npos) return -1;
  p += prefix.size();
  size_t e = p;
  while (e < s.size() && s[e] >= '0' && s[e] <= '9') ++e;
  if (e == p) return -1;
  return std::strtol(s.substr(p, e - p).c_str(), nullptr, 10);
}

// Write-order rank of a name inside one decoder layer.
int layer_role(const std::string& n) {
  static const char* kRoles[] = {"input_layernorm",
                                 "self_attn.q_proj",
                                 "self_attn.k_proj",
                                 "self_attn.v_proj",
                                 "self_attn.q_norm",
                                 "self_attn.k_norm",
                                 "self_attn.o_proj",
                                 "post_attention_layernorm",
                                 "pre_feedforward_layernorm",
                                 "mlp.gate.",
                                 "mlp.gate_proj",
                                 "mlp.up_proj",
                                 "mlp.down_proj",
                                 "mlp.experts.*gate_proj",
                                 "mlp.experts.*up_proj",
                                 "mlp.experts.*down_proj",
                                 "mlp.shared_expert.gate_proj",
                                 "mlp.shared_expert.up_proj",
                                 "mlp.shared_expert.down_proj",
                                 "mlp.shared_expert_gate",
                                 "post_feedforward_layernorm"};
  int r = 0;
  for (const char* role : kRoles) {
    std::string_view rv(role);
    const size_t star = rv.find('*');
    if (star == std::string_view::npos) {
      if (contains(n, rv)) return r;
    } else if (contains(n, rv.substr(0, star)) && contains(n, rv.substr(star + 1))) {
      return r;
    }
    ++r;
  }
  return r;
}

using Key = std::tuple<int, long, int, long, std::string>;

Key order_key(const std::string& n) {
  if (n == "model.embed_tokens.weight") return {0, 0, 0, 0, n};
  if (starts_with(n, "model.layers.")) {
    return {1, index_after(n, "model.layers."), layer_role(n), index_after(n, ".experts."), n};
  }
  if (starts_with(n, "model.norm.")) return {2, 0, 0, 0, n};
  if (starts_with(n, "lm_head.")) return {3, 0, 0, 0, n};
  if (starts_with(n, "model.mtp.")) {
    const long li = index_after(n, "model.mtp.layers.");
    return {4, li, li >= 0 ? layer_role(n) : 0, index_after(n, ".experts."), n};
  }
  return {5, 0, 0, 0, n};
}

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
  for (std::string_view drop : {"vision_tower.", "model.vision_tower.", "multi_modal_projector.",
                                "model.multi_modal_projector.", "vision_model.", "model.vision_model."})
    if (starts_with(n, drop)) return "";
  if (ends_with(n, "rotary_emb.inv_freq")) return "";
  if (starts_with(n, "language_model.model."))
    n = "model." + n.substr(21);
  else if (starts_with(n, "language_model.lm_head."))
    n = n.substr(15);
  else if (starts_with(n, "model.language_model."))
    n = "model." + n.substr(21);
  if (starts_with(n, "mtp.")) n = "model." + n;
  if (starts_with(n, "model.mtp.")) {
    replace_all(n, "model.mtp.fc.", "model.mtp.eh_proj.");
    replace_all(n, "model.mtp.pre_fc_norm_embedding.", "model.mtp.enorm.");
    replace_all(n, "model.mtp.pre_fc_norm_hidden.", "model.mtp.hnorm.");
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
  for (const StTensor* t : ckpt.tensors()) {
    std::string n = canonical_name(t->name);
    if (n.empty()) {
      m.dropped.push_back(t->name);
      continue;
    }
    if (starts_with(n, "model.mtp.")) {
      m.has_mtp = true;
      const long li = index_after(n, "model.mtp.layers.");
      if (li >= 0) mtp_layers.insert(li);
    }
    if (n == "lm_head.weight" && arch.tie_word_embeddings) {
      m.dropped.push_back(t->name);
      continue;
    }
    if (ends_with(n, "self_attn.o_proj.bias") || (contains(n, "mlp.") && contains(n, "_proj.bias")))
      fail(ErrorKind::Unsupported,
           "tensor '{}': biases on o_proj / MLP projections are not supported by the runtime", t->name);
    if (contains(n, ".mlp.experts.") && index_after(n, ".mlp.experts.") < 0)
      fail(ErrorKind::Unsupported,
           "tensor '{}': packed (3-D) expert banks are not supported; expected per-expert "
           "'mlp.experts.{{e}}.*_proj.weight'",
           t->name);
    if (ends_with(n, "self_attn.qkv_proj.weight") || ends_with(n, "self_attn.qkv_proj.bias")) {
      if (t->shape.empty() || t->shape[0] != q_rows + 2 * kv_rows)
        fail(ErrorKind::Parse, "tensor '{}': fused qkv has {} rows, the arch needs {} (q) + 2·{} (k, v)",
             t->name, t->shape.empty() ? 0 : t->shape[0], q_rows, kv_rows);
      const std::string base = n.substr(0, n.find("qkv_proj"));
      const std::string tail = n.substr(n.find("qkv_proj") + 8);
      add(base + "q_proj" + tail, row_slice(*t, 0, q_rows), t);
      add(base + "k_proj" + tail, row_slice(*t, q_rows, kv_rows), t);
      add(base + "v_proj" + tail, row_slice(*t, q_rows + kv_rows, kv_rows), t);
      continue;
    }
    if (ends_with(n, "mlp.gate_up_proj.weight")) {
      if (t->shape.size() != 2 || t->shape[0] % 2 != 0)
        fail(ErrorKind::Parse, "tensor '{}': fused gate_up must be 2-D with an even number of rows", t->name);
      const uint64_t inter = t->shape[0] / 2;
      const std::string base = n.substr(0, n.find("gate_up_proj"));
      add(base + "gate_proj.weight", row_slice(*t, 0, inter), t);
      add(base + "up_proj.weight", row_slice(*t, inter, inter), t);
      continue;
    }
    add(n, *t, t);
  }
  // The decoder layers must be the config's: every index below num_hidden_layers has tensors and
  // none above (a config that disagrees with its checkpoint would otherwise give a file that
  // fails to load, or one that carries dead layers).
  std::vector<const MappedTensor*> first_of_layer(arch.num_layers, nullptr);
  for (const auto& t : m.tensors) {
    if (!starts_with(t.name, "model.layers.")) continue;
    const long li = index_after(t.name, "model.layers.");
    if (li < 0) continue;
    if (static_cast<uint64_t>(li) >= arch.num_layers)
      fail(ErrorKind::Parse,
           "tensor '{}' belongs to layer {}, but config.json says num_hidden_layers = {} (layers 0..{})",
           t.origin ? t.origin->name : t.name, li, arch.num_layers, arch.num_layers - 1);
    if (!first_of_layer[static_cast<size_t>(li)]) first_of_layer[static_cast<size_t>(li)] = &t;
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
    if (t.name == "model.embed_tokens.weight") embed = &t;
    if (t.name == "lm_head.weight") has_head = true;
  }
  if (!embed) fail(ErrorKind::Parse, "checkpoint has no 'model.embed_tokens.weight'");
  if (embed->shape.size() != 2 || embed->shape[0] != arch.vocab_size || embed->shape[1] != arch.hidden_size)
    fail(ErrorKind::Parse,
         "tensor 'model.embed_tokens.weight' has shape [{}], config says [vocab_size {}, hidden_size {}]",
         fmt::join(embed->shape, ", "), arch.vocab_size, arch.hidden_size);
  if (!arch.tie_word_embeddings && !has_head)
    fail(ErrorKind::Parse, "checkpoint has no 'lm_head.weight' and tie_word_embeddings is false");
  m.mtp_layers = m.has_mtp ? std::max<uint32_t>(1, static_cast<uint32_t>(mtp_layers.size())) : 0;
  std::stable_sort(m.tensors.begin(), m.tensors.end(), [](const MappedTensor& a, const MappedTensor& b) {
    return write_order_less(a.name, b.name);
  });
  return m;
}

}  // namespace cortiq::convert
