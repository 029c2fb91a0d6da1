// Connection limit: past limits.max_connections a new connection gets 503 and is closed, and
// ferry serves again once connections are released.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/fixtures.h"

namespace ferry::itest {
namespace {

TEST(LimitsTest, ConnectionsPastTheLimitGet503AndServiceResumes) {
  TempDir dir;
  Server upstream = start_upstream();
  std::string config = standard_config(upstream.address);
  auto at = config.find("limits:\n");
  ASSERT_NE(at, std::string::npos);
  config.insert(at + 8, "  max_connections: 2\n");
  Server ferry = start_ferry(dir, config);

  // Two connections that each completed a request stay open (keep-alive): the limit is full.
  std::vector<std::unique_ptr<Connection>> held;
  for (int i = 0; i < 2; ++i) {
    auto c = Connection::open(ferry.address.host, ferry.address.port);
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"));
    auto r = c->read_response(Ms(10000));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    held.push_back(std::move(c));
  }

  auto third = Connection::open(ferry.address.host, ferry.address.port);
  ASSERT_TRUE(third);
  auto refused = third->read_response(Ms(10000));
  ASSERT_TRUE(refused) << "no answer on a connection past the limit";
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->body_json()["error"]["type"], "server_error") << refused->body;
  EXPECT_TRUE(third->wait_closed(Ms(10000)));

  // Releasing the held connections makes room again.
  held.clear();
  std::optional<Response> ok;
  for (int attempt = 0; attempt < 50 && !(ok && ok->status == 200); ++attempt) {
    ok = post_json(ferry.address, "/v1/chat/completions", chat_body("gpt-test", "room again"));
    if (!(ok && ok->status == 200)) std::this_thread::sleep_for(Ms(100));
  }
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;

  EXPECT_EQ(ferry.process->stop(Ms(15000)), 0);
  upstream.process->stop();
}

}  // namespace
}  // namespace ferry::itest
