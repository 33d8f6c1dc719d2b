// MoE statistics, cover rule, expert cut and expert mask (moe.h).
#include "specialize/moe.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>

#include "cmf/tensor_names.h"
#include "cmf/writer.h"
#include "quant/codec.h"
#include "quant/row_gather.h"
#include "specialize/defrag.h"
#include "util/error.h"
#include "util/progress.h"

namespace cortiq::specialize {

using cmf::TensorRole;

std::string_view moe_statistic_name(MoeStatistic s) noexcept {
  switch (s) {
    case MoeStatistic::Count:
      return "count";
    case MoeStatistic::Saliency:
      return "saliency";
    case MoeStatistic::Weight:
      break;
  }
  return "weight";
}

MoeStatistic parse_moe_statistic(std::string_view s) {
  if (s == "weight") return MoeStatistic::Weight;
  if (s == "count") return MoeStatistic::Count;
  if (s == "saliency") return MoeStatistic::Saliency;
  fail(ErrorKind::InvalidArgument, "statistic must be weight, count or saliency (got '{}')", s);
}

std::vector<double> MoeStats::values(uint32_t l, MoeStatistic s) const {
  const auto it = layers.find(l);
  if (it == layers.end()) return {};
  const MoeLayerStats& x = it->second;
  if (s == MoeStatistic::Count) return {x.count.begin(), x.count.end()};
  return s == MoeStatistic::Weight ? x.weight : x.saliency;
}

MoeStats collect_moe_stats(model::Model& m, std::span<const Chunk> chunks, const model::Variant* variant,
                           size_t batch, const std::function<void(size_t)>& progress) {
  const auto& a = m.arch();
  const model::Weights& w = *m.weights();
  MoeStats s;
  for (uint32_t l = 0; l < w.layers.size(); ++l)
    if (w.layers[l]->is_moe) {
      const size_t E = w.layers[l]->moe.experts.size();
      s.layers[l] = MoeLayerStats{std::vector<uint64_t>(E, 0), std::vector<double>(E, 0.0),
                                  std::vector<double>(E, 0.0)};
    }
  if (s.layers.empty())
    fail(ErrorKind::InvalidArgument, "moe-stats: the model has no mixture-of-experts layer");
  if (batch == 0) batch = 1;
  model::Activations act;
  act.record_routes = true;
  model::Taps taps;
  taps.layer_output = [&](size_t layer, std::span<const float>, size_t rows) {
    const auto it = s.layers.find(static_cast<uint32_t>(layer));
    if (it == s.layers.end() || act.route_off.size() != rows + 1) return;
    MoeLayerStats& ls = it->second;
    for (const auto& r : act.routes) {
      ++ls.count[r.expert];
      ls.weight[r.expert] += r.weight;
      ls.saliency[r.expert] += static_cast<double>(r.weight) * r.out_norm;
    }
    act.route_off.clear();  // a later layer that routes nothing must not see these
  };
  for (size_t b = 0; b < chunks.size(); b += batch) {
    const size_t n = std::min(batch, chunks.size() - b);
    std::vector<std::unique_ptr<model::KvCache>> kv;
    std::vector<model::SeqStep> steps;
    for (size_t i = 0; i < n; ++i) {
      const Chunk& c = chunks[b + i];
      if (c.empty() || (a.max_position_embeddings && c.size() > a.max_position_embeddings))
        fail(ErrorKind::InvalidArgument, "moe-stats: chunk of {} tokens (needs 1 to {})", c.size(),
             a.max_position_embeddings);
      kv.push_back(std::make_unique<model::KvCache>(a, c.size()));
      steps.push_back(model::SeqStep{c, kv.back().get(), {}, false, variant});
      s.tokens += c.size();
    }
    m.begin(steps, act);
    m.run_layers(0, w.layers.size(), steps, act, &taps);
    m.finish(steps, act, &taps);
    if (progress) progress(n);
  }
  return s;
}

nlohmann::json moe_stats_json(const MoeStats& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [l, x] : s.layers) {
    nlohmann::json e = {{"count", x.count}, {"weight", x.weight}};
    if (!x.saliency.empty()) e["saliency"] = x.saliency;
    j[std::to_string(l)] = e;
  }
  return j;
}

