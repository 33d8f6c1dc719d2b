// Bounded shutdown of `cortiq serve` (see shutdown.h).
#include "server/shutdown.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include "runtime/engine.h"

namespace cortiq::server {

InFlight::InFlight(std::function<void(const std::string&)> log) : log_(std::move(log)) {}

uint64_t InFlight::begin(std::string route) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t n = next_++;
  live_[n].route = std::move(route);
  live_[n].cancelled = cancelling_;  // (a keep-alive connection's next request, after the cancel)
  return n;
}

void InFlight::attach(uint64_t n, std::string response_id, std::shared_ptr<Job> job, int fd) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = live_.find(n);
  if (it == live_.end()) return;
  it->second.response_id = std::move(response_id);
  it->second.job = std::move(job);
  if (fd >= 0) it->second.fd = fd;
  // queued after the cancel (a handler that was rendering): cancelled at once
  if (cancelling_) {
    it->second.cancelled = true;
    if (it->second.job) it->second.job->cancel = true;
  }
}

void InFlight::set_fd(uint64_t n, int fd) {
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = live_.find(n); it != live_.end()) it->second.fd = fd;
}

void InFlight::end(uint64_t n, int status) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(n);
    if (it == live_.end()) return;
    if (stopping_) {
      const bool c = it->second.cancelled;
      (c ? cancelled_ : finished_)++;
      log_(fmt::format("{}: {} ({})", c ? "cancelled" : "finished", label(n, it->second), status));
    }
    live_.erase(it);
  }
  cv_.notify_all();
}

std::string InFlight::label(uint64_t n, const Entry& e) {
  std::string s = fmt::format("#{} {}", n, e.route);
  if (!e.response_id.empty()) s += " " + e.response_id;
  return s;
}

void InFlight::begin_shutdown(std::string_view why, double grace_s) {
  std::lock_guard<std::mutex> g(mu_);
  since_ = clock::now();
  stopping_ = true;
  std::string names;
  for (const auto& [n, e] : live_) names += (names.empty() ? ": " : ", ") + label(n, e);
  log_(fmt::format(
      "{}: stopping: new requests get 503; {} request(s) in flight get up to {:.1f} s to finish{}", why,
      live_.size(), grace_s, names));
}

bool InFlight::wait_idle(clock::time_point deadline, const std::function<bool()>& hurry) {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    if (live_.empty()) return true;
    const auto now = clock::now();
    if (now >= deadline || (hurry && hurry())) return false;
    cv_.wait_until(lk, std::min(deadline, now + std::chrono::milliseconds(50)));
  }
}

void InFlight::cancel_all() {
  std::lock_guard<std::mutex> g(mu_);
  cancelling_ = true;
  std::string names;
  for (auto& [n, e] : live_) {
    e.cancelled = true;
    if (e.job) e.job->cancel = true;
    names += (names.empty() ? ": " : ", ") + label(n, e);
  }
  if (!live_.empty()) log_(fmt::format("cancelling {} request(s){}", live_.size(), names));
}

void InFlight::cut_connections() {
  std::lock_guard<std::mutex> g(mu_);
  // An entry's socket stays open until after end() (the handler's worker closes it then), so
  // under the lock it is still this request's socket.
  std::string names;
  for (auto& [n, e] : live_) {
    if (e.fd >= 0) ::shutdown(e.fd, SHUT_RDWR);
    names += (names.empty() ? ": " : ", ") + label(n, e);
  }
  if (!live_.empty())
    log_(fmt::format("closing the connections of {} request(s) still running{}", live_.size(), names));
}

void InFlight::log_summary() {
  std::lock_guard<std::mutex> g(mu_);
  const double s = std::chrono::duration<double>(clock::now() - since_).count();
  std::string left;
  for (const auto& [n, e] : live_) left += (left.empty() ? "; abandoned: " : ", ") + label(n, e);
  log_(fmt::format("stopped after {:.1f} s: {} finished, {} cancelled{}", s, finished_, cancelled_, left));
}

size_t InFlight::size() const {
  std::lock_guard<std::mutex> g(mu_);
  return live_.size();
}

bool drain(InFlight& f, std::string_view why, double grace_s, const std::function<bool()>& hurry) {
  using std::chrono::duration_cast;
  using dur = InFlight::clock::duration;
  auto after = [](double s) {
    return InFlight::clock::now() + duration_cast<dur>(std::chrono::duration<double>(s));
  };
  f.begin_shutdown(why, grace_s);
  bool idle = f.wait_idle(after(grace_s), hurry);
  if (!idle) {
    f.cancel_all();
    idle = f.wait_idle(after(kCancelWindowS));
  }
  if (!idle) {
    f.cut_connections();
    idle = f.wait_idle(after(kCutWindowS));
  }
  f.log_summary();
  return idle;
}

}  // namespace cortiq::server
