#include "config/config.h"

#include <gtest/gtest.h>

namespace ferry::config {
namespace {

TEST(Config, EmbeddedDefaultLoads) {
  auto cfg = load_config_text(default_config_text(), "<embedded default>");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->server.listen_port, 8080);
  ASSERT_EQ(cfg->models.size(), 1u);
  EXPECT_NE(cfg->find_backend(cfg->models[0].backend), nullptr);
}

TEST(Config, ParsesBackendUrl) {
  auto cfg = load_config_text(R"(
backends:
  - name: gpu
    base_url: https://gpu.example:8443/v1/
  - name: plain
    base_url: http://[::1]/
models:
  - { name: m, backend: gpu }
)", "t.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  const auto* gpu = cfg->find_backend("gpu");
  EXPECT_TRUE(gpu->tls);
  EXPECT_EQ(gpu->host, "gpu.example");
  EXPECT_EQ(gpu->port, 8443);
  EXPECT_EQ(gpu->path_prefix, "/v1");
  const auto* plain = cfg->find_backend("plain");
  EXPECT_EQ(plain->host, "::1");
  EXPECT_EQ(plain->port, 80);
  EXPECT_EQ(plain->path_prefix, "");
  EXPECT_EQ(cfg->models[0].upstream_model, "m");
}

TEST(Config, UnknownKeyIsRefusedWithLineAndColumn) {
  auto cfg = load_config_text("server:\n  listen: 127.0.0.1:1\n  lisen: x\n", "c.yaml");
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("c.yaml:3:3"), std::string::npos) << cfg.error().message;
  EXPECT_NE(cfg.error().message.find("unknown key 'lisen'"), std::string::npos);
}

TEST(Config, WrongTypeIsRefused) {
  auto cfg = load_config_text("limits:\n  max_body_bytes: lots\n", "c.yaml");
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("c.yaml:2:19"), std::string::npos) << cfg.error().message;
}

TEST(Config, DanglingBackendReferenceIsRefused) {
  auto cfg = load_config_text("models:\n  - { name: m, backend: nope }\n", "c.yaml");
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("no backend named 'nope'"), std::string::npos);
  EXPECT_NE(cfg.error().message.find("c.yaml:2:"), std::string::npos);
}

TEST(Config, BrokenYamlIsRefused) {
  auto cfg = load_config_text("server: [unclosed\n", "c.yaml");
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("invalid YAML"), std::string::npos);
}

TEST(Config, KeysAreHashedAndRolesChecked) {
  auto cfg = load_config_text(R"(
auth:
  keys:
    - { id: a, key: secret, team: t, role: finance }
)", "k.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->auth.keys[0].sha256,
            "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b");
  EXPECT_EQ(cfg->auth.keys[0].role, Role::kFinance);
  auto bad = load_config_text("auth:\n  keys:\n    - { id: a, key: s, role: root }\n", "k.yaml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("role"), std::string::npos);
}

TEST(Config, HostPort) {
  auto hp = parse_host_port("127.0.0.1:0");
  ASSERT_TRUE(hp);
  EXPECT_EQ(hp->second, 0);
  EXPECT_FALSE(parse_host_port("nope"));
  EXPECT_FALSE(parse_host_port("h:70000"));
  EXPECT_EQ(parse_host_port("[::1]:9")->first, "::1");
}

}  // namespace
}  // namespace ferry::config

namespace ferry::config {
namespace {

TEST(Config, ExampleFileLoads) {
  auto cfg = load_config_file(std::string(FERRY_SOURCE_DIR) + "/config/ferry.example.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->auth.keys.size(), 1u);
  EXPECT_EQ(cfg->backends[0].timeouts.first_byte_ms, 60000);
  EXPECT_EQ(cfg->models[0].upstream_model, "meta-llama/Llama-3.1-8B-Instruct");
}

}  // namespace
}  // namespace ferry::config