MoeStats parse_moe_stats(const nlohmann::json& root) {
  if (!root.is_object()) fail(ErrorKind::Parse, "MoE stats: a JSON object of layers expected");
  const nlohmann::json& j = root.contains("layers") ? root["layers"] : root;
  MoeStats s;
  if (root.contains("tokens") && root["tokens"].is_number_unsigned())
    s.tokens = root["tokens"].get<uint64_t>();
  if (!j.is_object()) fail(ErrorKind::Parse, "MoE stats: \"layers\" must be an object");
  for (const auto& [k, v] : j.items()) {
    if (k.empty() || k.find_first_not_of("0123456789") != std::string::npos || k.size() > 9)
      fail(ErrorKind::Parse, "MoE stats: key '{}' is not a layer index", k);
    const uint32_t l = static_cast<uint32_t>(std::stoul(k));
    MoeLayerStats x;
    try {
      if (v.is_array()) {  // REF: bare counts
        x.count = v.get<std::vector<uint64_t>>();
      } else if (v.is_object()) {
        x.count = v.at("count").get<std::vector<uint64_t>>();
        if (v.contains("weight")) x.weight = v["weight"].get<std::vector<double>>();
        if (v.contains("saliency")) x.saliency = v["saliency"].get<std::vector<double>>();
      } else {
        fail(ErrorKind::Parse, "MoE stats: layer '{}' is neither an array nor an object", k);
      }
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorKind::Parse, "MoE stats: layer '{}': {}", k, e.what());
    }
    if ((!x.weight.empty() && x.weight.size() != x.count.size()) ||
        (!x.saliency.empty() && x.saliency.size() != x.count.size()))
      fail(ErrorKind::Parse, "MoE stats: layer '{}': count, weight and saliency have different lengths", k);
    for (double d : x.weight)
      if (!(d >= 0.0) || !std::isfinite(d))
        fail(ErrorKind::Parse, "MoE stats: layer '{}': weight {} is invalid", k, d);
    for (double d : x.saliency)
      if (!(d >= 0.0) || !std::isfinite(d))
        fail(ErrorKind::Parse, "MoE stats: layer '{}': saliency {} is invalid", k, d);
    s.layers[l] = std::move(x);
  }
  return s;
}

std::vector<uint32_t> cover_keep(std::span<const double> values, double cover, uint32_t min_keep) {
  if (!(cover > 0.0 && cover <= 1.0))
    fail(ErrorKind::InvalidArgument, "--cover must be in (0, 1], got {}", cover);
  const uint32_t E = static_cast<uint32_t>(values.size());
  std::vector<uint32_t> order(E);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return values[a] > values[b]; });
  double total = 0.0;
  for (uint32_t e : order) total += values[e];  // summed in the order the prefix is, so cover 1 is exact
  size_t k = E;
  if (total > 0.0) {
    double cum = 0.0;
    k = 0;
    while (k < E && cum < cover * total) cum += values[order[k++]];
  }
  k = std::max<size_t>(k, std::min<uint32_t>(min_keep, E));
  std::vector<uint32_t> keep(order.begin(), order.begin() + static_cast<ptrdiff_t>(k));
  std::sort(keep.begin(), keep.end());
  return keep;
}

uint32_t experts_in_file(const cmf::Reader& r, uint32_t l) {
  const cmf::TensorInfo* t = r.find(cmf::tensor_name(TensorRole::Router, l));
  return t && !t->shape.empty() ? static_cast<uint32_t>(t->shape[0]) : 0;
}

