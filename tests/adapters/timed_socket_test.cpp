// TimedSocket over real loopback sockets: reads that report a drained socket to the reactor
// (so the next read is queued without a speculative recv) must still see every byte that
// arrives later, whenever it arrives; deadlines and cancellation keep working.
#include "adapters/timed_socket.h"

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using ferry::adapters::TimedSocket;

struct Pair {
  asio::io_context ctx;
  std::optional<TimedSocket> ours;
  std::optional<tcp::socket> peer;

  Pair() {
    tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    peer.emplace(ctx);
    peer->connect(acceptor.local_endpoint());
    ours.emplace(acceptor.accept());
  }

  void send(const std::string& bytes) { asio::write(*peer, asio::buffer(bytes)); }

  struct Read {
    bool done = false;
    boost::system::error_code ec;
    std::string bytes;
  };

  // Starts a read of at most `max` bytes; the result lands in the returned object.
  std::shared_ptr<Read> start_read(size_t max) {
    auto r = std::make_shared<Read>();
    auto buf = std::make_shared<std::string>(max, '\0');
    ours->async_read_some(asio::buffer(*buf), [r, buf](boost::system::error_code ec, size_t n) {
      r->done = true;
      r->ec = ec;
      r->bytes = buf->substr(0, n);
    });
    return r;
  }

  // Lets the reactor wait once (a short timer), so that readiness events already queued are
  // reported and consumed while no read is pending.
  void turn() {
    bool ticked = false;
    asio::steady_timer t(ctx, std::chrono::milliseconds(20));
    t.async_wait([&](boost::system::error_code) { ticked = true; });
    ctx.restart();
    while (!ticked) ctx.run_one();
  }

  // Runs the loop until `r` completes, with a deadline that turns a lost wake-up into a
  // timeout error instead of a hang.
  void run_until(const std::shared_ptr<Read>& r) {
    ours->expires_after(std::chrono::seconds(5));
    ctx.restart();
    while (!r->done && ctx.run_one() != 0) {
    }
  }
};

TEST(TimedSocket, ShortReadThenLaterDataIsStillDelivered) {
  Pair p;
  p.send("hello");
  auto first = p.start_read(64);  // reads 5 of 64 bytes: the socket is drained
  p.run_until(first);
  ASSERT_FALSE(first->ec) << first->ec.message();
  EXPECT_EQ(first->bytes, "hello");

  auto second = p.start_read(64);  // queued without trying: nothing is there yet
  p.ctx.restart();
  p.ctx.poll();
  EXPECT_FALSE(second->done);
  p.send("world");
  p.run_until(second);
  ASSERT_FALSE(second->ec) << second->ec.message();
  EXPECT_EQ(second->bytes, "world");
}

TEST(TimedSocket, DataThatArrivedWhileNoReadWasPendingIsReadAtOnce) {
  Pair p;
  p.send("a");
  auto first = p.start_read(64);
  p.run_until(first);
  ASSERT_EQ(first->bytes, "a");

  // The readiness event for "bc" is reported while no read is pending (an unrelated handler
  // keeps the loop turning); the next read must not wait for another event.
  p.send("bc");
  p.turn();

  auto second = p.start_read(64);
  p.run_until(second);
  ASSERT_FALSE(second->ec) << second->ec.message();
  EXPECT_EQ(second->bytes, "bc");
}

TEST(TimedSocket, AFullBufferLeavesTheRestForTheNextRead) {
  Pair p;
  p.send("0123456789");
  p.turn();                      // the only readiness event is used up before the first read
  auto first = p.start_read(4);  // exactly full: more may be queued
  p.run_until(first);
  EXPECT_EQ(first->bytes, "0123");
  auto second = p.start_read(64);
  p.run_until(second);
  ASSERT_FALSE(second->ec) << second->ec.message();
  EXPECT_EQ(second->bytes, "456789");
}

TEST(TimedSocket, PeerCloseAfterADrainedReadIsEndOfStream) {
  Pair p;
  p.send("x");
  auto first = p.start_read(16);
  p.run_until(first);
  ASSERT_EQ(first->bytes, "x");
  auto second = p.start_read(16);
  p.peer->close();
  p.run_until(second);
  EXPECT_EQ(second->ec, asio::error::eof);
}

