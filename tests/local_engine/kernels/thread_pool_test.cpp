#include "local_engine/kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ferry::kernels {
namespace {

// Many small jobs back to back, on pools of every size: each job's ranges are run exactly once
// and the job is over when parallel_for returns (a range of job k never runs during job k+1),
// whichever threads took them.
TEST(ThreadPool, BackToBackJobsEachRunExactlyOnce) {
  for (int n : {1, 2, 4}) {
    ThreadPool pool(n, 0);
    EXPECT_EQ(pool.n_threads(), n);
    std::atomic<int> job_running{-1};
    for (int job = 0; job < 2000; ++job) {
      const int64_t len = 1 + job % 37;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(len));
      job_running.store(job);
      pool.parallel_for(len, 1, [&](int64_t b, int64_t e) {
        EXPECT_EQ(job_running.load(), job);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      job_running.store(-1);
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "pool " << n << " job " << job;
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

// A job below the pool's serial work runs as one range on the caller; above it, it is shared
// out (more than one range, on more than one thread when the workers are free to take them).
TEST(ThreadPool, SmallJobsStayOnTheCaller) {
  ThreadPool pool(3, 1000);
  const auto caller = std::this_thread::get_id();
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::mutex mu;
  bool elsewhere = false;
  auto record = [&](int64_t b, int64_t e) {
    std::lock_guard lock(mu);
    ranges.emplace_back(b, e);
    elsewhere = elsewhere || std::this_thread::get_id() != caller;
  };
  pool.parallel_for(64, 4, 999, record);
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0], std::make_pair(int64_t{0}, int64_t{64}));
  EXPECT_FALSE(elsewhere);
  ranges.clear();
  pool.parallel_for(64, 4, 1000, record);
  EXPECT_GT(ranges.size(), 1u);
  int64_t covered = 0;
  for (const auto& [b, e] : ranges) covered += e - b;
  EXPECT_EQ(covered, 64);
}

// Each thread walks its own share from the front in pieces that run on from one another and
// shrink (its weights read as one stream), then takes pieces from the back of the other
// shares: the caller's pieces start at 0 and run on contiguously within the first half, and
// whatever it takes of the worker's half comes from the back, each piece ending where the one
// before began.
TEST(ThreadPool, EachThreadReadsItsShareFromTheFrontAndTheOthersFromTheBack) {
  ThreadPool pool(2, 0);
  const auto caller = std::this_thread::get_id();
  for (int job = 0; job < 200; ++job) {
    const int64_t n = 64 + job;
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> mine;
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      if (std::this_thread::get_id() != caller) return;
      std::lock_guard lock(mu);
      mine.emplace_back(b, e);
    });
    // On a busy machine the worker may take any part of the caller's share from its back
    // first, so only the order is certain: from 0 upwards, then from n downwards.
    size_t i = 0;
    for (; i < mine.size() && mine[i].first < n / 2; ++i) {
      const int64_t expected_begin = i == 0 ? 0 : mine[i - 1].second;
      EXPECT_EQ(mine[i].first, expected_begin) << "job " << job << " piece " << i;
      if (i > 0) {
        EXPECT_LE(mine[i].second - mine[i].first, mine[i - 1].second - mine[i - 1].first);
      }
    }
    for (size_t j = i; j < mine.size(); ++j) {
      const int64_t expected_end = j == i ? n : mine[j - 1].first;
      EXPECT_EQ(mine[j].second, expected_end) << "job " << job << " piece " << j;
    }
  }
}

TEST(ThreadPool, DefaultSizeAndDestructionWhileIdle) {
  ThreadPool pool(0);
  EXPECT_GE(pool.n_threads(), 1);
  std::atomic<int64_t> count{0};
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) { count.fetch_add(e - b); });
  EXPECT_EQ(count.load(), 100);
}

}  // namespace
}  // namespace ferry::kernels
