// `cortiq export-gguf <model.cmf> -o model.gguf [--type f32|f16|bf16|q8_0|q4_0] [--skill ID]` —
// CMF → GGUF for llama.cpp (issue 32 item 1; convert/gguf_export.h). Prints `✓ wrote <output>` and
// what was exact and what was re-quantized (with the worst error).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "convert/gguf_export.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct ExportArgs {
  convert::ExportOptions o;
};

void export_cmd(ExportArgs& a) {
  if (a.o.output.empty()) fail(ErrorKind::InvalidArgument, "-o/--output FILE.gguf is required");
  refuse_overwriting_input(a.o.input, a.o.output, "export-gguf");
  const auto r = convert::export_gguf(a.o);
  for (const auto& n : r.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  std::string widths;
  if (!r.ffn_widths.empty() &&
      std::any_of(r.ffn_widths.begin(), r.ffn_widths.end(), [&](uint32_t w) { return w != r.ffn_widths[0]; }))
    widths = fmt::format(", per-layer FFN widths [{}]", fmt::join(r.ffn_widths, ", "));
  std::fprintf(stderr, "%s: %llu tensors, %llu exact%s\n", r.arch.c_str(),
               static_cast<unsigned long long>(r.tensors), static_cast<unsigned long long>(r.exact),
               widths.c_str());
  if (r.requantized)
    std::fprintf(
        stderr,
        "warning: %llu tensors re-quantized (their codec has no exact GGUF type): max |Δ| %.3g, worst "
        "relative RMS error %.3g in '%s'\n",
        static_cast<unsigned long long>(r.requantized), r.max_abs_err, r.worst_rel_rms,
        r.worst_tensor.c_str());
  std::printf("✓ wrote %s (%.1f MB)\n", r.output.c_str(), static_cast<double>(r.bytes) / 1e6);
}

void setup(CLI::App& root) {
  auto a = std::make_shared<ExportArgs>();
  auto* c = root.add_subcommand("export-gguf", "Export a CMF model to a llama.cpp GGUF file");
  c->add_option("model", a->o.input, "input .cmf (or shard set)")->required();
  c->add_option("-o,--output", a->o.output, "output .gguf path");
  c->add_option("--type", a->o.type,
                "f32|f16|bf16|q8_0|q4_0 for every matrix (default: keep each tensor's precision; q8_row → "
                "Q8_0 and q4_block → Q4_0 exactly)");
  c->add_option("--skill", a->o.skill, "export this skill applied on the backbone");
  c->add_option(
      "--task,--mask", a->o.task,
      "(refused: a task mask is made a model by `cortiq defrag --mask NAME` first; export that file)");
  c->callback([a] {
    a->o.progress = true;
    export_cmd(*a);
  });
}

}  // namespace

CORTIQ_COMMAND(14, setup);

}  // namespace cortiq::cli
