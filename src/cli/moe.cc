// `cortiq moe-stats | moe-defrag | moe-mask` — mixture-of-experts specialization
// (SPECIALIZATION-NOTES §7, FORMAT-NOTES §1.19, CLI-NOTES): router statistics over a text weighted
// by routing weight, the smallest expert set covering a fraction of it cut out physically, or
// written as an expert task mask.
#include "specialize/moe.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>

#include "cli/command.h"
#include "cmf/hash.h"
#include "cmf/reader.h"
#include "cmf/signature.h"
#include "runtime/session.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/utf8.h"

namespace cortiq::cli {
namespace {

namespace fs = std::filesystem;
using specialize::MoeStatistic;
using specialize::MoeStats;

/// Where the statistics come from and how the text is run.
struct StatsArgs {
  std::vector<std::string> files;  ///< -f: text to run
  std::string stats;               ///< --stats: a stats JSON (moe-stats -o / --json, REF dump)
  size_t ctx = 512;                ///< tokens per chunk
  size_t max_tokens = 0;           ///< 0 = all
  runtime::LoadOptions load;
};

void add_stats_flags(CLI::App* c, StatsArgs& a, bool stats_file) {
  c->add_option("-f,--file", a.files, "UTF-8 text file(s) to route")->check(CLI::ExistingFile);
  if (stats_file)
    c->add_option(
        "--stats", a.stats,
        "routing statistics JSON (moe-stats -o/--json, or the reference's {layer: [counts]}) instead "
        "of -f; with neither, provenance.moe_defrag's stats of the file are reused");
  c->add_option("-c,--ctx", a.ctx, "tokens per chunk, each run from an empty cache (512)")
      ->check(at_least(1));
  c->add_option("--max-tokens", a.max_tokens, "route at most this many tokens (0 = all)");
  add_load_flags(c, a.load, kLoadThreads | kLoadExact);
}

/// Runs the files through the model and gathers the routing statistics.
MoeStats stats_from_text(const std::string& model, const StatsArgs& a, nlohmann::json* files_out) {
  runtime::LoadOptions lo = a.load;
  lo.task = "off";  // the dense routing
  runtime::LoadedModel lm = runtime::load_model(model, lo);
  const uint64_t maxpos = lm.model->arch().max_position_embeddings;
  const size_t ctx = maxpos ? std::min<size_t>(a.ctx, maxpos) : a.ctx;
  std::vector<specialize::Chunk> chunks;
  size_t total = 0;
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : a.files) {
    const std::string text = read_file(f);
    if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)
      fail(ErrorKind::Parse, "'{}' is not UTF-8 text: byte {} starts no valid sequence", f, bad);
    const auto ids = lm.encode_raw(text);
    files.push_back({{"file", fs::path(f).filename().string()},
                     {"sha256", cmf::to_hex(cmf::sha256_file(f))},
                     {"tokens", ids.size()}});
    for (size_t i = 0; i < ids.size(); i += ctx) {
      size_t n = std::min(ctx, ids.size() - i);
      if (a.max_tokens) n = std::min(n, a.max_tokens - total);
      if (n == 0) break;
      chunks.emplace_back(ids.begin() + static_cast<ptrdiff_t>(i),
                          ids.begin() + static_cast<ptrdiff_t>(i + n));
      total += n;
    }
  }
  if (chunks.empty()) fail(ErrorKind::InvalidArgument, "the text files hold no tokens to route");
  std::optional<Progress> bar;
  bar.emplace("routing", chunks.size(), "chunk");
  MoeStats s = specialize::collect_moe_stats(*lm.model, chunks, lm.variant.get(), 4,
                                             [&](size_t n) { bar->advance(n); });
  bar->finish();
  if (files_out) *files_out = files;
  return s;
}

