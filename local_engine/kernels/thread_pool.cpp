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

constexpr uint64_t kMaxChunks = 0xffff;
constexpr uint64_t kNextOne = uint64_t{1} << 16;

}  // namespace

ThreadPool::ThreadPool(int n_threads, int64_t serial_work) : serial_work_(serial_work) {
  if (n_threads <= 0)
    n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::take_chunks() {
  uint64_t word = claim_.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t next = (word >> 16) & kMaxChunks;
    const uint64_t chunks = word & kMaxChunks;
    if (next >= chunks) return;
    if (!claim_.compare_exchange_weak(word, word + kNextOne, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;
    }
    const int64_t begin = static_cast<int64_t>(next) * job_.per_chunk;
    (*job_.fn)(begin, std::min(job_.n, begin + job_.per_chunk));
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) done_.notify_one();
    word = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    int spins = 0;
    uint32_t gen = generation_.load(std::memory_order_acquire);
    while (gen == seen) {
      if (!spin_once(spins)) generation_.wait(gen, std::memory_order_acquire);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    take_chunks();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  // About four ranges per thread, taken in order from a shared counter: a thread that runs
  // late (a busy machine) takes fewer, instead of holding back the whole step with its share.
  const int64_t grains = (n + grain - 1) / grain;
  int64_t per_chunk = std::max<int64_t>(1, grains / (4 * static_cast<int64_t>(n_threads_))) * grain;
  while ((n + per_chunk - 1) / per_chunk > static_cast<int64_t>(kMaxChunks)) per_chunk += grain;
  const auto chunks = static_cast<uint64_t>((n + per_chunk - 1) / per_chunk);
  if (n_threads_ == 1 || chunks == 1) {
    for (int64_t b = 0; b < n; b += per_chunk) fn(b, std::min(n, b + per_chunk));
    return;
  }
  job_ = Job{&fn, n, per_chunk};
  done_.store(0, std::memory_order_relaxed);
  ++tag_;
  claim_.store((static_cast<uint64_t>(tag_) << 32) | chunks, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  take_chunks();
  int spins = 0;
  for (uint32_t d = done_.load(std::memory_order_acquire); d != chunks;
       d = done_.load(std::memory_order_acquire)) {
    if (!spin_once(spins)) done_.wait(d, std::memory_order_acquire);
  }
}

}  // namespace ferry::kernels
