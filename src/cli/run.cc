// `cortiq run <model.cmf>` — one-shot generation with -p, interactive chat without.
// Generated text alone goes to stdout; the Ready line, notes and the footer go to stderr.
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "runtime/session.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct RunArgs {
  std::string model, prompt, system;
  size_t n = 256;
  runtime::LoadOptions load;  ///< --threads (default 0 = all cores), --exact, --no-mmap, --ctx, --kv-f16, -t
  bool greedy = false, raw = false, no_think = false;
  float temperature = 0.7f, top_p = 0.9f, min_p = 0.05f, repeat_penalty = 1.1f, presence = 0.0f;
  int top_k = 40;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  CLI::Option* prompt_opt = nullptr;
  CLI::Option* seed_opt = nullptr;
};

void print_footer(const runtime::GenerateResult& r) {
  const size_t n = r.ids.size();
  if (n >= 2 && r.ttft_s > 0 && r.total_s > r.ttft_s) {
    const double decode = static_cast<double>(n - 1) / (r.total_s - r.ttft_s);
    const double overall = static_cast<double>(n) / r.total_s;
    std::fprintf(stderr,
                 "\n[%zu tokens · first token %.1f s · decode %.1f tok/s · overall %.1f tok/s, finish: %s]\n",
                 n, r.ttft_s, decode, overall, r.finish.c_str());
  } else {
    std::fprintf(stderr, "\n[%zu tokens, %.1f tok/s, finish: %s]\n", n,
                 r.total_s > 0 ? static_cast<double>(n) / r.total_s : 0.0, r.finish.c_str());
  }
}

void run_cmd(const RunArgs& a) {
  runtime::LoadedModel lm = runtime::load_model(a.model, a.load);
  std::fprintf(stderr, "Ready: %s | Task: %s | Sparsity: %.0f%%\n", lm.model->arch().arch_name.c_str(),
               lm.active_task.c_str(), lm.sparsity * 100.0);
  runtime::GenerateParams gp;
  gp.max_tokens = a.n;
  gp.stop_strings = a.stop;
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
  if (a.seed_opt->count()) gp.sampler.seed = a.seed;
  const bool chat = !a.raw && lm.bundle.chat_template && !lm.bundle.chat_template->empty();
  if (!chat && !a.system.empty())
    std::fprintf(stderr, "note: --system is ignored: %s\n",
                 a.raw ? "--raw encodes the prompt as is" : "this model has no chat template");
  runtime::Session session(lm);
  auto stream = [](std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  std::vector<runtime::ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  auto turn = [&](const std::string& user) {
    std::vector<uint32_t> ids;
    if (chat) {
      messages.push_back({"user", user});
      // A conversation that outgrows the context drops its oldest exchanges (the system message and
      // the new turn stay), as llama.cpp's chat does, instead of ending the session.
      const size_t keep = !messages.empty() && messages.front().role == "system" ? 1 : 0;
      size_t dropped = 0;
      for (;;) {
        ids = lm.tokenizer->encode(runtime::render_chat(lm, messages, a.no_think), false);
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
    auto r = session.generate(ids, gp, stream);
    if (chat) messages.push_back({"assistant", r.text});
    std::fflush(stdout);
    print_footer(r);
    return r;
  };
  if (a.prompt_opt->count()) {
    turn(a.prompt);
    std::fputc('\n', stdout);
    return;
  }
  std::fprintf(stderr, "\nType your message (Ctrl+C to exit):\n");
  std::string line;
  for (;;) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (!chat) session.reset();
    try {
      turn(line);
    } catch (const Error& e) {  // e.g. one message longer than the context: the session goes on
      if (chat && !messages.empty() && messages.back().role == "user") messages.pop_back();
      std::fprintf(stderr, "Error: %s\n", e.what());
      continue;
    }
    std::fputc('\n', stdout);
  }
}

void setup(CLI::App& root) {
  auto a = std::make_shared<RunArgs>();
  a->load.threads = 0;
  auto* c = root.add_subcommand("run", "Generate text: one-shot with -p, interactive chat without");
  c->add_option("model", a->model, "model .cmf file")->required();
  a->prompt_opt = c->add_option("-p,--prompt", a->prompt, "prompt (one-shot); empty string = BOS only");
  c->add_option("-n,--max-tokens", a->n, "tokens to generate (256)");
  c->add_flag("--greedy", a->greedy, "argmax decoding (temperature 0, repetition penalty 1)");
  c->add_option("--temperature", a->temperature, "sampling temperature (0.7)")->check(non_negative());
  c->add_option("--top-k", a->top_k, "top-k (40; 0 = off)")->check(non_negative());
  c->add_option("--top-p", a->top_p, "top-p (0.9; 1 = off)")->check(in_range(0, 1));
  c->add_option("--min-p", a->min_p, "min-p (0.05; 0 = off)")->check(in_range(0, 1));
  c->add_option("--repeat-penalty,--rep-penalty", a->repeat_penalty, "repetition penalty (1.1)")
      ->check(positive());
  c->add_option("--presence-penalty", a->presence, "presence penalty (0)");
  a->seed_opt = c->add_option("--seed", a->seed, "sampler seed (default: random)");
  c->add_flag("--raw", a->raw, "no chat template: encode the prompt as is (BOS when the tokenizer wants it)");
  c->add_option("--system", a->system, "system message (chat mode)");
  c->add_flag("--no-think", a->no_think, "chat template with enable_thinking=false");
  c->add_option("-t,--task", a->load.task, "task mask name, or 'off' (default: the file's fallback mask)");
  add_load_flags(c, a->load);
  c->add_option("--ctx", a->load.ctx,
                "KV cache capacity in tokens (0 or absent: min(max_position_embeddings, 4096))");
  c->add_option("--stop", a->stop, "stop string (repeatable)")->allow_extra_args(false);
  c->callback([a] { run_cmd(*a); });
}

}  // namespace

CORTIQ_COMMAND(20, setup);

}  // namespace cortiq::cli
