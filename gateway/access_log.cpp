#include "gateway/access_log.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "common/clock.h"

namespace ferry::gateway {

namespace {
constexpr size_t kMaxQueuedLines = 1 << 16;
// While lines come, the writer wakes on its own this often; producers wake it early only for a
// large batch, so a request costs no futex call (a wake-up per request was measurable in the
// gateway benchmark). After a period with no line it sleeps until the next line, whose
// producer wakes it: an idle ferry does not wake for its log.
constexpr auto kWriterPeriod = std::chrono::milliseconds(100);
constexpr size_t kWakeBatch = 512;
// Lines are queued as bytes in one buffer (a copy per line, no allocation per line once the
// buffer has grown); the writer hands back its buffer after a batch, keeping at most this much.
constexpr size_t kKeptBufferBytes = 1 << 20;

// The buffer of the last JsonLine destroyed on this thread (unless finish() took it), for the
// next one.
thread_local std::string t_spare_line;
}  // namespace

JsonLine::JsonLine() : out_(std::move(t_spare_line)) {
  t_spare_line.clear();
  if (out_.size() < kInitialBytes) out_.resize(kInitialBytes);
  out_[0] = '{';
}

JsonLine::~JsonLine() {
  if (out_.size() >= kInitialBytes && out_.capacity() <= kMaxSpareBytes) {
    t_spare_line = std::move(out_);
  }
}

void JsonLine::grow(size_t more) {
  out_.resize(std::max(out_.size() * 2, size_ + more));
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

void AccessLog::write(std::string_view line) {
  if (out_ == nullptr) return;
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (queued_lines_ >= kMaxQueuedLines) {
      ++dropped_;
      return;
    }
    queue_.append(line);
    queue_ += '\n';
    ++queued_lines_;
    wake = queued_lines_ == kWakeBatch || (writer_idle_ && queued_lines_ == 1);
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
  std::string batch;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, kWriterPeriod,
                   [this] { return stopping_ || flush_requested_ || queued_lines_ >= kWakeBatch; });
      flush_requested_ = false;
      if (queue_.empty() && stopping_) return;
      if (queue_.empty()) {
        drained_.notify_all();
        // A whole period without a line: sleep until one comes (its producer wakes us).
        writer_idle_ = true;
        cv_.wait(lock, [this] { return stopping_ || flush_requested_ || !queue_.empty(); });
        writer_idle_ = false;
        continue;
      }
      batch.swap(queue_);  // producers go on appending into batch's old (empty) buffer
      queued_lines_ = 0;
      writing_ = true;
    }
    std::fwrite(batch.data(), 1, batch.size(), out_);
    std::fflush(out_);
    // Keep a buffer's memory for the next batch unless a burst made it large.
    if (batch.capacity() > kKeptBufferBytes) {
      std::string().swap(batch);
    } else {
      batch.clear();
    }
    {
      std::lock_guard lock(mu_);
      writing_ = false;
    }
    drained_.notify_all();
  }
}

}  // namespace ferry::gateway
