// `cortiq run <model.cmf>` — one-shot generation with -p or -f, interactive chat without.
// Generated text alone goes to stdout; the Ready line, notes and the footer go to stderr.
#include <fmt/format.h>
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

#include "cli/chat_repl.h"
#include "cli/command.h"
#include "cli/gguf_input.h"
#include "runtime/session.h"
#include "specialize/dynamic_route.h"
#include "specialize/skill_choice.h"
#include "tokenizer/output_protocol.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct RunArgs {
  std::string model, prompt, prompt_file, system, chat_template_file;
  std::string gguf_quant;  ///< --quant for a .gguf model (cli/gguf_input.h)
  int64_t n = 256;         ///< -1: until end of text or the context is full (llama-cli)
  runtime::LoadOptions
      load;  ///< -t/--threads (default 0 = all cores), --exact, --no-mmap, --ctx, --kv-f16, --task
  bool greedy = false, raw = false, no_think = false, verbose_prompt = false;
  bool route_dynamic = false;  ///< --route-dynamic (specialize/dynamic_route.h)
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
  restore_terminal();  // libedit had the terminal in raw mode
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

/// Splits "/cmd rest" into ("/cmd", "rest").
std::pair<std::string, std::string> split_command(const std::string& line) {
  const size_t sp = line.find_first_of(" \t");
  if (sp == std::string::npos) return {line, ""};
  const size_t rest = line.find_first_not_of(" \t", sp);
  return {line.substr(0, sp), rest == std::string::npos ? "" : line.substr(rest)};
}

constexpr const char* kChatHelp =
    "/exit, /quit           end the chat (or Ctrl+D, or Ctrl+C at the prompt)\n"
    "/clear                 forget the conversation so far (the --system message stays)\n"
    "/set KEY VALUE         sampling: temp, top_k, top_p, min_p, repeat_penalty, presence_penalty,\n"
    "                       seed (-1 = random), n (tokens per answer; -1 = until the context is full);\n"
    "                       /set greedy; /set alone shows the settings\n"
    "/save FILE, /load FILE the conversation as JSON {\"messages\": [{\"role\", \"content\"}, ...]}\n"
    "/skill ID|auto|none    switch skill (auto: route on the next message; none: the backbone)\n"
    "/task NAME|off         switch task mask\n"
    "\"\"\" ... \"\"\"            a message of several lines; a line ending in \\ continues on the next\n"
    "Up/Down                recall earlier lines (history in ~/.cortiq_history; $CORTIQ_HISTORY)\n"
    "Ctrl+C                 stop the answer being written\n";

