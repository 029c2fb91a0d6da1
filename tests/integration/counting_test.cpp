// One way of counting a prompt, through the real binaries: `ferry tokenize` and `ferry policy
// explain` (CLI) against the server's `usage.prompt_tokens` and `POST /admin/route/explain`
// for the same inputs, on a vocabulary that adds BOS (as Llama 2's does) and a routing rule
// whose threshold sits at the exact count.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/integration/fixtures.h"

namespace ferry::itest {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Turns on `tokenizer.ggml.add_bos_token` in a GGUF file: the key's bool value (type 7) is the
// byte after the key and its 4-byte type.
bool set_add_bos(const std::filesystem::path& path) {
  std::string bytes = read_file(path);
  const std::string key = "tokenizer.ggml.add_bos_token";
  size_t at = bytes.find(key);
  if (at == std::string::npos || at + key.size() + 5 > bytes.size()) return false;
  size_t type_at = at + key.size();
  if (bytes[type_at] != 7 || bytes[type_at + 1] != 0 || bytes[type_at + 2] != 0 ||
      bytes[type_at + 3] != 0) {
    return false;
  }
  bytes[type_at + 4] = 1;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  return static_cast<bool>(out);
}

// Runs a shell command and returns its stdout (nullopt when it exits non-zero).
std::optional<std::string> output_of(const TempDir& dir, const std::string& command) {
  std::string out = (dir.path() / "cmd.out").string();
  if (run_command(command + " > '" + out + "'") != 0) return std::nullopt;
  return read_file(out);
}

class CountingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = (dir_.path() / "bos.gguf").string();
    ASSERT_EQ(run_command(ferry_binary() + " model synth --preset tiny --type Q8_0 --seed 4 '" +
                          model_ + "' > /dev/null"),
              0);
    ASSERT_TRUE(set_add_bos(model_)) << "no add_bos_token key to flip in " << model_;
    upstream_ = start_upstream();
  }
  void TearDown() override {
    if (ferry_.process) {
      EXPECT_EQ(ferry_.process->stop(Ms(15000)), 0);
    }
    if (upstream_.process) upstream_.process->stop();
  }

  // A local model, and an HTTP model counted with the same GGUF's tokenizer; the rule `long`
  // sends prompts of more than `threshold` tokens to the HTTP one.
  void start(int64_t threshold) {
    std::string policy =
        "targets: { local: local, gpu: gpu }\nmodels: [chat]\nrules:\n"
        "  - { id: long, when: { prompt_tokens: { gt: " +
        std::to_string(threshold) + " } }, route: [gpu] }\ndefault: { route: [local] }\n";
    policy_ = dir_.write("policies.yaml", policy);
    std::string cfg =
        "server: { listen: 127.0.0.1:0 }\n"
        "auth:\n  keys:\n"
        "    - { id: admin, key: " +
        std::string(kAdminKey) +
        ", role: admin }\n"
        "    - { id: app, key: " +
        std::string(kAppKey) +
        ", role: app }\n"
        "backends:\n"
        "  - { name: cpu, kind: local, model: " +
        model_ +
        ", threads: 1 }\n"
        "  - { name: up, base_url: \"http://" +
        upstream_.address.host + ":" + std::to_string(upstream_.address.port) +
        "/v1\" }\n"
        "models:\n"
        "  - { name: local, backend: cpu }\n"
        "  - { name: gpu, backend: up, upstream_model: echo, tokenizer: " +
        model_ +
        " }\n"
        "policy: { file: " +
        policy_ + ", watch: false }\n";
    config_ = dir_.write("ferry.yaml", cfg);
    ferry_ = start_ferry(dir_, cfg);
  }

  json server_explain(const json& request) {
    auto r = http_request(ferry_.address, "POST", "/admin/route/explain", request.dump(),
                          auth_headers(kAdminKey));
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return r->body_json();
  }

  json cli_explain(const json& request) {
    std::string req = dir_.write("request.json", request.dump());
    auto out = output_of(dir_, ferry_binary() + " policy explain --json --config '" + config_ +
                                   "' --policy '" + policy_ + "' --request '" + req + "'");
    EXPECT_TRUE(out);
    return out ? json::parse(*out, nullptr, false) : json();
  }

  TempDir dir_;
  std::string model_;
  std::string policy_;
  std::string config_;
  Server upstream_;
  Server ferry_;
};

