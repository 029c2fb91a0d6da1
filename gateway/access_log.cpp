#include "gateway/access_log.h"

#include <chrono>
#include <stdexcept>

namespace ferry::gateway {

namespace {
constexpr size_t kMaxQueuedLines = 1 << 16;
// The writer wakes on its own this often; producers wake it early only for a large batch, so a
// request costs no futex call (a wake-up per request was measurable in the gateway benchmark).
constexpr auto kWriterPeriod = std::chrono::milliseconds(50);
constexpr size_t kWakeBatch = 512;
}

namespace {

void append_escaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < s.size();) {
    // Plain printable ASCII is copied a run at a time.
    size_t run = i;
    while (run < s.size()) {
      auto r = static_cast<unsigned char>(s[run]);
      if (r < 0x20 || r >= 0x80 || r == '"' || r == '\\') break;
      ++run;
    }
    if (run > i) {
      out.append(s.data() + i, run - i);
      i = run;
      continue;
    }
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20) {
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 0xf];
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A multi-byte sequence: copy it when it is well-formed UTF-8, else write U+FFFD.
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
    bool ok = len != 0 && c <= 0xf4 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    }
    if (ok && len >= 3) {
      auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0) && !(c == 0xf0 && c1 < 0x90) &&
           !(c == 0xf4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += "\xef\xbf\xbd";
      ++i;
    }
  }
}

}  // namespace

void JsonLine::key(std::string_view key) {
  if (out_.size() > 1) out_ += ',';
  out_ += '"';
  out_ += key;
  out_ += "\":";
}

JsonLine& JsonLine::str(std::string_view k, std::string_view value) {
  key(k);
  out_ += '"';
  append_escaped(out_, value);
  out_ += '"';
  return *this;
}

JsonLine& JsonLine::integer(std::string_view k, int64_t value) {
  key(k);
  out_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::millis(std::string_view k, int64_t micros) {
  key(k);
  if (micros < 0) {
    out_ += '-';
    micros = -micros;
  }
  out_ += std::to_string(micros / 1000);
  int ms = static_cast<int>(micros % 1000);
  char frac[4] = {'.', static_cast<char>('0' + ms / 100), static_cast<char>('0' + ms / 10 % 10),
                  static_cast<char>('0' + ms % 10)};
  out_.append(frac, 4);
  return *this;
}

JsonLine& JsonLine::boolean(std::string_view k, bool value) {
  key(k);
  out_ += value ? "true" : "false";
  return *this;
}

AccessLog::AccessLog(const std::string& target) {
  if (target == "off") return;
  if (target == "stdout") {
    out_ = stdout;
  } else if (target == "stderr") {
    out_ = stderr;
  } else {
    out_ = std::fopen(target.c_str(), "a");
    if (out_ == nullptr) throw std::runtime_error("cannot open access log '" + target + "'");
    owns_file_ = true;
  }
  thread_ = std::thread([this] { run(); });
}

AccessLog::~AccessLog() {
  if (out_ == nullptr) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (owns_file_) std::fclose(out_);
}

void AccessLog::write(std::string line) {
  if (out_ == nullptr) return;
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= kMaxQueuedLines) {
      ++dropped_;
      return;
    }
    queue_.push_back(std::move(line));
    wake = queue_.size() == kWakeBatch;
  }
  if (wake) cv_.notify_one();
}

void AccessLog::flush() {
  if (out_ == nullptr) return;
  std::unique_lock lock(mu_);
  flush_requested_ = true;
  cv_.notify_one();
  drained_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

int64_t AccessLog::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

void AccessLog::run() {
  std::deque<std::string> batch;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, kWriterPeriod, [this] {
        return stopping_ || flush_requested_ || queue_.size() >= kWakeBatch;
      });
      flush_requested_ = false;
      if (queue_.empty() && stopping_) return;
      if (queue_.empty()) {
        drained_.notify_all();
        continue;
      }
      batch.swap(queue_);
      writing_ = true;
    }
    for (const auto& line : batch) {
      std::fwrite(line.data(), 1, line.size(), out_);
      std::fputc('\n', out_);
    }
    std::fflush(out_);
    batch.clear();
    {
      std::lock_guard lock(mu_);
      writing_ = false;
    }
    drained_.notify_all();
  }
}

}  // namespace ferry::gateway
