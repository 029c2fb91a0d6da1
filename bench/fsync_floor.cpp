// The floor of a durable ledger row on this machine: what one group commit costs the disk and
// the kernel, whatever the database. It appends `--pages` pages of 4 KiB + 24 bytes (a SQLite
// WAL frame each) to a file in `--dir` with one pwrite per commit, then fdatasync()s it,
// `--commits` times (the file wraps at 4 MiB, as a WAL restarts after a checkpoint), and prints the
// wall time (p50, p90) and the CPU time (user + system, all of it this process's) per commit.
// gateway_bench.sh runs it beside the servers in the same run, in the directory of ferry-full's
// ledger, so that the durable commit's share of ferry-full's figures has a reference (see
// bench/README.md).
//
// Usage: ferry_bench_fsync --dir DIR [--pages 12] [--commits 300] [--interval-us 0] [--direct]
//        [--dsync] [--hand-off]
// --interval-us spaces the commits (the disk idles between them as at 200 req/s). --direct
// writes `--pages` aligned 4 KiB blocks with O_DIRECT instead (the row log's pre-sized
// segments, ledger/row_log.h), the file written and synced first as there. --dsync makes each
// commit one pwritev2 with RWF_DSYNC instead of pwrite + fdatasync (on a disk with FUA writes
// the kernel can then skip the separate cache flush; bench/README, issue 17 session 29).
// --hand-off has a second thread make each commit, as ferry's row-log writer does: the caller
// wakes it (mutex + condition variable) and waits for its acknowledgement on an eventfd in
// epoll_wait, as an I/O loop does; the difference from the same run without it is what the
// hand-off to a writer thread and back costs (bench/README, issue 17 session 31).
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

