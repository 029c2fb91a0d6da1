// A TCP socket with a deadline that costs a store to move: the drop-in for beast::tcp_stream
// on ferry's hot paths (client connections in gateway/, upstream connections here).
//
// beast::tcp_stream arms an Asio timer for every read and write (a timer-queue insert, often a
// timerfd_settime, and a later wake-up for the cancelled timer): two per streamed event on
// each side. Here, each event loop has one sweep (DeadlineSweep, an Asio service) with one
// timer. It wakes at the earliest deadline of a socket with an operation pending, but at least
// every kMaxSweepSleep while any is, and closes the sockets whose deadline has passed; their
// pending operations then complete with beast::error::timeout, as they would on a
// beast::tcp_stream. Setting a deadline links the socket into its loop's list (once); moving
// it is a store. Starting an operation compares its deadline with the sweep's next wake-up and
// brings the wake-up forward only when the deadline is earlier (in practice: deadlines under
// kMaxSweepSleep). A loop with nothing pending does not wake at all.
//
// Use from the socket's own event loop only (one thread per loop; see gateway/server.cpp).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detail/bind_handler.hpp>
#include <boost/asio/detail/fenced_block.hpp>
#include <boost/asio/detail/handler_alloc_helpers.hpp>
#include <boost/asio/detail/handler_cont_helpers.hpp>
#include <boost/asio/detail/handler_work.hpp>
#include <boost/asio/detail/reactor.hpp>
#include <boost/asio/detail/reactor_op.hpp>
#include <boost/asio/detail/socket_ops.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/error.hpp>

#include <chrono>
#include <cstddef>
#include <type_traits>

namespace ferry::adapters {

class DeadlineSweep;

#if defined(BOOST_ASIO_HAS_EPOLL) && !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT)
#define FERRY_DRAINING_READS 1

namespace drain {

namespace ad = boost::asio::detail;

// A receive that tells the reactor when it emptied the socket.
//
// Asio's epoll reactor tries every read at once (a "speculative" recv) before it waits for
// readiness, unless the last operation reported the socket exhausted; its receive reports that
// only at end of stream. On a request/response connection most reads are started when nothing
// can be there yet (the answer to a request just sent, the client's next request), so each
// costs a recv that fails with EAGAIN. A stream socket that returned fewer bytes than asked had
// no more data queued at that moment, and data arriving later raises a new edge-triggered
// event, which makes the reactor try again. This receive reports such short reads as
// exhausted (and sets *drained), so that the next read can be queued without a system call.
//
// One thing a short read does not rule out: an end of stream (or reset) that arrived with the
// data. It raises no new event. So only a read that expects the peer to be silent (the next
// request, the answer to a request just sent) may be queued blindly on a drained socket; one
// that continues a message tries a recv first (TimedSocket does this), as Asio would have.
// (Re-arming the socket with epoll_ctl instead would cost that call and, for a socket also
// registered for writing, a spurious "writable" wake-up.)
template <typename Handler, typename IoExecutor>
class RecvOp : public ad::reactor_op {
 public:
  BOOST_ASIO_DEFINE_HANDLER_PTR(RecvOp);

  RecvOp(int fd, void* data, std::size_t size, bool* drained, Handler& handler,
         const IoExecutor& io_ex)
      : reactor_op(boost::system::error_code(), &RecvOp::do_perform, &RecvOp::do_complete),
        fd_(fd),
        data_(data),
        size_(size),
        drained_(drained),
        handler_(std::move(handler)),
        work_(handler_, io_ex) {}

  static status do_perform(reactor_op* base) {
    auto* o = static_cast<RecvOp*>(base);
    if (!ad::socket_ops::non_blocking_recv1(o->fd_, o->data_, o->size_, 0, /*is_stream=*/true,
                                            o->ec_, o->bytes_transferred_)) {
      return not_done;  // EAGAIN: wait for readiness
    }
    // (The socket is open while the reactor performs its operations, and *drained lives as
    // long as the socket.)
    *o->drained_ = !o->ec_ && o->bytes_transferred_ < o->size_;
    return *o->drained_ ? done_and_exhausted : done;
  }