std::map<uint32_t, std::vector<uint32_t>> moe_selection(const cmf::Reader& r, const MoeStats& s,
                                                        MoeStatistic stat, double cover) {
  const auto& arch = r.header().arch;
  if (!arch.moe) fail(ErrorKind::InvalidArgument, "'{}' is not a mixture-of-experts model", r.path());
  std::map<uint32_t, std::vector<uint32_t>> keep;
  for (const auto& [l, x] : s.layers) {
    if (l >= arch.num_layers)
      fail(ErrorKind::InvalidArgument, "MoE stats name layer {}, the model has {}", l, arch.num_layers);
    const uint32_t E = experts_in_file(r, l);
    if (E == 0) fail(ErrorKind::InvalidArgument, "MoE stats name layer {}, which is not a MoE layer", l);
    const auto v = s.values(l, stat);
    if (v.empty())
      fail(ErrorKind::InvalidArgument,
           "MoE stats of layer {} have no '{}' statistic (REF counts only: use --by count)", l,
           moe_statistic_name(stat));
    if (v.size() != E)
      fail(ErrorKind::InvalidArgument, "MoE stats of layer {} have {} experts, the file's layer has {}", l,
           v.size(), E);
    if (std::accumulate(v.begin(), v.end(), 0.0) <= 0.0) continue;  // untouched (§7.2)
    keep[l] = cover_keep(v, cover, arch.moe->top_k);
  }
  return keep;
}

namespace {

/// Rows `ids` of a [rows, …] tensor (its first axis), in the source codec.
std::vector<uint8_t> gather_first_axis(const cmf::Reader& r, const cmf::TensorInfo& t,
                                       std::span<const uint32_t> ids, std::vector<std::string>& notes) {
  uint64_t cols = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) cols *= t.shape[i];
  const auto payload = r.payload(t);
  if (auto g = quant::gather_rows(t.dtype, t.shape[0], cols, payload, ids, t.name)) return std::move(*g);
  if (!quant::dtype_has_codec(t.dtype))
    fail(ErrorKind::Unsupported, "moe-defrag: tensor '{}' is {}, which has no codec to gather rows", t.name,
         quant::dtype_name(t.dtype));
  std::vector<float> full(t.shape[0] * cols), kept(ids.size() * cols);
  quant::decode(t.dtype, t.shape, payload, full);
  for (size_t j = 0; j < ids.size(); ++j)
    std::copy_n(full.begin() + static_cast<ptrdiff_t>(ids[j] * cols), cols,
                kept.begin() + static_cast<ptrdiff_t>(j * cols));
  std::vector<uint64_t> shape = t.shape;
  shape[0] = ids.size();
  notes.push_back(
      fmt::format("{}: re-encoded as {} (rows gathered through f32)", t.name, quant::dtype_name(t.dtype)));
  return quant::encode(t.dtype, shape, kept);
}

/// Whether `name` (under layer l, not in an expert) holds one row per expert: the router module's
/// tensors and `mlp.expert_bias`.
bool per_expert_router_tensor(std::string_view name, uint32_t l) {
  const std::string base = fmt::format("model.layers.{}.mlp.", l);
  if (name.substr(0, base.size()) != base) return false;
  const std::string_view tail = name.substr(base.size());
  return tail.substr(0, 5) == "gate." || tail == "expert_bias";
}

}  // namespace

