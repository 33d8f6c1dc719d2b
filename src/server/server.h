// `cortiq serve`: the OpenAI-compatible HTTP server (issue 7). Routes:
//   POST /v1/chat/completions, POST /v1/completions (stream via Server-Sent Events),
//   GET /v1/models, GET /health (also /healthz), POST /tokenize, POST /detokenize,
//   GET /v1/cortiq/masks; per-request task mask via {"cortiq": {"task": NAME}}.
// Security: binds 127.0.0.1 unless `host` says otherwise; with an API key every route but the
// health check requires `Authorization: Bearer KEY` (401 otherwise); bodies over max_body_bytes
// get 413; a full wait queue 429; all errors are OpenAI error JSON.
// A client that hangs up (stream or not) cancels its sequence at the next step (server/connection.h),
// and its chat-template render. An exception escaping a handler answers that request with an
// OpenAI error (api_error_of); the server goes on. SIGTERM/SIGINT: bounded stop (server/shutdown.h).
// GET /health: {status, model, slots, active, waiting, completed, cancelled, capabilities}.
// Issue 33: GET / is the chat page (server/page.h; served without the key, which it asks for),
// POST /v1/embeddings (server/embeddings.h), GET /metrics (Prometheus text, server/metrics.h),
// GET /props (llama-server's shape: model, n_ctx, slots, chat template, build).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "runtime/session.h"

namespace cortiq::server {

/// Server settings (`cortiq serve` flags).
struct ServerOptions {
  std::string model_path;     ///< .cmf file
  runtime::LoadOptions load;  ///< threads, ctx, kv_f16, default task
  std::string host = "127.0.0.1";
  int port = 8080;      ///< 0 = any free port (printed on the Listening line)
  std::string api_key;  ///< "" = no authentication
  /// Key of the admin routes (POST /v1/cortiq/skills, DELETE /v1/cortiq/skills/{id}: skill
  /// hot-load); "" = the api_key. With neither set the admin routes are open (the server binds
  /// 127.0.0.1 unless told otherwise). With both set, the admin key is also accepted as an API key.
  std::string admin_key;
  /// `--route-dynamic`: requests whose skill is routed (auto) re-route during generation
  /// (specialize/dynamic_route.h; ENGINE-NOTES §3.12).
  bool route_dynamic = false;
  size_t parallel = 1;               ///< sequences decoding together (KV caches)
  size_t queue = 16;                 ///< requests allowed to wait for a slot (then 429)
  size_t max_body_bytes = 8u << 20;  ///< request body limit (413 above)
  std::string alias;                 ///< model id in /v1/models ("" = "<arch_name>-cortiq")
  bool log_requests = false;         ///< one stderr line per request
  /// Reasoning models (a chat template that writes `</think>`): the `<think>` block of a chat answer
  /// goes to `reasoning_content` (split_reasoning). false: it stays in `content`.
  bool split_reasoning = true;
  /// A Jinja chat template file used instead of the model's ("" = the model's own).
  std::string chat_template_file;
  /// Browser origins allowed to call the server (CORS), e.g. "http://localhost:3000"; "*" = any.
  /// Empty: none, so a web page cannot read the answers of a server on this machine. Preflight
  /// OPTIONS requests are answered (204) without the API key either way.
  std::vector<std::string> cors_origins;
  /// On SIGTERM/SIGINT: seconds the requests in flight get to finish before they are cancelled
  /// (server/shutdown.h). The process exits at most shutdown_grace_s + kShutdownSlackS after the
  /// signal; a second signal cancels at once.
  double shutdown_grace_s = 5.0;
  /// `--grammar-file`: the output constraint of every request that sets neither `grammar` nor a
  /// JSON `response_format` (null = free text).
  std::shared_ptr<const runtime::Grammar> grammar;
};

/// Seconds a stop may take beyond the grace period: the cancel window, the cut window and the
/// wait for the listener's worker threads (1 s each).
inline constexpr double kShutdownSlackS = 3.0;

/// Whether this build has the HTTP server (cpp-httplib linked).
bool server_available() noexcept;

/// Loads the model, binds, prints `Listening on http://HOST:PORT` (stdout, flushed) and serves
/// until SIGINT/SIGTERM, then stops as ServerOptions::shutdown_grace_s says, naming on stderr each
/// request in flight as finished or cancelled. Returns 0 on a clean stop (and exits the process
/// with 0 itself when requests or idle connections are still open at the bound). Throws cortiq::Error for a
/// model that cannot load, Error(Io) when the address cannot be bound, Error(Unsupported) when built without
/// cpp-httplib.
int run_server(const ServerOptions& opt);

}  // namespace cortiq::server
