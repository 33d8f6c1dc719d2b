// A small persistent worker pool for the CPU kernels (ENGINE-NOTES §3.15).
//
// Work is split into contiguous, disjoint index ranges; each index is computed by exactly one
// worker with the same arithmetic as the serial loop, so results are bit-identical for any thread
// count. The pool is not re-entrant: a task must not call parallel_for on the same pool.
#pragma once

#include <condition_variable>
#include <cstddef>
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
  /// done. Ranges are at least `grain` long (except the last). Exceptions thrown by fn are
  /// rethrown on the caller (the first one wins).
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t grain = 1);

 private:
  void worker_loop(size_t index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_ = 0, chunk_ = 0, nchunks_ = 0;
  size_t generation_ = 0, pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

/// A process-wide serial pool (size 1), for callers that do not care about threads.
ThreadPool& serial_pool();

}  // namespace cortiq::kernels