void run_cmd(const RunArgs& a) {
  const bool one_shot = a.prompt_opt->count() || a.file_opt->count();
  const std::string prompt = a.file_opt->count() ? read_prompt_file(a.prompt_file) : a.prompt;
  if (a.route_dynamic && !a.load.blend.empty())
    fail(ErrorKind::InvalidArgument,
         "--route-dynamic and --blend {}: choose one (dynamic routing runs one skill at a time)",
         a.load.blend);
  const specialize::DynamicOptions dyn_opt =
      a.route_dynamic ? specialize::DynamicOptions::from_env() : specialize::DynamicOptions{};
  const std::string template_text = a.chat_template_file.empty() ? "" : read_file(a.chat_template_file);
  runtime::LoadOptions lo = a.load;
  auto load = [&](const runtime::LoadOptions& o) {
    runtime::LoadedModel m = runtime::load_model(resolve_model_path(a.model, a.gguf_quant), o);
    if (!template_text.empty()) m.bundle.chat_template = template_text;
    return m;
  };
  runtime::LoadedModel lm = load(lo);
  // Skills: a one-shot prompt on a file with routable skills routes when no flag chose (CLI-NOTES run).
  // With --route-dynamic the model stays on the backbone and the sequence carries its skill.
  const std::vector<uint32_t> route_ids =
      one_shot && lm.tokenizer ? lm.encode_raw(prompt) : std::vector<uint32_t>{};
  std::string routed;
  std::string dyn_start;  // --route-dynamic: the skill the first turn starts under ("" = backbone)
  std::unique_ptr<model::Model> dyn_backbone;
  if (a.route_dynamic) {
    if (lo.skill == "auto" || lo.skill.empty()) {
      if (!route_ids.empty()) {
        const specialize::RouteDecision d = specialize::route_prompt(lm, route_ids);
        dyn_start = d.chosen;
        routed = d.chosen.empty()
                     ? fmt::format("routed to backbone (novelty: {})", d.why)
                     : fmt::format("routed to skill: {} (E = {:.4f})", d.chosen, d.scores[*d.best].e);
      }
    } else if (lo.skill != "none" && lo.skill != "backbone") {
      dyn_start = lo.skill;
      runtime::bind_skill(lm, "", !lo.task.empty() && lo.task != "general");
    }
    dyn_backbone = model::Model::create(lm.backbone, lm.model_options);
    // checks the file has routable skills before anything runs
    specialize::DynamicRouter probe(*dyn_backbone, lm.reader->skills(), dyn_start, dyn_opt);
    std::fprintf(stderr, "dynamic routing: EON %.2f, EOFF %.2f, MARGIN %.2f, PERIOD %zu\n", dyn_opt.eon,
                 dyn_opt.eoff, dyn_opt.margin, dyn_opt.period);
  } else {
    routed = specialize::bind_routed(lm, lo, route_ids, true);
  }
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
  const char* why_raw = a.raw ? "--raw encodes the prompt as is" : "this model has no chat template";
  if (!chat && !a.system.empty()) std::fprintf(stderr, "note: --system is ignored: %s\n", why_raw);
  auto session = std::make_unique<runtime::Session>(lm);
  const OutputProtocol proto = chat ? OutputProtocol::of(*lm.bundle.chat_template) : OutputProtocol{};
  if (chat && lm.tokenizer) gp.keep_special = tool_markup_specials(*lm.tokenizer);
  std::vector<runtime::ChatMessage> messages;
  if (!a.system.empty() && chat) messages.push_back({"system", a.system});
  bool route_next = false;  // `/skill auto`: route on the next message
  auto turn = [&](const std::string& user) {
    if (route_next) {
      route_next = false;
      session.reset();  // the engine is made over the bound model: rebind without it
      const std::string line = specialize::bind_routed(lm, lo, lm.encode_raw(user), true);
      session = std::make_unique<runtime::Session>(lm);
      if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::vector<uint32_t> ids;
    std::string rendered;
    bool opens_reasoning = false;  // the rendered prompt leaves the model inside a <think> block
    if (chat) {
      messages.push_back({"user", user});
      // A conversation that outgrows the context drops its oldest exchanges (the system message and
      // the new turn stay), as llama.cpp's chat does, instead of ending the session.
      const size_t keep = !messages.empty() && messages.front().role == "system" ? 1 : 0;
      size_t dropped = 0;
      for (;;) {
        rendered = runtime::render_chat(lm, messages, a.no_think);
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
      rendered = user;
      ids = lm.encode_raw(user);
    }
    if (a.verbose_prompt)  // llama-cli's --verbose-prompt: what the model is given
      std::fprintf(stderr, "[prompt: %zu tokens]\n%s\n[/prompt]\n", ids.size(), rendered.c_str());
    g_cancel.store(false);
    std::shared_ptr<specialize::DynamicRouter> router;
    if (a.route_dynamic) {
      router =
          std::make_shared<specialize::DynamicRouter>(*dyn_backbone, lm.reader->skills(), dyn_start, dyn_opt);
      auto route = specialize::make_dynamic_route(lm, router, [](const specialize::RouteSwitch& s) {
        std::fprintf(stderr, "\n[route: %s -> %s at token %zu (E = %.4f)]\n",
                     s.from.empty() ? "backbone" : s.from.c_str(), s.to.empty() ? "backbone" : s.to.c_str(),
                     s.at, s.e);
      });
      gp.skill = route.initial;
      gp.reroute = route.reroute;
    }
    runtime::GenerateResult r;
    {
      const AnsweringScope answering;  // Ctrl-C cancels the answer, also when generate throws
      AnswerPrinter printer(chat, proto, opens_reasoning);
      r = session->generate(ids, gp, [&](std::string_view s) { printer.feed(s); });
      printer.finish();
    }
    if (chat) messages.push_back({"assistant", r.text});
    if (router) dyn_start = router->active();  // the next turn starts where this one ended
    std::fflush(stdout);
    print_footer(r);
    return r;
  };
  if (one_shot) {
    turn(prompt);
    std::fputc('\n', stdout);
    return;
  }
  // /skill and /task: the file loaded again with other options; on an error nothing changes.
  auto reload = [&](const runtime::LoadOptions& o) {
    runtime::LoadedModel fresh = load(o);
    session.reset();
    lm = std::move(fresh);
    session = std::make_unique<runtime::Session>(lm);
    lo = o;
  };
  gp.cancel = &g_cancel;
  install_sigint_handler();
  if (!chat)
    std::fprintf(stderr,
                 "note: %s: each line is a raw completion of its own (the model continues the text; "
                 "nothing is kept between lines)%s\n",
                 why_raw, a.raw ? "" : ". --chat-template-file FILE gives it one");
  std::fprintf(stderr,
               "\nType your message (/help for commands, \"\"\" for several lines, /exit or Ctrl+D to end; "
               "Ctrl+C stops an answer):\n");
  LineReader in(default_history_path());
  for (;;) {
    const std::optional<std::string> msg = read_message(in);
    if (!msg) break;
    const std::string& line = *msg;
    if (line.empty()) continue;
    // the chat commands; any other line is a message, also one that starts with '/'
    const auto [cmd, arg] = split_command(line);
    try {
      if (cmd == "/exit" || cmd == "/quit") break;
      if (cmd == "/help") {
        std::fputs(kChatHelp, stderr);
        continue;
      }
      if (cmd == "/clear") {  // the --system message stays
        if (!chat) {
          std::fprintf(stderr, "(no conversation to clear: each line is a raw completion)\n");
          continue;
        }
        messages.clear();
        if (!a.system.empty()) messages.push_back({"system", a.system});
        session->reset();
        std::fprintf(stderr, "(conversation cleared)\n");
        continue;
      }
      if (cmd == "/set") {
        std::fprintf(stderr, "%s\n",
                     arg.empty() ? describe_settings(gp).c_str() : apply_set(arg, gp).c_str());
        continue;
      }
      if (cmd == "/save" || cmd == "/load") {
        if (arg.empty()) fail(ErrorKind::InvalidArgument, "usage: {} FILE", cmd);
        if (!chat)
          fail(ErrorKind::InvalidArgument, "{}: no conversation: each line is a raw completion", cmd);
        if (cmd == "/save") {
          save_conversation(arg, messages);
          std::fprintf(stderr, "(saved %zu messages to %s)\n", messages.size(), arg.c_str());
        } else {
          messages = load_conversation(arg);
          session->reset();
          std::fprintf(stderr, "(loaded %zu messages from %s)\n", messages.size(), arg.c_str());
        }
        continue;
      }
      if (cmd == "/skill") {
        if (arg.empty()) {
          std::fprintf(stderr, "skill: %s\n", lm.skill.empty() ? "none (the backbone)" : lm.skill.c_str());
          continue;
        }
        runtime::LoadOptions o = lo;
        o.skill = arg;
        o.blend.clear();
        reload(o);
        route_next = arg == "auto";
        std::fprintf(stderr, "skill: %s\n",
                     route_next ? "auto (routed on the next message)"
                                : (lm.skill.empty() ? "none (the backbone)" : lm.skill.c_str()));
        continue;
      }
      if (cmd == "/task") {
        if (!arg.empty()) {
          runtime::LoadOptions o = lo;
          o.task = arg;
          reload(o);
        }
        std::fprintf(stderr, "Task: %s | Sparsity: %.0f%%\n", lm.active_task.c_str(), lm.sparsity * 100.0);
        continue;
      }
    } catch (const std::exception& e) {  // a bad /set value, an unknown task: the chat goes on
      std::fprintf(stderr, "Error: %s\n", e.what());
      continue;
    }
    if (!chat) session->reset();
    try {
      turn(line);
    } catch (const std::exception& e) {  // e.g. one message longer than the context: the chat goes on
      if (chat && !messages.empty() && messages.back().role == "user") messages.pop_back();
      session->reset();  // a turn that failed mid-way leaves its cache unknown
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
  add_examples(c, {"cortiq run build/stories260K.cmf -p \"Once upon a time\" -n 64 -t 4",
                   "cortiq run chat-model.cmf --system \"Be brief.\"   # interactive chat (/help inside)"});
  c->add_option("model", a->model, "model .cmf file (or .gguf: converted once, cached)")->required();
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
  c->add_option(
      "--task", a->load.task,
      "task mask name, or 'off' (default: the file's fallback mask; -t is --threads, as in llama.cpp)");
  c->add_option("--chat-template-file", a->chat_template_file,
                "Jinja chat template to use instead of the file's (e.g. to chat with a base model)")
      ->check(CLI::ExistingFile);
  c->add_flag(
      "--verbose-prompt", a->verbose_prompt,
      "print the prompt the model is given (the rendered chat template) and its token count on stderr");
  add_load_flags(c, a->load);
  add_gguf_flag(c, a->gguf_quant);
  c->add_option("-c,--ctx", a->load.ctx,
                "KV cache capacity in tokens (0 or absent: min(max_position_embeddings, 4096))");
  c->add_flag(
      "--route-dynamic", a->route_dynamic,
      "re-route during generation (ENGINE-NOTES 3.12): every 8 tokens the skill is re-chosen on the "
      "last 32 tokens, with hysteresis (activate below E 0.62, leave above 0.74 or for a rival better by "
      "0.03; CMF_ROUTE_EON/EOFF/MARGIN/PERIOD); switches are printed on stderr");
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