MoeDefragResult moe_defrag_file(const cmf::Reader& src, const std::string& out,
                                const std::map<uint32_t, std::vector<uint32_t>>& keep, const MoeStats* stats,
                                nlohmann::json provenance_moe, bool progress) {
  const cmf::Header& sh = src.header();
  const auto& arch = sh.arch;
  if (!arch.moe)
    fail(ErrorKind::InvalidArgument, "moe-defrag: '{}' is not a mixture-of-experts model", src.path());
  MoeDefragResult res;
  res.before.resize(arch.num_layers);
  res.kept.resize(arch.num_layers);
  // new index of each kept expert, per cut layer (-1 = dropped)
  std::map<uint32_t, std::vector<int64_t>> remap;
  for (uint32_t l = 0; l < arch.num_layers; ++l) res.kept[l] = res.before[l] = experts_in_file(src, l);
  for (const auto& [l, k] : keep) {
    if (l >= arch.num_layers || res.before[l] == 0)
      fail(ErrorKind::InvalidArgument, "moe-defrag: layer {} is not a mixture-of-experts layer of the file",
           l);
    if (k.empty())
      fail(ErrorKind::InvalidArgument, "moe-defrag: the keep set empties layer {}: a layer needs an expert",
           l);
    auto& m = remap[l];
    m.assign(res.before[l], -1);
    for (size_t j = 0; j < k.size(); ++j) {
      if (k[j] >= res.before[l] || (j && k[j] <= k[j - 1]))
        fail(ErrorKind::InvalidArgument, "moe-defrag: layer {}: expert ids must ascend below {} (got {})", l,
             res.before[l], k[j]);
      m[k[j]] = static_cast<int64_t>(j);
    }
    res.kept[l] = static_cast<uint32_t>(k.size());
  }

  // masks: expert rows through the same map (the REF copies them stale)
  std::optional<cmf::MaskCatalog> masks;
  if (const cmf::MaskCatalog* cat = src.masks()) {
    masks.emplace();
    masks->extra = cat->extra;
    for (const auto& m : cat->masks) {
      cmf::TaskMask nm = m;
      bool empty_layer = false;
      if (m.experts)
        for (const auto& [l, map] : remap) {
          for (uint32_t e = 0; e < m.experts->cols(); ++e) nm.experts->set(l, e, false);
          uint32_t alive = 0;
          for (uint32_t e = 0; e < map.size(); ++e)
            if (map[e] >= 0 && m.experts->get(l, e)) {
              nm.experts->set(l, static_cast<uint32_t>(map[e]), true);
              ++alive;
            }
          if (alive == 0) empty_layer = true;
        }
      if (empty_layer) {
        res.notes.push_back(fmt::format(
            "mask '{}' dropped: it routes only to experts the cut removes in some layer", m.name));
        continue;
      }
      bool renumbered = false;
      for (const auto& [l, map] : remap)
        for (uint32_t e = 0; e < map.size(); ++e) renumbered |= map[e] != static_cast<int64_t>(e);
      if (m.experts && renumbered)
        res.notes.push_back(fmt::format("mask '{}': expert rows renumbered", m.name));
      masks->masks.push_back(std::move(nm));
    }
    masks->default_task = cat->default_task;
    if (!masks->find(masks->default_task))
      masks->default_task = masks->masks.empty() ? "" : masks->masks[0].name;
    if (masks->masks.empty()) masks.reset();
  }

  cmf::Header h = sh;
  nlohmann::json prov = sh.provenance.is_object() ? sh.provenance : nlohmann::json::object();
  if (!sh.provenance.is_null() && !sh.provenance.is_object()) prov["previous"] = sh.provenance;
  provenance_moe["num_experts_pre"] = arch.moe->num_experts;
  provenance_moe["experts_before_per_layer"] = res.before;
  provenance_moe["kept_per_layer"] = res.kept;
  if (stats) {  // the stats in the new numbering, so a later cut can tighten without new stats
    nlohmann::json counts = nlohmann::json::object(), st = nlohmann::json::object();
    for (const auto& [l, x] : stats->layers) {
      MoeLayerStats y = x;
      if (const auto it = remap.find(l); it != remap.end()) {
        y = {};
        for (uint32_t e = 0; e < it->second.size(); ++e)
          if (it->second[e] >= 0) {
            if (e < x.count.size()) y.count.push_back(x.count[e]);
            if (e < x.weight.size()) y.weight.push_back(x.weight[e]);
            if (e < x.saliency.size()) y.saliency.push_back(x.saliency[e]);
          }
      }
      counts[std::to_string(l)] = y.count;
      MoeStats one;
      one.layers[l] = y;
      st.update(moe_stats_json(one));
    }
    provenance_moe["routing_counts"] = counts;
    provenance_moe["routing_stats"] = st;
  }
  prov["moe_defrag"] = provenance_moe;
  h.provenance = prov;
  h.skills.clear();

  cmf::WriterOptions wo;
  wo.expected_tensors = src.tensors().size();
  cmf::Writer w(out, wo);
  if (masks) w.set_masks(*masks, arch);
  if (!src.vocab().empty()) w.set_vocab({src.vocab().begin(), src.vocab().end()});
  uint64_t total = 0;
  for (const auto& t : src.tensors()) total += t.nbytes;
  std::optional<Progress> bar;
  if (progress) bar.emplace("moe-defrag", total);
  for (const auto& t : src.tensors()) {
    if (bar) bar->advance(t.nbytes);
    if (t.name.rfind("skill.", 0) == 0) continue;
    const cmf::TensorPlace p = cmf::tensor_place(t.name);
    const auto it = !p.mtp && p.layer ? remap.find(*p.layer) : remap.end();
    if (it == remap.end()) {
      w.add_tensor(t.name, t.dtype, t.shape, src.payload(t));
      continue;
    }
    const uint32_t l = *p.layer;
    if (p.in_experts && p.expert) {
      if (*p.expert >= it->second.size())
        fail(ErrorKind::Parse, "moe-defrag: tensor '{}' names expert {}, layer {} has {} router rows", t.name,
             *p.expert, l, it->second.size());
      const int64_t ne = it->second[*p.expert];
      if (ne < 0) continue;  // dropped
      const std::string from = fmt::format("model.layers.{}.mlp.experts.{}.", l, *p.expert);
      const std::string to = fmt::format("model.layers.{}.mlp.experts.{}.", l, ne);
      w.add_tensor(to + t.name.substr(from.size()), t.dtype, t.shape, src.payload(t));
      continue;
    }
    if (per_expert_router_tensor(t.name, l) && !t.shape.empty() && t.shape[0] == it->second.size()) {
      const auto& k = keep.at(l);
      std::vector<uint64_t> shape = t.shape;
      shape[0] = k.size();
      w.add_tensor(t.name, t.dtype, shape, gather_first_axis(src, t, k, res.notes));
      continue;
    }
    w.add_tensor(t.name, t.dtype, t.shape, src.payload(t));
  }
  if (bar) bar->finish();
  const auto paths = w.finish(h);
  res.bytes = std::filesystem::file_size(paths.front());
  return res;
}

