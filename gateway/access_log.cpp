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
