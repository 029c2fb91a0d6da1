// Benchmark support: the machine's memory read bandwidth with a given number of threads, the
// reference a memory-bound decode is measured against in the same run (model bytes read per
// token / this = the decode bound). Bench binaries only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

namespace ferry::bench {

// Sums a range of 64-bit words with eight independent accumulators (the loop is bound by the
// memory system, not by the additions).
inline uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) a[k] += p[i + static_cast<size_t>(k)];
  }
  for (; i < n; ++i) a[0] += p[i];
  uint64_t s = 0;
  for (const uint64_t v : a) s += v;
  return s;
}

// Best of `reps` reads of a `bytes`-long buffer (far larger than any cache) split evenly over
// `threads` threads, in GB/s (1e9 bytes per second).
inline double read_bandwidth_gbs(int threads, size_t bytes = size_t{1} << 30, int reps = 5) {
  threads = std::max(1, threads);
  const size_t words = bytes / sizeof(uint64_t);
  // One buffer for every call (allocated and written once): freeing and refaulting a GiB
  // between readings would leave the kernel zeroing and compacting pages while the next
  // measurement runs.
  static std::vector<uint64_t> buf;
  if (buf.size() != words) {
    buf.assign(words, 0);
    for (size_t i = 0; i < words; ++i) buf[i] = i;
  }
  double best = 0;
  volatile uint64_t sink = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    const size_t per = words / static_cast<size_t>(threads);
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t begin = per * static_cast<size_t>(t);
        const size_t end = t + 1 == threads ? words : begin + per;
        sums[static_cast<size_t>(t)] = sum_words(buf.data() + begin, end - begin);
      });
    }
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const uint64_t v : sums) sink = sink + v;
    best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) / s / 1e9);
  }
  return best;
}

}  // namespace ferry::bench
