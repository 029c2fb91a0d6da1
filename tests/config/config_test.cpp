#include "config/config.h"

#include <gtest/gtest.h>

#include "tests/common/alias_bomb.h"

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
)",
                              "t.yaml");
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

TEST(Config, BackendApisDefaultToChatAndCompletions) {
  auto cfg = load_config_text(R"(
backends:
  - { name: vllm, base_url: "http://h:1/v1" }
  - { name: anthropic, base_url: "http://h:2/v1", apis: [messages] }
  - { name: both, base_url: "http://h:3/v1", apis: [chat, completions, messages, responses] }
models:
  - { name: m, backend: vllm }
)",
                              "t.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_TRUE(cfg->find_backend("vllm")->speaks("chat"));
  EXPECT_TRUE(cfg->find_backend("vllm")->speaks("completions"));
  EXPECT_FALSE(cfg->find_backend("vllm")->speaks("messages"));
  EXPECT_TRUE(cfg->find_backend("anthropic")->speaks("messages"));
  EXPECT_FALSE(cfg->find_backend("anthropic")->speaks("chat"));
  EXPECT_TRUE(cfg->find_backend("both")->speaks("responses"));
  for (const char* bad : {"[chat, telepathy]", "[]", "[chat, chat]", "chat"}) {
    auto refused = load_config_text(
        std::string("backends:\n  - { name: b, base_url: \"http://h:1/v1\", apis: ") + bad +
            " }\nmodels:\n  - { name: m, backend: b }\n",
        "t.yaml");
    ASSERT_FALSE(refused) << bad;
    EXPECT_NE(refused.error().message.find("apis"), std::string::npos) << refused.error().message;
  }
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

// An alias bomb anywhere in the config (here under a key the config keeps for the ledger,
// whose parser walks it later) is refused at load with its position, before any walk.
TEST(Config, AliasBombIsRefusedWithItsPosition) {
  auto cfg = load_config_text("ledger:\n" + ferry::testing::alias_bomb("  "), "c.yaml");
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("c.yaml:7:"), std::string::npos) << cfg.error().message;
  EXPECT_NE(cfg.error().message.find("more than 200000 nodes"), std::string::npos);
  auto cycle = load_config_text("ledger: &x { a: *x }\n", "c.yaml");
  ASSERT_FALSE(cycle);
  EXPECT_NE(cycle.error().message.find("c.yaml:1:"), std::string::npos) << cycle.error().message;
}

TEST(Config, KeysAreHashedAndRolesChecked) {
  auto cfg = load_config_text(R"(
auth:
  keys:
    - { id: a, key: secret, team: t, role: finance }
)",
                              "k.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->auth.keys[0].sha256,
            "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b");
  EXPECT_EQ(cfg->auth.keys[0].role, Role::kFinance);
  auto bad = load_config_text("auth:\n  keys:\n    - { id: a, key: s, role: root }\n", "k.yaml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("role"), std::string::npos);
  // "shadow" marks a shadow copy's row in the ledger: no key's requests may carry it.
  auto shadow =
      load_config_text("auth:\n  keys:\n    - { id: a, key: s, tags: [x, shadow] }\n", "k.yaml");
  ASSERT_FALSE(shadow);
  EXPECT_NE(shadow.error().message.find("'shadow' is reserved"), std::string::npos)
      << shadow.error().message;
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
  ASSERT_EQ(cfg->backends.size(), 3u);  // one server, a replica pool, the local engine
  EXPECT_EQ(cfg->backends[1].replicas.size(), 2u);
  ASSERT_TRUE(cfg->backends[2].local);
  EXPECT_EQ(cfg->backends[2].local->model_path,
            std::string(FERRY_SOURCE_DIR) + "/config/models/qwen2.5-0.5b-instruct-q8_0.gguf");
  ASSERT_TRUE(cfg->policy);
  EXPECT_EQ(cfg->policy->file, std::string(FERRY_SOURCE_DIR) + "/config/policies.yaml");
  EXPECT_TRUE(cfg->ledger.present());
  EXPECT_TRUE(cfg->prices.present());
  EXPECT_TRUE(cfg->budgets.present());
}

