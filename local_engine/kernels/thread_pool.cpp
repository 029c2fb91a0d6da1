#include "local_engine/kernels/thread_pool.h"

#include <algorithm>
#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ferry::kernels {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Waiting for the next job (or for the workers) first spins with pause, then yields the core
// (so an oversubscribed machine still makes progress), then sleeps on the atomic: long
// enough to bridge the gap between two matmuls of a decode step, short enough not to burn
// an idle core.
constexpr int kPauseRounds = 1 << 13;
constexpr int kSpinRounds = kPauseRounds + 64;

// One round of waiting; returns false when it is time to sleep instead.
inline bool spin_once(int& spins) {
  ++spins;
  if (spins < kPauseRounds) {
    cpu_relax();
    return true;
  }
  if (spins < kSpinRounds) {
    std::this_thread::yield();
    return true;
  }
  return false;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads, int64_t serial_work) : serial_work_(serial_work) {
  if (n_threads <= 0)
    n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0, n_threads_);
  int spins = 0;
  for (int left = pending_.load(std::memory_order_acquire); left != 0;
       left = pending_.load(std::memory_order_acquire)) {
    if (!spin_once(spins)) pending_.wait(left, std::memory_order_acquire);
  }
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    uint64_t gen = generation_.load(std::memory_order_acquire);
    while (gen == seen) {
      if (!spin_once(spins)) generation_.wait(gen, std::memory_order_acquire);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(index, n_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  // About four chunks per thread, claimed in order from a shared counter: a thread that runs
  // late (a busy machine) takes fewer, instead of holding back the whole step with its share.
  const int64_t grains = (n + grain - 1) / grain;
  const int64_t per_chunk =
      std::max<int64_t>(1, grains / (4 * static_cast<int64_t>(n_threads_))) * grain;
  const int64_t chunks = (n + per_chunk - 1) / per_chunk;
  std::atomic<int64_t> next{0};
  run([&](int, int) {
    for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(c * per_chunk, std::min(n, (c + 1) * per_chunk));
    }
  });
}

}  // namespace ferry::kernels