cmf::TaskMask expert_mask_of(const cmf::Reader& r, const std::map<uint32_t, std::vector<uint32_t>>& keep,
                             std::string name, uint32_t task_id) {
  const auto& arch = r.header().arch;
  if (!arch.moe)
    fail(ErrorKind::InvalidArgument, "moe-mask: '{}' is not a mixture-of-experts model", r.path());
  cmf::TaskMask m = cmf::make_full_mask(arch, std::move(name), task_id, true);
  m.priority = cmf::MaskPriority::Normal;
  m.quality = nullptr;
  uint64_t kept = 0, all = 0;
  for (const auto& [l, k] : keep) {
    const uint32_t E = experts_in_file(r, l);
    if (l >= arch.num_layers || E == 0)
      fail(ErrorKind::InvalidArgument, "moe-mask: layer {} is not a mixture-of-experts layer of the file", l);
    if (k.empty()) fail(ErrorKind::InvalidArgument, "moe-mask: the keep set empties layer {}", l);
    for (uint32_t e = 0; e < m.experts->cols(); ++e) m.experts->set(l, e, false);
    for (uint32_t e : k) {
      if (e >= E)
        fail(ErrorKind::InvalidArgument, "moe-mask: layer {}: expert {} beyond its {} experts", l, e, E);
      m.experts->set(l, e, true);
    }
    kept += k.size();
    all += E;
  }
  m.sparsity = all ? static_cast<float>(1.0 - static_cast<double>(kept) / static_cast<double>(all)) : 0.0f;
  return m;
}

void add_mask_file(const cmf::Reader& src, const std::string& out, cmf::TaskMask mask) {
  cmf::MaskCatalog cat;
  if (const cmf::MaskCatalog* c = src.masks()) cat = *c;
  if (cat.find(mask.name))
    fail(ErrorKind::InvalidArgument, "'{}' already has a task mask named '{}'", src.path(), mask.name);
  uint32_t id = 0;
  bool any = false;
  for (const auto& m : cat.masks) id = std::max(id, m.task_id), any = true;
  mask.task_id = any ? id + 1 : 1;
  if (cat.default_task.empty()) cat.default_task = mask.name;
  cat.masks.push_back(std::move(mask));
  copy_with_header(src, out, src.header(), cat);
}

}  // namespace cortiq::specialize