TEST(Config, LocalBackendKeys) {
  auto cfg = load_config_text(R"(
backends:
  - { name: cpu, kind: local, model: /m/x.gguf, threads: 2, max_sequences: 8, max_queue: 3,
      kv_budget_mb: 512, prefill_chunk: 64, prefix_cache: false, context_length: 2048,
      max_unread_tokens: 8 }
models:
  - { name: small, backend: cpu }
)",
                              "t.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  const auto& l = *cfg->backends[0].local;
  EXPECT_EQ(cfg->backends[0].kind, "local");
  EXPECT_EQ(l.model_path, "/m/x.gguf");
  EXPECT_EQ(l.threads, 2);
  EXPECT_EQ(l.max_sequences, 8);
  EXPECT_EQ(l.max_queue, 3);
  EXPECT_EQ(l.kv_budget_mb, 512);
  EXPECT_EQ(l.prefill_chunk, 64);
  EXPECT_FALSE(l.prefix_cache);
  EXPECT_EQ(l.context_length, 2048);
  EXPECT_EQ(l.max_unread_tokens, 8);
  // The decoder-only keys it sets, for an encoder model to refuse by name.
  EXPECT_EQ(l.decoder_keys,
            (std::vector<std::string>{"context_length", "max_sequences", "kv_budget_mb",
                                      "prefill_chunk", "prefix_cache", "max_unread_tokens"}));
  EXPECT_FALSE(cfg->ledger.present());
  EXPECT_FALSE(cfg->policy);
  auto plain = load_config_text(
      "backends:\n  - { name: cpu, kind: local, model: x.gguf, threads: 1, max_queue: 2 }\n",
      "t.yaml");
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_TRUE(plain->backends[0].local->decoder_keys.empty());
}

TEST(Config, LocalBackendMaxUnreadTokensIsBounded) {
  auto dflt =
      load_config_text("backends:\n  - { name: cpu, kind: local, model: x.gguf }\n", "t.yaml");
  ASSERT_TRUE(dflt) << dflt.error().message;
  EXPECT_EQ(dflt->backends[0].local->max_unread_tokens, 64);
  // No "unbounded": a slow client must not make ferry buffer without limit.
  auto zero = load_config_text(
      "backends:\n  - { name: cpu, kind: local, model: x.gguf, max_unread_tokens: 0 }\n", "t.yaml");
  ASSERT_FALSE(zero);
  EXPECT_NE(zero.error().message.find("max_unread_tokens"), std::string::npos)
      << zero.error().message;
}

// speculative: on by default (prompt lookup, 8 drafted, suffixes of 2+); a mode or a number it
// cannot take is refused naming the key.
TEST(Config, LocalBackendSpeculativeKeys) {
  auto dflt =
      load_config_text("backends:\n  - { name: cpu, kind: local, model: x.gguf }\n", "t.yaml");
  ASSERT_TRUE(dflt) << dflt.error().message;
  const auto& d = dflt->backends[0].local->speculative;
  EXPECT_TRUE(d.prompt_lookup);
  EXPECT_EQ(d.max_draft, 8);
  EXPECT_EQ(d.min_match, 2);
  auto set = load_config_text(
      "backends:\n  - { name: cpu, kind: local, model: x.gguf,\n"
      "      speculative: { mode: off, max_draft: 4, min_match: 3 } }\n",
      "t.yaml");
  ASSERT_TRUE(set) << set.error().message;
  const auto& s = set->backends[0].local->speculative;
  EXPECT_FALSE(s.prompt_lookup);
  EXPECT_EQ(s.max_draft, 4);
  EXPECT_EQ(s.min_match, 3);
  const std::pair<std::string, std::string> bad[] = {{"{ mode: medusa }", "mode"},
                                                     {"{ max_draft: 0 }", "max_draft"},
                                                     {"{ max_draft: 65 }", "max_draft"},
                                                     {"{ min_match: 0 }", "min_match"},
                                                     {"{ draft_model: x.gguf }", "draft_model"}};
  for (const auto& [value, key] : bad) {
    auto r = load_config_text(
        "backends:\n  - { name: cpu, kind: local, model: x.gguf, speculative: " + value + " }\n",
        "t.yaml");
    ASSERT_FALSE(r) << value;
    EXPECT_NE(r.error().message.find(key), std::string::npos) << r.error().message;
  }
}

TEST(Config, LocalBackendRefusesHttpKeysAndUnknownKinds) {
  auto cfg = load_config_text(
      "backends:\n  - { name: cpu, kind: local, model: x.gguf, base_url: http://a/v1 }\n",
      "t.yaml");
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("t.yaml:2:"), std::string::npos) << cfg.error().message;
  EXPECT_NE(cfg.error().message.find("base_url"), std::string::npos) << cfg.error().message;
  auto kind =
      load_config_text("backends:\n  - { name: x, kind: grpc, base_url: http://a/v1 }\n", "t.yaml");
  ASSERT_FALSE(kind);
  EXPECT_NE(kind.error().message.find("'local'"), std::string::npos) << kind.error().message;
  auto missing = load_config_text("backends:\n  - { name: cpu, kind: local }\n", "t.yaml");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("model"), std::string::npos);
}

TEST(Config, PolicyPathIsRelativeToTheConfigFile) {
  auto cfg = load_config_text("policy: { file: p.yaml, watch: false }\n", "/etc/ferry/ferry.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->policy->file, "/etc/ferry/p.yaml");
  EXPECT_FALSE(cfg->policy->watch);
  auto bad = load_config_text("policy: { path: p.yaml }\n", "/etc/ferry/ferry.yaml");
  ASSERT_FALSE(bad);
}

}  // namespace
}  // namespace ferry::config
