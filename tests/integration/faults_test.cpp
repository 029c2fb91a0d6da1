// Faults through the real `ferry` binary: backend errors, hangs, resets and malformed streams,
// hostile clients (huge bodies and headers, slow headers, disconnects), upstream connection
// reuse and cancellation, and graceful shutdown. After each fault ferry must keep serving.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <thread>

#include "tests/integration/ferry_test_base.h"

namespace ferry::itest {
namespace {

using FaultTest = FerryTest;

TEST_F(FaultTest, Backend500Is502) {
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("fail-500", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502) << r->body;
  EXPECT_TRUE(is_openai_error(*r));
  StreamResult s =
      stream_request(ferry_.address, "/v1/chat/completions", chat_body("fail-500", "x", true));
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 502) << "an upstream error before any chunk is a plain 502";
  expect_serving();
}

// A backend's 429 (with no other target to fall back to) is the client's 429, in OpenAI's
// rate-limit shape, with ferry's message naming the backend that refused.
TEST_F(FaultTest, Backend429IsRateLimit) {
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("fail-429", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429) << r->body;
  ASSERT_TRUE(is_openai_error(*r)) << r->body;
  const json error = r->body_json()["error"];
  EXPECT_EQ(error.value("type", ""), "rate_limit_error") << r->body;
  EXPECT_NE(error.value("message", "").find("rate limiting"), std::string::npos) << r->body;
  expect_serving();
}

TEST_F(FaultTest, BackendThatNeverAnswersIs504AndIsCancelled) {
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("hang", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 504) << r->body;
  EXPECT_TRUE(is_openai_error(*r));
  json stats = wait_upstream_stat("cancelled", 1);
  EXPECT_EQ(stats["cancelled"], 1) << "ferry should drop the upstream request it gave up on";
  expect_serving();
}

TEST_F(FaultTest, NoBackendListeningIs503) {
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("dead-model", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_TRUE(is_openai_error(*r));
  StreamResult s =
      stream_request(ferry_.address, "/v1/chat/completions", chat_body("dead-model", "x", true));
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 503);
  expect_serving();
}

TEST_F(FaultTest, BackendClosingWithoutAnswerIs502) {
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("drop", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502) << r->body;
  EXPECT_TRUE(is_openai_error(*r));
  expect_serving();
}

// A head cut by the backend's close (the parser had part of it): 502, the stream request too,
// and the next request is served.
TEST_F(FaultTest, BackendClosingInsideTheHeadIs502) {
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("cut-head", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502) << r->body;
  EXPECT_TRUE(is_openai_error(*r));
  EXPECT_NE(r->body.find("waiting for the response"), std::string::npos) << r->body;
  StreamResult s =
      stream_request(ferry_.address, "/v1/chat/completions", chat_body("cut-head", "x", true));
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 502);
  expect_serving();
}

void expect_stream_ends_with_error(const StreamResult& s, const char* what) {
  ASSERT_TRUE(s.head) << what;
  EXPECT_EQ(s.head->status, 200) << what;
  EXPECT_NE(s.end, ReadStatus::kTimeout) << what << ": the client stream hung";
  EXPECT_TRUE(s.has_error_event()) << what << ": no error event before the end";
  EXPECT_FALSE(s.content().empty()) << what << ": the chunks sent before the fault are lost";
}

TEST_F(FaultTest, BackendResetMidStreamEndsWithErrorEvent) {
  StreamResult s = stream_request(ferry_.address, "/v1/chat/completions",
                                  chat_body("reset-mid-stream", "a b c d e f g h", true));
  expect_stream_ends_with_error(s, "reset-mid-stream");
  EXPECT_EQ(s.end, ReadStatus::kEnd)
      << "the client stream should end cleanly: " << read_status_name(s.end);
  expect_serving();
}

TEST_F(FaultTest, BackendClosingMidStreamEndsWithErrorEvent) {
  StreamResult s = stream_request(ferry_.address, "/v1/completions",
                                  completion_body("close-mid-stream", "a b c d e f g h", true));
  expect_stream_ends_with_error(s, "close-mid-stream");
  EXPECT_EQ(s.end, ReadStatus::kEnd) << read_status_name(s.end);
  expect_serving();
}

