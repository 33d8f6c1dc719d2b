// Subcommand registration for the `cortiq` CLI. Each src/cli/<name>.cc defines one subcommand
// and registers it with CORTIQ_COMMAND; main.cc only builds the CLI11 app and dispatches.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

namespace cortiq::runtime {
struct LoadOptions;
class Grammar;
}  // namespace cortiq::runtime

namespace cortiq::cli {

/// A subcommand: `setup` adds it to the root app (flags, callback). `order` sorts `--help`.
struct Command {
  int order;
  std::function<void(CLI::App& root)> setup;
};

/// Ends `cmd`'s --help with "Examples:" and one indented line per example (CLI11's footer), as
/// llama.cpp's tools show a usage line: every command has one or two that work as written from
/// the repository's root (paths of the embedded models).
inline void add_examples(CLI::App* cmd, std::initializer_list<const char*> lines) {
  std::string f = "\nExamples:";
  for (const char* l : lines) f += std::string("\n  ") + l;
  cmd->footer(f);
}

/// Registers a subcommand; returns a dummy value so it can initialise a static.
int register_command(Command c);

/// Throws Error(InvalidArgument) naming `command` when `output` resolves to `input` (the same
/// inode, through a symlink or hard link too, or the same canonical path) or, for an input named
/// as a shard of a set, to any shard of that set: writers replace their output atomically at the
/// end, so the source would be silently lost (requant, compact). When `input` is a folder (a
/// checkpoint for convert), an `output` that is an existing weights, config or tokenizer file of
/// that folder (.safetensors, .json, .jinja, .model, .bin, .gguf) is refused the same way.
void refuse_overwriting_input(const std::string& input, const std::string& output, const char* command);

/// The bytes of input file `path` (cortiq::read_file: Error(Io) naming a missing file or a folder);
/// "-" reads standard input to its end (template --messages, tokenize -f).
std::string read_input(const std::string& path);

/// The output constraint of `--grammar-file F` (GBNF) or `--json-schema F` (a JSON Schema file):
/// null when both are empty. Throws Error(InvalidArgument) when both are given, Error(Io) for an
/// unreadable file, Error(Parse) / Error(Unsupported) from the grammar or schema, the message
/// prefixed with the file's path.
std::shared_ptr<const runtime::Grammar> load_grammar(const std::string& grammar_file,
                                                     const std::string& schema_file);

/// The model-loading flags shared by the commands that call runtime::load_model (run, ppl, serve,
/// bench); a bit set for add_load_flags.
enum LoadFlag : unsigned {
  kLoadThreads = 1u << 0,       ///< `-t/--threads N` → LoadOptions::threads: kernel threads, 0 = all cores
  kLoadExact = 1u << 1,         ///< `--exact` → LoadOptions::exact: f32 activations in every matvec
                                ///< (kernels::MatmulMode::Exact) instead of int8 activations (Fast)
  kLoadNoMmap = 1u << 2,        ///< `--no-mmap` → LoadOptions::no_mmap: read the file into anonymous
                                ///< huge-page memory (MapMode::Memory) instead of mmap'ing it
  kLoadKvF16 = 1u << 3,         ///< `--kv-f16` → LoadOptions::kv_f16: f16 KV cache instead of f32
  kLoadCheckTensors = 1u << 4,  ///< `--check-tensors` → LoadOptions::check_tensors: verify every
                                ///< tensor's hash (as `cortiq verify`) before running
  kLoadSkill = 1u << 5,         ///< `--skill ID|auto|none` and `--blend id:w,…|auto` → LoadOptions::skill
                                ///< / blend (runtime/skills.h; routing: specialize/skill_choice.h)
  kLoadAll = kLoadThreads | kLoadExact | kLoadNoMmap | kLoadKvF16 | kLoadCheckTensors | kLoadSkill,
};

/// Adds the flags selected by `which` (LoadFlag bits) to `cmd`, bound to the fields of `opts`, in
/// the order -t/--threads, --exact, --no-mmap, --kv-f16, --check-tensors, --skill, --blend. Each flag's name
/// and help text live only here. Defaults: whatever `opts` holds when the command line is parsed (a flag that
/// is not given leaves its field untouched), so a command sets its own defaults in `opts` (run and ppl use
/// threads = 0, as does serve). `opts` must outlive the parse (keep it in the
/// command's shared state). `--task` and `--ctx` are not here: their meaning and help text differ
/// per command (ppl's --ctx is the chunk length; bench's -t is a thread-count list).
void add_load_flags(CLI::App* cmd, runtime::LoadOptions& opts, unsigned which = kLoadAll);

/// CLI11 validators with plain messages ("must be ≥ 0, got -5", "must be > 0, got 0"); CLI11's own
/// PositiveNumber prints the whole double range. A value that is not a number passes through to
/// the option's own conversion, which reports it.
CLI::Validator non_negative();
CLI::Validator positive();
/// value ≥ lo ("must be ≥ 4, got 0"; ppl's --ctx).
CLI::Validator at_least(double lo);
/// lo ≤ value ≤ hi ("must be in [0, 1], got 5").
CLI::Validator in_range(double lo, double hi);
/// A count that may also be -1, which means `minus_one` ("must be ≥ 0 or -1 (all chunks), got -5";
/// run's -n, ppl's --chunks, as llama.cpp spells "no limit").
CLI::Validator non_negative_or_minus_one(const std::string& minus_one);
/// A count ≥ 1 that may also be -1, which means `minus_one` ("must be ≥ 1 or -1 (all chunks), got
/// 0"; ppl's --chunks, where 0 chunks would score nothing).
CLI::Validator positive_or_minus_one(const std::string& minus_one);

/// The usage error for a llama.cpp flag that cortiq does not take, or nullopt: `-ngl` /
/// `--n-gpu-layers` / `--gpu-layers` (no GPU offload) and `-m` / `--model` (the model is the first
/// argument), in the model-loading commands run, ppl, serve and bench (`argv[1]`). Checked on argv
/// before CLI11 parses it: CLI11 would read `-ngl 99` as `-n gl` and then refuse "99"; main.cc
/// prints it and exits 2. Arguments after `--` are not looked at.
std::optional<std::string> llama_cpp_flag_error(int argc, const char* const* argv);

/// Adds non_negative() to every option of `app` and of its subcommands (recursively) whose value
/// type is unsigned (CLI11 type name "UINT"): CLI11 2.1 converts "-5" into an unsigned option as
/// 2^64 − 5 without a word, so `run -n -5` would generate until the context ends. main.cc calls it
/// once after every command is set up, so new options are covered without a per-option check.
/// It also makes every single-value option given twice take the last value (`-n 10 -n 20` → 20).
void guard_unsigned_options(CLI::App& app);

}  // namespace cortiq::cli

#define CORTIQ_CONCAT_INNER(a, b) a##b
#define CORTIQ_CONCAT(a, b) CORTIQ_CONCAT_INNER(a, b)
/// Registers `setup_fn` (void(CLI::App&)) as a subcommand, listed in help by `order`.
#define CORTIQ_COMMAND(order, setup_fn)                       \
  static const int CORTIQ_CONCAT(cortiq_cmd_reg_, __LINE__) = \
      ::cortiq::cli::register_command(::cortiq::cli::Command{order, setup_fn})
