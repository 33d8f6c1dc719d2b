// The `cortiq` command line: builds the CLI11 app from the registered subcommands and maps
// library errors to "Error: <kind>: <message>" on stderr with exit status 1.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command.h"
#include "util/atomic_file.h"
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

namespace {
/// The number that `s` spells (leading blanks skipped), or nullopt when it is not one.
std::optional<double> number_of(const std::string& s) {
  const char* b = s.c_str();
  char* e = nullptr;
  const double v = std::strtod(b, &e);
  if (e == b) return std::nullopt;
  return v;
}
/// Whether `arg` is the flag `name`, alone or as `name=value`.
bool is_flag(std::string_view arg, std::string_view name) {
  return arg == name || (arg.starts_with(name) && arg.size() > name.size() && arg[name.size()] == '=');
}
}  // namespace

std::optional<std::string> llama_cpp_flag_error(int argc, const char* const* argv) {
  if (argc < 2) return std::nullopt;
  const std::string_view cmd = argv[1];
  if (cmd != "run" && cmd != "ppl" && cmd != "serve" && cmd != "bench") return std::nullopt;
  for (int i = 2; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;  // what follows is positional
    for (const char* f : {"-ngl", "--n-gpu-layers", "--gpu-layers"})
      if (is_flag(a, f))
        return fmt::format("GPU offload is not supported: cortiq runs on the CPU (drop {})", f);
    for (const char* f : {"-m", "--model"})
      if (is_flag(a, f))
        return fmt::format("the model is the first argument: cortiq {} MODEL.cmf … (drop {})", cmd, f);
  }
  return std::nullopt;
}

CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const auto v = number_of(s);
        return v && !(*v >= 0) ? "must be ≥ 0, got " + s : std::string();  // NaN too
      },
      "", "NON_NEGATIVE");
}

CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const auto v = number_of(s);
        return v && !(*v > 0) ? "must be > 0, got " + s : std::string();
      },
      "", "POSITIVE");
}

CLI::Validator non_negative_or_minus_one(const std::string& minus_one) {
  return CLI::Validator(
      [minus_one](std::string& s) -> std::string {
        return s.starts_with('-') && s != "-1" ? "must be ≥ 0 or -1 (" + minus_one + "), got " + s
                                               : std::string();
      },
      "", "N_OR_MINUS_1");
}

CLI::Validator positive_or_minus_one(const std::string& minus_one) {
  return CLI::Validator(
      [minus_one](std::string& s) -> std::string {
        const auto v = number_of(s);
        return v && *v != -1 && *v < 1 ? "must be ≥ 1 or -1 (" + minus_one + "), got " + s : std::string();
      },
      "", "N_OR_MINUS_1");
}

CLI::Validator at_least(double lo) {
  return CLI::Validator(
      [lo](std::string& s) -> std::string {
        const auto v = number_of(s);
        return v && !(*v >= lo) ? fmt::format("must be ≥ {}, got {}", lo, s) : std::string();
      },
      "", "AT_LEAST");
}

CLI::Validator in_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        const auto v = number_of(s);
        return v && !(*v >= lo && *v <= hi) ? fmt::format("must be in [{}, {}], got {}", lo, hi, s)
                                            : std::string();
      },
      "", "RANGE");
}

void guard_unsigned_options(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    if (o->get_type_name().rfind("UINT", 0) == 0) o->check(non_negative());
    // a single-value option given twice takes the last value (`-n 10 -n 20` → 20), as getopt tools
    // and llama.cpp do; CLI11 refuses it by default
    if (o->get_items_expected_max() == 1 && o->get_positional() == false)
      o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) guard_unsigned_options(*sub);
}

}  // namespace cortiq::cli

int main(int argc, char** argv) {
  CLI::App app{"cortiq — CMF v2 toolchain and CPU runtime"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "cortiq 0.1.0");
  auto cmds = cortiq::cli::registry();
  std::stable_sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  for (auto& c : cmds) c.setup(app);
  cortiq::cli::guard_unsigned_options(app);
  cortiq::remove_temporaries_on_signals();  // an interrupted convert / requant leaves no .tmp file
  if (argc > 1 && argv[1][0] != '-') {      // CLI11 alone says "A subcommand is required" for a typo
    std::string names;
    bool known = false;
    for (const CLI::App* sc : app.get_subcommands([](CLI::App*) { return true; })) {
      known = known || sc->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sc->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "Error: unknown command '%s'; commands: %s (cortiq --help)\n", argv[1],
                   names.c_str());
      return 2;
    }
  }
  // llama.cpp spellings CLI11 would misread (`-ngl 99` as `-n gl`, then "99 was not expected")
  if (const auto e = cortiq::cli::llama_cpp_flag_error(argc, argv)) {
    std::fprintf(stderr, "Error: %s\n", e->c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a command's own exit status (diff: files differ)
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (help and version too); a usage error exits 2, as getopt tools do
    // (CLI11's own codes are 105–114)
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
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
