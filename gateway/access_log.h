// The access log: one JSON line per request, written by a background thread so no I/O thread
// ever blocks on a file. Thread-safe: write() may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace ferry::gateway {

// Builds one JSON object on one line without a DOM: the access log writes one per request.
// Strings are escaped as JSON requires; bytes that are not valid UTF-8 become U+FFFD.
class JsonLine {
 public:
  JsonLine() { out_.reserve(384); out_ = "{"; }
  JsonLine& str(std::string_view key, std::string_view value);
  JsonLine& integer(std::string_view key, int64_t value);
  JsonLine& millis(std::string_view key, int64_t micros);  // micros as decimal milliseconds
  JsonLine& boolean(std::string_view key, bool value);
  std::string finish() { return std::move(out_) + "}"; }

 private:
  void key(std::string_view key);
  std::string out_;
};

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
