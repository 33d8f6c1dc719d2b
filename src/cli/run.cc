// `cortiq run <model.cmf>` — one-shot generation with -p or -f, interactive chat without.
// Generated text alone goes to stdout; the Ready line, notes and the footer go to stderr.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "runtime/session.h"
#include "specialize/skill_choice.h"
#include "tokenizer/output_protocol.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct RunArgs {
  std::string model, prompt, prompt_file, system;
  int64_t n = 256;            ///< -1: until end of text or the context is full (llama-cli)
  runtime::LoadOptions load;  ///< --threads (default 0 = all cores), --exact, --no-mmap, --ctx, --kv-f16, -t
  bool greedy = false, raw = false, no_think = false;
  float temperature = 0.7f, top_p = 0.9f, min_p = 0.05f, repeat_penalty = 1.0f, presence = 0.0f;
  int top_k = 40;
  std::string seed = "-1";  ///< checked by seed_value(); -1 = random (llama-cli)
  std::vector<std::string> stop;
  std::string grammar_file, json_schema;
  CLI::Option* prompt_opt = nullptr;
  CLI::Option* file_opt = nullptr;
};

/// `--seed` as a number: a decimal uint64, or nullopt for "-1" (a random seed, as llama-cli).
/// Anything else (other negatives, text, out of range) returns an empty optional too, with `ok`
/// false.
std::optional<uint64_t> seed_value(const std::string& s, bool& ok) {
  ok = true;
  if (s == "-1") return std::nullopt;
  ok = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
  if (!ok) return std::nullopt;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  ok = errno == 0;
  return ok ? std::optional<uint64_t>(v) : std::nullopt;
}