TEST_F(FaultTest, BackendSilentMidStreamEndsWithErrorEventAfterIdleTimeout) {
  StreamResult s = stream_request(ferry_.address, "/v1/chat/completions",
                                  chat_body("hang-after-first", "a b c", true));
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 200);
  EXPECT_NE(s.end, ReadStatus::kTimeout) << "idle_ms should end the stream";
  EXPECT_TRUE(s.has_error_event());
  json stats = wait_upstream_stat("cancelled", 1);
  EXPECT_EQ(stats["cancelled"], 1);
  expect_serving();
}

TEST_F(FaultTest, MalformedSseEndsTheStreamWithoutHanging) {
  StreamResult s = stream_request(ferry_.address, "/v1/chat/completions",
                                  chat_body("malformed-sse", "a b", true));
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 200);
  EXPECT_NE(s.end, ReadStatus::kTimeout);
  EXPECT_TRUE(s.saw_done || s.has_error_event())
      << "the stream should end with [DONE] or an error event";
  for (const auto& e : s.events) {
    if (e.data == "[DONE]") continue;
    EXPECT_FALSE(json::parse(e.data, nullptr, false).is_discarded())
        << "non-JSON data forwarded to the client: " << e.data;
  }
  expect_serving();
}

TEST_F(FaultTest, ClientDisconnectMidStreamCancelsUpstream) {
  json before = upstream_stats(upstream_.address);
  {
    auto c = Connection::open(ferry_.address.host, ferry_.address.port);
    ASSERT_TRUE(c);
    json body = chat_body("stream-slow", "a b c d e f g h i j k l m n o p", true);
    ASSERT_TRUE(c->send(make_request("POST", "/v1/chat/completions", body.dump(), auth_headers())));
    auto head = c->read_head(Ms(20000));
    ASSERT_TRUE(head);
    ASSERT_EQ(head->status, 200);
    SseEvent e;
    ASSERT_EQ(c->read_event(e, Ms(20000)), ReadStatus::kData);
    ASSERT_EQ(c->read_event(e, Ms(20000)), ReadStatus::kData);
  }  // the client hangs up here, about 5 s before the upstream would finish
  json stats = wait_upstream_stat("cancelled", before["cancelled"].get<int64_t>() + 1);
  EXPECT_EQ(stats["cancelled"], before["cancelled"].get<int64_t>() + 1)
      << "upstream stream not cancelled: " << stats.dump();
  EXPECT_EQ(stats["completed"], before["completed"]) << stats.dump();
  expect_serving();
}

TEST_F(FaultTest, ClientDisconnectBeforeTheAnswerCancelsUpstream) {
  // A second ferry whose first-byte timeout (60 s) cannot be what ends the upstream request.
  std::string yaml = standard_config(upstream_.address);
  std::string from = "first_byte_ms: 2000";
  yaml.replace(yaml.find(from), from.size(), "first_byte_ms: 60000");
  TempDir dir;
  Server patient = start_ferry(dir, yaml);
  {
    auto c = Connection::open(patient.address.host, patient.address.port);
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->send(make_request("POST", "/v1/chat/completions", chat_body("hang", "x").dump(),
                                     auth_headers())));
    json stats = wait_upstream_stat("requests", 1);
    ASSERT_EQ(stats["in_flight"], 1) << stats.dump();
  }  // the client hangs up while ferry waits for the upstream
  json stats = wait_upstream_stat("cancelled", 1);
  EXPECT_EQ(stats["cancelled"], 1) << "upstream request not cancelled: " << stats.dump();
  EXPECT_EQ(patient.process->stop(Ms(15000)), 0);
}

TEST_F(FaultTest, UpstreamConnectionsAreReused) {
  auto reset = http_request(upstream_.address, "POST", "/_reset");
  ASSERT_TRUE(reset);
  for (int i = 0; i < 8; ++i) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "r"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  for (int i = 0; i < 4; ++i) {
    StreamResult s =
        stream_request(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "s", true));
    EXPECT_TRUE(s.saw_done);
  }
  json stats = upstream_stats(upstream_.address);
  EXPECT_EQ(stats["requests"], 12);
  EXPECT_LT(stats["api_connections"].get<int64_t>(), 12) << stats.dump();
  EXPECT_LE(stats["api_connections"].get<int64_t>(), 2) << "sequential requests should share "
                                                           "one pooled connection: "
                                                        << stats.dump();
  // ferry's own view of the pool agrees: most of the 12 exchanges reused a connection.
  auto metrics = http_request(ferry_.address, "GET", "/metrics");
  ASSERT_TRUE(metrics);
  const std::string series = "ferry_backend_connections_total{backend=\"up\",how=\"reused\"} ";
  auto at = metrics->body.find(series);
  ASSERT_NE(at, std::string::npos) << metrics->body;
  EXPECT_GE(std::stoll(metrics->body.substr(at + series.size())), 10) << metrics->body;
}

