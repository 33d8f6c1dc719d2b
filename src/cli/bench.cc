// `cortiq bench <model.cmf> [-p 512] [-n 128] [-r 5] [-t 1,2] [--parallel 1,4] [--json] [--exact]` — prefill
// and decode throughput with the memory-bandwidth roofline (issue 6 item 3; llama-bench's contract). The
// table / JSON goes to stdout; notes and --progress lines go to stderr.
#include "runtime/bench.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>

#include "cli/command.h"
#include "cli/gguf_input.h"
#include "runtime/grammar.h"
#include "runtime/session.h"
#include "specialize/skill_choice.h"
#include "tokenizer/tokenizer.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct BenchArgs {
  std::string model, json_file;
  size_t n_prompt = 512, n_gen = 128, reps = 5;
  std::string threads_list = "1,2", parallel_list = "1";
  std::string task = "off";
  std::string skill, route_prompt;  ///< --skill ID|auto|none, --route-prompt TEXT (what auto routes on)
  uint64_t seed = 42;
  double bw_mib = 0;
  bool json = false, progress = false;
  runtime::LoadOptions load;  ///< only --exact and --no-mmap (threads come from -t, a list)
  std::string gguf_quant;     ///< --quant for a .gguf model (cli/gguf_input.h)
  std::string grammar_file, json_schema;
};

/// `bench --grammar F` / `--json-schema F`: the grammar's cost per generated token, without the
/// model's forward: from the grammar's start, each step computes the token mask over the whole
/// vocabulary (Engine::mask_by_grammar's work) and advances by one allowed token drawn uniformly
/// (SplitMix64(seed)); the walk restarts when the grammar is done or no token fits. n_gen steps,
/// each timed with steady_clock; prints tokens, vocabulary, mean / median / max microseconds.
void grammar_bench(const BenchArgs& a) {
  const auto g = load_grammar(a.grammar_file, a.json_schema);
  runtime::LoadOptions lo = a.load;
  lo.threads = 1;
  auto lm = runtime::load_model(a.model, lo);
  if (!lm.tokenizer) fail(ErrorKind::Unsupported, "{}: bench --grammar needs the model's tokenizer", a.model);
  const Tokenizer& t = *lm.tokenizer;
  std::vector<std::string> bytes(t.vocab_size());
  std::vector<bool> usable(bytes.size());
  for (uint32_t id = 0; id < bytes.size(); ++id)
    if ((usable[id] = !t.is_special(id))) bytes[id] = t.token_bytes(id);
  const runtime::TokenMasker masker(bytes, usable);
  runtime::SplitMix64 rng(a.seed);
  std::vector<double> us;
  std::vector<uint8_t> allow;
  std::vector<uint32_t> ids;
  std::optional<runtime::GrammarState> st(std::in_place, g);
  size_t restarts = 0;
  while (us.size() < std::max<size_t>(a.n_gen, 1)) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t n = masker.allowed(*st, allow);
    ids.clear();
    for (uint32_t id = 0; id < allow.size(); ++id)
      if (allow[id]) ids.push_back(id);
    uint32_t pick = 0;
    if (n > 0) {
      pick = ids[static_cast<size_t>(rng.next() % ids.size())];
      st->accept(masker.bytes(pick));
    }
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (n == 0 || st->done()) {
      st.emplace(g);
      ++restarts;
    }
  }
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double x : us) sum += x;
  std::printf(
      "grammar overhead: %zu tokens, vocabulary %zu, mask+advance per token: mean %.1f us, median %.1f us, "
      "max %.1f us (%zu restarts)\n",
      us.size(), bytes.size(), sum / static_cast<double>(us.size()), sorted[sorted.size() / 2], sorted.back(),
      restarts);
}

/// "1,2,4" → {1, 2, 4}: every entry a decimal count. Throws Error(InvalidArgument) naming `flag` for
/// an empty entry or one that is not a number.
std::vector<size_t> count_list(const std::string& list, const char* flag) {
  std::vector<size_t> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string e = list.substr(pos, comma - pos);
    size_t v = 0;
    const auto r = std::from_chars(e.data(), e.data() + e.size(), v);
    if (e.empty() || r.ec != std::errc() || r.ptr != e.data() + e.size())
      fail(ErrorKind::InvalidArgument, "{} '{}': entry '{}' is not a count (give e.g. 1,2)", flag, list, e);
    out.push_back(v);
    if (comma == list.size()) return out;
    pos = comma + 1;
  }
}

