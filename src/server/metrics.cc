#include "server/metrics.h"

#include <fmt/format.h>

namespace cortiq::server {

std::string prometheus_label(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void Metrics::request(std::string_view method, std::string_view path, int status) {
  std::lock_guard<std::mutex> g(mu_);
  ++requests_[{std::string(method), std::string(path), status}];
}

void Metrics::prompt(size_t prompt, size_t cached) {
  std::lock_guard<std::mutex> g(mu_);
  prompt_ += prompt;
  cached_ += cached;
  if (cached > 0) ++cache_hits_;
}

void Metrics::first_token(double seconds) {
  std::lock_guard<std::mutex> g(mu_);
  size_t b = 0;
  while (b < kTtftBuckets.size() && seconds > kTtftBuckets[b]) ++b;
  ++ttft_[b];
  ttft_sum_ += seconds;
}

void Metrics::generation(std::string_view finish, size_t tokens, double decode_s) {
  std::lock_guard<std::mutex> g(mu_);
  ++finishes_[std::string(finish)];
  completion_ += tokens;
  decode_s_ += decode_s;
  if (tokens >= 2 && decode_s > 0) last_rate_ = static_cast<double>(tokens - 1) / decode_s;
}

void Metrics::embedded(size_t tokens) {
  std::lock_guard<std::mutex> g(mu_);
  embedded_ += tokens;
}

std::string Metrics::render(const MetricsGauges& gv) const {
  std::lock_guard<std::mutex> g(mu_);
  std::string o;
  auto head = [&](const char* name, const char* type, const char* help) {
    o += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  auto one = [&](const char* name, const char* type, const char* help, auto v) {
    head(name, type, help);
    o += fmt::format("{} {}\n", name, v);
  };
  head("cortiq_requests_total", "counter", "HTTP requests answered, by method, route and status.");
  for (const auto& [k, n] : requests_)
    o += fmt::format("cortiq_requests_total{{method=\"{}\",path=\"{}\",status=\"{}\"}} {}\n",
                     prometheus_label(std::get<0>(k)), prometheus_label(std::get<1>(k)), std::get<2>(k), n);
  one("cortiq_prompt_tokens_total", "counter", "Prompt tokens of the generations finished.", prompt_);
  one("cortiq_prompt_tokens_cached_total", "counter", "Prompt tokens served from a slot's prompt cache.",
      cached_);
  one("cortiq_prompt_cache_hits_total", "counter", "Generations that reused prompt-cache tokens.",
      cache_hits_);
  one("cortiq_completion_tokens_total", "counter", "Tokens generated.", completion_);
  head("cortiq_generations_total", "counter", "Finished generations by finish reason.");
  for (const auto& [f, n] : finishes_)
    o += fmt::format("cortiq_generations_total{{finish=\"{}\"}} {}\n", prometheus_label(f), n);
  one("cortiq_embedding_tokens_total", "counter", "Tokens embedded by /v1/embeddings.", embedded_);
  one("cortiq_decode_seconds_total", "counter", "Seconds from each generation's first token to its end.",
      decode_s_);
  one("cortiq_decode_tokens_per_second", "gauge",
      "Decode rate of the last generation with at least two tokens.", last_rate_);
  head("cortiq_time_to_first_token_seconds", "histogram",
       "Seconds from queueing to the first sampled token.");
  uint64_t cum = 0;
  for (size_t b = 0; b < kTtftBuckets.size(); ++b) {
    cum += ttft_[b];
    o += fmt::format("cortiq_time_to_first_token_seconds_bucket{{le=\"{}\"}} {}\n", kTtftBuckets[b], cum);
  }
  cum += ttft_.back();
  o += fmt::format("cortiq_time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {}\n", cum);
  o += fmt::format("cortiq_time_to_first_token_seconds_sum {}\n", ttft_sum_);
  o += fmt::format("cortiq_time_to_first_token_seconds_count {}\n", cum);
  one("cortiq_queue_depth", "gauge", "Requests waiting for a slot.", gv.queue_depth);
  one("cortiq_slots_busy", "gauge", "Slots decoding a sequence.", gv.slots_busy);
  one("cortiq_slots", "gauge", "Slots (--parallel).", gv.slots_total);
  one("cortiq_requests_in_flight", "gauge", "HTTP requests being answered.", gv.in_flight);
  return o;
}

}  // namespace cortiq::server
