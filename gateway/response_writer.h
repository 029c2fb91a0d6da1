// Writing answers to the client: a whole reply in one gathered write (write_reply), and a
// chunked body written as it comes (ChunkedSink: SSE streams, CSV exports), each with the
// write timeout. Templates over the connection's stream (PlainStream, TlsStream), defined
// here for the few files that write (connection, proxy, worker_jobs).
// Thread-safety: a sink and its stream are used from the connection's own loop only.
#pragma once

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "adapters/backend.h"
#include "adapters/timed_socket.h"
#include "common/clock.h"
#include "gateway/endpoints.h"
#include "gateway/errors.h"
#include "gateway/http_wire.h"
#include "gateway/net.h"
#include "gateway/request_record.h"
#include "gateway/server_state.h"

namespace ferry::gateway {

// Writes `reply` (head and body in one gathered write). False when the write failed.
template <typename Stream>
asio::awaitable<bool> write_reply(const ServerState& server, Stream& stream, const Reply& reply,
                                  const std::string& rid, bool keep_alive) {
  // The head is written by hand and goes out with the body in one gathered write.
  std::string head;  // sized once by append_response_head
  ResponseHead h;
  h.status = reply.status;
  h.content_type = reply.content_type;
  h.request_id = rid;
  h.headers = &reply.headers;
  h.content_length = reply.body.size();
  h.keep_alive = keep_alive;
  append_response_head(head, h);
  std::array<asio::const_buffer, 2> bufs{
      asio::buffer(head), asio::buffer(reply.body.data(), reply.head_only ? 0 : reply.body.size())};
  beast::get_lowest_layer(stream).expires_after(
      std::chrono::milliseconds(server.cfg.limits.write_timeout_ms));
  beast::error_code now_ec;
  size_t done = adapters::write_now(stream, bufs, now_ec);
  if (now_ec) co_return false;
  if (done == asio::buffer_size(bufs)) co_return true;
  beast::buffers_suffix<std::array<asio::const_buffer, 2>> rest(bufs);
  rest.consume(done);
  auto [ec, n] = co_await asio::async_write(stream, rest, kAwait);
  co_return !ec;
}

// Streams a body to the client as chunked transfer encoding (SSE by default). The head goes
// out with the first write.
template <typename Stream>
class ChunkedSink final : public adapters::StreamSink {
 public:
  ChunkedSink(const ServerState& server, Stream& stream, const std::string& rid,
              RequestRecord& record, const HeaderList* headers = nullptr)
      : server_(server), stream_(stream), rid_(rid), record_(record), headers_(headers) {}

  bool started() const { return started_; }
  bool broken() const { return broken_; }
  // Every byte sent since the last take while capturing (the default), for counting the answer
  // when usage is missing. A translated hop's answer is counted from the backend's own bytes,
  // which its translator keeps: its proxy turns capturing off.
  std::string take_captured() { return std::exchange(captured_, {}); }
  void set_capture(bool capture) { capture_ = capture; }
  std::string_view captured() const { return captured_; }

  void set_content_type(std::string type) { content_type_ = std::move(type); }
  void add_header(std::string_view name, std::string_view value) override {
    if (!started_) extra_.emplace_back(name, value);
  }

  asio::awaitable<bool> write(std::string_view bytes) override {
    co_return co_await send(bytes, false);
  }

  // Ends the stream with `tail`, the front-end's (gateway/frontend.h): OpenAI's [DONE] after
  // success, an error event after a failure; the tail and the last chunk go out in one write.
  asio::awaitable<void> finish(std::string_view tail) {
    if (broken_) co_return;
    co_await send(tail, true);
  }

  // Ends the chunked body without an SSE tail.
  asio::awaitable<void> finish_plain() {
    if (broken_) co_return;
    std::string_view nothing;
    co_await send(nothing, true);
  }

 private:
  // One gathered write: the response head (first call only), `bytes` as one chunk (when not
  // empty: an empty chunk would end the body) and, when `last`, the last chunk.
  asio::awaitable<bool> send(std::string_view bytes, bool last) {
    if (broken_) co_return false;
    framing_.clear();
    if (!started_) {
      started_ = true;
      record_.ttft_us = micros_between(record_.started, Clock::now());
      ResponseHead h;
      h.status = 200;
      h.content_type = content_type_;
      h.no_cache = true;
      h.request_id = rid_;
      h.headers = headers_;
      if (!extra_.empty()) {
        if (headers_ != nullptr) extra_.insert(extra_.begin(), headers_->begin(), headers_->end());
        h.headers = &extra_;
      }
      h.keep_alive = !server_.draining.load();
      append_response_head(framing_, h);
    }
    if (!bytes.empty()) {
      if (capture_) {
        // A stream's whole text is kept: room made ahead (twice what is kept, and 4 KiB), not
        // doubled up from a few bytes event by event.
        if (captured_.capacity() < captured_.size() + bytes.size()) {
          captured_.reserve(std::max(captured_.size() + bytes.size(), 2 * captured_.size() + 4096));
        }
        captured_.append(bytes);
      }
      append_chunk_prefix(framing_, bytes.size());
    } else if (framing_.empty() && !last) {
      co_return true;  // nothing to send
    }
    std::array<asio::const_buffer, 3> bufs{
        asio::buffer(framing_), asio::buffer(bytes.data(), bytes.size()),
        asio::buffer(kChunkEnd.data(), bytes.empty() ? 0 : kChunkEnd.size())};
    if (last) {
      // The last chunk follows the chunk end; both are constant text.
      tail_.assign(bytes.empty() ? "" : kChunkEnd);
      tail_.append(kLastChunk);
      bufs[2] = asio::buffer(tail_);
    }
    beast::error_code now_ec;
    size_t done = adapters::write_now(stream_, bufs, now_ec);
    if (now_ec) co_return fail();
    if (done == asio::buffer_size(bufs)) co_return true;
    beast::buffers_suffix<std::array<asio::const_buffer, 3>> rest(bufs);
    rest.consume(done);
    arm();
    auto [ec, n] = co_await asio::async_write(stream_, rest, kAwait);
    if (ec) co_return fail();
    co_return true;
  }

  void arm() {
    beast::get_lowest_layer(stream_).expires_after(
        std::chrono::milliseconds(server_.cfg.limits.write_timeout_ms));
  }
  bool fail() {
    broken_ = true;
    return false;
  }
  const ServerState& server_;
  Stream& stream_;
  const std::string& rid_;
  RequestRecord& record_;
  const HeaderList* headers_;
  HeaderList extra_;  // add_header's, sent after headers_
  std::string captured_;
  std::string framing_;  // head and chunk-size line of the write in progress
  std::string tail_;     // chunk end and last chunk of the final write
  std::string content_type_ = "text/event-stream";
  bool started_ = false;
  bool capture_ = true;
  bool broken_ = false;
};

}  // namespace ferry::gateway
