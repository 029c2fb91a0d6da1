// Progress of a long command (model synth/quantize, policy replay, ledger report/export) on
// stderr: on a terminal, one line redrawn in place with a bar, the percentage and the time
// left; otherwise a plain line at each tenth of the work (and every 30 s when the total is
// unknown). Work that ends within `quiet_for` (1 s by default) prints nothing at all, unless
// the environment has FERRY_PROGRESS=always.
// One owner thread calls update(); not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ferry {

class Progress {
 public:
  // `total` units of work (0: unknown, then only counts are shown). `out` defaults to stderr;
  // `terminal` says how to draw (default: whether `out` is a terminal).
  Progress(std::string what, uint64_t total, std::FILE* out = stderr, int terminal = -1,
           std::chrono::milliseconds quiet_for = std::chrono::milliseconds(1000));
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void set_total(uint64_t total) { total_ = total; }
  // `done` units are finished (monotonic). Cheap: draws at most 10 times a second.
  void update(uint64_t done);
  // The final line ("done" with the elapsed time); called by the destructor if not before.
  void finish();

  // "1h02m", "3m07s", "12s": for the time left and the elapsed time.
  static std::string format_duration(std::chrono::seconds s);

 private:
  void draw(uint64_t done, bool final);

  std::string what_;
  uint64_t total_;
  std::FILE* out_;
  bool terminal_;
  std::chrono::milliseconds quiet_for_;
  bool finished_ = false;
  bool shown_ = false;  // something was drawn: finish() draws the last line
  uint64_t done_ = 0;
  int last_tenth_ = 0;  // plain mode: the last tenth printed (0%: never a line)
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace ferry