TEST_F(CountingTest, TokenizeCountsWhatTheServerBillsForTheSameText) {
  start(1000000);
  for (const std::string text : {"Once upon a time", "hello <|im_start|> world", "x"}) {
    std::string file = dir_.write("prompt.txt", text);
    auto counted =
        output_of(dir_, ferry_binary() + " tokenize --tokenizer '" + model_ + "' '" + file + "'");
    ASSERT_TRUE(counted);
    auto ids = output_of(
        dir_, ferry_binary() + " tokenize --ids --tokenizer '" + model_ + "' '" + file + "'");
    ASSERT_TRUE(ids);
    json body = completion_body("chat", text);
    body["max_tokens"] = 1;
    auto r = post_json(ferry_.address, "/v1/completions", body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    int64_t billed = r->body_json()["usage"]["prompt_tokens"].get<int64_t>();
    EXPECT_EQ(std::stoll(*counted), billed) << "'" << text << "'";
    std::istringstream words(*ids);
    int64_t n = 0;
    for (std::string w; words >> w;) ++n;
    EXPECT_EQ(n, billed) << *ids;
  }
  // The chat form counts the rendered template, BOS included, as the server does.
  json chat = chat_body("chat", "Tell me about boats.");
  std::string file = dir_.write("chat.json", chat.dump());
  auto counted = output_of(
      dir_, ferry_binary() + " tokenize --chat --tokenizer '" + model_ + "' '" + file + "'");
  ASSERT_TRUE(counted);
  chat["max_tokens"] = 1;
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(std::stoll(*counted), r->body_json()["usage"]["prompt_tokens"].get<int64_t>());
}

TEST_F(CountingTest, PolicyExplainOnTheCliCountsAndDecidesLikeTheServer) {
  // The threshold is the exact count minus one: only an exact count picks `long`.
  json request = chat_body("chat", "Summarise the history of the lighthouse in three lines.");
  std::string file = dir_.write("chat.json", request.dump());
  auto counted = output_of(
      dir_, ferry_binary() + " tokenize --chat --tokenizer '" + model_ + "' '" + file + "'");
  ASSERT_TRUE(counted);
  int64_t exact = std::stoll(*counted);
  start(exact - 1);

  json server = server_explain(request);
  json cli = cli_explain(request);
  ASSERT_TRUE(server.is_object() && cli.is_object()) << cli.dump();
  EXPECT_EQ(server["facts"]["prompt_tokens"], exact) << server.dump(2);
  EXPECT_EQ(cli["facts"]["prompt_tokens"], server["facts"]["prompt_tokens"]) << cli.dump(2);
  ASSERT_EQ(cli["facts"]["targets"].size(), server["facts"]["targets"].size());
  for (size_t i = 0; i < cli["facts"]["targets"].size(); ++i) {
    const json& c = cli["facts"]["targets"][i];
    const json& s = server["facts"]["targets"][i];
    EXPECT_EQ(c["ref"], s["ref"]);
    EXPECT_EQ(c["prompt_tokens"], s["prompt_tokens"]) << c["ref"];
  }
  EXPECT_EQ(server["decision"]["rule"], "long");
  EXPECT_EQ(cli["decision"]["rule"], server["decision"]["rule"]);
  EXPECT_EQ(cli["prompt_tokens_source"], "tokenizer");
  // Both targets count alike: the local engine and the HTTP model with the same tokenizer.
  for (const auto& t : server["facts"]["targets"]) EXPECT_EQ(t["prompt_tokens"], exact) << t;

  // And the request itself goes where both said, billed at that count.
  json body = request;
  body["max_tokens"] = 1;
  auto r = post_json(ferry_.address, "/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->header("x-ferry-rule").value_or(""), "long");
}

}  // namespace
}  // namespace ferry::itest