TEST_F(FaultTest, BodyOf100MBIsRefusedWith413WithoutReadingIt) {
  constexpr int64_t kClaimed = 100LL << 20;
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c);
  std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
      std::string(kAppKey) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(kClaimed) +
      "\r\n\r\n";
  ASSERT_TRUE(c->send(head));
  std::string block(64 << 10, 'a');
  int64_t sent = 0;
  bool answered = false;
  while (sent < kClaimed) {
    if (c->readable(Ms(0))) {
      answered = true;
      break;
    }
    pollfd p{c->fd(), POLLOUT, 0};
    if (::poll(&p, 1, 5000) != 1) break;  // ferry stopped reading (5 s): look for the answer
    ssize_t n = ::send(c->fd(), block.data(), block.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;  // closed or reset by ferry
    sent += n;
  }
  EXPECT_LT(sent, kClaimed) << "ferry read the whole 100 MB body";
  auto r = c->read_response(Ms(10000));
  ASSERT_TRUE(r) << "no response (sent " << sent << " bytes, answered early: " << answered << ")";
  EXPECT_EQ(r->status, 413) << r->body;
  EXPECT_TRUE(is_openai_error(*r));
  expect_serving();
}

TEST_F(FaultTest, ChunkedBodyOverTheLimitIs413) {
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c);
  std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                     std::string(kAppKey) +
                     "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  ASSERT_TRUE(c->send(head));
  std::string piece(32 << 10, 'a');
  char size_line[32];
  std::snprintf(size_line, sizeof size_line, "%zx\r\n", piece.size());
  std::string chunk = size_line + piece + "\r\n";
  for (int i = 0; i < 64 && !c->readable(Ms(0)); ++i) {  // up to 2 MB, twice the limit
    if (!c->send(chunk)) break;
  }
  auto r = c->read_response(Ms(10000));
  ASSERT_TRUE(r) << "no response to a chunked body over max_body_bytes";
  EXPECT_EQ(r->status, 413) << r->body;
  expect_serving();
}

TEST_F(FaultTest, HeaderOf1MBIsRefusedAndClosed) {
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c);
  std::string request =
      "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Huge: " + std::string(1 << 20, 'h') + "\r\n\r\n";
  c->send(request);  // ferry may close before it has all of it
  auto r = c->read_response(Ms(10000));
  ASSERT_TRUE(r) << "no response to a 1 MB header";
  EXPECT_TRUE(r->status == 431 || r->status == 400) << r->status;
  EXPECT_TRUE(c->wait_closed(Ms(10000))) << "the connection should be closed afterwards";
  expect_serving();
}

TEST_F(FaultTest, SlowHeadersAreCutByTheHeaderTimeout) {
  // header_timeout_ms is 2000 in the test config; this header would take 60 s at 1 byte/s.
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c);
  std::string request = "GET /healthz HTTP/1.1\r\nHost: slowloris.example\r\nX-Pad: 123456\r\n\r\n";
  size_t sent = 0;
  bool closed = false;
  for (; sent < request.size(); ++sent) {
    if (!c->send(request.substr(sent, 1))) {
      closed = true;
      break;
    }
    if (c->readable(Ms(1000))) {
      closed = c->wait_closed(Ms(5000));
      break;
    }
  }
  EXPECT_TRUE(closed) << "connection still open after " << sent << " bytes at 1 byte/s";
  EXPECT_LT(sent, request.size() / 2) << "the header timeout did not cut the slow client";
  expect_serving();
}

TEST_F(FaultTest, RequestCutMidHeaderIsDroppedAndTheConnectionClosed) {
  // The client stops sending half-way through a header line and shuts its side down: ferry
  // must give up on the request (not wait for bytes that cannot come) and close.
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le"));
  ASSERT_EQ(::shutdown(c->fd(), SHUT_WR), 0);
  auto r = c->read_response(Ms(10000));
  ASSERT_TRUE(r) << "no answer to the cut request (ferry waited for bytes that cannot come)";
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_TRUE(c->wait_closed(Ms(10000))) << "ferry kept the half-closed connection open";
  expect_serving();
}

