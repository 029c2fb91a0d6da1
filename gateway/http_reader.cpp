#include "gateway/http_reader.h"

#include <algorithm>
#include <string>

#include "gateway/errors.h"

namespace ferry::gateway {

void EarlyRead::start(PlainStream& stream, const std::shared_ptr<EarlyRead>& self,
                      const beast::flat_buffer& buffer) {
  bool room = buffer.size() + bytes.size() <= buffer.max_size();
  if (pending || fired || !room) return;
  pending = true;
  behind = buffer.size() != 0;
  stream.async_read_some_untimed(asio::buffer(bytes), EarlyReadDone(self));
}

void EarlyReadDone::operator()(const beast::error_code& ec, size_t n) {
  std::shared_ptr<EarlyRead> e = std::move(e_);
  e->pending = false;
  e->fired = true;
  e->ec = ec;
  e->n = n;
  if (e->waiter) {
    std::unique_ptr<EarlyRead::Waiter> waiter = std::move(e->waiter);
    waiter->resume(ec, n);
  } else if (e->cancel != nullptr && e->hung_up()) {
    e->cancel->cancel();
  }
}

template <typename Stream>
asio::awaitable<void> wait_early(Stream& stream, EarlyRead& e) {
  if (!e.pending) co_return;
  auto& timed = beast::get_lowest_layer(stream);
  timed.count_as_pending(true);  // the deadline applies to the early read
  EarlyRead* ep = &e;
  auto wait = [ep](auto handler) {
    ep->waiter = std::make_unique<EarlyRead::WaiterFor<decltype(handler)>>(std::move(handler));
  };
  co_await asio::async_initiate<decltype(kAwait), void(beast::error_code, size_t)>(wait, kAwait);
  timed.count_as_pending(false);
}

namespace {

// Gives `parser` the buffered bytes and drops those it used; how many it used.
size_t feed(beast::flat_buffer& buffer, RequestParser& parser, beast::error_code& ec) {
  auto data = buffer.data();
  const size_t used =
      parser.put(std::string_view(static_cast<const char*>(data.data()), data.size()), ec);
  buffer.consume(used);
  return used;
}

// Feeds the buffered bytes to `parser` until `enough(parser)`, reading from the socket only
// when the parser needs more; errors as Beast's reads report them. (Beast's composed reads
// take an event-loop turn per call even when the whole request is already buffered.)
// `early`: the connection's early read (plain connections), which comes before any other read.
template <typename Stream, typename Enough>
asio::awaitable<beast::error_code> read_until(Stream& stream, beast::flat_buffer& buffer,
                                              RequestParser& parser, const Enough& enough,
                                              EarlyRead* early) {
  for (;;) {
    if (buffer.size() != 0) {
      beast::error_code ec;
      const size_t used = feed(buffer, parser, ec);
      if (ec && ec != http::error::need_more) co_return ec;
      if (enough(parser)) co_return beast::error_code{};
      if (!ec && used != 0) continue;
    } else if (enough(parser)) {
      co_return beast::error_code{};
    }
    beast::error_code rec;
    if (early != nullptr && (early->pending || early->fired)) {
      co_await wait_early(stream, *early);
      if (early->take(buffer)) continue;
      rec = early->ec ? early->ec : beast::error_code(asio::error::eof);
    } else {
      size_t room = std::min<size_t>(64 * 1024, buffer.max_size() - buffer.size());
      if (room == 0) co_return beast::error_code(http::error::header_limit);
      auto [ec, n] = co_await stream.async_read_some(buffer.prepare(room), kAwait);
      buffer.commit(n);
      rec = ec;
    }
    if (rec == asio::error::eof || rec == ssl::error::stream_truncated) {
      // Nothing more will come: what the parser has, and has not taken, is all there is.
      if (!parser.got_some() && buffer.size() == 0) {
        co_return beast::error_code(http::error::end_of_stream);
      }
      beast::error_code ec;
      parser.put_eof(ec);
      if (ec) co_return ec;
      if (!enough(parser)) co_return beast::error_code(http::error::partial_message);
      continue;
    }
    if (rec) co_return rec;
  }
}

// A 4xx answer, noted in the record.
ReadFailure refuse(RequestRecord& rec, int status, const Error& error, std::string log_error,
                   bool linger) {
  // In the shape of the endpoint's front-end (Anthropic's on /v1/messages) when the target is
  // known.
  Reply r = reply_error(rec, error, frontend_for_target(rec.path));
  r.headers.clear();
  r.status = status;
  rec.status = status;
  rec.error = std::move(log_error);
  return ReadFailure{std::move(r), linger};
}

// Errors that end a connection without an answer: the client went away or stayed silent.
bool quiet_end(const beast::error_code& ec) {
  return ec == beast::error::timeout || ec == http::error::end_of_stream ||
         ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::operation_aborted;
}

}  // namespace

ReadFailure body_too_large(const config::Limits& limits, RequestRecord& rec) {
  Error e = Error::make(
      ErrorCode::kPayloadTooLarge,
      "the request body exceeds the limit of " + std::to_string(limits.max_body_bytes) + " bytes",
      "", "request_too_large");
  return refuse(rec, 413, e, e.message, /*linger=*/true);
}

namespace {

void set_limits(RequestParser& parser, const config::Limits& lim) {
  parser.header_limit(static_cast<uint32_t>(lim.max_header_bytes));
  parser.body_limit(static_cast<uint64_t>(lim.max_body_bytes));
}

}  // namespace

bool take_buffered(beast::flat_buffer& buffer, RequestParser& parser, const config::Limits& lim,
                   Fed& fed) {
  set_limits(parser, lim);
  fed = Fed{};
  while (buffer.size() != 0 && !parser.is_done()) {
    // An error is the head's when the head was not whole before the call that met it: the
    // reading coroutines would have met it in read_head, else in read_body.
    const bool in_head = !parser.is_header_done();
    beast::error_code ec;
    const size_t used = feed(buffer, parser, ec);
    if (ec == http::error::need_more) return false;
    if (ec) {
      (in_head ? fed.head : fed.body) = ec;
      return false;
    }
    if (used == 0) return false;
  }
  return parser.is_done() && parser[http::field::expect].empty();
}

template <typename Stream>
asio::awaitable<std::optional<ReadFailure>> read_head(Stream& stream, beast::flat_buffer& buffer,
                                                      RequestParser& parser, EarlyRead* early,
                                                      const config::Limits& lim, RequestRecord& rec,
                                                      beast::error_code fed) {
  set_limits(parser, lim);
  beast::error_code hec = fed;
  if (!hec && parser.is_header_done()) co_return std::nullopt;  // take_buffered had it
  if (!hec) {
    beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(lim.header_timeout_ms));
    auto header_done = [](const RequestParser& p) { return p.is_header_done(); };
    hec = co_await read_until(stream, buffer, parser, header_done, early);
  }
  if (!hec) co_return std::nullopt;
  if (hec == http::error::body_limit) {
    // The Content-Length alone is over the limit: refuse without reading the body.
    rec.method = std::string(parser.method_string());
    rec.path = std::string(parser.target());
    co_return body_too_large(lim, rec);
  }
  if (hec == http::error::header_limit) {
    Error e =
        Error::make(ErrorCode::kInvalidRequest,
                    "request headers exceed " + std::to_string(lim.max_header_bytes) + " bytes", "",
                    "headers_too_large");
    co_return refuse(rec, 431, e, "request headers too large", /*linger=*/true);
  }
  if (quiet_end(hec)) co_return ReadFailure{};
  Error e = Error::make(ErrorCode::kInvalidRequest, "malformed HTTP request: " + hec.message(), "",
                        "bad_request");
  co_return refuse(rec, 400, e, e.message, /*linger=*/true);
}

