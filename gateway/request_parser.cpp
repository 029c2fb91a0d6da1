#include "gateway/request_parser.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/json_text.h"

namespace ferry::gateway {

namespace http = boost::beast::http;
using boost::beast::error_code;
using boost::beast::iequals;

namespace {

// RFC 9110 tchar: the bytes of a method or a field name.
constexpr bool kTokenChar[256] = {
    // clang-format off
    0,0,0,0,0,0,0,0, 0,0,0,0,0,0,0,0, 0,0,0,0,0,0,0,0, 0,0,0,0,0,0,0,0,
    0,1,0,1,1,1,1,1, 0,0,1,1,0,1,1,0, 1,1,1,1,1,1,1,1, 1,1,0,0,0,0,0,0,  // ! # $ % & ' * + - . 0-9
    0,1,1,1,1,1,1,1, 1,1,1,1,1,1,1,1, 1,1,1,1,1,1,1,1, 1,1,1,0,0,0,1,1,  // A-Z ^ _
    1,1,1,1,1,1,1,1, 1,1,1,1,1,1,1,1, 1,1,1,1,1,1,1,1, 1,1,1,0,1,0,1,0,  // ` a-z | ~
    // clang-format on
};

bool token_char(char c) {
  return kTokenChar[static_cast<unsigned char>(c)];
}
// The bytes of a target the scan takes: visible ASCII (Beast also takes bytes over 0x7F).
bool target_char(char c) {
  return c > 0x20 && c < 0x7f;
}
// The bytes of a field value the scan takes: visible ASCII, space and tab (Beast also takes
// obs-text, bytes over 0x7F).
bool value_char(char c) {
  return (c >= 0x20 && c < 0x7f) || c == '\t';
}

// A Content-Length of digits alone (at most 18: no overflow).
bool parse_length(std::string_view v, uint64_t& out) {
  if (v.empty() || v.size() > 18) return false;
  uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  out = n;
  return true;
}

}  // namespace

// Beast's parser for the requests the scan does not take, keeping what it parses in the
// RequestParser's own fields.
class RequestParser::Beast final : public http::basic_parser<true> {
 public:
  explicit Beast(RequestParser& out) : out_(out) {}

 private:
  void on_request_impl(http::verb method, boost::beast::string_view method_str,
                       boost::beast::string_view target, int version, error_code&) override {
    out_.verb_ = method;
    out_.version_ = static_cast<unsigned>(version);
    out_.method_ = out_.keep(method_str);
    out_.target_ = out_.keep(target);
  }
  void on_response_impl(int, boost::beast::string_view, int, error_code&) override {}
  void on_field_impl(http::field, boost::beast::string_view name, boost::beast::string_view value,
                     error_code&) override {
    out_.add_field(name, value);
  }
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<uint64_t>& length, error_code& ec) override {
    // The parser checked the length against the body limit before this.
    if (!length) return;
    if (*length > out_.body_.max_size()) {
      ec = http::error::buffer_overflow;
      return;
    }
    out_.body_.reserve(static_cast<size_t>(*length) + kJsonReadSlack);
  }
  size_t on_body_impl(boost::beast::string_view body, error_code&) override {
    out_.body_.append(body.data(), body.size());
    return body.size();
  }
  void on_chunk_header_impl(uint64_t, boost::beast::string_view, error_code&) override {}
  size_t on_chunk_body_impl(uint64_t, boost::beast::string_view body, error_code&) override {
    out_.body_.append(body.data(), body.size());
    return body.size();
  }
  void on_finish_impl(error_code&) override {}

  RequestParser& out_;
};

RequestParser::RequestParser() {
  fields_.reserve(16);
}

RequestParser::~RequestParser() = default;

void RequestParser::reset() {
  state_ = State::kHead;
  got_some_ = false;
  keep_alive_ = true;
  length_.reset();
  remaining_ = 0;
  verb_ = http::verb::unknown;
  version_ = 11;
  method_ = {};
  target_ = {};
  text_.clear();
  fields_.clear();
  body_.clear();
  beast_.reset();
}

