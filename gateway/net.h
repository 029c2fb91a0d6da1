// The one header of the gateway that brings in Boost.Asio and Boost.Beast: the aliases, the
// two stream types a client connection can have, and Notifier. Include it only from the
// translation units that do socket work (server, connection, http_reader, proxy, worker_jobs):
// each one costs ~20 s of compile. Notifier is thread-safe; the rest are declarations.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <chrono>
#include <memory>

#include "adapters/timed_socket.h"

namespace ferry::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

inline constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);

// A client connection: plain TCP, or TLS over it. Every template of the connection code is
// instantiated for these two (explicitly, in its .cpp).
using PlainStream = adapters::TimedSocket;
using TlsStream = beast::ssl_stream<adapters::TimedSocket>;

// Wakes one coroutine, on its own executor, from any thread. Shared so that a late notify()
// from a worker after the coroutine finished is harmless.
class Notifier : public std::enable_shared_from_this<Notifier> {
 public:
  explicit Notifier(const asio::any_io_executor& ex) : timer_(ex, Clock::time_point::max()) {}
  void notify() {
    asio::post(timer_.get_executor(), [self = shared_from_this()] {
      ++self->signals_;
      self->timer_.cancel();
    });
  }
  // Returns once notify() has been called (since the last wait) and its post has run.
  asio::awaitable<void> wait() {
    while (signals_ == 0) co_await timer_.async_wait(kAwait);
    signals_ = 0;
  }

 private:
  asio::steady_timer timer_;
  int signals_ = 0;  // touched only on the timer's executor
};

}  // namespace ferry::gateway
