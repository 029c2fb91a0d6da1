// A TCP socket with a deadline that costs a store to move: the drop-in for beast::tcp_stream
// on ferry's hot paths (client connections in gateway/, upstream connections here).
//
// beast::tcp_stream arms an Asio timer for every read and write (a timer-queue insert, often a
// timerfd_settime, and a later wake-up for the cancelled timer): two per streamed event on
// each side. Here, each event loop has one sweep (DeadlineSweep, an Asio service) that wakes
// every kSweepInterval while some deadline is set and closes the sockets whose deadline has
// passed; their pending operations then complete with beast::error::timeout, as they would on
// a beast::tcp_stream. Setting a deadline links the socket into its loop's list (once);
// moving it is a store. Deadlines fire up to kSweepInterval late.
//
// Use from the socket's own event loop only (one thread per loop; see gateway/server.cpp).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/error.hpp>

#include <chrono>
#include <cstddef>
#include <type_traits>

namespace ferry::adapters {

class DeadlineSweep;

class TimedSocket {
 public:
  using Clock = std::chrono::steady_clock;
  using executor_type = boost::asio::any_io_executor;
  static constexpr auto kSweepInterval = std::chrono::milliseconds(50);

  explicit TimedSocket(const executor_type& executor);
  explicit TimedSocket(boost::asio::ip::tcp::socket socket);
  ~TimedSocket();
  TimedSocket(const TimedSocket&) = delete;
  TimedSocket& operator=(const TimedSocket&) = delete;

  executor_type get_executor() noexcept { return socket_.get_executor(); }
  boost::asio::ip::tcp::socket& socket() noexcept { return socket_; }

  // Once `deadline` has passed while an operation (read, write, connect through this object)
  // is pending, the socket is closed and that operation fails with beast::error::timeout, as
  // on a beast::tcp_stream; a socket with nothing pending does not time out.
  void expires_at(Clock::time_point deadline);
  void expires_after(Clock::duration d) { expires_at(Clock::now() + d); }
  void expires_never();
  bool timed_out() const noexcept { return timed_out_; }

  void close() noexcept;

  // What boost::asio::ssl::stream asks of the layer below it (it reads the executor there).
  using lowest_layer_type = boost::asio::ip::tcp::socket;
  lowest_layer_type& lowest_layer() noexcept { return socket_; }
  const lowest_layer_type& lowest_layer() const noexcept { return socket_; }

  // Writes what the socket takes now, without waiting and without the event loop: the bytes
  // written (0 with ec = would_block when the socket buffer is full). A write that completes
  // here saves the posted completion and the event-loop turn of an asynchronous write.
  template <typename ConstBuffers>
  std::size_t try_write(const ConstBuffers& buffers, boost::system::error_code& ec) {
    if (timed_out_) {
      ec = boost::beast::error::timeout;
      return 0;
    }
    if (!socket_.non_blocking()) {
      socket_.non_blocking(true, ec);
      if (ec) return 0;
    }
    return socket_.write_some(buffers, ec);
  }

  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return boost::asio::async_compose<Token, void(boost::system::error_code, std::size_t)>(
        Op<ReadOp<MutableBuffers>>{this, ReadOp<MutableBuffers>{buffers}}, token, socket_);
  }

  template <typename ConstBuffers, typename Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return boost::asio::async_compose<Token, void(boost::system::error_code, std::size_t)>(
        Op<WriteOp<ConstBuffers>>{this, WriteOp<ConstBuffers>{buffers}}, token, socket_);
  }

  template <typename Endpoints, typename Token>
  auto async_connect(const Endpoints& endpoints, Token&& token) {
    using Endpoint = typename Endpoints::endpoint_type;
    return boost::asio::async_compose<Token, void(boost::system::error_code, Endpoint)>(
        ConnectOp<Endpoints>{this, endpoints}, token, socket_);
  }

 private:
  friend class DeadlineSweep;

  template <typename B>
  struct ReadOp {
    B buffers;
    template <typename H>
    void start(boost::asio::ip::tcp::socket& s, H&& h) {
      B b = buffers;  // the handler that holds `buffers` moves into the operation
      s.async_read_some(b, std::forward<H>(h));
    }
  };
  template <typename B>
  struct WriteOp {
    B buffers;
    template <typename H>
    void start(boost::asio::ip::tcp::socket& s, H&& h) {
      B b = buffers;
      s.async_write_some(b, std::forward<H>(h));
    }
  };
  // Starts the socket operation, then reports its result, with a close by the sweep reported
  // as beast::error::timeout.
  template <typename Start>
  struct Op {
    TimedSocket* self;
    Start start;
    bool started = false;
    template <typename Self>
    void operator()(Self& op, boost::system::error_code ec = {}, std::size_t n = 0) {
      if (!started) {
        started = true;
        if (self->timed_out_) {
          ec = boost::beast::error::timeout;
          // Complete through the executor, never inline from the initiating call.
          return boost::asio::post(self->socket_.get_executor(),
                                   [op = std::move(op), ec]() mutable { op.complete(ec, 0); });
        }
        ++self->pending_;
        return start.start(self->socket_, std::move(op));
      }
      --self->pending_;
      if (ec && self->timed_out_) ec = boost::beast::error::timeout;
      op.complete(ec, n);
    }
  };
  template <typename Endpoints>
  struct ConnectOp {
    TimedSocket* self;
    Endpoints endpoints;
    bool started = false;
    template <typename Self>
    void operator()(Self& op, boost::system::error_code ec = {},
                    typename Endpoints::endpoint_type ep = {}) {
      if (!started) {
        started = true;
        ++self->pending_;
        Endpoints eps = endpoints;
        return boost::asio::async_connect(self->socket_, eps, std::move(op));
      }
      --self->pending_;
      if (ec && self->timed_out_) ec = boost::beast::error::timeout;
      op.complete(ec, ep);
    }
  };

  void expire();  // called by the sweep

  boost::asio::ip::tcp::socket socket_;
  DeadlineSweep* sweep_ = nullptr;  // the loop's sweep, found on first use
  Clock::time_point deadline_ = Clock::time_point::max();
  int pending_ = 0;  // operations started through this object and not yet complete
  bool timed_out_ = false;
  bool linked_ = false;
  TimedSocket* prev_ = nullptr;  // the sweep's intrusive list
  TimedSocket* next_ = nullptr;
};

// The bytes of `buffers` that `stream` took without waiting: a plain TimedSocket tries a
// non-blocking write; other streams (TLS) take nothing this way. ec is set on a failure other
// than a full socket buffer.
template <typename Stream, typename ConstBuffers>
std::size_t write_now(Stream& stream, const ConstBuffers& buffers, boost::system::error_code& ec) {
  ec = {};
  if constexpr (std::is_same_v<Stream, TimedSocket>) {
    std::size_t n = stream.try_write(buffers, ec);
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) ec = {};
    return n;
  } else {
    (void)stream;
    (void)buffers;
    return 0;
  }
}

}  // namespace ferry::adapters
