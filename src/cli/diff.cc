// `cortiq diff <a> <b>` — compare two CMF files by tensor name, dtype, shape and hash64; exit 1
// when they differ (as diff(1)), 0 when they hold the same tensors and header.
#include <fmt/ranges.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cmf/reader.h"
#include "quant/dtype.h"

namespace cortiq::cli {
namespace {

void setup_diff(CLI::App& root) {
  auto files = std::make_shared<std::pair<std::string, std::string>>();
  auto* c = root.add_subcommand("diff", "Compare two CMF files tensor by tensor (name, dtype, shape, hash)");
  c->add_option("a", files->first, "first .cmf")->required();
  c->add_option("b", files->second, "second .cmf")->required();
  c->callback([files] {
    cmf::Reader a = cmf::Reader::open(files->first), b = cmf::Reader::open(files->second);
    size_t same = 0, changed = 0, only_a = 0, only_b = 0;
    for (const auto& t : a.tensors()) {
      const cmf::TensorInfo* u = b.find(t.name);
      if (!u) {
        std::printf("- %s\n", t.name.c_str());
        ++only_a;
      } else if (u->hash != t.hash || u->dtype != t.dtype || u->shape != t.shape || u->nbytes != t.nbytes) {
        std::printf("~ %s (%s %s %016llx -> %s %s %016llx)\n", t.name.c_str(),
                    std::string(quant::dtype_name(t.dtype)).c_str(), fmt::format("{}", t.shape).c_str(),
                    static_cast<unsigned long long>(t.hash), std::string(quant::dtype_name(u->dtype)).c_str(),
                    fmt::format("{}", u->shape).c_str(), static_cast<unsigned long long>(u->hash));
        ++changed;
      } else {
        ++same;
      }
    }
    for (const auto& t : b.tensors())
      if (!a.find(t.name)) {
        std::printf("+ %s\n", t.name.c_str());
        ++only_b;
      }
    const bool hdr = cmf::serialize_header(a.header()) != cmf::serialize_header(b.header());
    if (hdr) std::printf("~ header differs\n");
    std::printf("%zu identical, %zu changed, %zu only in a, %zu only in b\n", same, changed, only_a, only_b);
    std::fflush(stdout);
    // as diff(1) and cmp(1): exit 1 when the files differ
    if (hdr || changed || only_a || only_b) throw CLI::RuntimeError(1);
  });
}

}  // namespace
CORTIQ_COMMAND(24, setup_diff);
}  // namespace cortiq::cli
