// The `ferry` binary's command line: --version, config errors with file:line:col, and the
// "listening on" contract of `ferry serve`.
#include <gtest/gtest.h>

#include "tests/integration/fixtures.h"

namespace ferry::itest {
namespace {

TEST(CliTest, VersionPrintsFerryAndExitsZero) {
  ASSERT_FALSE(ferry_binary().empty());
  Process p({ferry_binary(), "--version"});
  auto status = p.wait_exit(Ms(10000));
  ASSERT_TRUE(status);
  EXPECT_EQ(*status, 0);
  auto line = p.wait_for_line("ferry ", Ms(5000));
  EXPECT_TRUE(line) << "stdout: " << (p.stdout_lines().empty() ? "" : p.stdout_lines()[0]);
}

TEST(CliTest, BadConfigIsRefusedWithFileLineAndColumn) {
  TempDir dir;
  std::string path = dir.write("bad.yaml", "server:\n  listen: 127.0.0.1:0\n  no_such_key: 1\n");
  Process p({ferry_binary(), "serve", "--config", path});
  auto status = p.wait_exit(Ms(10000));
  ASSERT_TRUE(status) << "ferry serve kept running on a bad config";
  EXPECT_NE(*status, 0);
  std::string err = p.stderr_text();
  EXPECT_NE(err.find(path + ":3:"), std::string::npos) << err;
  EXPECT_NE(err.find("no_such_key"), std::string::npos) << err;
}

TEST(CliTest, DanglingBackendReferenceIsRefused) {
  TempDir dir;
  std::string path = dir.write("dangling.yaml",
                               "backends:\n  - name: a\n    base_url: http://127.0.0.1:9/v1\n"
                               "models:\n  - name: m\n    backend: b\n");
  Process p({ferry_binary(), "serve", "--config", path, "--listen", "127.0.0.1:0"});
  auto status = p.wait_exit(Ms(10000));
  ASSERT_TRUE(status);
  EXPECT_NE(*status, 0);
  EXPECT_NE(p.stderr_text().find(path + ":6:"), std::string::npos) << p.stderr_text();
}

TEST(CliTest, ServePrintsExactlyOneListeningLine) {
  TempDir dir;
  std::string path = dir.write("ok.yaml",
                               "backends:\n  - name: a\n    base_url: http://127.0.0.1:9/v1\n"
                               "models:\n  - name: m\n    backend: a\n"
                               "log:\n  access_log: off\n");
  Server s = start_server({ferry_binary(), "serve", "--config", path, "--listen", "127.0.0.1:0"});
  EXPECT_EQ(s.address.scheme, "http");
  EXPECT_EQ(s.address.host, "127.0.0.1");
  EXPECT_NE(s.address.port, 0);
  auto r = http_request(s.address, "GET", "/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(s.process->stop(Ms(15000)), 0);
  auto lines = s.process->stdout_lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "listening on " + s.address.url());
  int listening = 0;
  for (const auto& l : lines) listening += l.starts_with("listening on ") ? 1 : 0;
  EXPECT_EQ(listening, 1);
  EXPECT_EQ(lines.size(), 1u) << "access_log: off prints no access lines";
}

}  // namespace
}  // namespace ferry::itest
