// The `cortiq` command line: builds the CLI11 app from the registered subcommands and maps
// library errors to "Error: <kind>: <message>" on stderr with exit status 1.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "cli/command.h"
#include "util/error.h"

namespace cortiq::cli {

static std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

int register_command(Command c) {
  registry().push_back(std::move(c));
  return 0;
}

}  // namespace cortiq::cli

int main(int argc, char** argv) {
  CLI::App app{"cortiq — CMF v2 toolchain and CPU runtime"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "cortiq 0.1.0");
  auto cmds = cortiq::cli::registry();
  std::stable_sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  for (auto& c : cmds) c.setup(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const cortiq::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "Error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "Error: %s\n", e.what());
    return 1;
  }
  return 0;
}