/// The text of `-f/--file`: the whole file, less one trailing newline (as llama-cli's -f).
/// Throws Error(Io) naming the file when it cannot be read (missing, unreadable, a folder).
std::string read_prompt_file(const std::string& path) {
  if (std::filesystem::is_directory(path))
    fail(ErrorKind::Io, "-f/--file: cannot read '{}': it is a folder", path);
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::Io, "-f/--file: cannot read '{}': {}", path, std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

// Ctrl-C in the interactive chat, as in llama-cli: during an answer it ends that answer (the
// text so far is kept, finish "cancelled") and the chat goes on; at the prompt it ends the program
// (exit status 130, the shell's for SIGINT). Lock-free atomics, so the handler may touch them.
std::atomic<bool> g_answering{false};
std::atomic<bool> g_cancel{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_sigint(int) {
  if (g_answering.load()) {
    g_cancel.store(true);
    return;
  }
  const char nl = '\n';
  [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, &nl, 1);
  ::_exit(130);
}

/// Marks an answer being written (g_answering) for its lifetime, so Ctrl-C cancels the answer
/// instead of ending the program; cleared on every exit, exceptions included.
struct AnsweringScope {
  AnsweringScope() { g_answering.store(true); }
  ~AnsweringScope() { g_answering.store(false); }
  AnsweringScope(const AnsweringScope&) = delete;
  AnsweringScope& operator=(const AnsweringScope&) = delete;
};

void install_sigint_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a write to stdout interrupted mid-answer resumes
  sigaction(SIGINT, &sa, nullptr);
}

/// Raw mode (`chat` false): the text as it streams. A chat answer on the terminal is read with the template's
/// output protocol (tokenizer/output_protocol.h): reasoning blocks go to stderr between "[thinking]" and
/// "[/thinking]" lines as they stream; the answer goes to stdout; tool-call markup is held back
/// from where it may begin and, when it parses as calls, printed at the end as one JSON line
/// {"tool_calls":[{"id","type":"function","function":{"name","arguments"}}]} after the rest of the text.
class AnswerPrinter {
 public:
  /// `starts_inside`: the rendered prompt opened a reasoning block (prompt_opens_reasoning).
  AnswerPrinter(bool chat, const OutputProtocol& proto, bool starts_inside)
      : chat_(chat), proto_(proto), reasoning_(chat && proto.reasoning, starts_inside) {}
  void feed(std::string_view text) { emit(reasoning_.feed(text), false); }
  /// The end of the answer: everything held back.
  void finish() { emit(reasoning_.finish(), true); }

 private:
  void emit(const ReasoningStream::Delta& d, bool done) {
    if (!chat_) return out(d.content);
    if (!d.reasoning.empty()) {
      if (!thinking_) std::fputs("[thinking]\n", stderr);
      thinking_ = true;
      std::fwrite(d.reasoning.data(), 1, d.reasoning.size(), stderr);
    }
    if (thinking_ && (!d.content.empty() || done)) {
      std::fputs("\n[/thinking]\n", stderr);
      thinking_ = false;
    }
    content_ += d.content;
    if (done) {
      const std::string tail = content_.substr(sent_);
      const ToolParse p = parse_tool_calls(tail, false, {proto_.tools, {}});
      if (p.calls.empty()) {
        out(tail);
      } else {
        nlohmann::ordered_json calls = nlohmann::ordered_json::array();
        for (const auto& c : p.calls)
          calls.push_back({{"id", c.id},
                           {"type", "function"},
                           {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        out(p.content.empty() ? std::string() : p.content + "\n");
        out(nlohmann::ordered_json{{"tool_calls", calls}}.dump());
      }
      sent_ = content_.size();
      return;
    }
    const size_t upto = std::min(content_.size(), tool_markup_start(content_, false, proto_.tools));
    if (upto > sent_) out(std::string_view(content_).substr(sent_, upto - sent_));
    sent_ = std::max(sent_, upto);
  }
  static void out(std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  }
  bool chat_;
  OutputProtocol proto_;
  ReasoningStream reasoning_;
  std::string content_;
  size_t sent_ = 0;
  bool thinking_ = false;
};

void print_footer(const runtime::GenerateResult& r) {
  const size_t n = r.ids.size();
  if (n >= 2 && r.ttft_s > 0 && r.total_s > r.ttft_s) {
    const double decode = static_cast<double>(n - 1) / (r.total_s - r.ttft_s);
    const double overall = static_cast<double>(n) / r.total_s;
    std::fprintf(stderr,
                 "\n[%zu tokens · first token %.1f s · decode %.1f tok/s · overall %.1f tok/s, finish: %s]\n",
                 n, r.ttft_s, decode, overall, r.finish.c_str());
  } else if (n == 1) {  // no decode rate from one token: the same footer without it
    std::fprintf(stderr, "\n[1 tokens · first token %.1f s, finish: %s]\n", r.ttft_s, r.finish.c_str());
  } else {
    std::fprintf(stderr, "\n[0 tokens, finish: %s]\n", r.finish.c_str());
  }
}

void run_cmd(const RunArgs& a) {
  const bool one_shot = a.prompt_opt->count() || a.file_opt->count();
  const std::string prompt = a.file_opt->count() ? read_prompt_file(a.prompt_file) : a.prompt;
  runtime::LoadedModel lm = runtime::load_model(a.model, a.load);
  // Skills: a one-shot prompt on a file with routable skills routes when no flag chose (CLI-NOTES run).
  const std::string routed = specialize::bind_routed(
      lm, a.load, one_shot && lm.tokenizer ? lm.encode_raw(prompt) : std::vector<uint32_t>{}, true);
  if (!routed.empty())
    std::fprintf(stderr, "%s\n", routed.c_str());
  else if (!lm.blend.empty())
    std::fprintf(stderr, "blend: %s\n", runtime::describe_blend(lm.blend).c_str());
  else if (!lm.skill.empty())
    std::fprintf(stderr, "skill: %s\n", lm.skill.c_str());
  std::fprintf(stderr, "Ready: %s | Task: %s | Sparsity: %.0f%%\n", lm.model->arch().arch_name.c_str(),
               lm.active_task.c_str(), lm.sparsity * 100.0);
  runtime::GenerateParams gp;
  gp.max_tokens = a.n < 0 ? std::numeric_limits<size_t>::max() : static_cast<size_t>(a.n);
  gp.stop_strings = a.stop;
  gp.grammar = load_grammar(a.grammar_file, a.json_schema);
  if (a.greedy) {
    gp.sampler = runtime::SamplerParams::greedy();
  } else {
    gp.sampler.temperature = a.temperature;
    gp.sampler.top_k = a.top_k;
    gp.sampler.top_p = a.top_p;
    gp.sampler.min_p = a.min_p;
    gp.sampler.repeat_penalty = a.repeat_penalty;
    gp.sampler.presence_penalty = a.presence;
  }
  bool seed_ok = true;
  if (const auto seed = seed_value(a.seed, seed_ok)) gp.sampler.seed = *seed;
  const bool chat = !a.raw && lm.bundle.chat_template && !lm.bundle.chat_template->empty();
  if (!chat && !a.system.empty())
    std::fprintf(stderr, "note: --system is ignored: %s\n",
                 a.raw ? "--raw encodes the prompt as is" : "this model has no chat template");
  runtime::Session session(lm);
  const OutputProtocol proto = chat ? OutputProtocol::of(*lm.bundle.chat_template) : OutputProtocol{};
  if (chat && lm.tokenizer) gp.keep_special = tool_markup_specials(*lm.tokenizer);
  std::vector<runtime::ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  auto turn = [&](const std::string& user) {
    std::vector<uint32_t> ids;
    bool opens_reasoning = false;  // the rendered prompt leaves the model inside a <think> block
    if (chat) {
      messages.push_back({"user", user});
      // A conversation that outgrows the context drops its oldest exchanges (the system message and
      // the new turn stay), as llama.cpp's chat does, instead of ending the session.
      const size_t keep = !messages.empty() && messages.front().role == "system" ? 1 : 0;
      size_t dropped = 0;
      for (;;) {
        const std::string rendered = runtime::render_chat(lm, messages, a.no_think);
        opens_reasoning = prompt_opens_reasoning(rendered);
        ids = lm.tokenizer->encode(rendered, false);
        if (ids.size() < lm.ctx || messages.size() <= keep + 1) break;
        const size_t n = std::min<size_t>(2, messages.size() - keep - 1);
        messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(keep),
                       messages.begin() + static_cast<std::ptrdiff_t>(keep + n));
        dropped += n;
      }
      if (dropped)
        std::fprintf(stderr, "note: dropped the %zu oldest messages to fit the context (%zu tokens)\n",
                     dropped, lm.ctx);
    } else {
      ids = lm.encode_raw(user);
    }
    g_cancel.store(false);
    runtime::GenerateResult r;
    {
      const AnsweringScope answering;  // Ctrl-C cancels the answer, also when generate throws
      AnswerPrinter printer(chat, proto, opens_reasoning);
      r = session.generate(ids, gp, [&](std::string_view s) { printer.feed(s); });
      printer.finish();
    }
    if (chat) messages.push_back({"assistant", r.text});
    std::fflush(stdout);
    print_footer(r);
    return r;
  };
  if (one_shot) {
    turn(prompt);
    std::fputc('\n', stdout);
    return;
  }
  gp.cancel = &g_cancel;
  install_sigint_handler();
  std::fprintf(stderr,
               "\nType your message (/help for commands, /exit or Ctrl+D to end; Ctrl+C stops an answer):\n");
  std::string line;
  for (;;) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    // llama-cli's chat commands; any other line is a message, also one that starts with '/'
    if (line == "/exit" || line == "/quit") break;
    if (line == "/help") {
      std::fprintf(
          stderr,
          "/exit, /quit  end the chat (or Ctrl+D, or Ctrl+C at the prompt)\n/clear        forget the "
          "conversation so far\nCtrl+C        stop the answer being written\n");
      continue;
    }
    if (line == "/clear") {  // the --system message stays
      messages.clear();
      if (!a.system.empty()) messages.push_back({"system", a.system});
      session.reset();
      std::fprintf(stderr, "(conversation cleared)\n");
      continue;
    }
    if (!chat) session.reset();
    try {
      turn(line);
    } catch (const std::exception& e) {  // e.g. one message longer than the context: the chat goes on
      if (chat && !messages.empty() && messages.back().role == "user") messages.pop_back();
      session.reset();  // a turn that failed mid-way leaves its cache unknown
      std::fprintf(stderr, "Error: %s\n", e.what());
      continue;
    }
    std::fputc('\n', stdout);
  }
}

void setup(CLI::App& root) {
  auto a = std::make_shared<RunArgs>();
  a->load.threads = 0;
  auto* c = root.add_subcommand("run", "Generate text: one-shot with -p or -f, interactive chat without");
  c->add_option("model", a->model, "model .cmf file")->required();
  a->prompt_opt = c->add_option("-p,--prompt", a->prompt, "prompt (one-shot); empty string = BOS only");
  a->file_opt = c->add_option("-f,--file", a->prompt_file,
                              "prompt (one-shot) read from FILE, less one trailing newline");
  a->prompt_opt->excludes(a->file_opt);
  c->add_option("-n,--max-tokens", a->n,
                "tokens to generate (256; -1 = until end of text or the context is full)")
      ->check(non_negative_or_minus_one("until the context is full"));
  c->add_flag("--greedy", a->greedy, "argmax decoding (temperature 0, repetition penalty 1)");
  c->add_option("--temperature,--temp", a->temperature, "sampling temperature (0.7)")->check(non_negative());
  c->add_option("--top-k", a->top_k, "top-k (40; 0 = off)")->check(non_negative());
  c->add_option("--top-p", a->top_p, "top-p (0.9; 1 = off)")->check(in_range(0, 1));
  c->add_option("--min-p", a->min_p, "min-p (0.05; 0 = off)")->check(in_range(0, 1));
  c->add_option("--repeat-penalty,--rep-penalty", a->repeat_penalty, "repetition penalty (1 = off)")
      ->check(positive());
  c->add_option("--presence-penalty", a->presence, "presence penalty (0)");
  c->add_option("--seed", a->seed, "sampler seed (default -1: random)")
      ->type_name("INT")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            bool ok = true;
            seed_value(s, ok);
            return ok ? std::string() : "must be an integer ≥ 0 or -1 (random), got " + s;
          },
          "", "SEED"));
  c->add_flag("--raw", a->raw, "no chat template: encode the prompt as is (BOS when the tokenizer wants it)");
  c->add_option("--system", a->system, "system message (chat mode)");
  c->add_flag("--no-think", a->no_think, "chat template with enable_thinking=false");
  c->add_option("-t,--task", a->load.task,
                "task mask name, or 'off' (default: the file's fallback mask; threads: --threads)");
  add_load_flags(c, a->load);
  c->add_option("-c,--ctx", a->load.ctx,
                "KV cache capacity in tokens (0 or absent: min(max_position_embeddings, 4096))");
  c->add_option("--stop", a->stop, "stop string (repeatable)")->allow_extra_args(false);
  c->add_option("--grammar-file", a->grammar_file,
                "constrain the output to this GBNF grammar (llama.cpp syntax)");
  c->add_option("--json-schema", a->json_schema,
                "constrain the output to JSON valid under this JSON Schema file");
  c->callback([a] { run_cmd(*a); });
}

}  // namespace

CORTIQ_COMMAND(20, setup);

}  // namespace cortiq::cli
