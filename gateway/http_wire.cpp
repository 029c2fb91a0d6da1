#include "gateway/http_wire.h"

#include <charconv>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace ferry::gateway {

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 402:
      return "Payment Required";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 499:
      return "Client Closed Request";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

namespace {

bool unsafe_byte(char c) {
  return c == '\r' || c == '\n' || c == '\0';
}

bool safe(std::string_view s) {
  // Eight bytes at a time: a word without a byte under 0x20 holds no CR, LF or NUL (the test is
  // exact for "any byte under n", n <= 0x80); the last bytes are one word padded with spaces.
  // Only a value with a byte under 0x20 somewhere (a tab, say) is looked at byte by byte.
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  auto plain = [](uint64_t w) { return ((w - kOnes * 0x20) & ~w & kOnes * 0x80) == 0; };
  size_t i = 0;
  bool all_plain = true;
  for (; i + 8 <= s.size() && all_plain; i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    all_plain = plain(w);
  }
  if (all_plain && i < s.size()) {
    uint64_t w = kOnes * 0x20;
    std::memcpy(&w, s.data() + i, s.size() - i);
    all_plain = plain(w);
  }
  if (all_plain) return true;
  for (char c : s) {
    if (unsafe_byte(c)) return false;
  }
  return true;
}

void append_number(std::string& out, size_t n, int base) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, n, base);
  out.append(buf, r.ptr);
}

// Writes a head into room made once, with a bound on its size: a piece is a memcpy (of a
// constant size for a literal), not an append's capacity check and length update each. (The
// head was twenty appends, ~1.4k instructions a response.)
class HeadWriter {
 public:
  HeadWriter(std::string& out, size_t bound) : out_(out) {
    const size_t start = out.size();
    out.resize(start + bound);
    p_ = out.data() + start;
    end_ = out.data() + out.size();
  }
  ~HeadWriter() { out_.resize(static_cast<size_t>(p_ - out_.data())); }
  HeadWriter(const HeadWriter&) = delete;
  HeadWriter& operator=(const HeadWriter&) = delete;

  void put(std::string_view s) {
    room(s.size());
    std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }
  void number(size_t n) {
    room(kNumberBytes);
    p_ = std::to_chars(p_, p_ + kNumberBytes, n).ptr;
  }
  // A field, left out when its name is empty or either part holds CR, LF or NUL.
  void header(std::string_view name, std::string_view value) {
    if (name.empty() || !safe(name)) return;
    named_header(name, value);
  }
  // A field of a name known to be clean (a literal), left out when its value is not.
  void named_header(std::string_view name, std::string_view value) {
    if (!safe(value)) return;
    put(name);
    put(": ");
    put(value);
    put("\r\n");
  }
  static size_t header_bound(std::string_view name, std::string_view value) {
    return name.size() + value.size() + 4;
  }
  static constexpr size_t kNumberBytes = 20;  // a size_t in decimal

 private:
  // A bound that is too small is a defect: refused here, never written past.
  void room(size_t n) const {
    if (n > static_cast<size_t>(end_ - p_)) throw std::length_error("response head over its bound");
  }

  std::string& out_;
  char* p_;
  char* end_;
};

}  // namespace

void append_response_head(std::string& out, const ResponseHead& head) {
  const std::string_view reason = reason_phrase(head.status);
  // Every fixed piece below (the status line's, Server, Cache-Control, Content-Length or
  // Transfer-Encoding, Connection, the blank line) in 160 bytes, and two numbers.
  size_t bound = 160 + 2 * HeadWriter::kNumberBytes + reason.size() +
                 HeadWriter::header_bound("Content-Type", head.content_type) +
                 HeadWriter::header_bound("x-request-id", head.request_id);
  if (head.headers != nullptr) {
    for (const auto& [k, v] : *head.headers) bound += HeadWriter::header_bound(k, v);
  }
  HeadWriter w(out, bound);
  w.put("HTTP/1.1 ");
  w.number(static_cast<size_t>(head.status));
  w.put(" ");
  w.put(reason);
  w.put("\r\nServer: ferry\r\n");
  if (!head.content_type.empty()) w.named_header("Content-Type", head.content_type);
  if (head.no_cache) w.put("Cache-Control: no-cache\r\n");
  if (!head.request_id.empty()) w.named_header("x-request-id", head.request_id);
  if (head.headers != nullptr) {
    for (const auto& [k, v] : *head.headers) w.header(k, v);
  }
  if (head.content_length) {
    w.put("Content-Length: ");
    w.number(*head.content_length);
    w.put("\r\n");
  } else {
    w.put("Transfer-Encoding: chunked\r\n");
  }
  if (!head.keep_alive) w.put("Connection: close\r\n");
  w.put("\r\n");
}

void append_chunk_prefix(std::string& out, size_t size) {
  append_number(out, size, 16);
  out.append("\r\n");
}

bool is_clean_target(std::string_view target) {
  for (char c : target) {
    auto b = static_cast<unsigned char>(c);
    if (b < 0x21 || b > 0x7e) return false;
  }
  return true;
}

}  // namespace ferry::gateway
