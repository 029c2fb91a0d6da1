#include "gateway/http_wire.h"

#include <charconv>
#include <cstdint>
#include <cstring>

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
  // exact for "any byte under n", n <= 0x80); a word with one is looked at byte by byte.
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    if (((w - kOnes * 0x20) & ~w & kOnes * 0x80) == 0) continue;
    for (size_t j = i; j < i + 8; ++j) {
      if (unsafe_byte(s[j])) return false;
    }
  }
  for (; i < s.size(); ++i) {
    if (unsafe_byte(s[i])) return false;
  }
  return true;
}

void append_header(std::string& out, std::string_view name, std::string_view value) {
  if (name.empty() || !safe(name) || !safe(value)) return;
  out.append(name);
  out.append(": ");
  out.append(value);
  out.append("\r\n");
}

void append_number(std::string& out, size_t n, int base) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, n, base);
  out.append(buf, r.ptr);
}

}  // namespace

void append_response_head(std::string& out, const ResponseHead& head) {
  out.append("HTTP/1.1 ");
  append_number(out, static_cast<size_t>(head.status), 10);
  out.push_back(' ');
  out.append(reason_phrase(head.status));
  out.append("\r\nServer: ferry\r\n");
  if (!head.content_type.empty()) append_header(out, "Content-Type", head.content_type);
  if (head.no_cache) out.append("Cache-Control: no-cache\r\n");
  if (!head.request_id.empty()) append_header(out, "x-request-id", head.request_id);
  if (head.headers != nullptr) {
    for (const auto& [k, v] : *head.headers) append_header(out, k, v);
  }
  if (head.content_length) {
    out.append("Content-Length: ");
    append_number(out, *head.content_length, 10);
    out.append("\r\n");
  } else {
    out.append("Transfer-Encoding: chunked\r\n");
  }
  if (!head.keep_alive) out.append("Connection: close\r\n");
  out.append("\r\n");
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
