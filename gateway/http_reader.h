// Reading HTTP requests from a client connection, bounded: the header limit and timeout, the
// body limit (a Content-Length over it is refused before the body is read) and timeout,
// `Expect: 100-continue`, and EarlyRead, the read that watches a plain connection for a
// hang-up while a backend works and carries pipelined bytes with back-pressure.
// Thread-safety: everything here is used from the connection's own loop only.
#pragma once

#include <array>
#include <cstring>
#include <memory>
#include <optional>

#include "adapters/backend.h"
#include "config/config.h"
#include "gateway/endpoints.h"
#include "gateway/net.h"
#include "gateway/request_parser.h"
#include "gateway/request_record.h"

namespace ferry::gateway {

// On a plain connection, the read of the client's next bytes starts as soon as a request goes
// to the backend. While the backend works it notices a hang-up (end of stream or reset: the
// upstream request is cancelled); afterwards it is the next request's read. So the connection
// never cancels a watch (a posted completion, an extra event-loop turn) and never reads twice.
// It costs no system call to start: the request read left the socket drained, so the reactor
// queues it without trying. Pipelined bytes it reads end the hang-up watch (we cannot tell
// then); they are handed to the request parser like any other. The bytes live here, not in the
// connection's buffer, so a read still pending when the connection ends writes nothing freed.
// It starts only while the connection's buffer has room for all it can bring (back-pressure on
// a client that pipelines), and every later read of the connection waits for it first, so bytes
// are never taken out of order. An end of stream that comes while requests are still buffered
// is a half-close: the client has sent everything and waits for its answers, which it gets.
struct EarlyRead {
  std::array<char, 4096> bytes{};
  bool pending = false;  // the read is under way
  bool fired = false;    // it completed; its result (ec, n, bytes) is not consumed yet
  beast::error_code ec;
  size_t n = 0;
  bool behind = false;  // bytes of later requests were buffered when the read started
  adapters::CancelSignal* cancel = nullptr;  // set while a backend call runs

  // The idle connection's coroutine, resumed when the read completes. (Type-erased by hand:
  // Boost 1.81's any_completion_handler recurses when moved from an lvalue of itself.)
  struct Waiter {
    virtual ~Waiter() = default;
    virtual void resume(beast::error_code ec, size_t n) = 0;
  };
  template <typename Handler>
  struct WaiterFor final : Waiter {
    explicit WaiterFor(Handler h) : handler(std::move(h)) {}
    void resume(beast::error_code ec, size_t n) override { std::move(handler)(ec, n); }
    Handler handler;
  };
  std::unique_ptr<Waiter> waiter;

  bool ended() const { return fired && (ec || n == 0); }
  bool half_closed() const { return ended() && ec == asio::error::eof && behind; }
  bool hung_up() const { return ended() && !half_closed(); }

  // Moves the completed read's bytes into `buffer` (they fit: the read started only with room
  // for them). False when the read ended the input instead; it then stays fired, so no read
  // starts again.
  bool take(beast::flat_buffer& into) {
    if (!fired || ended()) return false;
    auto room = into.prepare(n);
    std::memcpy(room.data(), bytes.data(), n);
    into.commit(n);
    fired = false;
    return true;
  }

  // Starts the read on `stream` while a backend call runs, when none is under way and the
  // connection's buffer has room for what it can bring.
  void start(PlainStream& stream, const std::shared_ptr<EarlyRead>& self,
             const beast::flat_buffer& buffer);
};

// The early read's completion handler.
class EarlyReadDone {
 public:
  explicit EarlyReadDone(std::shared_ptr<EarlyRead> e) : e_(std::move(e)) {}
  EarlyReadDone(EarlyReadDone&& other) noexcept : e_(std::move(other.e_)) {}
  EarlyReadDone& operator=(EarlyReadDone&&) = delete;
  // Destroyed without being called: the event loop is being torn down with the read pending.
  // The waiting coroutine's frame is owned by `waiter`, and it owns the EarlyRead in turn:
  // drop it here, or neither would ever be freed.
  ~EarlyReadDone() {
    if (e_) e_->waiter.reset();
  }
  void operator()(const beast::error_code& ec, size_t n);

 private:
  std::shared_ptr<EarlyRead> e_;
};

// Waits, under the deadline the caller set, for the early read to complete.
template <typename Stream>
asio::awaitable<void> wait_early(Stream& stream, EarlyRead& e);

// What reading a request's head or body came to when it did not succeed: the connection
// writes `reply` (when set, with `connection: close`), logs the request, and ends, after
// reading and discarding the client's input for a moment when `linger` (so the client sees
// the answer instead of a reset). The record's status and error are set.
struct ReadFailure {
  std::optional<Reply> reply;
  bool linger = false;
};

// What take_buffered's parse met: the error read_head, or read_body, would have met.
struct Fed {
  beast::error_code head;
  beast::error_code body;
};

// The common case without a coroutine: gives `parser` (limits set here) the bytes already
// buffered. True when they held the whole request (head and body) and it asks for no
// `100-continue`: read_head and read_body are then not needed. Otherwise the two go on from
// where this stopped, each given its part of `fed`.
bool take_buffered(beast::flat_buffer& buffer, RequestParser& parser, const config::Limits& limits,
                   Fed& fed);

// Reads the head of the next request into `parser` (limits set here) under the header
// timeout. `early`: the connection's early read (plain connections), read before the socket.
// `fed`: take_buffered's head error, answered as if read here.
template <typename Stream>
asio::awaitable<std::optional<ReadFailure>> read_head(Stream& stream, beast::flat_buffer& buffer,
                                                      RequestParser& parser, EarlyRead* early,
                                                      const config::Limits& limits,
                                                      RequestRecord& record,
                                                      beast::error_code fed = {});

// Reads the rest of the request whose head `parser` holds, under the body timeout: refuses a
// Content-Length over the body limit unread, answers `Expect: 100-continue`. `fed`:
// take_buffered's body error, answered as if read here.
template <typename Stream>
asio::awaitable<std::optional<ReadFailure>> read_body(Stream& stream, beast::flat_buffer& buffer,
                                                      RequestParser& parser, EarlyRead* early,
                                                      const config::Limits& limits,
                                                      RequestRecord& record,
                                                      beast::error_code fed = {});

// The 413 answer to a body over the limit.
ReadFailure body_too_large(const config::Limits& limits, RequestRecord& record);

}  // namespace ferry::gateway