RequestParser::Span RequestParser::keep(std::string_view s) {
  // A head is at most its limit (a uint32_t): the offsets fit.
  Span span{static_cast<uint32_t>(text_.size()), static_cast<uint32_t>(s.size())};
  text_.append(s);
  return span;
}

void RequestParser::add_field(std::string_view name, std::string_view value) {
  Span n = keep(name);
  fields_.push_back(Field{n, keep(value), name_key(name)});
}

uint32_t RequestParser::name_key(std::string_view name) {
  if (name.empty()) return 0;
  auto lower = [](char c) { return static_cast<uint32_t>(static_cast<unsigned char>(c) | 0x20); };
  // `| 0x20` lower-cases a letter (and may join other bytes: the compare below decides), so
  // names iequals calls equal get equal keys.
  return static_cast<uint32_t>(name.size()) << 16 | lower(name.front()) << 8 | lower(name.back());
}

std::string_view RequestParser::operator[](std::string_view name) const {
  const uint32_t key = name_key(name);
  for (const Field& f : fields_) {
    if (f.key == key && iequals(piece(f.name), name)) return piece(f.value);
  }
  return {};
}

std::string_view RequestParser::operator[](http::field name) const {
  return (*this)[std::string_view(http::to_string(name))];
}

bool RequestParser::got_some() const {
  return beast_ ? beast_->got_some() : got_some_;
}
bool RequestParser::is_header_done() const {
  return beast_ ? beast_->is_header_done() : state_ != State::kHead;
}
bool RequestParser::is_done() const {
  return beast_ ? beast_->is_done() : state_ == State::kDone;
}
bool RequestParser::keep_alive() const {
  return beast_ ? beast_->keep_alive() : keep_alive_;
}
boost::optional<uint64_t> RequestParser::content_length() const {
  return beast_ ? beast_->content_length() : length_;
}

RequestParser::Scan RequestParser::scan_head(std::string_view h) {
  // The spans are of `h`, which becomes text_ when the scan takes it; nothing of an earlier,
  // partial scan stays.
  fields_.clear();
  auto span = [h](std::string_view part) {
    return Span{static_cast<uint32_t>(part.data() - h.data()), static_cast<uint32_t>(part.size())};
  };
  // Running out of bytes with all well so far: the rest of the head is still to come.
  const Scan more = Scan::kMore;
  // The request line: method SP target SP HTTP/1.x CRLF.
  size_t i = 0;
  while (i < h.size() && h[i] >= 'A' && h[i] <= 'Z') ++i;
  if (i == h.size()) return more;
  if (i == 0 || h[i] != ' ') return Scan::kOther;
  const std::string_view method = h.substr(0, i);
  const http::verb verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) return Scan::kOther;
  const size_t t = ++i;
  while (i < h.size() && target_char(h[i])) ++i;
  if (i == h.size()) return more;
  if (i == t || h[i] != ' ') return Scan::kOther;
  const std::string_view target = h.substr(t, i - t);
  const std::string_view version = h.substr(i + 1, 10);
  unsigned v = 0;
  if (version == "HTTP/1.1\r\n") {
    v = 11;
  } else if (version == "HTTP/1.0\r\n") {
    v = 10;
  } else {
    const bool prefix = std::string_view("HTTP/1.1\r\n").starts_with(version) ||
                        std::string_view("HTTP/1.0\r\n").starts_with(version);
    return prefix && version.size() < 10 ? more : Scan::kOther;
  }
  i += 11;
  verb_ = verb;
  version_ = v;
  method_ = span(method);
  target_ = span(target);
  // The fields, up to the empty line.
  bool close = false;
  bool keep_alive = false;
  boost::optional<uint64_t> length;
  for (;;) {
    if (i == h.size()) return more;
    if (h[i] == '\r') break;
    const size_t n = i;
    while (i < h.size() && token_char(h[i])) ++i;
    if (i == h.size()) return more;
    if (i == n || h[i] != ':') return Scan::kOther;  // also obs-fold (a leading SP)
    const std::string_view name = h.substr(n, i - n);
    ++i;
    while (i < h.size() && (h[i] == ' ' || h[i] == '\t')) ++i;
    const size_t start = i;
    while (i < h.size() && value_char(h[i])) ++i;
    if (i + 1 >= h.size()) return i < h.size() && h[i] != '\r' ? Scan::kOther : more;
    if (h[i] != '\r' || h[i + 1] != '\n') return Scan::kOther;
    size_t end = i;
    while (end > start && (h[end - 1] == ' ' || h[end - 1] == '\t')) --end;
    const std::string_view value = h.substr(start, end - start);
    i += 2;
    // The fields that frame the message or the connection: only their plain forms here.
    // (Their lengths differ: one comparison of a length rules a field out.)
    switch (name.size()) {
      case 14:  // content-length
        if (iequals(name, "content-length")) {
          uint64_t bytes = 0;
          if (length || !parse_length(value, bytes)) return Scan::kOther;
          length = bytes;
        }
        break;
      case 10:  // connection
      case 16:  // proxy-connection
        if (iequals(name, "connection") || iequals(name, "proxy-connection")) {
          if (iequals(value, "close")) {
            close = true;
          } else if (iequals(value, "keep-alive")) {
            keep_alive = true;
          } else {
            return Scan::kOther;
          }
        }
        break;
      case 17:  // transfer-encoding
      case 7:   // upgrade
        if (iequals(name, "transfer-encoding") || iequals(name, "upgrade")) return Scan::kOther;
        break;
      default:
        break;
    }
    fields_.push_back(Field{span(name), span(value), name_key(name)});
  }
  // At the empty line: the head ends here, with nothing after it in `h`.
  if (i + 1 == h.size()) return more;
  if (h[i + 1] != '\n' || i + 2 != h.size()) return Scan::kOther;
  if (length && *length > body_limit_) return Scan::kOther;  // Beast refuses it (body_limit)
  keep_alive_ = v == 11 ? !close : keep_alive;
  length_ = length;
  text_.assign(h);
  return Scan::kOk;
}