/// Statistics for moe-defrag / moe-mask: -f text, --stats file, or the file's provenance.
MoeStats load_stats(const std::string& model, const cmf::Reader& r, const StatsArgs& a,
                    nlohmann::json& prov) {
  if (!a.files.empty() && !a.stats.empty()) fail(ErrorKind::InvalidArgument, "give -f or --stats, not both");
  if (!a.files.empty()) {
    nlohmann::json files;
    MoeStats s = stats_from_text(model, a, &files);
    prov["source"] = "text";
    prov["files"] = files;
    prov["tokens"] = s.tokens;
    prov["stats_hash64"] = fmt::format("{:016x}", cmf::hash64(specialize::moe_stats_json(s).dump()));
    return s;
  }
  if (!a.stats.empty()) {
    const std::string text = read_file(a.stats);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorKind::Parse, "'{}' is not JSON: {}", a.stats, e.what());
    }
    prov["source"] = "stats";
    prov["stats_hash64"] = fmt::format("{:016x}", cmf::hash64(text));
    try {
      return specialize::parse_moe_stats(j);
    } catch (const Error& e) {
      throw Error(e.kind(), fmt::format("'{}': {}", a.stats, e.message()));
    }
  }
  const auto& p = r.header().provenance;
  if (p.is_object() && p.contains("moe_defrag")) {
    const auto& m = p["moe_defrag"];
    prov["source"] = "provenance";
    if (m.contains("routing_stats")) return specialize::parse_moe_stats(m["routing_stats"]);
    if (m.contains("routing_counts")) return specialize::parse_moe_stats(m["routing_counts"]);
  }
  fail(ErrorKind::InvalidArgument,
       "'{}' has no routing statistics in its provenance: give text with -f or a stats file with --stats",
       model);
}

/// The statistic to rank by: `by`, or count when the stats have no weights and `by` was not given.
MoeStatistic pick_statistic(const MoeStats& s, const std::string& by, bool by_given) {
  MoeStatistic st = specialize::parse_moe_statistic(by);
  bool have = !s.layers.empty();
  for (const auto& [l, x] : s.layers) have = have && !s.values(l, st).empty();
  if (!have && !by_given && st == MoeStatistic::Weight) {
    std::fprintf(stderr, "note: the statistics hold selection counts only; ranking by count\n");
    return MoeStatistic::Count;
  }
  return st;
}

// ---------------------------------------------------------------- moe-stats

struct MoeStatsArgs {
  std::string model, output;
  StatsArgs s;
  bool json = false;
};

double sum(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0);
}

void moe_stats_cmd(const MoeStatsArgs& a) {
  if (a.s.files.empty()) fail(ErrorKind::InvalidArgument, "moe-stats needs text: -f FILE");
  nlohmann::json files;
  const MoeStats s = stats_from_text(a.model, a.s, &files);
  nlohmann::json out = {
      {"model", a.model}, {"tokens", s.tokens}, {"files", files}, {"layers", specialize::moe_stats_json(s)}};
  // shares: what each expert got of its layer's routing weight / selections
  for (const auto& [l, x] : s.layers) {
    const double tw = sum(x.weight),
                 tc = static_cast<double>(std::accumulate(x.count.begin(), x.count.end(), 0ull));
    std::vector<double> ws, cs;
    for (size_t e = 0; e < x.count.size(); ++e) {
      ws.push_back(tw > 0 ? x.weight[e] / tw : 0.0);
      cs.push_back(tc > 0 ? static_cast<double>(x.count[e]) / tc : 0.0);
    }
    out["layers"][std::to_string(l)]["weight_share"] = ws;
    out["layers"][std::to_string(l)]["count_share"] = cs;
  }
  if (!a.output.empty()) {
    const std::string text = out.dump(1) + "\n";
    write_file_atomic(a.output,
                      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }
  if (a.json) {
    std::printf("%s\n", out.dump(1).c_str());
    return;
  }
  std::printf("moe-stats: %s, %llu tokens routed, %zu MoE layers\n", a.model.c_str(),
              static_cast<unsigned long long>(s.tokens), s.layers.size());
  for (const auto& [l, x] : s.layers) {
    const double tw = sum(x.weight), ts = sum(x.saliency);
    const double tc = static_cast<double>(std::accumulate(x.count.begin(), x.count.end(), 0ull));
    std::vector<uint32_t> order(x.count.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t i, uint32_t j) { return x.weight[i] > x.weight[j]; });
    std::string covers;
    for (double c : {0.5, 0.9, 0.95, 0.99})
      covers += fmt::format("{}{:.0f}%: {}", covers.empty() ? "" : ", ", c * 100,
                            specialize::cover_keep(x.weight, c, 1).size());
    std::printf("layer %u: %zu experts; experts covering routing weight %s\n", l, x.count.size(),
                covers.c_str());
    std::printf("  %6s %9s %9s %10s %9s\n", "expert", "weight%", "count%", "count", "saliency%");
    for (uint32_t e : order)
      std::printf("  %6u %8.2f%% %8.2f%% %10llu %8.2f%%\n", e, tw > 0 ? 100.0 * x.weight[e] / tw : 0.0,
                  tc > 0 ? 100.0 * static_cast<double>(x.count[e]) / tc : 0.0,
                  static_cast<unsigned long long>(x.count[e]), ts > 0 ? 100.0 * x.saliency[e] / ts : 0.0);
  }
  if (!a.output.empty()) std::printf("wrote %s\n", a.output.c_str());
}

