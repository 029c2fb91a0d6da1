// The access log: one JSON line per request, written by a background thread so no I/O thread
// ever blocks on a file. Thread-safe: write() may be called from any thread.
#pragma once

#include <charconv>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/clock.h"
#include "common/json_text.h"

namespace ferry::gateway {

// Builds one JSON object on one line without a DOM: the access log writes one per request.
// Strings are escaped by common/json_text (control characters as \u00XX); bytes that are not
// valid UTF-8 become U+FFFD.
// Each field is written straight into a buffer sized ahead for its worst case; the small field
// writers are inline so that constant keys are copied with constant-size copies.
class JsonLine {
 public:
  // Starts with a buffer left by an earlier JsonLine on this thread when there is one.
  JsonLine();
  ~JsonLine();
  JsonLine(JsonLine&&) = default;
  JsonLine& operator=(JsonLine&&) = delete;

  JsonLine& str(std::string_view k, std::string_view value) {
    char* p = key(k, value.size() * kJsonEscapedMaxPerByte + 2 + kJsonEscapeSlack);
    *p = '"';
    p = escape_json(p + 1, value, JsonControls::kUnicode);
    *p = '"';
    return commit(p + 1);
  }
  JsonLine& integer(std::string_view k, int64_t value) {
    char* p = key(k, 20);
    return commit(std::to_chars(p, p + 20, value).ptr);
  }
  // micros as decimal milliseconds: "1234.567".
  JsonLine& millis(std::string_view k, int64_t micros) {
    char* p = key(k, 25);
    if (micros < 0) {
      *p++ = '-';
      micros = -micros;
    }
    p = std::to_chars(p, p + 20, micros / 1000).ptr;
    auto ms = static_cast<int>(micros % 1000);
    p[0] = '.';
    p[1] = static_cast<char>('0' + ms / 100);
    p[2] = static_cast<char>('0' + ms / 10 % 10);
    p[3] = static_cast<char>('0' + ms % 10);
    return commit(p + 4);
  }
  JsonLine& boolean(std::string_view k, bool value) {
    char* p = key(k, 5);
    std::memcpy(p, value ? "true" : "false", 5);  // "true" is followed by its terminator
    return commit(p + (value ? 4 : 5));
  }
  // A string in format_utc_micros' form ("2026-11-29T21:35:04.123456Z").
  JsonLine& utc_micros(std::string_view k, int64_t unix_micros) {
    char* p = key(k, kUtcMicrosChars + 2);
    *p = '"';
    write_utc_micros(unix_micros, p + 1);
    p[kUtcMicrosChars + 1] = '"';
    return commit(p + kUtcMicrosChars + 2);
  }
  // The line; call once, last.
  std::string finish() {
    *reserve(1) = '}';
    out_.resize(size_ + 1);
    return std::move(out_);
  }
  // The line without a copy, valid while this JsonLine lives; call once, last. Its buffer then
  // goes on to the next JsonLine made on this thread.
  std::string_view close() {
    *reserve(1) = '}';
    return {out_.data(), size_ + 1};
  }

 private:
  static constexpr size_t kInitialBytes = 512;
  static constexpr size_t kMaxSpareBytes = 64 << 10;  // a larger buffer is not kept
  void grow(size_t more);
  // Room for `more` bytes past the end; returns where they go.
  char* reserve(size_t more) {
    if (out_.size() - size_ < more) grow(more);
    return out_.data() + size_;
  }
  // Writes `,"key":` (no comma first) with room after it for `value_bytes`.
  char* key(std::string_view k, size_t value_bytes) {
    char* p = reserve(k.size() + 4 + value_bytes);
    if (size_ > 1) *p++ = ',';
    *p = '"';
    std::memcpy(p + 1, k.data(), k.size());
    p += k.size() + 1;
    p[0] = '"';
    p[1] = ':';
    return p + 2;
  }
  JsonLine& commit(char* end) {
    size_ = static_cast<size_t>(end - out_.data());
    return *this;
  }

  std::string out_;  // out_[0, size_) is the line so far; the rest is room
  size_t size_ = 1;
};

class AccessLog {
 public:
  // target: "stdout", "stderr", "off", or a file path (appended). Throws on an unopenable file.
  explicit AccessLog(const std::string& target);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  bool enabled() const { return out_ != nullptr; }
  // Queues one line (without the trailing newline). Copies it: the caller keeps its buffer.
  void write(std::string_view line);
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
  std::string queue_;  // queued lines, each ended by '\n'
  size_t queued_lines_ = 0;
  bool stopping_ = false;
  bool writing_ = false;
  bool flush_requested_ = false;
  bool writer_idle_ = false;  // the writer waits for a line, without a timeout
  int64_t dropped_ = 0;
  std::thread thread_;
};

}  // namespace ferry::gateway
