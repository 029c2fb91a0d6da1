#include "gateway/http_wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

namespace ferry::gateway {
namespace {

TEST(HttpWire, FixedLengthHeadHasEveryFieldAndEndsWithBlankLine) {
  HeaderList extra = {{"x-ferry-target", "gpu"}, {"retry-after", "3"}};
  ResponseHead h;
  h.status = 429;
  h.content_type = "application/json";
  h.request_id = "req-1";
  h.headers = &extra;
  h.content_length = 42;
  std::string out;
  append_response_head(out, h);
  EXPECT_EQ(out,
            "HTTP/1.1 429 Too Many Requests\r\nServer: ferry\r\nContent-Type: application/json\r\n"
            "x-request-id: req-1\r\nx-ferry-target: gpu\r\nretry-after: 3\r\n"
            "Content-Length: 42\r\n\r\n");
}

TEST(HttpWire, ChunkedHeadClosesWhenAsked) {
  ResponseHead h;
  h.content_type = "text/event-stream";
  h.no_cache = true;
  h.keep_alive = false;
  std::string out;
  append_response_head(out, h);
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nServer: ferry\r\nContent-Type: text/event-stream\r\n"
            "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
}

TEST(HttpWire, HeadersThatWouldSplitTheResponseAreLeftOut) {
  HeaderList extra = {{"x-a", "ok"},
                      {"x-b", "bad\r\nSet-Cookie: x"},
                      {"x-c\n", "v"},
                      {"x-d", std::string("nul\0x", 5)}};
  ResponseHead h;
  h.status = 200;
  h.headers = &extra;
  h.request_id = "id\r\nx";
  h.content_length = 0;
  std::string out;
  append_response_head(out, h);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nServer: ferry\r\nx-a: ok\r\nContent-Length: 0\r\n\r\n");
}

TEST(HttpWire, ABreakAnywhereInALongValueLeavesTheHeaderOut) {
  // The check reads eight bytes at a time: a CR, LF or NUL at every offset of a 21-byte value,
  // beside bytes it must keep (tab, other control bytes, bytes over 0x7F, a space).
  const std::string base = "a\tb\x01c\x1f d\x7f\xc3\xa9 0123456789";
  ASSERT_EQ(base.size(), 21u);
  ResponseHead kept;
  HeaderList plain = {{"x-long", base}};
  kept.headers = &plain;
  kept.content_length = 0;
  std::string out;
  append_response_head(out, kept);
  EXPECT_NE(out.find("x-long: " + base + "\r\n"), std::string::npos);
  for (char bad : {'\r', '\n', '\0'}) {
    for (size_t at = 0; at < base.size(); ++at) {
      std::string value = base;
      value[at] = bad;
      HeaderList extra = {{"x-long", value}, {"x-after-the-long-one", value}};
      ResponseHead h;
      h.headers = &extra;
      h.content_length = 0;
      out.clear();
      append_response_head(out, h);
      EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nServer: ferry\r\nContent-Length: 0\r\n\r\n")
          << "byte " << int(bad) << " at " << at;
    }
  }
}

// The head as plain appends write it: the reference for the writer that sizes it once.
std::string reference_head(const ResponseHead& h) {
  auto clean = [](std::string_view v) {
    return v.find_first_of(std::string("\r\n\0", 3)) == v.npos;
  };
  std::string out = "HTTP/1.1 " + std::to_string(h.status) + " " +
                    std::string(reason_phrase(h.status)) + "\r\nServer: ferry\r\n";
  auto header = [&](std::string_view k, std::string_view v) {
    if (!k.empty() && clean(k) && clean(v)) out += std::string(k) + ": " + std::string(v) + "\r\n";
  };
  if (!h.content_type.empty()) header("Content-Type", h.content_type);
  if (h.no_cache) out += "Cache-Control: no-cache\r\n";
  if (!h.request_id.empty()) header("x-request-id", h.request_id);
  if (h.headers != nullptr) {
    for (const auto& [k, v] : *h.headers) header(k, v);
  }
  out += h.content_length ? "Content-Length: " + std::to_string(*h.content_length) + "\r\n"
                          : std::string("Transfer-Encoding: chunked\r\n");
  if (!h.keep_alive) out += "Connection: close\r\n";
  return out + "\r\n";
}

TEST(HttpWire, AHeadOfAnySizeIsWhatAppendsWouldWrite) {
  // Heads from none to many fields, long and refused values, the largest numbers, appended
  // after bytes already in the buffer (a stream's framing reuses its buffer).
  std::mt19937 rng(26);
  for (int round = 0; round < 300; ++round) {
    HeaderList extra;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      std::string value(rng() % 3 == 0 ? rng() % 5000 : rng() % 40, 'v');
      if (!value.empty() && rng() % 10 == 0) value[rng() % value.size()] = '\n';
      extra.emplace_back("x-h" + std::to_string(i), value);
    }
    const std::string content_type(rng() % 200, 't');
    const std::string request_id(rng() % 100, 'r');
    ResponseHead h;  // (views: the strings above hold the bytes)
    h.status = round % 7 == 0 ? 999 : 200;
    h.content_type = content_type;
    h.request_id = request_id;
    h.no_cache = round % 2 == 0;
    h.keep_alive = round % 3 != 0;
    h.headers = &extra;
    if (round % 5 != 0) h.content_length = round % 11 == 0 ? SIZE_MAX : rng();
    std::string out = "prefix";
    append_response_head(out, h);
    ASSERT_EQ(out, "prefix" + reference_head(h)) << "round " << round;
  }
}

TEST(HttpWire, ReasonPhrasesAndChunkPrefixes) {
  EXPECT_EQ(reason_phrase(404), "Not Found");
  EXPECT_EQ(reason_phrase(504), "Gateway Timeout");
  EXPECT_EQ(reason_phrase(299), "Unknown");
  std::string p;
  append_chunk_prefix(p, 1);
  append_chunk_prefix(p, 255);
  append_chunk_prefix(p, 4096);
  EXPECT_EQ(p, "1\r\nff\r\n1000\r\n");
}

TEST(HttpWire, Utf8ValidationRefusesEveryMalformedForm) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain"));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  for (const char* bad :
       {"\xff", "\xfe\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok\x80"}) {
    EXPECT_FALSE(is_valid_utf8(bad)) << bad;
  }
}

TEST(HttpWire, CleanTargetsArePrintableAscii) {
  EXPECT_TRUE(is_clean_target("/v1/models/gpt-4o?x=%ff&y=a+b"));
  EXPECT_FALSE(is_clean_target("/h\xe9lth"));
  EXPECT_FALSE(is_clean_target("/v1/models/\xff"));
  EXPECT_FALSE(is_clean_target("/a b"));
  EXPECT_FALSE(is_clean_target("/a\x7f"));
}

}  // namespace
}  // namespace ferry::gateway
