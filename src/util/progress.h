// A terminal progress bar that stays silent when stderr is not a TTY.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace cortiq {

/// Progress over a known total of units (bytes, tensors, tokens). Draws
/// "\r  <label> [#####.....] 42.0%  1.2 GB/s  ETA 3s" on stderr at most ~10×/s when stderr is a
/// terminal (and CORTIQ_NO_PROGRESS is unset); otherwise prints nothing. Thread-safe `advance`.
class Progress {
 public:
  /// `total` in units of `unit`: "" counts bytes (the rate reads B/s … GB/s), another name is
  /// shown with the rate ("tok" → "812.4 tok/s").
  Progress(std::string label, uint64_t total, std::string unit = "");
  ~Progress();
  /// Adds `n` units done.
  void advance(uint64_t n);
  /// Text shown after the ETA from the next draw on ("loss 3.21 · val 3.40"); thread-safe.
  void set_note(std::string note);
  /// Clears the line (called by the destructor too).
  void finish();
  /// Whether this process draws progress bars at all (stderr is a TTY).
  static bool enabled();

 private:
  void draw(bool force);
  std::string label_;
  uint64_t total_, done_ = 0;
  std::string unit_, note_;
  bool active_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::mutex mu_;
};

}  // namespace cortiq
