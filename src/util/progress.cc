#include "util/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace cortiq {

bool Progress::enabled() {
  return ::isatty(STDERR_FILENO) == 1 && std::getenv("CORTIQ_NO_PROGRESS") == nullptr;
}

Progress::Progress(std::string label, uint64_t total, std::string unit)
    : label_(std::move(label)), total_(total), unit_(std::move(unit)), active_(enabled()) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() {
  finish();
}

void Progress::advance(uint64_t n) {
  if (!active_) return;
  std::lock_guard<std::mutex> lock(mu_);
  done_ += n;
  draw(false);
}

static std::string human_rate(double v, const std::string& unit) {
  if (!unit.empty()) return fmt::format("{:.1f} {}/s", v, unit);
  const char* units[] = {"B/s", "KB/s", "MB/s", "GB/s"};
  int u = 0;
  while (v >= 1000.0 && u < 3) {
    v /= 1000.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

void Progress::draw(bool force) {
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  const int width = 30, filled = static_cast<int>(frac * width);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(width - filled), '.');
  const double rate = secs > 0 ? static_cast<double>(done_) / secs : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total_ - std::min(done_, total_)) / rate : 0.0;
  std::fprintf(stderr, "\r  %s [%s] %5.1f%%  %s  ETA %.0fs  %s   ", label_.c_str(), bar.c_str(), frac * 100.0,
               human_rate(rate, unit_).c_str(), eta, note_.c_str());
  std::fflush(stderr);
}

void Progress::set_note(std::string note) {
  if (!active_) return;
  std::lock_guard<std::mutex> lock(mu_);
  note_ = std::move(note);
}

void Progress::finish() {
  if (!active_ || finished_) return;
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  std::fprintf(stderr, "\r%*s\r", 100, "");
  std::fflush(stderr);
}

}  // namespace cortiq