  static void do_complete(void* owner, ad::operation* base, const boost::system::error_code&,
                          std::size_t) {
    auto* o = static_cast<RecvOp*>(base);
    ptr p = {std::addressof(o->handler_), o, o};
    ad::handler_work<Handler, IoExecutor> w(std::move(o->work_));
    // The handler may own the operation's memory: move it out before freeing.
    ad::binder2<Handler, boost::system::error_code, std::size_t> handler(o->handler_, o->ec_,
                                                                         o->bytes_transferred_);
    p.h = std::addressof(handler.handler_);
    p.reset();
    if (owner != nullptr) {
      ad::fenced_block b(ad::fenced_block::half);
      w.complete(handler, handler.handler_);
    }
  }

 private:
  int fd_;
  void* data_;
  std::size_t size_;
  bool* drained_;
  Handler handler_;
  ad::handler_work<Handler, IoExecutor> work_;
};

// Per-operation cancellation, as Asio's own socket operations offer it.
struct Cancel {
  ad::reactor* reactor;
  ad::reactor::per_descriptor_data* data;
  int fd;
  void operator()(boost::asio::cancellation_type_t type) {
    using boost::asio::cancellation_type;
    if (!!(type &
           (cancellation_type::terminal | cancellation_type::partial | cancellation_type::total))) {
      reactor->cancel_ops_by_key(fd, *data, ad::reactor::read_op, this);
    }
  }
};

// tcp::socket with its reactor state reachable (Asio keeps it protected).
class Socket : public boost::asio::ip::tcp::socket {
 public:
  using boost::asio::ip::tcp::socket::basic_stream_socket;
  explicit Socket(boost::asio::ip::tcp::socket&& s) : boost::asio::ip::tcp::socket(std::move(s)) {}
  auto& implementation() noexcept { return impl_.get_implementation(); }
};

}  // namespace drain
#endif

class TimedSocket {
 public:
  using Clock = std::chrono::steady_clock;
  using executor_type = boost::asio::any_io_executor;
  static constexpr auto kMaxSweepSleep = std::chrono::seconds(1);

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

  // Reads what is there, or waits for it. See drain::RecvOp for how reads avoid a recv that
  // finds nothing.
  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return boost::asio::async_compose<Token, void(boost::system::error_code, std::size_t)>(
        Op<ReadOp<MutableBuffers>>{this, ReadOp<MutableBuffers>{buffers}}, token, socket_);
  }

  // Says that the next read started through this socket expects the peer to be silent until
  // it is spoken to (the next request on an idle connection, the answer to a request just
  // sent): on a socket that the last read drained, it is queued without trying a recv, and an
  // end of stream that came with the last data is only noticed with the next event (our write
  // being reset, new data, the deadline). Call it right before a read that is sure to reach
  // this socket (not through a TLS layer, which may answer from its own buffer): a flag left
  // over would apply to a later read that continues a message.
  void expect_silence() noexcept { expect_silence_ = true; }

  // A read that expects silence (see above) and that the deadline does not apply to (it is
  // not "pending" for the sweep): for watching a connection while other work runs. It notices
  // a hang-up, and its bytes are the start of what comes next. `handler` is called as
  // handler(error_code, bytes) from the event loop.
  template <typename Handler>
  void async_read_some_untimed(boost::asio::mutable_buffer buffer, Handler&& handler) {
#ifdef FERRY_DRAINING_READS
    if (buffer.size() != 0) {
      expect_silence_ = true;
      return start_draining_read(buffer, std::forward<Handler>(handler));
    }
#endif
    socket_.async_read_some(buffer, std::forward<Handler>(handler));
  }

