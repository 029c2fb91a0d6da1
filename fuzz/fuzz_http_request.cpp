// Fuzzes the HTTP request reader as gateway/http_reader.cpp runs it: gateway::RequestParser with
// the default config's header and body limits, fed the bytes in the pieces a socket could deliver
// (the first input byte picks the piece size), against Beast's request parser fed the same (any
// difference in the verdict aborts), then what the server reads from a parsed request: the API
// key, the tag header and a chat body. (The admin query-string parsers live
// in gateway/admin.cpp with the handlers, which need the whole gateway: not linked here.) Beast
// is included here only because this file is built in the fuzz build alone.
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

#include "common/sha256.h"
#include "config/config.h"
#include "gateway/auth.h"
#include "gateway/openai_request.h"
#include "gateway/request_parser.h"
#include "tests/gateway/request_parser_diff.h"

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
void use_head(const gateway::RequestParser& req) {
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

  // ferry's parser must come to Beast's verdict on every input (tests/gateway/
  // request_parser_diff.h says what is compared).
  const auto header_limit = static_cast<uint32_t>(lim.max_header_bytes);
  const auto body_limit = static_cast<uint64_t>(lim.max_body_bytes);
  gateway::parser_diff::BeastParser beast;
  gateway::RequestParser parser;
  const auto want = gateway::parser_diff::read(beast, input, piece, header_limit, body_limit);
  const auto got = gateway::parser_diff::read(parser, input, piece, header_limit, body_limit);
  if (!(got == want)) {
    std::cerr << "ferry: " << got << "\nBeast: " << want << "\n";
    std::abort();
  }
  if (!got.refused && parser.is_header_done()) {
    use_head(parser);
    if (parser.is_done() && parser.target() == "/v1/chat/completions") {
      (void)gateway::parse_request(adapters::Endpoint::kChatCompletions, std::move(parser.body()));
    }
  }
  return 0;
}
