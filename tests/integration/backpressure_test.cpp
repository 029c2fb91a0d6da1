// A client that stops reading a local model's stream (issue 14), through the real binary: once
// the sockets are full its sequence pauses at max_unread_tokens, the engine keeps answering other
// requests, and when the client reads again it gets exactly what an unthrottled client gets; a
// paused client that hangs up frees its sequence. No timing: every wait is for a state, bounded.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <string>
#include <thread>

#include "tests/integration/ferry_test_base.h"

namespace ferry::itest {
namespace {

constexpr auto kPoll = Ms(20);
constexpr auto kPatience = Ms(180000);

class BackpressureTest : public OwnConfigTest {
 protected:
  void SetUp() override {
    OwnConfigTest::SetUp();
    const std::string model = (dir_.path() / "tiny.gguf").string();
    ASSERT_EQ(run_command(ferry_binary() + " model synth --preset tiny --type Q8_0 --ctx 3072 " +
                          "--seed 1 '" + model + "' > /dev/null"),
              0);
    std::string cfg = standard_config(upstream_.address);
    cfg.insert(cfg.find("backends:\n") + 10, "  - { name: cpu, kind: local, model: " + model +
                                                 ", threads: 1, max_unread_tokens: 4 }\n");
    cfg.insert(cfg.find("models:\n") + 8, "  - { name: local, backend: cpu }\n");
    ferry_ = start_ferry(dir_, cfg);
  }

  // A local-engine series of /metrics for backend "cpu"; -1 when absent.
  int64_t metric(const std::string& name) {
    auto r = http_request(ferry_.address, "GET", "/metrics");
    if (!r || r->status != 200) return -1;
    const std::string key = name + "{backend=\"cpu\"} ";
    const size_t at = r->body.find(key);
    if (at == std::string::npos) return -1;
    return std::stoll(r->body.substr(at + key.size()));
  }

  // Polls until metric(name) == want; false when it never does.
  bool wait_for_metric(const std::string& name, int64_t want) {
    const auto until = std::chrono::steady_clock::now() + kPatience;
    while (metric(name) != want) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(kPoll);
    }
    return true;
  }

  // A long greedy stream whose events are large (20 alternatives each, ~1.5 KB): its ~4.5 MB
  // cannot all sit in the socket buffers (ferry's send buffer grows to 4 MB at most here).
  static json long_stream() {
    json body = chat_body("local", "tell me everything", true);
    body["max_tokens"] = 3000;
    body["temperature"] = 0;
    body["ignore_eos"] = true;
    body["logprobs"] = true;
    body["top_logprobs"] = 20;
    return body;
  }

  // Sends long_stream() on a connection whose receive buffer is small, and reads nothing.
  std::unique_ptr<Connection> start_slow_reader() {
    auto c = Connection::open(ferry_.address.host, ferry_.address.port);
    if (!c) return nullptr;
    set_receive_buffer(*c, 4096);
    if (!c->send(
            make_request("POST", "/v1/chat/completions", long_stream().dump(), auth_headers()))) {
      return nullptr;
    }
    return c;
  }

  static void set_receive_buffer(Connection& c, int bytes) {
    EXPECT_EQ(setsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes), 0);
  }

  // long_stream() read at full speed on a fresh connection.
  StreamResult read_unthrottled() {
    auto c = Connection::open(ferry_.address.host, ferry_.address.port);
    if (!c || !c->send(make_request("POST", "/v1/chat/completions", long_stream().dump(),
                                    auth_headers()))) {
      return {};
    }
    return read_stream(*c, kPatience);
  }
};

TEST_F(BackpressureTest, SlowReaderPausesItsSequenceAndLaterGetsTheWholeAnswer) {
  auto slow = start_slow_reader();
  ASSERT_TRUE(slow);
  ASSERT_TRUE(wait_for_metric("ferry_local_paused_sequences", 1))
      << "the unread sequence never paused";

  // The engine keeps serving: another request runs to its end meanwhile.
  json quick = chat_body("local", "hello");
  quick["max_tokens"] = 8;
  quick["ignore_eos"] = true;
  auto other = post_json(ferry_.address, "/v1/chat/completions", quick);
  ASSERT_TRUE(other);
  ASSERT_EQ(other->status, 200) << other->body;
  EXPECT_EQ(other->body_json()["usage"]["completion_tokens"], 8);
  // Still unread, so still paused (a first pause may have been a moment's lag of ferry's loop).
  ASSERT_TRUE(wait_for_metric("ferry_local_paused_sequences", 1));

  // Reading now (with room to read quickly), the slow client gets the whole answer, identical to
  // an unthrottled one.
  set_receive_buffer(*slow, 1 << 20);
  StreamResult paused = read_stream(*slow, kPatience);
  ASSERT_TRUE(paused.head);
  ASSERT_EQ(paused.head->status, 200);
  EXPECT_EQ(paused.end, ReadStatus::kEnd);
  EXPECT_TRUE(paused.saw_done);
  EXPECT_FALSE(paused.has_error_event());
  StreamResult direct = read_unthrottled();
  ASSERT_TRUE(direct.head);
  ASSERT_EQ(direct.end, ReadStatus::kEnd);
  EXPECT_FALSE(paused.content().empty());
  EXPECT_EQ(paused.content(), direct.content());
  EXPECT_EQ(paused.chunks.size(), direct.chunks.size());
  EXPECT_EQ(metric("ferry_local_paused_sequences"), 0);
  EXPECT_EQ(metric("ferry_local_active_sequences"), 0);
}

TEST_F(BackpressureTest, PausedReaderThatHangsUpFreesItsSequence) {
  auto slow = start_slow_reader();
  ASSERT_TRUE(slow);
  ASSERT_TRUE(wait_for_metric("ferry_local_paused_sequences", 1));
  EXPECT_EQ(metric("ferry_local_active_sequences"), 1);
  slow->close();  // unread bytes: the kernel resets the connection
  EXPECT_TRUE(wait_for_metric("ferry_local_active_sequences", 0));
  EXPECT_EQ(metric("ferry_local_paused_sequences"), 0);
  EXPECT_EQ(metric("ferry_local_sequences_cancelled_total"), 1);
  // And the process serves on.
  json quick = chat_body("local", "hello");
  quick["max_tokens"] = 4;
  auto after = post_json(ferry_.address, "/v1/chat/completions", quick);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200) << after->body;
}

}  // namespace
}  // namespace ferry::itest