// ---------------------------------------------------------------- moe-defrag / moe-mask

struct MoeCutArgs {
  std::string model, output, name, by = "weight";
  bool by_given = false;
  double cover = 0.95;
  StatsArgs s;
};

void moe_defrag_cmd(const MoeCutArgs& a) {
  refuse_overwriting_input(a.model, a.output, "moe-defrag");
  cmf::Reader r = cmf::Reader::open(a.model);
  r.check_sections();
  nlohmann::json prov = {{"tool", "cortiq moe-defrag"}, {"cover", a.cover}};
  const MoeStats s = load_stats(a.model, r, a.s, prov);
  const MoeStatistic st = pick_statistic(s, a.by, a.by_given);
  prov["statistic"] = specialize::moe_statistic_name(st);
  const auto& moe = *r.header().arch.moe;
  prov["router_renormalizes"] = moe.norm_topk_prob;
  prov["equals_runtime_mask"] = moe.norm_topk_prob;  // §7.3 semantics caveat, per file
  const auto keep = specialize::moe_selection(r, s, st, a.cover);
  const auto res = specialize::moe_defrag_file(r, a.output, keep, &s, prov);
  for (const auto& n : res.notes) std::printf("note: %s\n", n.c_str());
  uint64_t before = 0, kept = 0;
  for (uint32_t l = 0; l < res.kept.size(); ++l) {
    if (!res.before[l]) continue;
    before += res.before[l];
    kept += res.kept[l];
    if (keep.count(l))
      std::printf("layer %u: kept %u of %u experts (dropped %u)\n", l, res.kept[l], res.before[l],
                  res.before[l] - res.kept[l]);
    else
      std::printf("layer %u: untouched (%u experts; no routing seen)\n", l, res.before[l]);
  }
  const auto src_bytes = fs::file_size(a.model);
  std::printf(
      "wrote %s: %llu bytes (source %llu, %.2fx smaller); experts kept %llu of %llu (cover %.3g by %s)\n",
      a.output.c_str(), static_cast<unsigned long long>(res.bytes),
      static_cast<unsigned long long>(src_bytes),
      static_cast<double>(src_bytes) / static_cast<double>(res.bytes), static_cast<unsigned long long>(kept),
      static_cast<unsigned long long>(before), a.cover,
      std::string(specialize::moe_statistic_name(st)).c_str());
  if (!moe.norm_topk_prob)
    std::printf(
        "note: this router does not renormalize its top-k (norm_topk_prob false): the cut changes the "
        "softmax "
        "denominator, so it differs slightly from the same selection as a runtime mask (moe-mask)\n");
}

