#include "gateway/access_log.h"

#include <algorithm>
#include <bit>
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

// SWAR over 8 bytes (little-endian): a mask with the high bit set in the lowest byte that needs
// more than a copy ('"', '\\', a control character, or a byte >= 0x80), and possibly in bytes
// above it; zero when all 8 bytes are plain. (x - 1) & ~x & 0x80 flags a zero byte exactly
// unless a borrow comes from a lower flagged byte, so the lowest flag is always right.
constexpr uint64_t kOnes = 0x0101010101010101ULL;
constexpr uint64_t kHighBits = 0x8080808080808080ULL;

uint64_t special_bytes(uint64_t x) {
  uint64_t control = (x - kOnes * 0x20) & ~x;
  uint64_t quote = x ^ (kOnes * '"');
  uint64_t backslash = x ^ (kOnes * '\\');
  quote = (quote - kOnes) & ~quote;
  backslash = (backslash - kOnes) & ~backslash;
  return (control | quote | backslash | x) & kHighBits;
}

// Escapes one byte, or one UTF-8 sequence, at `in`; returns the input after it. Writes at most
// 6 bytes per input byte consumed.
const char* escape_one(const char* in, const char* end, char*& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  auto c = static_cast<unsigned char>(*in);
  if (c < 0x80) {
    if (c == '"' || c == '\\') {
      out[0] = '\\';
      out[1] = static_cast<char>(c);
      out += 2;
    } else if (c < 0x20) {
      std::memcpy(out, "\\u00", 4);
      out[4] = kHex[c >> 4];
      out[5] = kHex[c & 0xf];
      out += 6;
    } else {
      *out++ = static_cast<char>(c);
    }
    return in + 1;
  }
  // A multi-byte sequence: copy it when it is well-formed UTF-8, else write U+FFFD.
  size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
  bool ok = len != 0 && c <= 0xf4 && len <= static_cast<size_t>(end - in);
  for (size_t k = 1; ok && k < len; ++k) {
    ok = (static_cast<unsigned char>(in[k]) & 0xc0) == 0x80;
  }
  if (ok && len >= 3) {
    auto c1 = static_cast<unsigned char>(in[1]);
    ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0) && !(c == 0xf0 && c1 < 0x90) &&
         !(c == 0xf4 && c1 >= 0x90);
  }
  if (!ok) {
    std::memcpy(out, "\xef\xbf\xbd", 3);
    out += 3;
    return in + 1;
  }
  std::memcpy(out, in, len);
  out += len;
  return in + len;
}

// Loads the last `n` (1 to 7) bytes before `end` as one word, the bytes above them plain;
// `have` bytes before `end` are readable. Whole-word loads, no byte loop.
uint64_t load_tail(const char* end, size_t n, size_t have) {
  uint64_t x;
  if (have >= 8) {
    std::memcpy(&x, end - 8, 8);
    x >>= 8 * (8 - n);
  } else if (n >= 4) {
    uint32_t lo;
    uint32_t hi;
    std::memcpy(&lo, end - n, 4);
    std::memcpy(&hi, end - 4, 4);
    x = lo | (uint64_t{hi} << (8 * (n - 4)));  // the overlap holds the same bytes twice
  } else {
    const char* in = end - n;
    x = static_cast<unsigned char>(in[0]) |
        (uint64_t{static_cast<unsigned char>(in[n / 2])} << (8 * (n / 2))) |
        (uint64_t{static_cast<unsigned char>(in[n - 1])} << (8 * (n - 1)));
  }
  return x | ((kOnes * 'a') << (8 * n));
}

}  // namespace

char* JsonLine::escape(char* out, std::string_view s) {
  const char* in = s.data();
  const char* end = in + s.size();
  if constexpr (std::endian::native == std::endian::little) {
    // Plain bytes go 8 at a time: store the word, advance to the first byte that needs more.
    while (end - in >= 8) {
      uint64_t x;
      std::memcpy(&x, in, 8);
      std::memcpy(out, &x, 8);
      uint64_t special = special_bytes(x);
      if (special == 0) {
        in += 8;
        out += 8;
        continue;
      }
      auto plain = static_cast<size_t>(std::countr_zero(special) / 8);
      out += plain;
      in = escape_one(in + plain, end, out);
    }
    // The last 1-7 bytes as one padded word; the store may run 8 bytes (escape's slack).
    if (in != end) {
      auto n = static_cast<size_t>(end - in);
      uint64_t x = load_tail(end, n, s.size());
      std::memcpy(out, &x, 8);
      uint64_t special = special_bytes(x);
      if (special == 0) return out + n;
      auto plain = static_cast<size_t>(std::countr_zero(special) / 8);
      in += plain;
      out += plain;
    }
  }
  while (in != end) in = escape_one(in, end, out);
  return out;
}

namespace {
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
