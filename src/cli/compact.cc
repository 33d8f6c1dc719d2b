// `cortiq compact <in.cmf> -o out.cmf` — tight rewrite: payloads copied verbatim, header, masks and
// vocab carried over, section hashes regenerated (FORMAT-NOTES §1.16, decision 5).
#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "convert/convert.h"

namespace cortiq::cli {
namespace {

struct CompactArgs {
  std::string input, output;
};

void setup(CLI::App& root) {
  auto a = std::make_shared<CompactArgs>();
  auto* c =
      root.add_subcommand("compact", "Rewrite a CMF file tightly (drops dead bytes of appended growth)");
  add_examples(c, {"cortiq compact grown.cmf -o tight.cmf"});
  c->add_option("input", a->input, "input .cmf")->required();
  c->add_option("-o,--output", a->output, "output .cmf path")->required();
  c->callback([a] {
    refuse_overwriting_input(a->input, a->output, "compact");
    auto r = convert::compact_file(a->input, a->output);
    for (const auto& p : r.outputs) std::printf("✓ wrote %s\n", p.c_str());
  });
}

}  // namespace

CORTIQ_COMMAND(13, setup);

}  // namespace cortiq::cli
