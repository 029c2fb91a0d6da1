// Reads one request with Beast's request parser and with gateway::RequestParser, fed as
// gateway/http_reader.cpp feeds them, into comparable outcomes: for
// tests/gateway/request_parser_test.cpp and fuzz/fuzz_http_request.cpp.
#pragma once

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gateway/request_parser.h"

namespace ferry::gateway::parser_diff {

namespace http = boost::beast::http;
using BeastParser = http::request_parser<http::string_body>;

struct Outcome {
  // Refused or not; why is not compared: Beast's own reason for a malformed head can depend on
  // the pieces it was fed in (a bare LF: "partial message" a byte at a time, "bad value" at
  // once), and ferry's parser hands Beast what is buffered when it falls back.
  bool refused = false;
  std::string error;
  bool header_done = false;
  std::string method, target;
  unsigned version = 0;
  bool keep_alive = false;
  std::string length;  // content_length(), "-" when none
  std::vector<std::string> fields;
  std::string body;
  size_t left = 0;          // bytes after the request (the next one's)
  bool verb_agrees = true;  // ferry's verb is its method's text's

  bool operator==(const Outcome& o) const {
    return refused == o.refused && header_done == o.header_done && method == o.method &&
           target == o.target && version == o.version && keep_alive == o.keep_alive &&
           length == o.length && fields == o.fields && body == o.body && left == o.left &&
           verb_agrees == o.verb_agrees;
  }
};

inline std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  os << "{error '" << o.error << "' head " << o.header_done << " " << o.method << " " << o.target
     << " v" << o.version << " ka " << o.keep_alive << " len " << o.length << " fields [";
  for (const auto& f : o.fields) os << f << "|";
  return os << "] body " << o.body.size() << " '" << o.body.substr(0, 40) << "' left " << o.left
            << "}";
}

// The fields the server reads, and the framing ones.
const char* const kNames[] = {
    "host",         "content-type", "content-length", "authorization",     "x-api-key",
    "x-ferry-task", "x-ferry-tags", "connection",     "transfer-encoding", "expect",
    "x-request-id", "cookie",       "x-empty",        "X-FERRY-CACHE",     "anthropic-version"};

inline size_t put(BeastParser& p, std::string_view bytes, boost::beast::error_code& ec) {
  return p.put(boost::asio::const_buffer(bytes.data(), bytes.size()), ec);
}
inline size_t put(RequestParser& p, std::string_view bytes, boost::beast::error_code& ec) {
  return p.put(bytes, ec);
}
inline std::string_view body_of(BeastParser& p) {
  return p.get().body();
}
inline std::string_view body_of(RequestParser& p) {
  return p.body();
}

// Reads one request from `input` delivered `piece` bytes at a time, as read_until does.
template <typename Parser>
Outcome read(Parser& parser, std::string_view input, size_t piece, uint32_t header_limit,
             uint64_t body_limit) {
  parser.header_limit(header_limit);
  parser.body_limit(body_limit);
  Outcome o;
  std::string buffer;
  size_t delivered = 0;
  boost::beast::error_code ec;
  for (;;) {
    bool stop = false;
    while (!buffer.empty() && !parser.is_done()) {
      size_t used = put(parser, buffer, ec);
      buffer.erase(0, used);
      if (ec == http::error::need_more) {
        ec = {};
        break;
      }
      if (ec) {
        stop = true;
        break;
      }
      if (used == 0) break;
    }
    if (stop || parser.is_done()) break;
    if (delivered < input.size()) {
      size_t n = std::min(piece, input.size() - delivered);
      buffer.append(input.substr(delivered, n));
      delivered += n;
      continue;
    }
    if (!parser.got_some() && buffer.empty()) {
      o.refused = true;
      o.error = "end of stream";
      return o;
    }
    parser.put_eof(ec);
    if (!ec && !parser.is_done()) ec = http::error::partial_message;
    break;
  }
  o.refused = static_cast<bool>(ec);
  if (ec) o.error = ec.message();
  o.header_done = parser.is_header_done();
  if (!o.header_done || ec) return o;
  // (After an error the connection ends: how much of the input either parser took is moot.)
  o.left = buffer.size() + (input.size() - delivered);
  if constexpr (std::is_same_v<Parser, BeastParser>) {
    const auto& m = parser.get();
    o.method = std::string(m.method_string());
    o.target = std::string(m.target());
    o.version = m.version();
    for (const char* name : kNames) o.fields.push_back(std::string(m[name]));
    o.fields.push_back(std::string(m[http::field::authorization]));
  } else {
    o.method = std::string(parser.method_string());
    o.target = std::string(parser.target());
    o.version = parser.version();
    for (const char* name : kNames) o.fields.push_back(std::string(parser[name]));
    o.fields.push_back(std::string(parser[http::field::authorization]));
    // The verb agrees with the method's text.
    o.verb_agrees = parser.method() == http::string_to_verb(o.method);
  }
  o.keep_alive = parser.keep_alive();
  auto len = parser.content_length();
  o.length = len ? std::to_string(*len) : "-";
  o.body = std::string(body_of(parser));
  return o;
}

}  // namespace ferry::gateway::parser_diff
