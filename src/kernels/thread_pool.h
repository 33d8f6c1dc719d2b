// A small persistent worker pool for the CPU kernels (ENGINE-NOTES §3.15).
//
// Work is split into contiguous, disjoint index ranges; each index is computed by exactly one
// worker with the same arithmetic as the serial loop, so results are bit-identical for any thread
// count. The pool is not re-entrant: a task must not call parallel_for on the same pool.
//
// Balance: a job of at least kSplit·grain indices per thread is split into one contiguous range
// per thread, which its owner claims front to back in kPieces pieces; a thread whose range is
// empty steals the back half of the fullest other range (one CAS on a packed [front, back) word)
// and carries on with it the same way. Each thread thus streams long runs of consecutive rows (a
// new range restarts the q4tp/q2tp ladder batch and the weight prefetch, and prefetches past a
// range's end fetch rows another thread computes), while a thread that the host slows down (a
// shared machine) or that started late hands its tail to the others, to the piece. With fewer
// indices each thread gets one fixed range (index t → thread t when n equals the pool size: the
// bandwidth probe relies on it). 0.5B decode, 2 threads, interleaved A/B against the previous
// scheme (two ranges per thread handed out on demand, taken alternately): q4tp 139–146 → 149–153
// tok/s, q8 75–77 → 79–94, 4-stream steps (bench --parallel 4) 235–239 → 268–272; 4 or 16 pieces
// per thread measured 3–5% below 8.
//
// Hand-off: a decode step makes ~200 parallel_for calls of 10–200 µs each, so waking sleeping
// workers through a futex per call (tens of µs on a VM) cost more than the second thread gained.
// Workers therefore spin (with `pause`) on an atomic job generation for kSpinMicros after their last
// job before they block on a condition variable; the caller spins on the pending count for
// kCallerSpinMicros, then blocks too. Between decode steps the workers stay hot; an idle pool
// blocks after kSpinMicros and costs nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace cortiq::kernels {

/// Persistent pool of `threads - 1` workers plus the calling thread.
class ThreadPool {
 public:
  /// `threads` = total parallelism including the caller; 0 means hardware_concurrency()
  /// (capped at 32); 1 means fully serial (no workers).
  explicit ThreadPool(size_t threads = 1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Total parallelism (workers + caller).
  size_t size() const noexcept { return workers_.size() + 1; }

  /// Calls fn(begin, end) over disjoint contiguous ranges covering [0, n); blocks until all are
  /// done. Ranges are at least `grain` long (except the one that ends at n). n ≥ kSplit·size()·grain:
  /// each thread claims pieces of its own range and then steals (file comment); else one range per
  /// thread. Exceptions thrown by fn are
  /// rethrown on the caller (the first one wins).
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t grain = 1);

 private:
  void worker_loop(size_t index);

  /// How long an idle worker spins for the next job before it blocks (µs); spinning yields the
  /// core every ~128 pauses so an oversubscribed pool does not starve the threads doing work.
  static constexpr int64_t kSpinMicros = 500;
  /// How long parallel_for spins for the workers to finish before it blocks on cv_done_ (µs).
  static constexpr int64_t kCallerSpinMicros = 50;
  /// Jobs of at least kSplit·grain indices per thread are balanced by stealing (file comment).
  static constexpr size_t kSplit = 2;
  /// Pieces per thread an owner claims its range in (the granularity of the balance).
  static constexpr size_t kPieces = 8;
  /// Most threads a pool takes part with (the participant count travels in 8 bits).
  static constexpr size_t kMaxThreads = 255;

  /// A range of units [front, back) packed in one word, so claims and steals are one CAS.
  static uint64_t pack(size_t front, size_t back) { return uint64_t{front} << 32 | back; }
  static size_t front(uint64_t r) { return static_cast<size_t>(r >> 32); }
  static size_t back(uint64_t r) { return static_cast<size_t>(r & 0xFFFFFFFFu); }
  /// Claims the next piece of thread t's own range into [lo, hi) (units); false when it is empty.
  bool claim(size_t t, size_t& lo, size_t& hi);
  /// Moves the back half of the fullest other range into thread t's (empty) range; false when no
  /// range has two unclaimed units left.
  bool steal(size_t t);

  /// Runs the ranges of the current job that this thread takes (range `index` of a fixed split, or
  /// pieces claimed from ranges_ and stolen); the first exception is kept in error_ and stops the
  /// claiming.
  void run_chunks(size_t index);

  std::vector<std::thread> workers_;
  std::mutex mu_;                    // guards the blocking path and error_
  std::condition_variable cv_work_;  // sleeping workers wait here for a new generation
  std::condition_variable cv_done_;  // a caller that stopped spinning waits here for pending_ == 0
  // The job: written by the caller before generation_ is bumped (release), read by workers after
  // they observe the new generation (acquire).
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_ = 0, grain_ = 1, nchunks_ = 0, piece_ = 1;  // nchunks_: threads taking part
  bool on_demand_ = false;  // ranges claimed in pieces and stolen (else range t → thread t)
  struct alignas(64) Range {
    std::atomic<uint64_t> v{0};  // unclaimed units of a thread's range (pack)
  };
  std::unique_ptr<Range[]> ranges_;      // one per thread (on-demand jobs)
  std::atomic<bool> stopped_{false};     // an exception stops the claiming
  std::atomic<uint64_t> generation_{0};  // (job counter << 8) | threads taking part (≤ 32)
  std::atomic<size_t> pending_{0};       // workers taking part that have not finished yet
  std::atomic<size_t> sleepers_{0};      // workers blocked (or about to block) on cv_work_
  std::atomic<bool> stop_{false};
  std::atomic<bool> caller_waiting_{false};  // the caller is blocked (or about to) on cv_done_
  std::exception_ptr error_;
};

/// A process-wide serial pool (size 1), for callers that do not care about threads.
ThreadPool& serial_pool();

}  // namespace cortiq::kernels