  // While set, the socket counts as having an operation pending, so the deadline applies:
  // for a caller that waits on the result of an untimed read.
  void count_as_pending(bool on) noexcept {
    if (on) {
      started();
    } else {
      --pending_;
    }
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
    void start(TimedSocket& self, H&& h) {
      B b = buffers;  // the handler that holds `buffers` moves into the operation
#ifdef FERRY_DRAINING_READS
      boost::asio::mutable_buffer first = *boost::asio::buffer_sequence_begin(b);
      if (first.size() != 0) return self.start_draining_read(first, std::forward<H>(h));
#endif
      self.socket_.async_read_some(b, std::forward<H>(h));
    }
  };
  template <typename B>
  struct WriteOp {
    B buffers;
    template <typename H>
    void start(TimedSocket& self, H&& h) {
      B b = buffers;
      self.socket_.async_write_some(b, std::forward<H>(h));
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
        self->started();
        return start.start(*self, std::move(op));
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
        self->started();
        Endpoints eps = endpoints;
        return boost::asio::async_connect(self->socket_, eps, std::move(op));
      }
      --self->pending_;
      if (ec && self->timed_out_) ec = boost::beast::error::timeout;
      op.complete(ec, ep);
    }
  };

  void expire();  // called by the sweep

  // An operation starts: the sweep must wake by this socket's deadline.
  void started() noexcept {
    ++pending_;
    if (sweep_wakes_at_ != nullptr && deadline_ < *sweep_wakes_at_) wake_sweep_by_deadline();
  }
  void wake_sweep_by_deadline();

#ifdef FERRY_DRAINING_READS
  // Starts a drain::RecvOp into `buffer`, the way Asio's socket service starts its receive
  // (handler allocator, per-operation cancellation, internal non-blocking mode).
  template <typename Handler>
  void start_draining_read(boost::asio::mutable_buffer buffer, Handler&& h) {
    namespace ad = boost::asio::detail;
    using H = std::decay_t<Handler>;
    using Op = drain::RecvOp<H, executor_type>;
    // A read that continues a message on a drained socket must not wait for an event that an
    // end of stream already queued will not raise: it tries a recv first, whatever the
    // reactor's own "try at once" state.
    bool try_first = drained_ && !expect_silence_;
    expect_silence_ = false;
    H handler(std::forward<Handler>(h));
    if (reactor_ == nullptr) {
      reactor_ = &boost::asio::use_service<ad::reactor>(
          boost::asio::query(socket_.get_executor(), boost::asio::execution::context));
    }
    auto& impl = socket_.implementation();
    bool is_continuation = boost_asio_handler_cont_helpers::is_continuation(handler);
    auto slot = boost::asio::get_associated_cancellation_slot(handler);
    typename Op::ptr p = {std::addressof(handler), Op::ptr::allocate(handler), nullptr};
    p.p = new (p.v)
        Op(impl.socket_, buffer.data(), buffer.size(), &drained_, handler, socket_.get_executor());
    if (slot.is_connected()) {
      p.p->cancellation_key_ = &slot.template emplace<drain::Cancel>(
          drain::Cancel{reactor_, &impl.reactor_data_, impl.socket_});
    }
    Op* op = p.p;
    p.v = p.p = nullptr;
    if ((impl.state_ & ad::socket_ops::non_blocking) != 0 ||
        ad::socket_ops::set_internal_non_blocking(impl.socket_, impl.state_, true, op->ec_)) {
      if (try_first && op->perform() != ad::reactor_op::not_done) {
        reactor_->post_immediate_completion(op, is_continuation);
        return;
      }
      reactor_->start_op(ad::reactor::read_op, impl.socket_, impl.reactor_data_, op,
                         is_continuation, /*allow_speculative=*/true);
    } else {
      reactor_->post_immediate_completion(op, is_continuation);
    }
  }

  drain::Socket socket_;
  boost::asio::detail::reactor* reactor_ = nullptr;
  bool drained_ = false;  // the last read here was short (see drain::RecvOp)
#else
  boost::asio::ip::tcp::socket socket_;
#endif
  bool expect_silence_ = false;                        // for the next read (see expect_silence())
  DeadlineSweep* sweep_ = nullptr;                     // the loop's sweep, found on first use
  const Clock::time_point* sweep_wakes_at_ = nullptr;  // its next wake-up (max: none)
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