TEST(TimedSocket, EndOfStreamThatCameWithTheDataIsSeenByTheNextRead) {
  // The data and the end of stream arrive before the loop looks: one readiness event for
  // both. The first read is short (the data); the second must still see the end of stream,
  // although no new event will come.
  Pair p;
  p.send("partial");
  p.peer->shutdown(tcp::socket::shutdown_send);
  p.turn();
  auto first = p.start_read(64);
  p.run_until(first);
  ASSERT_EQ(first->bytes, "partial");
  auto second = p.start_read(64);
  p.run_until(second);
  EXPECT_EQ(second->ec, asio::error::eof) << second->ec.message();
}

TEST(TimedSocket, AQueuedReadTimesOut) {
  Pair p;
  p.send("x");
  auto first = p.start_read(16);
  p.run_until(first);
  auto second = p.start_read(16);
  p.ours->expires_after(std::chrono::milliseconds(60));
  p.ctx.restart();
  while (!second->done && p.ctx.run_one() != 0) {
  }
  ASSERT_TRUE(second->done);
  EXPECT_EQ(second->ec, boost::beast::error::timeout);
}

TEST(TimedSocket, AQueuedReadCanBeCancelledThroughItsSlot) {
  Pair p;
  p.send("x");
  auto first = p.start_read(16);
  p.run_until(first);
  asio::cancellation_signal signal;
  std::array<char, 16> buf{};
  bool done = false;
  boost::system::error_code got;
  p.ours->async_read_some(
      asio::buffer(buf),
      asio::bind_cancellation_slot(signal.slot(), [&](boost::system::error_code ec, size_t) {
        done = true;
        got = ec;
      }));
  p.ctx.restart();
  p.ctx.poll();
  ASSERT_FALSE(done);
  signal.emit(asio::cancellation_type::terminal);
  p.ctx.restart();
  p.ctx.poll();
  ASSERT_TRUE(done);
  EXPECT_EQ(got, asio::error::operation_aborted);
  // The socket stays usable.
  p.send("after");
  auto next = p.start_read(16);
  p.run_until(next);
  EXPECT_EQ(next->bytes, "after");
}

}  // namespace

namespace {

TEST(TimedSocket, AnUntimedReadIgnoresTheDeadlineUntilCountedAsPending) {
  Pair p;
  p.send("req");
  auto first = p.start_read(64);
  p.run_until(first);
  ASSERT_EQ(first->bytes, "req");
  bool fired = false;
  boost::system::error_code got;
  std::array<char, 64> buf{};
  size_t got_n = 0;
  p.ours->async_read_some_untimed(asio::buffer(buf), [&](boost::system::error_code ec, size_t n) {
    fired = true;
    got = ec;
    got_n = n;
  });
  // A passed deadline does not touch a socket whose only operation is untimed.
  p.ours->expires_after(std::chrono::milliseconds(1));
  p.turn();
  p.turn();
  p.turn();
  p.turn();
  EXPECT_FALSE(fired);
  p.send("next");
  p.ctx.restart();
  for (int i = 0; i < 100 && !fired; ++i) p.ctx.run_one_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fired);
  EXPECT_FALSE(got);
  EXPECT_EQ(std::string(buf.data(), got_n), "next");

  // Counted as pending, it is closed at the deadline.
  bool second_fired = false;
  p.ours->async_read_some_untimed(asio::buffer(buf), [&](boost::system::error_code ec, size_t) {
    second_fired = true;
    got = ec;
  });
  p.ours->count_as_pending(true);
  p.ours->expires_after(std::chrono::milliseconds(1));
  p.ctx.restart();
  for (int i = 0; i < 100 && !second_fired; ++i) p.ctx.run_one_for(std::chrono::milliseconds(50));
  p.ours->count_as_pending(false);
  ASSERT_TRUE(second_fired);
  EXPECT_TRUE(p.ours->timed_out());
  EXPECT_EQ(got, asio::error::operation_aborted);
}

}  // namespace
