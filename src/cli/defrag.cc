// `cortiq defrag <model.cmf> --mask NAME -o out.cmf` — a task mask already in the file made physical
// (spec §11, FORMAT-NOTES §1.18): the mask's dead FFN neurons removed, a standalone smaller file.
#include "specialize/defrag.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/command.h"
#include "cmf/reader.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct DefragArgs {
  std::string model, mask, output;
};

void defrag_cmd(const DefragArgs& a) {
  refuse_overwriting_input(a.model, a.output, "defrag");
  cmf::Reader r = cmf::Reader::open(a.model);
  r.check_sections();
  const cmf::MaskCatalog* cat = r.masks();
  const cmf::TaskMask* m = cat ? cat->find(a.mask) : nullptr;
  if (!m) {
    std::string names;
    if (cat)
      for (const auto& x : cat->masks) names += (names.empty() ? "" : ", ") + x.name;
    fail(ErrorKind::InvalidArgument, "'{}' has no task mask '{}' (masks: {})", a.model, a.mask,
         names.empty() ? "none" : names);
  }
  specialize::DefragPlan plan;
  plan.keep = specialize::keep_of(r.header().arch, *m);
  std::vector<uint32_t> widths;
  uint64_t kept = 0;
  for (const auto& k : plan.keep) widths.push_back(static_cast<uint32_t>(k.size())), kept += k.size();
  const double all = static_cast<double>(r.header().arch.intermediate_size) * r.header().arch.num_layers;
  plan.provenance["defrag"] = {{"source_skill", nullptr},
                               {"source_mask", a.mask},
                               {"pre_intermediate", r.header().arch.intermediate_size},
                               {"post_intermediate_max", *std::max_element(widths.begin(), widths.end())},
                               {"kept_per_layer", widths},
                               {"pruned_ratio", 1.0 - static_cast<double>(kept) / all}};
  if (!m->quality.is_null()) plan.provenance["defrag"]["mask_quality"] = m->quality;
  if (m->extra.contains("specialize")) plan.provenance["specialize"] = m->extra["specialize"];
  const auto res = specialize::defrag_file(r, a.output, plan);
  for (const auto& n : res.notes) std::printf("note: %s\n", n.c_str());
  const auto before = std::filesystem::file_size(a.model);
  std::printf("wrote %s: %llu bytes (source %llu, %.2fx smaller), FFN kept %.1f%%\n", a.output.c_str(),
              static_cast<unsigned long long>(res.bytes), static_cast<unsigned long long>(before),
              static_cast<double>(before) / static_cast<double>(res.bytes),
              100.0 * static_cast<double>(kept) / all);
}

void setup(CLI::App& root) {
  auto a = std::make_shared<DefragArgs>();
  auto* c = root.add_subcommand(
      "defrag", "Remove a task mask's dead FFN neurons physically (a smaller standalone file)");
  add_examples(c, {"cortiq defrag masked.cmf --mask stories -o stories-only.cmf"});
  c->add_option("model", a->model, "model .cmf with the mask")->required();
  c->add_option("--mask", a->mask, "task mask name")->required();
  c->add_option("-o,--output", a->output, "output .cmf")->required();
  c->callback([a] { defrag_cmd(*a); });
}

}  // namespace

CORTIQ_COMMAND(41, setup);

}  // namespace cortiq::cli
