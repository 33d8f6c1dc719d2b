// Bounded shutdown of `cortiq serve` (issue 27 §3): on SIGTERM/SIGINT the server refuses new
// requests (503), gives the requests in flight a grace period to finish, then cancels the rest (each
// job's `cancel`, honoured by the engine at its next step; a chat-template render polls
// InFlight::cancelling()), cuts the connections of any request still not ended a moment later, and
// exits — at most grace + kCancelWindowS + kCutWindowS seconds after the signal. Every request in
// flight at the signal is named on stderr as finished or cancelled.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace cortiq::runtime {
struct Job;
}

namespace cortiq::server {

using runtime::Job;

/// Seconds between the cancel and the cut of the connections still open (a cancelled job ends at
/// its next engine step, a render within kCancelPollSteps steps: milliseconds, normally).
inline constexpr double kCancelWindowS = 1.0;
/// Seconds between the cut and giving up on requests that have still not ended (process exit).
inline constexpr double kCutWindowS = 1.0;

/// The requests a server is answering (one entry from a route handler's start to the end of its
/// response, a stream's included), so a shutdown can wait for them, cancel the rest and say which
/// was which. Thread-safe.
class InFlight {
 public:
  using clock = std::chrono::steady_clock;
  /// `log` receives the shutdown's stderr lines (without newline).
  explicit InFlight(std::function<void(const std::string&)> log);

  /// A request on `route` ("POST /v1/completions") started; returns its number (1, 2, …).
  uint64_t begin(std::string route);
  /// Request `n` queued `job` (cancelled on shutdown) under response id `response_id` ("cmpl-…",
  /// named in the log) for the client on socket `fd` (-1: unknown; cut by cut_connections()).
  void attach(uint64_t n, std::string response_id, std::shared_ptr<Job> job, int fd);
  /// The client's socket of request `n`, known before its job (for cut_connections()).
  void set_fd(uint64_t n, int fd);
  /// Request `n` ended with HTTP `status` (a stream: 200 when it ended normally). During a shutdown
  /// it is logged as "finished" or, when cancel_all() reached it, "cancelled".
  void end(uint64_t n, int status);

  /// Whether a shutdown has started (stopping) / reached the cancel (cancelling). Render cancel
  /// checks and waits poll these.
  bool stopping() const noexcept { return stopping_; }
  bool cancelling() const noexcept { return cancelling_; }

  /// Starts a shutdown caused by `why` ("SIGTERM"): logs the requests in flight.
  void begin_shutdown(std::string_view why, double grace_s);
  /// Waits until no request is in flight, `deadline` passes or `hurry()` says to stop waiting
  /// (polled every 50 ms; may be empty). True when none is left.
  bool wait_idle(clock::time_point deadline, const std::function<bool()>& hurry = {});
  /// Cancels every request in flight (sets its job's cancel) and logs them.
  void cancel_all();
  /// Shuts down the sockets of the requests still in flight, so a write blocked on a client that
  /// does not read returns at once. Logs them.
  void cut_connections();
  /// Logs the summary ("stopped after 5.1 s: 2 finished, 1 cancelled"); with requests left, names
  /// them as abandoned.
  void log_summary();
  /// Requests in flight now.
  size_t size() const;

 private:
  struct Entry {
    std::string route, response_id;
    std::shared_ptr<Job> job;
    int fd = -1;
    bool cancelled = false;
  };
  static std::string label(uint64_t n, const Entry& e);
  std::function<void(const std::string&)> log_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Entry> live_;
  uint64_t next_ = 1;
  std::atomic<bool> stopping_{false}, cancelling_{false};
  clock::time_point since_{};
  size_t finished_ = 0, cancelled_ = 0;
};

/// The whole shutdown sequence after a stop signal: begin_shutdown, wait up to `grace_s` (cut short
/// when `hurry()`, e.g. a second signal), cancel_all, wait kCancelWindowS, cut_connections, wait
/// kCutWindowS, log_summary. Returns true when every request ended.
bool drain(InFlight& f, std::string_view why, double grace_s, const std::function<bool()>& hurry = {});

}  // namespace cortiq::server