size_t RequestParser::to_beast(std::string_view bytes, error_code& ec) {
  if (!beast_) {
    // From the first byte: nothing was taken yet, and nothing the scan kept stays.
    text_.clear();
    fields_.clear();
    body_.clear();
    beast_ = std::make_unique<Beast>(*this);
    beast_->header_limit(header_limit_);
    beast_->body_limit(body_limit_);
  }
  return beast_->put(boost::asio::const_buffer(bytes.data(), bytes.size()), ec);
}

size_t RequestParser::put(std::string_view bytes, error_code& ec) {
  ec = {};
  if (beast_) return to_beast(bytes, ec);
  if (!bytes.empty()) got_some_ = true;
  size_t used = 0;
  if (state_ == State::kHead) {
    const size_t look = std::min<size_t>(bytes.size(), header_limit_);
    const size_t eoh = bytes.substr(0, look).find("\r\n\r\n");
    if (eoh == std::string_view::npos) {
      // Beast reads a head line by line as it comes and refuses a bad one at once: so does
      // this, by scanning what came so far.
      if (bytes.size() >= header_limit_ || scan_head(bytes) != Scan::kMore) {
        return to_beast(bytes, ec);
      }
      ec = http::error::need_more;
      return 0;
    }
    const size_t head = eoh + 4;
    if (head > header_limit_ || scan_head(bytes.substr(0, head)) != Scan::kOk) {
      return to_beast(bytes, ec);
    }
    used = head;
    remaining_ = length_.value_or(0);
    if (remaining_ == 0) {
      state_ = State::kDone;
      return used;
    }
    body_.reserve(static_cast<size_t>(remaining_) + kJsonReadSlack);  // parsed in place
    state_ = State::kBody;
  }
  if (state_ == State::kBody) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, bytes.size() - used));
    body_.append(bytes.data() + used, n);
    used += n;
    remaining_ -= n;
    if (remaining_ == 0) {
      state_ = State::kDone;
    } else {
      ec = http::error::need_more;
    }
  }
  return used;
}

void RequestParser::put_eof(error_code& ec) {
  ec = {};
  if (beast_) {
    beast_->put_eof(ec);
    return;
  }
  if (state_ != State::kDone) ec = http::error::partial_message;
}

}  // namespace ferry::gateway