TEST_F(FaultTest, BodyThatNeverArrivesIsCutByTheBodyTimeout) {
  // body_timeout_ms is 5000 in the test config: 10 of the 100 announced bytes, then silence.
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c);
  std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                     std::string(kAppKey) +
                     "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n";
  ASSERT_TRUE(c->send(head + "{\"model\": "));
  ASSERT_TRUE(c->readable(Ms(60000))) << "ferry waited more than 60 s for the body";
  auto r = c->read_response(Ms(5000));
  if (r) {
    EXPECT_TRUE(r->status == 408 || r->status == 400) << r->status << " " << r->body;
  }
  EXPECT_TRUE(c->wait_closed(Ms(10000))) << "the connection should be closed";
  expect_serving();
}

// A request whose bytes are all buffered is parsed without the reading coroutines; what it
// asks for, or how it is refused, is what the same bytes get when they come in pieces.
TEST_F(FaultTest, RequestsWhollyInOneWriteAreReadAsWhenTheyComeInPieces) {
  const std::string body = chat_body("gpt-test", "whole").dump();
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
      std::string(kAppKey) + "\r\nContent-Type: application/json\r\n";
  const std::string request =
      head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  // A fresh connection that has sent `bytes` in one write.
  auto sent = [&](const std::string& bytes) {
    auto c = Connection::open(ferry_.address.host, ferry_.address.port);
    EXPECT_TRUE(c && c->send(bytes));
    return c;
  };
  {
    // Expect: 100-continue with the body in the same write: the interim answer, then the answer.
    auto c = sent(head + "Expect: 100-continue\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\n\r\n" + body);
    ASSERT_TRUE(c);
    // (read_response passes over a 1xx answer, as HTTP clients do: the bytes are peeked at.)
    ASSERT_TRUE(c->readable(Ms(10000)));
    char first[12] = {};
    ASSERT_EQ(::recv(c->fd(), first, sizeof first, MSG_PEEK | MSG_WAITALL),
              static_cast<ssize_t>(sizeof first));
    EXPECT_EQ(std::string(first, sizeof first), "HTTP/1.1 100");
    auto r = c->read_response(Ms(10000));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: whole");
  }
  {
    // A request, then garbage, in one write: the first answered, the garbage refused.
    auto c = sent(request + "GARBAGE\r\n\r\n");
    ASSERT_TRUE(c);
    auto r = c->read_response(Ms(10000));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    auto bad = c->read_response(Ms(10000));
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400) << bad->body;
    EXPECT_TRUE(c->wait_closed(Ms(10000)));
  }
  {
    // A whole head and a chunked body whose chunk size is not hex: no answer, and closed.
    auto c = sent(head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n");
    ASSERT_TRUE(c);
    auto r = c->read_response(Ms(10000));
    EXPECT_FALSE(r) << r->status << " " << r->body;
    EXPECT_TRUE(c->wait_closed(Ms(10000)));
  }
  {
    // A Content-Length over max_body_bytes with a few body bytes: 413, unread.
    auto c = sent(head + "Content-Length: 104857600\r\n\r\n{\"model\"");
    ASSERT_TRUE(c);
    auto r = c->read_response(Ms(10000));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413) << r->body;
  }
  expect_serving();
}

