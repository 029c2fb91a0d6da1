// The access log: one JSON line per request, written by a background thread so no I/O thread
// ever blocks on a file. Thread-safe: write() may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace ferry::gateway {

class AccessLog {
 public:
  // target: "stdout", "stderr", "off", or a file path (appended). Throws on an unopenable file.
  explicit AccessLog(const std::string& target);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  bool enabled() const { return out_ != nullptr; }
  // Queues one line (without the trailing newline).
  void write(std::string line);
  // Writes everything queued so far (used at shutdown and by tests).
  void flush();
  int64_t dropped() const;

 private:
  void run();

  std::FILE* out_ = nullptr;
  bool owns_file_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable drained_;
  std::deque<std::string> queue_;
  bool stopping_ = false;
  bool writing_ = false;
  bool flush_requested_ = false;
  int64_t dropped_ = 0;
  std::thread thread_;
};

}  // namespace ferry::gateway
