// A persistent pool of compute threads for data-parallel kernels (matmul and friends).
// parallel_for must be called from one thread at a time (the pool's owner); workers spin
// briefly between jobs, then sleep, so back-to-back decode steps pay no wake-up latency.
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

  // Splits [0, n) into one contiguous share per thread (in multiples of `grain`) and calls
  // fn(begin, end) on pieces of it: each thread walks its own share from the front, in pieces
  // that halve as it goes, then takes pieces from the back of shares not yet done. So a thread
  // reads its weights as one stream (the prefetches of one piece run into the next), the
  // threads finish within a small piece of each other, and the caller waits only for pieces
  // a worker took: a worker that is asleep or off its core (a busy machine) when the job
  // starts holds nothing back, the caller does its share. Returns when all are done.
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
  struct Job {
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    int64_t n = 0;
    int64_t unit = 0;    // elements of one unit (a multiple of the grain)
    uint32_t units = 0;  // units in the job
  };
  // One thread's share of the current job, in units: [tag : 32][front : 16][back : 16]. Its
  // owner takes pieces from the front, the others from the back, each by a compare-exchange,
  // which fails for a thread that read an earlier job's word. On its own cache line.
  struct alignas(64) Share {
    std::atomic<uint64_t> word{0};
  };
  // Takes and runs pieces of the current job, its own share's first, until none is left.
  void take_pieces(int self);
  void worker_loop(int self);

  int n_threads_;
  int64_t serial_work_;
  std::vector<std::thread> workers_;
  // Written by the owner before it publishes a job in the shares, read by a thread only after
  // it took a piece of that job (the job cannot end before that piece is done).
  Job job_;
  uint32_t tag_ = 0;
  std::vector<Share> shares_;
  // Each on its own cache line: the owner and the workers write done_ while idle workers poll
  // generation_.
  alignas(64) std::atomic<uint32_t> done_{0};        // units of the current job finished
  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped per job; idle workers sleep on it
  std::atomic<bool> stop_{false};
};

}  // namespace ferry::kernels