void moe_mask_cmd(const MoeCutArgs& a) {
  refuse_overwriting_input(a.model, a.output, "moe-mask");
  cmf::Reader r = cmf::Reader::open(a.model);
  r.check_sections();
  if (r.masks() && r.masks()->find(a.name))
    fail(ErrorKind::InvalidArgument, "'{}' already has a task mask named '{}'", a.model, a.name);
  nlohmann::json prov;
  const MoeStats s = load_stats(a.model, r, a.s, prov);
  const MoeStatistic st = pick_statistic(s, a.by, a.by_given);
  const auto keep = specialize::moe_selection(r, s, st, a.cover);
  cmf::TaskMask m = specialize::expert_mask_of(r, keep, a.name, 0);
  m.description = fmt::format("experts covering {:.3g} of the routing {} (moe-mask)", a.cover,
                              specialize::moe_statistic_name(st));
  m.extra["moe_mask"] = prov;
  m.extra["moe_mask"]["cover"] = a.cover;
  m.extra["moe_mask"]["statistic"] = specialize::moe_statistic_name(st);
  const float sparsity = m.sparsity;
  specialize::add_mask_file(r, a.output, std::move(m));
  uint64_t kept = 0, all = 0;
  for (const auto& [l, k] : keep) {
    std::printf("layer %u: %zu of %u experts routable\n", l, k.size(), specialize::experts_in_file(r, l));
    kept += k.size();
    all += specialize::experts_in_file(r, l);
  }
  std::printf("wrote %s: task mask '%s' (%llu of %llu experts routable, sparsity %.3f)\n", a.output.c_str(),
              a.name.c_str(), static_cast<unsigned long long>(kept), static_cast<unsigned long long>(all),
              sparsity);
  std::printf("use it: cortiq run %s --task %s  (or --task off for every expert)\n", a.output.c_str(),
              a.name.c_str());
}

void add_cut_flags(CLI::App* c, MoeCutArgs& a) {
  c->add_option("model", a.model, "MoE model .cmf")->required();
  c->add_option("-o,--output", a.output, "output .cmf")->required();
  c->add_option("--cover", a.cover,
                "fraction of each layer's routing statistic the kept experts cover (0.95)")
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--by", a.by, "statistic ranked: weight (routing-weight mass, default), count, saliency")
      ->each([&a](const std::string&) { a.by_given = true; });
  add_stats_flags(c, a.s, true);
}

void setup(CLI::App& root) {
  {
    auto a = std::make_shared<MoeStatsArgs>();
    a->s.load.threads = 0;
    auto* c = root.add_subcommand("moe-stats",
                                  "Router statistics of a MoE model over text (per layer, per expert)");
    c->add_option("model", a->model, "MoE model .cmf")->required();
    add_stats_flags(c, a->s, false);
    c->add_option("-o,--output", a->output, "also write the statistics JSON here (for --stats)");
    c->add_flag("--json", a->json, "print the statistics as JSON");
    c->callback([a] { moe_stats_cmd(*a); });
  }
  {
    auto a = std::make_shared<MoeCutArgs>();
    a->s.load.threads = 0;
    auto* c =
        root.add_subcommand("moe-defrag", "Remove the experts a text does not route to (a smaller file)");
    add_cut_flags(c, *a);
    c->callback([a] {
      if (!(a->cover > 0.0)) fail(ErrorKind::InvalidArgument, "--cover must be in (0, 1], got {}", a->cover);
      moe_defrag_cmd(*a);
    });
  }
  {
    auto a = std::make_shared<MoeCutArgs>();
    a->s.load.threads = 0;
    auto* c = root.add_subcommand("moe-mask", "Write an expert task mask: only the experts a text routes to");
    add_cut_flags(c, *a);
    c->add_option("--task,--name", a->name, "name of the new task mask")->required();
    c->callback([a] {
      if (!(a->cover > 0.0)) fail(ErrorKind::InvalidArgument, "--cover must be in (0, 1], got {}", a->cover);
      moe_mask_cmd(*a);
    });
  }
}

}  // namespace

CORTIQ_COMMAND(44, setup);

}  // namespace cortiq::cli
