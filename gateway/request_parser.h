// The request parser of a client connection. A request of the common shape - a request line of
// plain ASCII, HTTP/1.0 or 1.1, fields of printable ASCII, a body by Content-Length or none - is
// read by a strict scan of its own; anything else (chunked bodies, obs-fold, bytes over 0x7E,
// a duplicated Content-Length, Transfer-Encoding, Upgrade, a head over the limit) goes, from its
// first byte, to Beast's HTTP/1.1 parser, which accepts or refuses it as it always did. The scan
// takes nothing Beast refuses, and reads what it takes as Beast does (tests/gateway/
// request_parser_test.cpp and fuzz/fuzz_http_request.cpp hold the two side by side). Either
// way the request lands in one string - the method, the target, each field's name and value -
// and a field is found by a scan. (Beast's parser and message cost ~6k instructions for a
// request of five fields: a per-byte state machine, and every field allocated and indexed
// twice, for a server that reads a dozen fields once.) One request per parser, as Beast's.
// Thread-safety: none; a connection's own.
#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/optional.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::gateway {

class RequestParser {
 public:
  RequestParser();
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Ready for the connection's next request, keeping the capacity of its head and field
  // buffers (a parser per connection, not per request: two allocations fewer a request).
  void reset();

  void header_limit(uint32_t bytes) { header_limit_ = bytes; }
  void body_limit(uint64_t bytes) { body_limit_ = bytes; }

  // Takes what it can of `bytes` (the connection's buffered input, from the start of this
  // request); returns how many bytes it used. `ec`: http::error::need_more when it needs more
  // input, or why the request is refused (Beast's error codes).
  size_t put(std::string_view bytes, boost::beast::error_code& ec);
  // The input ended: an error unless the request is complete.
  void put_eof(boost::beast::error_code& ec);

  bool got_some() const;
  bool is_header_done() const;
  bool is_done() const;
  bool keep_alive() const;
  boost::optional<uint64_t> content_length() const;
  // True once the request went to Beast's parser (for the tests).
  bool took_slow_path() const { return beast_ != nullptr; }

  boost::beast::http::verb method() const { return verb_; }
  std::string_view method_string() const { return piece(method_); }
  std::string_view target() const { return piece(target_); }
  unsigned version() const { return version_; }
  // The value of the first field of that name (in any case), "" when there is none.
  std::string_view operator[](std::string_view name) const;
  std::string_view operator[](boost::beast::http::field name) const;
  std::string& body() { return body_; }

 private:
  class Beast;  // Beast's parser, writing into this one's fields
  struct Span {
    uint32_t at = 0;
    uint32_t size = 0;
  };
  struct Field {
    Span name;
    Span value;
    uint32_t key = 0;  // name_key(name): most lookups pass over a field on this compare alone
  };
  enum class State { kHead, kBody, kDone };

  std::string_view piece(Span s) const { return std::string_view(text_).substr(s.at, s.size); }
  // A name's length and first and last letters, lower-cased: equal for names equal in any case.
  static uint32_t name_key(std::string_view name);
  Span keep(std::string_view s);
  void add_field(std::string_view name, std::string_view value);
  // Reads a head: kOk when `head` is a whole one (ending with the empty line) of the common
  // shape, kMore when it is the start of one, kOther when it is not (what it kept is then
  // cleared by the fall to Beast).
  enum class Scan { kOk, kMore, kOther };
  Scan scan_head(std::string_view head);
  size_t to_beast(std::string_view bytes, boost::beast::error_code& ec);

  // reset() gives every member below but the two limits (which the reader sets for each
  // request) its initial value again: a member added here is added there too
  // (RequestParser.AResetParserReadsTheNextRequestAsAFreshOneDoes holds the two side by side).
  uint32_t header_limit_ = 8192;
  uint64_t body_limit_ = 1024 * 1024;
  State state_ = State::kHead;
  bool got_some_ = false;
  bool keep_alive_ = true;
  boost::optional<uint64_t> length_;
  uint64_t remaining_ = 0;  // body bytes still to come

  boost::beast::http::verb verb_ = boost::beast::http::verb::unknown;
  unsigned version_ = 11;
  Span method_;
  Span target_;
  // The head as read (the scan's), or the method, target, names and values (Beast's).
  std::string text_;
  std::vector<Field> fields_;
  std::string body_;
  std::unique_ptr<Beast> beast_;
};

}  // namespace ferry::gateway