double cpu_seconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int pages = 12;
  int commits = 300;
  long interval_us = 0;
  bool direct = false;
  bool dsync = false;
  bool hand_off = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--direct") {
      direct = true;
      continue;
    }
    if (arg == "--hand-off") {
      hand_off = true;
      continue;
    }
    if (arg == "--dsync") {
      dsync = true;
      continue;
    }
    if (arg != "--dir" && arg != "--pages" && arg != "--commits" && arg != "--interval-us") {
      std::fprintf(stderr, "ferry_bench_fsync: unknown option %s\n", arg.c_str());
      return 2;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ferry_bench_fsync: %s needs a value\n", arg.c_str());
      return 2;
    }
    const char* value = argv[++i];
    if (arg == "--dir") {
      dir = value;
    } else if (arg == "--pages") {
      pages = std::atoi(value);
    } else if (arg == "--commits") {
      commits = std::atoi(value);
    } else {
      interval_us = std::atol(value);
    }
  }
  if (dir.empty() || pages < 1 || commits < 1) {
    std::fprintf(stderr,
                 "usage: ferry_bench_fsync --dir DIR [--pages 12] [--commits 300] "
                 "[--interval-us 0] [--direct] [--dsync] [--hand-off]\n");
    return 2;
  }
  const std::string path = dir + "/fsync-floor.dat";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    std::perror("ferry_bench_fsync: open");
    return 1;
  }
  constexpr size_t kBlock = 4096;
  constexpr size_t kFrame = kBlock + 24;
  constexpr off_t kWrap = 4 << 20;
  const size_t commit_bytes = (direct ? kBlock : kFrame) * static_cast<size_t>(pages);
  // Aligned for O_DIRECT (harmless otherwise).
  void* memory = nullptr;
  if (posix_memalign(&memory, kBlock, commit_bytes) != 0) {
    std::perror("ferry_bench_fsync: posix_memalign");
    return 1;
  }
  std::unique_ptr<char, decltype(&std::free)> owned(static_cast<char*>(memory), &std::free);
  std::memset(owned.get(), 'x', commit_bytes);
  const std::string_view commit(owned.get(), commit_bytes);
  // The file exists at its full size first (a reused WAL), so commits do not grow it.
  for (off_t at = 0; at < kWrap; at += static_cast<off_t>(commit.size())) {
    if (pwrite(fd, commit.data(), commit.size(), at) < 0) {
      std::perror("ferry_bench_fsync: pwrite");
      return 1;
    }
  }
  fdatasync(fd);
  if (direct) {
    close(fd);
    fd = open(path.c_str(), O_RDWR | O_DIRECT);
    if (fd < 0) {
      std::perror("ferry_bench_fsync: open with O_DIRECT");
      return 1;
    }
  }
  auto write_commit = [&](off_t where) {
    iovec iov{const_cast<char*>(commit.data()), commit.size()};
    return dsync ? pwritev2(fd, &iov, 1, where, RWF_DSYNC) >= 0
                 : pwrite(fd, commit.data(), commit.size(), where) >= 0 && fdatasync(fd) == 0;
  };
  // --hand-off: the writer thread, woken by `due`, acknowledging each commit on `done`.
  std::mutex mu;
  std::condition_variable wake;
  off_t due = -1;  // the offset of the commit asked for, -1: none; -2: stop
  bool written = true;
  const int done = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  const int loop = epoll_create1(EPOLL_CLOEXEC);
  epoll_event watch{};
  watch.events = EPOLLIN;
  if (done < 0 || loop < 0 || epoll_ctl(loop, EPOLL_CTL_ADD, done, &watch) != 0) {
    std::perror("ferry_bench_fsync: eventfd/epoll");
    return 1;
  }
  std::thread writer;
  if (hand_off) {
    writer = std::thread([&] {
      for (;;) {
        off_t where;
        {
          std::unique_lock lock(mu);
          wake.wait(lock, [&] { return due != -1; });
          if (due == -2) return;
          where = due;
          due = -1;
        }
        const bool ok = write_commit(where);
        {
          std::lock_guard lock(mu);
          written = ok;
        }
        const uint64_t one = 1;
        if (write(done, &one, sizeof one) != sizeof one) std::abort();
      }
    });
  }
  auto handed_off = [&](off_t where) {
    {
      std::lock_guard lock(mu);
      due = where;
    }
    wake.notify_one();
    epoll_event ready{};
    while (epoll_wait(loop, &ready, 1, -1) != 1) {
    }
    uint64_t n = 0;
    if (read(done, &n, sizeof n) != sizeof n) std::abort();
    std::lock_guard lock(mu);
    return written;
  };
  std::vector<double> wall_us;
  wall_us.reserve(static_cast<size_t>(commits));
  off_t at = 0;
  const double cpu0 = cpu_seconds();
  for (int i = 0; i < commits; ++i) {
    if (interval_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(interval_us));
    auto t0 = std::chrono::steady_clock::now();
    if (!(hand_off ? handed_off(at) : write_commit(at))) {
      std::perror("ferry_bench_fsync: write");
      return 1;
    }
    auto t1 = std::chrono::steady_clock::now();
    wall_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    at += static_cast<off_t>(commit.size());
    if (at + static_cast<off_t>(commit.size()) > kWrap) at = 0;
  }
  const double cpu_us = (cpu_seconds() - cpu0) * 1e6 / commits;
  if (hand_off) {
    {
      std::lock_guard lock(mu);
      due = -2;
    }
    wake.notify_one();
    writer.join();
  }
  close(loop);
  close(done);
  close(fd);
  unlink(path.c_str());
  std::sort(wall_us.begin(), wall_us.end());
  auto pct = [&](double p) { return wall_us[static_cast<size_t>(p * (wall_us.size() - 1))]; };
  std::printf(
      "fsync floor: %d commits of %d pages (%s%s)%s%s: wall p50 %.3f ms, p90 %.3f "
      "ms; CPU %.1f us per commit\n",
      commits, pages, direct ? "O_DIRECT " : "",
      dsync ? "pwritev2 RWF_DSYNC" : "pwrite + fdatasync", interval_us > 0 ? ", spaced" : "",
      hand_off ? ", by a writer thread" : "", pct(0.5) / 1000, pct(0.9) / 1000, cpu_us);
  return 0;
}
