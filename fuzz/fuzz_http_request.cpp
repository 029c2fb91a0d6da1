// Fuzzes the HTTP request reader as gateway/http_reader.cpp runs it: Beast's request parser with
// the default config's header and body limits, fed the bytes in the pieces a socket could deliver
// (the first input byte picks the piece size), then what the server reads from a parsed
// request: the API key, the tag header and a chat body. (The admin query-string parsers live
// in gateway/admin.cpp with the handlers, which need the whole gateway: not linked here.) Beast
// is included here only because this file is built in the fuzz build alone.
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/sha256.h"
#include "config/config.h"
#include "gateway/auth.h"
#include "gateway/openai_request.h"

namespace {

namespace http = boost::beast::http;
using namespace ferry;

const config::Config& default_config() {
  static const config::Config cfg =
      *config::load_config_text(config::default_config_text(), "<embedded default>");
  return cfg;
}

const gateway::Authenticator& authenticator() {
  static const gateway::Authenticator auth = [] {
    config::AuthConfig a;
    config::ApiKey key;
    key.id = "fuzz";
    key.sha256 = sha256_hex("sk-fuzz");
    key.role = config::Role::kAdmin;
    a.keys.push_back(key);
    return gateway::Authenticator(a);
  }();
  return auth;
}

// What the server reads from a complete request head (see Server::Impl::route).
void use_head(const http::request<http::string_body>& req) {
  (void)authenticator().authenticate(req[http::field::authorization]);
  (void)gateway::split_tags(req["x-ferry-tags"]);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)default_config();
  (void)authenticator();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = static_cast<size_t>(data[0]) + 1;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const config::Limits& lim = default_config().limits;

  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<uint32_t>(lim.max_header_bytes));
  parser.body_limit(static_cast<uint64_t>(lim.max_body_bytes));
  std::string buffer;  // bytes read and not yet taken by the parser, as in read_until
  size_t read = 0;
  boost::beast::error_code ec;
  while (!parser.is_done()) {
    if (read < input.size()) {
      size_t n = std::min(piece, input.size() - read);
      buffer.append(input.substr(read, n));
      read += n;
    } else {
      if (!parser.got_some() && buffer.empty()) return 0;
      parser.put_eof(ec);
      break;
    }
    for (;;) {
      size_t used = parser.put(boost::asio::buffer(buffer), ec);
      buffer.erase(0, used);
      if (ec == http::error::need_more) {
        ec = {};
        break;
      }
      if (ec || used == 0 || parser.is_done()) break;
    }
    if (ec) break;
  }
  if (!ec && parser.is_header_done()) {
    use_head(parser.get());
    if (parser.is_done()) {
      auto req = parser.release();
      if (req.target() == "/v1/chat/completions") {
        (void)gateway::parse_request(adapters::Endpoint::kChatCompletions, std::move(req.body()));
      }
    }
  }
  return 0;
}