TEST_F(FaultTest, ManyBadInputsInARowThenNormalService) {
  for (int i = 0; i < 20; ++i) {
    auto c = Connection::open(ferry_.address.host, ferry_.address.port);
    ASSERT_TRUE(c);
    c->send(i % 2 == 0 ? "GARBAGE\r\n\r\n"
                       : "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                         "Content-Length: nope\r\n\r\n");
    auto r = c->read_response(Ms(10000));
    if (r) {
      EXPECT_EQ(r->status, 400) << "garbage request " << i;
    }
  }
  expect_serving();
}

TEST_F(FaultTest, SigtermLetsTheInFlightStreamFinishThenExitsZero) {
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c);
  json body = chat_body("stream-slow", "a b c d e f", true);
  ASSERT_TRUE(c->send(make_request("POST", "/v1/chat/completions", body.dump(), auth_headers())));
  auto head = c->read_head(Ms(20000));
  ASSERT_TRUE(head);
  ASSERT_EQ(head->status, 200);
  SseEvent e;
  ASSERT_EQ(c->read_event(e, Ms(20000)), ReadStatus::kData);
  ferry_.process->send_signal(SIGTERM);
  std::string content;
  bool done = false;
  ReadStatus st;
  while ((st = c->read_event(e, Ms(20000))) == ReadStatus::kData) {
    if (e.data == "[DONE]") {
      done = true;
      continue;
    }
    json j = json::parse(e.data, nullptr, false);
    if (j.is_object() && j.contains("choices") && !j["choices"].empty() &&
        j["choices"][0]["delta"].contains("content")) {
      content += j["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_TRUE(done) << "the in-flight stream was cut by SIGTERM";
  EXPECT_EQ(st, ReadStatus::kEnd) << read_status_name(st);
  EXPECT_EQ(content, "echo: a b c d e f") << "everything after the role chunk arrives";
  auto status = ferry_.process->wait_exit(Ms(15000));
  ASSERT_TRUE(status) << "ferry did not exit after SIGTERM";
  EXPECT_EQ(*status, 0);
  EXPECT_FALSE(Connection::open(ferry_.address.host, ferry_.address.port))
      << "still accepting after shutdown";
}

TEST_F(FaultTest, WhileDrainingReadyzAnswers503AndNewRequestsAre503NotDropped) {
  // A stream keeps ferry draining; two keep-alive connections opened before SIGTERM then ask.
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  auto probe = Connection::open(ferry_.address.host, ferry_.address.port);
  auto api = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c && probe && api);
  json body = chat_body("stream-slow", "a b c d e f g h", true);
  ASSERT_TRUE(c->send(make_request("POST", "/v1/chat/completions", body.dump(), auth_headers())));
  auto head = c->read_head(Ms(20000));
  ASSERT_TRUE(head);
  ASSERT_EQ(head->status, 200);
  for (auto* conn : {probe.get(), api.get()}) {
    ASSERT_TRUE(conn->send(make_request("GET", "/healthz", "")));
    auto ok = conn->read_response(Ms(10000));
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200);
  }
  ferry_.process->send_signal(SIGTERM);
  // Draining has begun once the listener is closed.
  for (int i = 0; i < 400 && Connection::open(ferry_.address.host, ferry_.address.port); ++i) {
    std::this_thread::sleep_for(Ms(10));
  }
  ASSERT_FALSE(Connection::open(ferry_.address.host, ferry_.address.port));

  ASSERT_TRUE(probe->send(make_request("GET", "/readyz", "")));
  auto ready = probe->read_response(Ms(10000));
  ASSERT_TRUE(ready) << "the connection was closed instead of answering";
  EXPECT_EQ(ready->status, 503);
  EXPECT_EQ(ready->body, "draining\n");
  EXPECT_EQ(ready->header("connection").value_or(""), "close");

  ASSERT_TRUE(api->send(make_request("POST", "/v1/chat/completions",
                                     chat_body("gpt-test", "late").dump(), auth_headers())));
  auto late = api->read_response(Ms(10000));
  ASSERT_TRUE(late) << "the connection was closed instead of answering";
  EXPECT_EQ(late->status, 503) << late->body;
  EXPECT_TRUE(late->header("retry-after").has_value());
  EXPECT_NE(late->body.find("shutting down"), std::string::npos) << late->body;

  SseEvent e;
  bool done = false;
  while (c->read_event(e, Ms(20000)) == ReadStatus::kData) done = done || e.data == "[DONE]";
  EXPECT_TRUE(done) << "the in-flight stream finished";
  auto status = ferry_.process->wait_exit(Ms(15000));
  ASSERT_TRUE(status);
  EXPECT_EQ(*status, 0);
}

TEST_F(FaultTest, SigtermWithNothingInFlightExitsPromptly) {
  expect_serving();
  ferry_.process->send_signal(SIGINT);
  auto status = ferry_.process->wait_exit(Ms(15000));
  ASSERT_TRUE(status) << "ferry did not exit after SIGINT";
  EXPECT_EQ(*status, 0);
}

}  // namespace
}  // namespace ferry::itest
