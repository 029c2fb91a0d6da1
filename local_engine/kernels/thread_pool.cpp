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

constexpr uint64_t kMaxUnits = 0xffff;

uint64_t share_word(uint32_t tag, uint64_t front, uint64_t back) {
  return (static_cast<uint64_t>(tag) << 32) | (front << 16) | back;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads, int64_t serial_work) : serial_work_(serial_work) {
  if (n_threads <= 0)
    n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  shares_ = std::vector<Share>(static_cast<size_t>(n_threads_));
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::take_pieces(int self) {
  for (int k = 0; k < n_threads_; ++k) {
    Share& share = shares_[static_cast<size_t>((self + k) % n_threads_)];
    const bool own = k == 0;
    uint64_t word = share.word.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t front = (word >> 16) & kMaxUnits;
      const uint64_t back = word & kMaxUnits;
      if (front >= back) break;
      // Half of what is left: the owner's pieces run on from one another, and what the
      // others take from the back shrinks as the share ends.
      const uint64_t take = std::max<uint64_t>(1, (back - front) / 2);
      const uint32_t tag = static_cast<uint32_t>(word >> 32);
      const uint64_t first = own ? front : back - take;
      const uint64_t next =
          own ? share_word(tag, front + take, back) : share_word(tag, front, back - take);
      if (!share.word.compare_exchange_weak(word, next, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
        continue;
      }
      const int64_t begin = static_cast<int64_t>(first) * job_.unit;
      (*job_.fn)(begin, std::min(job_.n, begin + static_cast<int64_t>(take) * job_.unit));
      if (done_.fetch_add(static_cast<uint32_t>(take), std::memory_order_acq_rel) + take ==
          job_.units)
        done_.notify_one();
      word = share.word.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::worker_loop(int self) {
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
    take_pieces(self);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t unit = grain;
  while ((n + unit - 1) / unit > static_cast<int64_t>(kMaxUnits)) unit += grain;
  const auto units = static_cast<uint64_t>((n + unit - 1) / unit);
  if (n_threads_ == 1 || units == 1) {
    fn(0, n);
    return;
  }
  job_ = Job{&fn, n, unit, static_cast<uint32_t>(units)};
  done_.store(0, std::memory_order_relaxed);
  ++tag_;
  const auto threads = static_cast<uint64_t>(n_threads_);
  for (uint64_t t = 0; t < threads; ++t) {
    shares_[t].word.store(share_word(tag_, units * t / threads, units * (t + 1) / threads),
                          std::memory_order_release);
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  take_pieces(0);
  int spins = 0;
  for (uint32_t d = done_.load(std::memory_order_acquire); d != units;
       d = done_.load(std::memory_order_acquire)) {
    if (!spin_once(spins)) done_.wait(d, std::memory_order_acquire);
  }
}

}  // namespace ferry::kernels
