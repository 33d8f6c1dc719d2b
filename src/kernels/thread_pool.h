// A small persistent worker pool for the CPU kernels (ENGINE-NOTES §3.15).
//
// Work is split into contiguous, disjoint index ranges; each index is computed by exactly one
// worker with the same arithmetic as the serial loop, so results are bit-identical for any thread
// count. The pool is not re-entrant: a task must not call parallel_for on the same pool.
//
// Balance: with at least kSplit ranges per thread the ranges are handed out on demand (an atomic
// counter), so a thread that the host slows down (a shared machine) takes fewer of them instead of
// holding up the call — continuous-batching serve steps at 4 streams on the 0.5B q4tp file: 178 →
// 203 tok/s on 2 threads; single-stream decode unchanged. With fewer indices each thread gets one
// fixed range (index t → thread t when n equals the pool size: the bandwidth probe relies on it).
// Two ranges per thread: more cost more than the balance they buy (each range restarts the q4tp/q2tp
// ladder batch, and its weight prefetches run into rows another thread computes). 0.5B decode, 2
// threads, interleaved A/B: q4tp 140–147 tok/s with 4 ranges per thread, 153–154 with 2, 123–125
// with 16; q8 121–123 → 124–128; 4-stream steps (bench --parallel 4) 321–323 → 339–340.
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
  /// done. Ranges are at least `grain` long (except the last). n ≥ kSplit·size()·grain: about
  /// kSplit ranges per thread, taken on demand; else one range per thread. Exceptions thrown by fn are
  /// rethrown on the caller (the first one wins).
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t grain = 1);

 private:
  void worker_loop(size_t index);

  /// How long an idle worker spins for the next job before it blocks (µs); spinning yields the
  /// core every ~128 pauses so an oversubscribed pool does not starve the threads doing work.
  static constexpr int64_t kSpinMicros = 500;
  /// How long parallel_for spins for the workers to finish before it blocks on cv_done_ (µs).
  static constexpr int64_t kCallerSpinMicros = 50;
  /// Ranges per thread when the work is handed out on demand (file comment).
  static constexpr size_t kSplit = 2;

  /// Runs the ranges of the current job that this thread takes (range `index` of a fixed split, or
  /// ranges claimed from next_); the first exception is kept in error_ and stops the claiming.
  void run_chunks(size_t index);

  std::vector<std::thread> workers_;
  std::mutex mu_;                    // guards the blocking path and error_
  std::condition_variable cv_work_;  // sleeping workers wait here for a new generation
  std::condition_variable cv_done_;  // a caller that stopped spinning waits here for pending_ == 0
  // The job: written by the caller before generation_ is bumped (release), read by workers after
  // they observe the new generation (acquire).
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_ = 0, chunk_ = 0, nchunks_ = 0;
  bool on_demand_ = false;               // ranges claimed through next_ (else range t → thread t)
  std::atomic<size_t> next_{0};          // next unclaimed range (on-demand jobs)
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
