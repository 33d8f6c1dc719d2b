// `cortiq serve <model.cmf>` — the OpenAI-compatible HTTP server (issue 7; src/server/server.h).
#include <fmt/format.h>

#include <cstdlib>
#include <memory>

#include "cli/command.h"
#include "cli/gguf_input.h"
#include "server/server.h"

namespace cortiq::cli {
namespace {

void setup(CLI::App& root) {
  auto o = std::make_shared<server::ServerOptions>();
  auto* c = root.add_subcommand("serve", "OpenAI-compatible HTTP server (chat/completions, SSE streaming)");
  add_examples(c, {"cortiq serve build/stories260K.cmf --port 8080",
                   "cortiq serve model.cmf --parallel 4 --api-key \"$KEY\" --host 0.0.0.0"});
  c->add_option("model", o->model_path, "model .cmf file (or .gguf: converted once, cached)")->required();
  c->add_option("--host", o->host, "address to bind (default 127.0.0.1: local only)");
  c->add_option("--port", o->port, "TCP port (8080; 0 = any free port, printed on the Listening line)")
      ->check(CLI::Range(0, 65535).description(""))
      ->type_name("0..65535");
  c->add_option("--api-key", o->api_key,
                "require 'Authorization: Bearer KEY' on every route but /health (default: $CORTIQ_API_KEY)");
  c->add_option(
      "--admin-key", o->admin_key,
      "key of the admin routes (POST/DELETE /v1/cortiq/skills: skill hot-load; default: the API key; "
      "with no key at all they are open)");
  c->add_flag("--route-dynamic", o->route_dynamic,
              "requests routed to a skill (auto) re-route during generation (ENGINE-NOTES 3.12 thresholds; "
              "CMF_ROUTE_EON/EOFF/MARGIN/PERIOD)");
  c->add_option("--parallel,-P", o->parallel, "sequences decoding together, each with its own KV cache (1)");
  c->add_option("--queue", o->queue, "requests that may wait for a slot before 429 (16)");
  c->add_option("--max-body", o->max_body_bytes, "request body limit in bytes (8 MiB; 413 above)");
  c->add_option("--alias", o->alias, "model id shown by /v1/models (default <arch_name>-cortiq)");
  c->add_option("--task", o->load.task, "default task mask name, or 'off' (-t is --threads)");
  o->load.threads = 0;  // all cores, as run and ppl
  add_load_flags(c, o->load);
  auto gguf_quant = std::make_shared<std::string>();
  add_gguf_flag(c, *gguf_quant);
  c->add_option("-c,--ctx", o->load.ctx,
                "KV cache capacity per slot in tokens (0 or absent: min(max_position_embeddings, 4096))");
  c->add_flag("--log-requests", o->log_requests, "one stderr line per request");
  c->add_option(
       "--cors-origin", o->cors_origins,
       "browser origin allowed to call the server, e.g. http://localhost:3000; '*' = any (repeatable; "
       "default none)")
      ->allow_extra_args(false);
  c->add_option(
       "--chat-template-file", o->chat_template_file,
       "Jinja chat template to use instead of the model's (a tokenizer_config.json's chat_template, as "
       "text)")
      ->check(CLI::ExistingFile);
  c->add_option_function<std::string>(
       "--reasoning-format", [o](const std::string& v) { o->split_reasoning = v == "auto"; },
       "auto: a reasoning model's <think> block goes to reasoning_content (default); none: it stays in "
       "content")
      ->check(CLI::IsMember({"auto", "none"}));
  c->add_option("--shutdown-grace", o->shutdown_grace_s,
                fmt::format("on SIGTERM/SIGINT: seconds the requests in flight get to finish before they are "
                            "cancelled (default 5); the server exits at most this + {:g} s after the signal, "
                            "naming each request as finished or cancelled on stderr; a second signal cancels "
                            "at once",
                            server::kShutdownSlackS))
      ->check(CLI::Range(0.0, 3600.0).description(""))
      ->type_name("SECONDS");
  auto grammar_file = std::make_shared<std::string>();
  c->add_option("--grammar-file", *grammar_file,
                "GBNF grammar (llama.cpp syntax) constraining every request that sets no grammar or "
                "JSON response_format");
  c->callback([o, grammar_file, gguf_quant] {
    server::ServerOptions opt = *o;
    opt.model_path = resolve_model_path(opt.model_path, *gguf_quant);
    opt.grammar = load_grammar(*grammar_file, "");
    if (opt.api_key.empty())
      if (const char* k = std::getenv("CORTIQ_API_KEY")) opt.api_key = k;
    server::run_server(opt);
  });
}

}  // namespace

CORTIQ_COMMAND(25, setup);

}  // namespace cortiq::cli
