// `cortiq serve` GET /metrics (issue 33 §3): Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), every name prefixed `cortiq_`.
// Counters grow from the server's start; gauges are read when the page is asked for.
//
//   cortiq_requests_total{method,path,status}     counter    HTTP answers (routes by their pattern,
//                                                             e.g. /v1/models/{id}; unknown paths "other")
//   cortiq_prompt_tokens_total                    counter    prompt tokens of the generations finished
//   cortiq_prompt_tokens_cached_total             counter    of those, tokens served from a slot's prompt
//   cache cortiq_prompt_cache_hits_total                counter    generations that reused at least one
//   cached token cortiq_completion_tokens_total                counter    tokens generated (finished
//   generations) cortiq_generations_total{finish}              counter    finished generations by finish
//   reason cortiq_embedding_tokens_total                 counter    tokens embedded by /v1/embeddings
//   cortiq_decode_seconds_total                   counter    time from each generation's first token to its
//   end cortiq_decode_tokens_per_second               gauge      tokens after the first / that time, of the
//   last
//                                                             generation with at least 2 tokens (0 before
//                                                             one)
//   cortiq_time_to_first_token_seconds            histogram  from queueing to the first sampled token
//   cortiq_queue_depth                            gauge      requests waiting for a slot
//   cortiq_slots_busy / cortiq_slots              gauge      slots decoding / slots (--parallel)
//   cortiq_requests_in_flight                     gauge      HTTP requests being answered
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>

namespace cortiq::server {

/// What /metrics reads from the engine and the listener when it is asked (the gauges).
struct MetricsGauges {
  size_t queue_depth = 0, slots_busy = 0, slots_total = 0, in_flight = 0;
};

/// Thread-safe counters and the TTFT histogram of one server. All methods may be called from any
/// thread (HTTP workers, the engine thread).
class Metrics {
 public:
  /// Upper bounds (seconds) of the TTFT histogram's buckets; +Inf is implicit.
  static constexpr std::array<double, 11> kTtftBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                          0.5,   1.0,  2.5,   5.0,  10.0};

  /// One HTTP answer: `path` already reduced to its route pattern (or "other").
  void request(std::string_view method, std::string_view path, int status);
  /// A generation (counted when it ends) that had `prompt` tokens, `cached` of them from the prompt cache.
  void prompt(size_t prompt, size_t cached);
  /// Time to first token of one generation (seconds, >= 0).
  void first_token(double seconds);
  /// A finished generation: `finish` reason, `tokens` generated, `decode_s` seconds from its first
  /// token to its end (0 when it produced none).
  void generation(std::string_view finish, size_t tokens, double decode_s);
  /// Tokens run through /v1/embeddings.
  void embedded(size_t tokens);

  /// The exposition text (HELP and TYPE lines, then samples), with `g` as the gauges' values.
  std::string render(const MetricsGauges& g) const;

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> finishes_;
  uint64_t prompt_ = 0, cached_ = 0, cache_hits_ = 0, completion_ = 0, embedded_ = 0;
  double decode_s_ = 0, last_rate_ = 0;
  std::array<uint64_t, kTtftBuckets.size() + 1> ttft_{};  ///< per bucket (not cumulative), last = +Inf
  double ttft_sum_ = 0;
};

/// `s` with `\`, `"` and newlines escaped for a Prometheus label value.
std::string prometheus_label(std::string_view s);

}  // namespace cortiq::server
