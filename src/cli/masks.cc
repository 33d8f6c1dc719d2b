// `cortiq masks <file>` — list the task masks of a CMF file (spec §5).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cmf/reader.h"
#include "specialize/compile.h"

namespace cortiq::cli {
namespace {

void setup_masks(CLI::App& root) {
  auto file = std::make_shared<std::string>();
  auto* c = root.add_subcommand("masks", "List task masks (FFN/head/gate/expert activity)");
  add_examples(c, {"cortiq masks tb-masked.cmf"});
  c->add_option("file", *file, "model .cmf")->required();
  c->callback([file] {
    cmf::Reader r = cmf::Reader::open(*file);
    const cmf::MaskCatalog* cat = r.masks();
    if (!cat || cat->masks.empty()) {
      std::printf("No masks in %s\n", file->c_str());
      return;
    }
    const auto& a = r.header().arch;
    std::printf("Masks in %s (default: %s)\n", file->c_str(), cat->default_task.c_str());
    for (const auto& m : cat->masks) {
      const double ffn_total = static_cast<double>(m.ffn.rows()) * m.ffn.cols();
      const double head_total = static_cast<double>(m.heads.rows()) * m.heads.cols();
      std::printf("  [%u] %-20s %-8s sparsity %.3f  ffn %.1f%%  heads %.1f%%  layers %llu/%u%s%s\n",
                  m.task_id, m.name.c_str(), std::string(cmf::mask_priority_name(m.priority)).c_str(),
                  m.sparsity, ffn_total ? 100.0 * static_cast<double>(m.ffn.count()) / ffn_total : 0.0,
                  head_total ? 100.0 * static_cast<double>(m.heads.count()) / head_total : 0.0,
                  static_cast<unsigned long long>(m.layer_gates.count()), a.num_layers,
                  m.ffn.rows() != a.num_layers ? "  per-pass" : "",
                  m.experts
                      ? fmt::format("  experts {:.1f}%", 100.0 * static_cast<double>(m.experts->count()) /
                                                             (static_cast<double>(m.experts->rows()) *
                                                              std::max<uint32_t>(m.experts->cols(), 1)))
                            .c_str()
                      : "");
      if (m.description) std::printf("      %s\n", m.description->c_str());
      std::printf("      quality: %s\n", m.quality.is_null() ? "not measured" : m.quality.dump().c_str());
      if (m.extra.contains("specialize"))
        for (const auto& line : specialize::contract_lines(m.extra["specialize"]))
          std::printf("      %s\n", line.c_str());
    }
  });
}

}  // namespace
CORTIQ_COMMAND(23, setup_masks);
}  // namespace cortiq::cli
