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
//        [--dsync]
// --interval-us spaces the commits (the disk idles between them as at 200 req/s). --direct
// writes `--pages` aligned 4 KiB blocks with O_DIRECT instead (the row log's pre-sized
// segments, ledger/row_log.h), the file written and synced first as there. --dsync makes each
// commit one pwritev2 with RWF_DSYNC instead of pwrite + fdatasync (on a disk with FUA writes
// the kernel can then skip the separate cache flush; bench/README, issue 17 session 29).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
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
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--direct") {
      direct = true;
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
                 "[--interval-us 0] [--direct] [--dsync]\n");
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
  std::vector<double> wall_us;
  wall_us.reserve(static_cast<size_t>(commits));
  off_t at = 0;
  const double cpu0 = cpu_seconds();
  for (int i = 0; i < commits; ++i) {
    if (interval_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(interval_us));
    auto t0 = std::chrono::steady_clock::now();
    iovec iov{const_cast<char*>(commit.data()), commit.size()};
    const bool failed =
        dsync ? pwritev2(fd, &iov, 1, at, RWF_DSYNC) < 0
              : pwrite(fd, commit.data(), commit.size(), at) < 0 || fdatasync(fd) != 0;
    if (failed) {
      std::perror("ferry_bench_fsync: write");
      return 1;
    }
    auto t1 = std::chrono::steady_clock::now();
    wall_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    at += static_cast<off_t>(commit.size());
    if (at + static_cast<off_t>(commit.size()) > kWrap) at = 0;
  }
  const double cpu_us = (cpu_seconds() - cpu0) * 1e6 / commits;
  close(fd);
  unlink(path.c_str());
  std::sort(wall_us.begin(), wall_us.end());
  auto pct = [&](double p) { return wall_us[static_cast<size_t>(p * (wall_us.size() - 1))]; };
  std::printf(
      "fsync floor: %d commits of %d pages (%s%s)%s: wall p50 %.3f ms, p90 %.3f "
      "ms; CPU %.1f us per commit\n",
      commits, pages, direct ? "O_DIRECT " : "",
      dsync ? "pwritev2 RWF_DSYNC" : "pwrite + fdatasync", interval_us > 0 ? ", spaced" : "",
      pct(0.5) / 1000, pct(0.9) / 1000, cpu_us);
  return 0;
}