template <typename Stream>
asio::awaitable<std::optional<ReadFailure>> read_body(Stream& stream, beast::flat_buffer& buffer,
                                                      RequestParser& parser, EarlyRead* early,
                                                      const config::Limits& lim, RequestRecord& rec,
                                                      beast::error_code fed) {
  if (rec.path.empty()) rec.path = std::string(parser.target());
  auto cl = parser.content_length();
  if (cl && *cl > static_cast<uint64_t>(lim.max_body_bytes)) co_return body_too_large(lim, rec);
  if (beast::iequals(parser[http::field::expect], "100-continue")) {
    http::response<http::empty_body> cont{http::status::continue_, 11};
    beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(lim.write_timeout_ms));
    auto [cec, cn] = co_await http::async_write(stream, cont, kAwait);
    if (cec) co_return ReadFailure{};
  }
  if (parser.is_done()) co_return std::nullopt;
  beast::error_code bec = fed;
  if (!bec) {
    beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(lim.body_timeout_ms));
    auto message_done = [](const RequestParser& p) { return p.is_done(); };
    bec = co_await read_until(stream, buffer, parser, message_done, early);
  }
  if (!bec) co_return std::nullopt;
  if (bec == http::error::body_limit) co_return body_too_large(lim, rec);
  if (bec != beast::error::timeout) co_return ReadFailure{};
  Error e = Error::make(
      ErrorCode::kInvalidRequest,
      "the request body was not received within " + std::to_string(lim.body_timeout_ms) + " ms", "",
      "request_timeout");
  co_return refuse(rec, 408, e, "request body not received in time", /*linger=*/false);
}

// The two streams a connection can have.
template asio::awaitable<void> wait_early(PlainStream&, EarlyRead&);
template asio::awaitable<void> wait_early(TlsStream&, EarlyRead&);
template asio::awaitable<std::optional<ReadFailure>> read_head(PlainStream&, beast::flat_buffer&,
                                                               RequestParser&, EarlyRead*,
                                                               const config::Limits&,
                                                               RequestRecord&, beast::error_code);
template asio::awaitable<std::optional<ReadFailure>> read_head(TlsStream&, beast::flat_buffer&,
                                                               RequestParser&, EarlyRead*,
                                                               const config::Limits&,
                                                               RequestRecord&, beast::error_code);
template asio::awaitable<std::optional<ReadFailure>> read_body(PlainStream&, beast::flat_buffer&,
                                                               RequestParser&, EarlyRead*,
                                                               const config::Limits&,
                                                               RequestRecord&, beast::error_code);
template asio::awaitable<std::optional<ReadFailure>> read_body(TlsStream&, beast::flat_buffer&,
                                                               RequestParser&, EarlyRead*,
                                                               const config::Limits&,
                                                               RequestRecord&, beast::error_code);

}  // namespace ferry::gateway
