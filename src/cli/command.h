// Subcommand registration for the `cortiq` CLI. Each src/cli/<name>.cc defines one subcommand
// and registers it with CORTIQ_COMMAND; main.cc only builds the CLI11 app and dispatches.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace cortiq::cli {

/// A subcommand: `setup` adds it to the root app (flags, callback). `order` sorts `--help`.
struct Command {
  int order;
  std::function<void(CLI::App& root)> setup;
};

/// Registers a subcommand; returns a dummy value so it can initialise a static.
int register_command(Command c);

}  // namespace cortiq::cli

#define CORTIQ_CONCAT_INNER(a, b) a##b
#define CORTIQ_CONCAT(a, b) CORTIQ_CONCAT_INNER(a, b)
/// Registers `setup_fn` (void(CLI::App&)) as a subcommand, listed in help by `order`.
#define CORTIQ_COMMAND(order, setup_fn)                        \
  static const int CORTIQ_CONCAT(cortiq_cmd_reg_, __LINE__) = \
      ::cortiq::cli::register_command(::cortiq::cli::Command{order, setup_fn})
