#include "local_engine/kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace ferry::kernels {
namespace {

TEST(ThreadPool, RunsEveryIndexOncePerJob) {
  for (int n : {1, 2, 4}) {
    ThreadPool pool(n);
    EXPECT_EQ(pool.n_threads(), n);
    for (int job = 0; job < 100; ++job) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.run([&](int ith, int nth) {
        EXPECT_EQ(nth, n);
        hits[static_cast<size_t>(ith)].fetch_add(1);
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, ParallelForCoversTheRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 5, 16, 17, 1000}) {
    for (int64_t grain : {1, 4, 16}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        EXPECT_LT(b, e);
        EXPECT_EQ(b % grain, 0);
        EXPECT_TRUE(e == n || e % grain == 0);
        for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
      });
      for (auto& s : seen) ASSERT_EQ(s.load(), 1) << n << " " << grain;
    }
  }
}

TEST(ThreadPool, DefaultSizeAndDestructionWhileIdle) {
  ThreadPool pool(0);
  EXPECT_GE(pool.n_threads(), 1);
  std::atomic<int> count{0};
  pool.run([&](int, int) { count.fetch_add(1); });
  EXPECT_EQ(count.load(), pool.n_threads());
}

}  // namespace
}  // namespace ferry::kernels
