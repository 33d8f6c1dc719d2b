#include "kernels/thread_pool.h"

#include <algorithm>
#include <exception>

namespace cortiq::kernels {

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 32);
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t grain) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  const size_t parts = std::min(size(), (n + grain - 1) / grain);
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  const size_t chunk = (n + parts - 1) / parts;
  const size_t nchunks = (n + chunk - 1) / chunk;
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    nchunks_ = nchunks;
    pending_ = nchunks - 1;  // chunk 0 runs on the caller
    error_ = nullptr;
    ++generation_;
  }
  cv_work_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0, std::min(chunk, n));
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [&] { return pending_ == 0; });
  fn_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(size_t index) {
  size_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_work_.wait(lk, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= nchunks_) continue;  // not needed for this job
    const auto* fn = fn_;
    const size_t b = index * chunk_, e = std::min(n_, b + chunk_);
    lk.unlock();
    std::exception_ptr err;
    try {
      (*fn)(b, e);
    } catch (...) {
      err = std::current_exception();
    }
    lk.lock();
    if (err && !error_) error_ = err;
    if (--pending_ == 0) cv_done_.notify_all();
  }
}

ThreadPool& serial_pool() {
  static ThreadPool p(1);
  return p;
}

}  // namespace cortiq::kernels
