// The `ferry` binary's command line: --version, config errors with file:line:col, and the
// "listening on" contract of `ferry serve`.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

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

TEST(CliTest, EmbeddedDefaultServesTheDemoModelOrSaysHowToGetOne) {
  TempDir dir;
  std::string cd =
      "cd '" + dir.path().string() + "' && exec " + ferry_binary() + " serve --listen 127.0.0.1:0";
  {
    Process p({"/bin/sh", "-c", cd});
    auto status = p.wait_exit(Ms(15000));
    ASSERT_TRUE(status) << "ferry serve started without a model";
    EXPECT_NE(*status, 0);
    EXPECT_NE(p.stderr_text().find("models/ferry-demo-1m.gguf"), std::string::npos)
        << p.stderr_text();
    EXPECT_NE(p.stderr_text().find("scripts/run.sh"), std::string::npos) << p.stderr_text();
  }
  // The committed demo model, where the embedded default looks for it.
  std::filesystem::create_directories(dir.path() / "models");
  std::filesystem::copy_file(std::string(FERRY_SOURCE_DIR) + "/models/ferry-demo-1m.gguf",
                             dir.path() / "models" / "ferry-demo-1m.gguf");
  Server s = start_server({"/bin/sh", "-c", cd});
  auto models = http_request(s.address, "GET", "/v1/models");
  ASSERT_TRUE(models);
  json listed = models->body_json();
  ASSERT_EQ(listed["data"].size(), 1u) << models->body;
  EXPECT_EQ(listed["data"][0]["id"], "default");
  json body = chat_body("default", "Who made the heaven and the earth?");
  body["max_tokens"] = 150;
  body["temperature"] = 0.8;
  body["seed"] = 1;
  auto r = http_request(s.address, "POST", "/v1/chat/completions", body.dump(),
                        {"Content-Type: application/json"});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json answer = r->body_json();
  ASSERT_TRUE(answer["choices"][0]["message"]["content"].is_string()) << r->body;
  // The trained model answers with words and ends its turn itself (<|im_end|>).
  const std::string content = answer["choices"][0]["message"]["content"];
  std::istringstream in(content);
  int words = 0;
  for (std::string w; in >> w;) words += std::isalpha(static_cast<unsigned char>(w[0])) ? 1 : 0;
  EXPECT_GE(words, 4) << content;
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "stop") << r->body;
  EXPECT_LT(answer["usage"]["completion_tokens"].get<int>(), 150);
  EXPECT_EQ(s.process->stop(Ms(15000)), 0);
}

// `engine generate --chat` renders the prompt with the model's own chat template (the one the
// server uses); the synthetic model ships ChatML.
TEST(CliTest, EngineGenerateChatRendersWithTheModelsTemplate) {
  TempDir dir;
  const std::string model = (dir.path() / "tiny.gguf").string();
  ASSERT_EQ(run_command(ferry_binary() + " model synth --preset tiny --type Q8_0 --seed 1 '" +
                        model + "' > /dev/null"),
            0);
  Process p({ferry_binary(), "engine", "generate", "--model", model, "--chat", "--prompt", "hello",
             "--max-tokens", "3", "--temperature", "0", "--ids"});
  auto status = p.wait_exit(Ms(60000));
  ASSERT_TRUE(status) << "ferry engine generate --chat did not finish";
  EXPECT_EQ(*status, 0) << p.stderr_text();
}

}  // namespace
}  // namespace ferry::itest