void bench_cmd(const BenchArgs& a) {
  if (!a.grammar_file.empty() || !a.json_schema.empty()) return grammar_bench(a);
  runtime::bench::BenchOptions o;
  o.n_prompt = a.n_prompt;
  o.n_gen = a.n_gen;
  o.reps = a.reps;
  o.threads = count_list(a.threads_list, "-t/--threads");
  o.parallel = count_list(a.parallel_list, "--parallel");
  o.seed = a.seed;
  o.exact = a.load.exact;
  o.no_mmap = a.load.no_mmap;
  o.task = a.task;
  o.skill = a.skill;
  if (a.skill == "auto") {
    if (a.route_prompt.empty())
      fail(ErrorKind::InvalidArgument,
           "--skill auto: bench's tokens are random ids, nothing to route on; give --route-prompt TEXT");
    runtime::LoadOptions lo;
    lo.skill = "auto";
    runtime::LoadedModel lm = runtime::load_model(a.model, lo);
    const specialize::RouteDecision d = specialize::route_prompt(lm, lm.encode_raw(a.route_prompt));
    o.skill = d.chosen.empty() ? "none" : d.chosen;
    o.skill_how =
        d.chosen.empty() ? "auto: routed to backbone (novelty)" : "auto: routed to skill: " + d.chosen;
  } else if (!a.route_prompt.empty()) {
    fail(ErrorKind::InvalidArgument, "--route-prompt is only for --skill auto (got --skill '{}')", a.skill);
  }
  if (a.bw_mib < 0) fail(ErrorKind::InvalidArgument, "--bw-mib {} must be >= 0", a.bw_mib);
  o.bandwidth_bytes = static_cast<uint64_t>(a.bw_mib * 1024.0 * 1024.0);
  runtime::bench::BenchProgress prog;
  if (a.progress)
    prog = [](const std::string& s) {
      std::fprintf(stderr, "bench: %s\n", s.c_str());
      std::fflush(stderr);
    };
  // The JSON file is created before the run, so an unwritable path fails now, not after minutes of
  // measuring; it is committed after the table is printed.
  std::optional<AtomicFile> json_file;
  if (!a.json_file.empty()) json_file.emplace(a.json_file, "bench.json");
  const auto r = runtime::bench::run_bench(resolve_model_path(a.model, a.gguf_quant), o, prog);
  if (a.json) {
    std::printf("%s\n", runtime::bench::to_json(r).dump(2).c_str());
  } else {
    std::printf("%s", runtime::bench::to_markdown(r).c_str());
  }
  std::fflush(stdout);
  if (json_file) {
    const std::string j = runtime::bench::to_json(r).dump(2) + "\n";
    json_file->write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(j.data()), j.size()));
    json_file->commit();
  }
}

void setup(CLI::App& root) {
  auto a = std::make_shared<BenchArgs>();
  auto* c =
      root.add_subcommand("bench", "Measure prefill (pp) and decode (tg) tok/s and the bandwidth roofline");
  add_examples(c, {"cortiq bench build/stories260K.cmf -p 128 -n 64 -r 3 -t 1,2",
                   "cortiq bench model.cmf --parallel 1,4 --json"});
  c->add_option("model", a->model, "model .cmf file (or .gguf: converted once, cached)")->required();
  c->add_option("-p,--n-prompt", a->n_prompt, "prefill test size in tokens, one batch (512; 0 = skip)");
  c->add_option("-n,--n-gen", a->n_gen, "decode test size in tokens (128; 0 = skip)");
  c->add_option("-r,--repetitions", a->reps, "measured repetitions per test (5)")->check(positive());
  // lists are split here: CLI11's delimiter split drops an empty entry ("1,,2"), a typo rather than
  // a list of two
  c->add_option("-t,--threads", a->threads_list, "comma-separated thread counts (1,2)");
  c->add_option("--parallel", a->parallel_list,
                "comma-separated decode sequence counts (1): B > 1 decodes B sequences per step in one "
                "batched pass, as serve --parallel does; test tg<n>x<B>, aggregate t/s");
  c->add_option("--seed", a->seed, "token-id RNG seed (42)");
  c->add_option("--task", a->task,
                "run the tests under this task mask of the file (off = dense, the default; '' = the "
                "file's fallback); a mask keeping <= 50% of a layer's FFN reads only its alive rows");
  c->add_option("--skill", a->skill,
                "run the tests with this skill of the file on its backbone: an id, 'none' (the backbone, "
                "default) or 'auto' (routed on --route-prompt); the report says which ran");
  c->add_option("--route-prompt", a->route_prompt,
                "text --skill auto routes on (bench's own tokens are random)");
  c->add_option("--bw-mib", a->bw_mib,
                "bandwidth read-buffer size in MiB (default 2 x LLC within [256, 1024])");
  c->add_flag("--json", a->json, "JSON output (one object per test) instead of the markdown table");
  c->add_option("--json-file", a->json_file, "also write the JSON records to this file");
  add_load_flags(c, a->load, kLoadExact | kLoadNoMmap);
  add_gguf_flag(c, a->gguf_quant);
  c->add_flag("--progress", a->progress, "print progress lines to stderr");
  c->add_option("--grammar", a->grammar_file,
                "instead of throughput: the per-token cost of this GBNF grammar's token mask (-n tokens)");
  c->add_option("--json-schema", a->json_schema, "as --grammar, for a JSON Schema file");
  c->callback([a] { bench_cmd(*a); });
}

}  // namespace

CORTIQ_COMMAND(26, setup);

}  // namespace cortiq::cli
