// A persistent pool of compute threads for data-parallel kernels (matmul and friends).
// run() must be called from one thread at a time (the pool's owner); workers spin briefly
// between jobs, then sleep, so back-to-back decode steps pay no wake-up latency.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace ferry::kernels {

class ThreadPool {
 public:
  // n_threads counts the calling thread; 0 means std::thread::hardware_concurrency().
  // serial_work: see parallel_for (tests pass 0 to have every job shared out).
  explicit ThreadPool(int n_threads, int64_t serial_work = kSerialWork);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) once on every thread (the caller is index 0) and
  // returns when all have returned. fn must not throw.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into contiguous ranges (multiples of `grain` except the last; about four per
  // thread) and calls fn(begin, end) once for each, the threads taking them in order as they
  // come free; returns when all are done.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  // The same for a job of about `work` multiply-adds in all: below serial_work() (by default
  // kSerialWork), where waking the other threads and gathering their results costs more than
  // sharing the work saves (a small model's decode step), fn(0, n) runs on the caller alone.
  // For callers whose ranges' results do not depend on the split (every kernel here).
  static constexpr int64_t kSerialWork = int64_t{1} << 16;
  void parallel_for(int64_t n, int64_t grain, int64_t work,
                    const std::function<void(int64_t, int64_t)>& fn) {
    if (work < serial_work_ || n_threads_ == 1) {
      if (n > 0) fn(0, n);
      return;
    }
    parallel_for(n, grain, fn);
  }

 private:
  void worker_loop(int index);

  int n_threads_;
  int64_t serial_work_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace ferry::kernels
