#include "kernels/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <exception>

namespace cortiq::kernels {

namespace {

/// The spin-wait hint of the CPU (x86 pause, ARM yield); nothing where there is none.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield");
#endif
}

using Clock = std::chrono::steady_clock;

}  // namespace

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 32);
  threads = std::min(threads, kMaxThreads);
  ranges_ = std::make_unique<Range[]>(threads);
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
    generation_.fetch_add(uint64_t{1} << 8);
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
  const size_t units = (n + grain - 1) / grain;
  on_demand_ = n >= kSplit * parts * grain && units <= 0xFFFFFFFFu;
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  nchunks_ = parts;
  error_ = nullptr;
  stopped_.store(false, std::memory_order_relaxed);
  if (on_demand_) {
    // Participant t owns units [t·units/parts, (t+1)·units/parts) and claims them front to back,
    // kPieces per thread at a time; a thread whose range ran dry steals the back half of the
    // fullest other range.
    piece_ = std::max<size_t>(1, units / (parts * kPieces));
    for (size_t t = 0; t < parts; ++t)
      ranges_[t].v.store(pack(t * units / parts, (t + 1) * units / parts), std::memory_order_relaxed);
  }
  pending_.store(parts - 1);  // the caller takes part too
  // The participant count travels inside the generation word, so a worker that takes no part never
  // reads the job fields (which the next call may already be rewriting). seq_cst store then seq_cst
  // load of sleepers_ pairs with the worker's increment of sleepers_ then load of generation_:
  // either the worker sees the new generation or we see it sleeping.
  generation_.store(((generation_.load() >> 8) + 1) << 8 | parts);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    cv_work_.notify_all();
  }
  run_chunks(0);
  // Spin briefly (chunks are balanced, the wait is usually a few µs), then block: on a busy or
  // oversubscribed machine a worker may be descheduled for milliseconds and needs our core.
  const auto deadline = Clock::now() + std::chrono::microseconds(kCallerSpinMicros);
  for (uint32_t spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    cpu_relax();
    if ((spins & 63) == 63 && Clock::now() > deadline) {
      std::unique_lock<std::mutex> lk(mu_);
      caller_waiting_.store(true);
      cv_done_.wait(lk, [&] { return pending_.load() == 0; });
      caller_waiting_.store(false);
      break;
    }
  }
  fn_ = nullptr;
  std::lock_guard<std::mutex> lk(mu_);
  if (error_) std::rethrow_exception(error_);
}

bool ThreadPool::claim(size_t t, size_t& lo, size_t& hi) {
  std::atomic<uint64_t>& r = ranges_[t].v;
  uint64_t cur = r.load(std::memory_order_acquire);
  for (;;) {
    const size_t a = front(cur), b = back(cur);
    if (a >= b) return false;
    const size_t take = std::min(piece_, b - a);
    if (r.compare_exchange_weak(cur, pack(a + take, b), std::memory_order_acq_rel)) {
      lo = a;
      hi = a + take;
      return true;
    }
  }
}

bool ThreadPool::steal(size_t t) {
  for (;;) {
    // the victim: the range with the most unclaimed units (two or more, so its owner keeps one)
    size_t victim = nchunks_, most = 1;
    uint64_t seen = 0;
    for (size_t v = 0; v < nchunks_; ++v) {
      if (v == t) continue;
      const uint64_t cur = ranges_[v].v.load(std::memory_order_acquire);
      if (back(cur) - std::min(front(cur), back(cur)) > most) {
        most = back(cur) - front(cur);
        victim = v;
        seen = cur;
      }
    }
    if (victim == nchunks_) return false;
    const size_t a = front(seen), b = back(seen), mid = b - (b - a) / 2;
    // Only the owner stores into its own empty range, and no thief changes an empty range, so the
    // plain store cannot lose a concurrent update.
    if (ranges_[victim].v.compare_exchange_strong(seen, pack(a, mid), std::memory_order_acq_rel)) {
      ranges_[t].v.store(pack(mid, b), std::memory_order_release);
      return true;
    }
  }
}

void ThreadPool::run_chunks(size_t index) {
  auto one = [&](size_t lo, size_t hi) {
    try {
      (*fn_)(lo * grain_, std::min(n_, hi * grain_));
      return true;
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
      stopped_.store(true, std::memory_order_relaxed);  // stop claiming ranges
      return false;
    }
  };
  if (!on_demand_) {
    const size_t units = (n_ + grain_ - 1) / grain_;
    (void)one(index * units / nchunks_, (index + 1) * units / nchunks_);
    return;
  }
  for (;;) {
    size_t lo = 0, hi = 0;
    while (!stopped_.load(std::memory_order_relaxed) && claim(index, lo, hi))
      if (!one(lo, hi)) return;
    if (stopped_.load(std::memory_order_relaxed) || !steal(index)) return;
  }
}

void ThreadPool::worker_loop(size_t index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for the next generation, then block.
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const auto deadline = Clock::now() + std::chrono::microseconds(kSpinMicros);
      for (uint32_t i = 0; (g = generation_.load(std::memory_order_acquire)) == seen; ++i) {
        cpu_relax();
        if ((i & 127) == 127) {
          if (Clock::now() > deadline) break;
          std::this_thread::yield();  // an oversubscribed pool must not starve the working threads
        }
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lk(mu_);
        sleepers_.fetch_add(1);
        cv_work_.wait(lk, [&] { return generation_.load() != seen; });
        sleepers_.fetch_sub(1);
        g = generation_.load();
      }
    }
    seen = g;
    if (stop_.load()) return;
    if (index < (g & 0xFF)) {
      run_chunks(index);
      // seq_cst decrement then load of caller_waiting_ pairs with the caller's store of
      // caller_waiting_ then load of pending_ (under mu_): the last worker either is seen by the
      // caller's predicate or sees the caller waiting and wakes it.
      if (pending_.fetch_sub(1) == 1 && caller_waiting_.load()) {
        std::lock_guard<std::mutex> lk(mu_);
        cv_done_.notify_one();
      }
    }
  }
}

ThreadPool& serial_pool() {
  static ThreadPool p(1);
  return p;
}

}  // namespace cortiq::kernels
