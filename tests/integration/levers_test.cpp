// The cost levers through the real binaries: context trimming (the prompt that reaches the
// backend recounted with `ferry tokenize --chat`, tool pairs kept, a 400 when nothing fits),
// the response cache (hits and misses, stream and body, keys isolated, no caching of failed-over
// or sampled answers, expiry, the opt-out headers), each lever's row in the SQLite ledger and
// the savings report reconciling with the rows.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "ledger/sqlite_db.h"
#include "tests/integration/fixtures.h"

namespace ferry::itest {
namespace {

constexpr const char* kOtherKey = "sk-test-other-team-777";

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class LeversTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = (dir_.path() / "tiny.gguf").string();
    ASSERT_EQ(run_command(ferry_binary() + " model synth --preset tiny --type Q8_0 --seed 4 '" +
                          model_ + "' > /dev/null"),
              0);
    upstream_ = start_upstream();
    db_ = (dir_.path() / "ledger.db").string();
  }
  void TearDown() override {
    if (ferry_.process) {
      EXPECT_EQ(ferry_.process->stop(Ms(15000)), 0);
    }
    if (upstream_.process) upstream_.process->stop();
  }

  // `rules`: the policy's rules (YAML list items); `gpu` answers (the echo upstream, counted with
  // the synthetic model's tokenizer and template), `broken` fails with a 500; with
  // `local_backend` (a local backend's YAML members after its name and kind), target `local`
  // is that in-process model.
  void start(const std::string& rules, const std::string& extra_config = "",
             const std::string& local_backend = "") {
    const bool local = !local_backend.empty();
    std::string policy = std::string("targets: { gpu: gpu, broken: broken") +
                         (local ? ", local: local" : "") + " }\nmodels: [chat, plain]\nrules:\n" +
                         rules + "default: { route: [gpu] }\n";
    std::string policy_file = dir_.write("policies.yaml", policy);
    std::string cfg =
        "server: { listen: 127.0.0.1:0 }\n"
        "auth:\n  keys:\n"
        "    - { id: admin, key: " +
        std::string(kAdminKey) +
        ", role: admin }\n"
        "    - { id: app, key: " +
        std::string(kAppKey) +
        ", role: app, team: red }\n"
        "    - { id: other, key: " +
        std::string(kOtherKey) +
        ", role: app, team: blue }\n"
        "backends:\n"
        "  - { name: up, base_url: \"http://" +
        upstream_.address.host + ":" + std::to_string(upstream_.address.port) + "/v1\" }\n" +
        (local ? "  - { name: cpu, kind: local, " + local_backend + " }\n" : std::string()) +
        "models:\n" + (local ? "  - { name: local, backend: cpu }\n" : std::string()) +
        "  - { name: gpu, backend: up, upstream_model: echo, context_length: 4096, tokenizer: " +
        model_ +
        " }\n"
        "  - { name: broken, backend: up, upstream_model: fail-500, tokenizer: " +
        model_ +
        " }\n"
        "policy: { file: " +
        policy_file +
        ", watch: false }\n"
        "ledger:\n  path: " +
        db_ +
        "\nprices:\n  - { model: gpu, effective_from: 2026-01-01, input: 3.00, output: 15.00 }\n"
        "  - { model: broken, effective_from: 2026-01-01, input: 3.00, output: 15.00 }\n" +
        extra_config;
    ferry_ = start_ferry(dir_, cfg);
  }

  // `ferry tokenize --chat` of a chat body: the exact prompt count of the synthetic model.
  int64_t tokenize(const json& body) {
    std::string file = dir_.write("count.json", body.dump());
    std::string out = (dir_.path() / "count.out").string();
    EXPECT_EQ(run_command(ferry_binary() + " tokenize --chat --tokenizer '" + model_ + "' '" +
                          file + "' > '" + out + "'"),
              0);
    return std::stoll(read_file(out));
  }

  Response chat(const json& body, const std::vector<std::string>& headers = auth_headers()) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", body, headers);
    EXPECT_TRUE(r);
    return r ? *r : Response{};
  }

  int64_t upstream_requests() { return upstream_stats(upstream_.address)["requests"]; }

  // One column of every request row, in order ("<null>" for NULL).
  std::vector<std::string> column(const std::string& expr) {
    std::vector<std::string> out;
    if (ferry_.process) wait_ledger_committed(ferry_.address);
    auto db = ledger::Db::open(db_, true);
    EXPECT_TRUE(db);
    if (!db) return out;
    auto stmt = db->prepare("SELECT " + expr + " FROM requests WHERE kind='request' ORDER BY seq");
    EXPECT_TRUE(stmt) << expr;
    if (!stmt) return out;
    for (;;) {
      auto has = stmt->step();
      if (!has || !*has) break;
      if (stmt->is_null(0)) {
        out.push_back("<null>");
        continue;
      }
      ledger::Value v = stmt->value_at(0);
      out.push_back(std::holds_alternative<int64_t>(v) ? std::to_string(std::get<int64_t>(v))
                                                       : std::get<std::string>(v));
    }
    return out;
  }

  TempDir dir_;
  std::string model_;
  std::string db_;
  Server upstream_;
  Server ferry_;
};

// A conversation: a system prompt, `turns` user/assistant exchanges, then the last question.
json conversation(int turns) {
  json messages = json::array();
  messages.push_back({{"role", "system"}, {"content", "You are a terse assistant."}});
  for (int i = 0; i < turns; ++i) {
    messages.push_back({{"role", "user"},
                        {"content", "Question number " + std::to_string(i) +
                                        " about the lighthouse keepers of the northern coast."}});
    messages.push_back({{"role", "assistant"},
                        {"content", "Answer " + std::to_string(i) + ": they kept the lamps lit."}});
  }
  messages.push_back({{"role", "user"}, {"content", "And what happened last?"}});
  return {{"model", "chat"}, {"messages", messages}, {"max_tokens", 8}, {"temperature", 0}};
}

// The body with the first `drop` exchanges after the system prompt removed.
json dropped(json body, int drop) {
  auto& m = body["messages"];
  m.erase(m.begin() + 1, m.begin() + 1 + 2 * drop);
  return body;
}

TEST_F(LeversTest, TrimDropsTheOldestTurnsUntilTheExactCountFits) {
  const json full = conversation(12);
  const int64_t before = tokenize(full);
  // A limit between the counts with 4 and with 3 whole exchanges dropped: trimming drops
  // the 3 oldest exchanges' 6 messages and one more message (its exchange's user turn).
  const int64_t limit = tokenize(dropped(full, 4)) + 1;
  ASSERT_LT(limit, tokenize(dropped(full, 3)));
  start("  - { id: fit, when: { model: chat }, route: [gpu], trim: { max_prompt_tokens: " +
        std::to_string(limit) + " } }\n");
  Response r = chat(full);
  ASSERT_EQ(r.status, 200) << r.body;
  json sent = upstream_last_request(upstream_.address)["body"];
  json resent = {{"model", "chat"}, {"messages", sent["messages"]}};
  const int64_t after = tokenize(resent);
  EXPECT_LE(after, limit);
  EXPECT_EQ(r.header("x-ferry-trimmed-tokens"), std::to_string(before - after));
  // The fewest messages dropped: one message more would have fit too many tokens.
  const auto& kept = sent["messages"];
  EXPECT_EQ(kept.front(), full["messages"].front()) << "the system prompt stays";
  EXPECT_EQ(kept.back(), full["messages"].back()) << "the last user turn stays";
  const size_t dropped_count = full["messages"].size() - kept.size();
  ASSERT_GE(dropped_count, 1u);
  json one_less = full;
  one_less["messages"].erase(one_less["messages"].begin() + 1,
                             one_less["messages"].begin() + static_cast<long>(dropped_count));
  EXPECT_GT(tokenize(one_less), limit) << "dropping one message fewer would not fit";
  // The ledger: the tokens removed, priced at the target's input price ($3 per million).
  EXPECT_EQ(column("trimmed_tokens"), std::vector<std::string>{std::to_string(before - after)});
  EXPECT_EQ(column("trim_avoided"), std::vector<std::string>{std::to_string((before - after) * 3)});

  // A conversation that already fits is untouched, header 0.
  Response small = chat(conversation(0));
  ASSERT_EQ(small.status, 200) << small.body;
  EXPECT_EQ(small.header("x-ferry-trimmed-tokens"), "0");
  EXPECT_EQ(upstream_last_request(upstream_.address)["body"]["messages"].size(), 2u);
}

TEST_F(LeversTest, TrimNeverSplitsAToolCallFromItsResult) {
  json body = conversation(0);
  auto& m = body["messages"];
  json call = {
      {"role", "assistant"},
      {"content", ""},  // (the synthetic template cannot render a null)
      {"tool_calls",
       json::array({{{"id", "call_1"},
                     {"type", "function"},
                     {"function", {{"name", "lookup"}, {"arguments", "{\"q\":\"keepers\"}"}}}}})}};
  json result = {{"role", "tool"},
                 {"tool_call_id", "call_1"},
                 {"content", "A long tool result about the keepers of the northern lighthouse."}};
  m.insert(m.begin() + 1, json{{"role", "user"}, {"content", "look it up please"}});
  m.insert(m.begin() + 2, call);
  m.insert(m.begin() + 3, result);
  m.insert(m.begin() + 4, json{{"role", "assistant"}, {"content", "Found it."}});
  // The limit lies between dropping the call and dropping its result too.
  json without_call = body;
  without_call["messages"].erase(without_call["messages"].begin() + 1,
                                 without_call["messages"].begin() + 3);  // user, call
  json without_pair = body;
  without_pair["messages"].erase(without_pair["messages"].begin() + 1,
                                 without_pair["messages"].begin() + 4);  // user, call, result
  const int64_t limit = tokenize(without_pair);
  ASSERT_LT(limit, tokenize(without_call));
  start("  - { id: fit, when: { model: chat }, route: [gpu], trim: { max_prompt_tokens: " +
        std::to_string(limit) + " } }\n");
  Response r = chat(body);
  ASSERT_EQ(r.status, 200) << r.body;
  json sent = upstream_last_request(upstream_.address)["body"]["messages"];
  for (size_t i = 0; i < sent.size(); ++i) {
    if (sent[i]["role"] != "tool") continue;
    ASSERT_GT(i, 0u);
    EXPECT_TRUE(sent[i - 1].contains("tool_calls")) << "a tool result without its call";
  }
  EXPECT_EQ(sent.size(), body["messages"].size() - 3) << sent.dump();
}

TEST_F(LeversTest, TrimRefusesWhenEvenTheMinimumDoesNotFit) {
  start(
      "  - { id: fit, when: { model: chat }, route: [gpu], trim: { max_prompt_tokens: 5, "
      "keep_last_turns: 1 } }\n");
  Response r = chat(conversation(3));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body_json()["error"]["code"], "context_length_exceeded") << r.body;
  EXPECT_EQ(upstream_requests(), 0);
  // It keeps serving: the policy's other requests still go through.
  Response again = chat(conversation(3));
  EXPECT_EQ(again.status, 400);
  Response fits = chat(conversation(0));
  EXPECT_EQ(fits.status, 400) << "a 5-token limit fits no conversation";
  ASSERT_TRUE(ferry_.process);
  EXPECT_EQ(ferry_.process->stop(Ms(15000)), 0);  // refusal rows are queued: all durable now
  ferry_.process.reset();
  EXPECT_EQ(column("status"), (std::vector<std::string>{"refused", "refused", "refused"}));
}

TEST_F(LeversTest, CacheServesRepeatsAsBodiesAndStreamsPerKey) {
  start("  - { id: cached, when: { model: chat }, route: [gpu], cache: { ttl: 10m } }\n");
  json body = chat_body("chat", "What is a lighthouse?");
  body["temperature"] = 0;
  Response first = chat(body);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.header("x-ferry-cache"), "miss");
  EXPECT_EQ(upstream_requests(), 1);
  Response second = chat(body);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.header("x-ferry-cache"), "hit");
  EXPECT_EQ(upstream_requests(), 1) << "a hit never reaches the backend";
  const std::string content = first.body_json()["choices"][0]["message"]["content"];
  EXPECT_EQ(second.body_json()["choices"][0]["message"]["content"], content);
  EXPECT_EQ(second.body_json()["model"], "chat");

  // The same request streamed: replayed as SSE from the kept answer.
  json streamed = body;
  streamed["stream"] = true;
  StreamResult s = stream_request(ferry_.address, "/v1/chat/completions", streamed);
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->header("x-ferry-cache"), "hit");
  EXPECT_EQ(s.content(), content);
  EXPECT_TRUE(s.saw_done);
  EXPECT_EQ(upstream_requests(), 1);

  // Another key (another team) with the same prompt: its own namespace, a miss.
  Response other = chat(body, auth_headers(kOtherKey));
  ASSERT_EQ(other.status, 200);
  EXPECT_EQ(other.header("x-ferry-cache"), "miss");
  EXPECT_EQ(upstream_requests(), 2);

  // The rows: hits cost nothing and carry what they avoided, the original row's cost.
  auto cache = column("cache");
  auto costs = column("cost_total");
  auto avoided = column("cache_avoided");
  ASSERT_EQ(cache, (std::vector<std::string>{"miss", "hit", "hit", "miss"}));
  EXPECT_EQ(costs[1], "0");
  EXPECT_EQ(costs[2], "0");
  EXPECT_EQ(avoided[1], costs[0]);
  EXPECT_EQ(avoided[2], costs[0]);
  EXPECT_NE(costs[0], "0");
}

TEST_F(LeversTest, CacheStoresAStreamedMissAndServesItAsABody) {
  start("  - { id: cached, when: { model: chat }, route: [gpu], cache: { ttl: 10m } }\n");
  json body = chat_body("chat", "Tell me about the fog horn.", true);
  body["seed"] = 7;
  StreamResult s = stream_request(ferry_.address, "/v1/chat/completions", body);
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->header("x-ferry-cache"), "miss");
  body["stream"] = false;
  Response hit = chat(body);
  ASSERT_EQ(hit.status, 200) << hit.body;
  EXPECT_EQ(hit.header("x-ferry-cache"), "hit");
  EXPECT_EQ(hit.body_json()["choices"][0]["message"]["content"], s.content());
  EXPECT_EQ(upstream_requests(), 1);
}

TEST_F(LeversTest, CacheSkipsSampledAndFailedOverAnswers) {
  start(
      "  - { id: failover, when: { model: chat, claimed_tags: failover }, route: [broken, gpu], "
      "cache: { ttl: 10m } }\n"
      "  - { id: cached, when: { model: chat }, route: [gpu], cache: { ttl: 10m } }\n");
  json sampled = chat_body("chat", "Sampled answer please.");
  sampled["temperature"] = 0.8;
  for (int i = 0; i < 2; ++i) {
    Response r = chat(sampled);
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.header("x-ferry-cache"), "bypass");
  }
  EXPECT_EQ(upstream_requests(), 2);

  json failed_over = chat_body("chat", "Through the fallback.");
  failed_over["temperature"] = 0;
  std::vector<std::string> headers = auth_headers();
  headers.push_back("x-ferry-tags: failover");
  for (int i = 0; i < 2; ++i) {
    Response r = chat(failed_over, headers);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-ferry-target"), "gpu");
    EXPECT_EQ(r.header("x-ferry-cache"), "miss") << "a fallback's answer is never kept";
  }
  // Each request of a caching rule says in its row what the cache did.
  EXPECT_EQ(column("cache"), (std::vector<std::string>{"bypass", "bypass", "miss", "miss"}));
  EXPECT_EQ(column("cache_avoided"),
            (std::vector<std::string>{"<null>", "<null>", "<null>", "<null>"}));
}

// The server-wide `cache:` section: a bound of 0 keeps nothing; per_policy_version: an answer
// is found again only under the policy version that kept it (a reload to another version
// misses, and the new version's answers are then hits).
TEST_F(LeversTest, CacheSizeAndPolicyVersionAreConfigured) {
  start("  - { id: cached, when: { model: chat }, route: [gpu], cache: { ttl: 10m } }\n",
        "cache: { max_bytes: 0 }\n");
  json body = chat_body("chat", "Nothing is kept.");
  body["temperature"] = 0;
  EXPECT_EQ(chat(body).header("x-ferry-cache"), "miss");
  EXPECT_EQ(chat(body).header("x-ferry-cache"), "miss");
  EXPECT_EQ(upstream_requests(), 2);
  ASSERT_EQ(ferry_.process->stop(Ms(15000)), 0);
  ferry_.process.reset();

  start("  - { id: cached, when: { model: chat }, route: [gpu], cache: { ttl: 10m } }\n",
        "cache: { max_bytes: 1048576, per_policy_version: true }\n");
  EXPECT_EQ(chat(body).header("x-ferry-cache"), "miss");
  Response hit = chat(body);
  EXPECT_EQ(hit.header("x-ferry-cache"), "hit");
  const std::string version = hit.header("x-ferry-policy").value_or("");
  // Another policy version: the rule's id changes, and so does the version.
  dir_.write("policies.yaml",
             "targets: { gpu: gpu, broken: broken }\nmodels: [chat, plain]\nrules:\n"
             "  - { id: cached2, when: { model: chat }, route: [gpu], cache: { ttl: 10m } }\n"
             "default: { route: [gpu] }\n");
  auto reload =
      post_json(ferry_.address, "/admin/policy/reload", json::object(), auth_headers(kAdminKey));
  ASSERT_TRUE(reload);
  ASSERT_EQ(reload->status, 200) << reload->body;
  Response after = chat(body);
  EXPECT_NE(after.header("x-ferry-policy"), version);
  EXPECT_EQ(after.header("x-ferry-cache"), "miss") << "kept under the old version";
  EXPECT_EQ(chat(body).header("x-ferry-cache"), "hit");
}

TEST_F(LeversTest, CacheEntriesExpireAndClientsOptOut) {
  start("  - { id: cached, when: { model: chat }, route: [gpu], cache: { ttl: 1s } }\n");
  json body = chat_body("chat", "Short lived.");
  body["temperature"] = 0;
  EXPECT_EQ(chat(body).header("x-ferry-cache"), "miss");
  EXPECT_EQ(chat(body).header("x-ferry-cache"), "hit");
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  EXPECT_EQ(chat(body).header("x-ferry-cache"), "miss") << "expired after its ttl";

  // no-cache: not answered from the cache (but kept); no-store: not kept.
  std::vector<std::string> no_cache = auth_headers();
  no_cache.push_back("x-ferry-cache: no-cache");
  int64_t before = upstream_requests();
  EXPECT_EQ(chat(body, no_cache).header("x-ferry-cache"), "miss");
  EXPECT_EQ(upstream_requests(), before + 1);
  json fresh = chat_body("chat", "Never kept.");
  fresh["temperature"] = 0;
  std::vector<std::string> no_store = auth_headers();
  no_store.push_back("x-ferry-cache: no-store");
  EXPECT_EQ(chat(fresh, no_store).header("x-ferry-cache"), "miss");
  EXPECT_EQ(chat(fresh).header("x-ferry-cache"), "miss");
  EXPECT_EQ(chat(fresh).header("x-ferry-cache"), "hit");
  std::vector<std::string> bad = auth_headers();
  bad.push_back("x-ferry-cache: sometimes");
  Response refused = chat(fresh, bad);
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.body.find("x-ferry-cache"), std::string::npos) << refused.body;
}

TEST_F(LeversTest, SavingsByLeverReconcileWithTheRowsToTheMicroUnit) {
  const json full = conversation(12);
  const int64_t limit = tokenize(dropped(full, 4)) + 1;
  start(
      "  - { id: fit, when: { model: chat }, route: [gpu], cache: { ttl: 10m }, "
      "trim: { max_prompt_tokens: " +
      std::to_string(limit) + " }, set: { reasoning: high } }\n");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(chat(full).status, 200);  // a miss, then two hits
  json other = conversation(1);
  ASSERT_EQ(chat(other).status, 200);
  EXPECT_EQ(upstream_last_request(upstream_.address)["body"]["reasoning_effort"], "high");
  ASSERT_TRUE(ferry_.process);
  EXPECT_EQ(ferry_.process->stop(Ms(15000)), 0);  // every row durable and the file closed
  ferry_.process.reset();
  std::string out = (dir_.path() / "savings.json").string();
  ASSERT_EQ(run_command(ferry_binary() + " ledger report --savings --format json --db '" + db_ +
                        "' > '" + out + "'"),
            0);
  json report = json::parse(read_file(out));
  const json& levers = report["savings_by_lever"];
  ASSERT_TRUE(levers.is_object()) << report.dump(2);
  auto sum = [&](const std::string& expr) {
    auto v = column("COALESCE(SUM(" + expr + "),0)");
    return v.empty() ? std::string("?") : v.front();
  };
  auto money = [](const std::string& micros) {
    int64_t m = std::stoll(micros);
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%lld.%06lld", static_cast<long long>(m / 1000000),
                  static_cast<long long>(m % 1000000));
    return std::string(buf);
  };
  EXPECT_EQ(levers["cache"]["hits"], 2);
  EXPECT_EQ(std::to_string(levers["cache"]["tokens"].get<int64_t>()), sum("cache_tokens"));
  EXPECT_EQ(levers["cache"]["avoided_cost"], money(sum("cache_avoided")));
  EXPECT_EQ(std::to_string(levers["trim"]["tokens"].get<int64_t>()), sum("trimmed_tokens"));
  EXPECT_EQ(levers["trim"]["avoided_cost"], money(sum("trim_avoided")));
  // The hits were planned (and trimmed) too: a hit avoids the trimmed answer's cost, its trim
  // the tokens trimming took off; together what the request would have cost without levers.
  EXPECT_EQ(levers["trim"]["requests"], 3);
  EXPECT_EQ(levers["reasoning"]["capped_requests"], 4);
  EXPECT_NE(levers["cache"]["avoided_cost"], "0.000000");
  EXPECT_EQ(column("reasoning_budget"),
            (std::vector<std::string>{"effort:high", "effort:high", "effort:high", "effort:high"}));
}

// A hit is served in the front-end the client speaks: an Anthropic Messages request answered
// by an OpenAI chat target is kept and replayed as a Messages body and as its event stream.
TEST_F(LeversTest, CacheHitsAreServedInTheMessagesFrontEnd) {
  start("  - { id: cached, when: { model: chat }, route: [gpu], cache: { ttl: 10m } }\n");
  const json body = {
      {"model", "chat"},
      {"max_tokens", 64},
      {"temperature", 0},
      {"messages", json::array({{{"role", "user"}, {"content", "Hail the keeper."}}})}};
  const std::vector<std::string> headers = {std::string("x-api-key: ") + kAppKey,
                                            "anthropic-version: 2023-06-01"};
  auto first = post_json(ferry_.address, "/v1/messages", body, headers);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_EQ(first->header("x-ferry-cache"), "miss");
  auto second = post_json(ferry_.address, "/v1/messages", body, headers);
  ASSERT_TRUE(second);
  ASSERT_EQ(second->status, 200) << second->body;
  EXPECT_EQ(second->header("x-ferry-cache"), "hit");
  EXPECT_EQ(second->body_json()["type"], "message");
  EXPECT_EQ(second->body_json()["content"], first->body_json()["content"]);
  json streamed = body;
  streamed["stream"] = true;
  StreamResult s = stream_request(ferry_.address, "/v1/messages", streamed, headers);
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->header("x-ferry-cache"), "hit");
  std::string text;
  bool stopped = false;
  for (const json& e : s.chunks) {
    if (e.value("type", "") == "content_block_delta") text += e["delta"].value("text", "");
    stopped = stopped || e.value("type", "") == "message_stop";
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text, first->body_json()["content"][0]["text"]);
  EXPECT_EQ(upstream_requests(), 1);
}

// The same for the Responses front-end: a whole response and a stream of response.* events,
// both answered from the one upstream answer kept for the first request.
TEST_F(LeversTest, CacheHitsAreServedInTheResponsesFrontEnd) {
  start("  - { id: cached, when: { model: chat }, route: [gpu], cache: { ttl: 10m } }\n");
  const json body = {{"model", "chat"},
                     {"max_output_tokens", 64},
                     {"temperature", 0},
                     {"store", false},
                     {"input", "Hail the keeper of the ledger."}};
  const std::vector<std::string> headers = auth_headers(kAppKey);
  auto first = post_json(ferry_.address, "/v1/responses", body, headers);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_EQ(first->header("x-ferry-cache"), "miss");
  const json first_json = first->body_json();
  ASSERT_EQ(first_json["object"], "response") << first->body;
  std::string first_text;
  for (const json& item : first_json["output"]) {
    if (item.value("type", "") != "message") continue;
    for (const json& part : item["content"]) first_text += part.value("text", "");
  }
  ASSERT_FALSE(first_text.empty()) << first->body;
  auto second = post_json(ferry_.address, "/v1/responses", body, headers);
  ASSERT_TRUE(second);
  ASSERT_EQ(second->status, 200) << second->body;
  EXPECT_EQ(second->header("x-ferry-cache"), "hit");
  EXPECT_EQ(second->body_json()["object"], "response");
  EXPECT_EQ(second->body_json()["status"], "completed");
  EXPECT_EQ(second->body_json()["output"].size(), first_json["output"].size());
  json streamed = body;
  streamed["stream"] = true;
  StreamResult s = stream_request(ferry_.address, "/v1/responses", streamed, headers);
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->header("x-ferry-cache"), "hit");
  std::string text;
  bool completed = false;
  for (const json& e : s.chunks) {
    if (e.value("type", "") == "response.output_text.delta") text += e.value("delta", "");
    completed = completed || e.value("type", "") == "response.completed";
  }
  EXPECT_TRUE(completed);
  EXPECT_EQ(text, first_text);
  EXPECT_EQ(upstream_requests(), 1);
}

// A hit costs nothing, so no budget reserves for it or refuses it: team red's hard budget of one
// micro-dollar refuses any request it would pay for, but not the answer another team's request
// left in a global cache.
TEST_F(LeversTest, CacheHitsNeverCountAgainstBudgets) {
  start(
      "  - { id: shared, when: { model: chat }, route: [gpu], cache: { ttl: 10m, scope: global } "
      "}\n",
      "budgets:\n  - { name: red-cap, scope: team, match: red, amount: 0.000001, period: day, "
      "mode: hard }\n");
  json body = chat_body("chat", "What does the keeper log?");
  body["temperature"] = 0;
  Response blue = chat(body, auth_headers(kOtherKey));
  ASSERT_EQ(blue.status, 200) << blue.body;
  EXPECT_EQ(blue.header("x-ferry-cache"), "miss");
  for (int i = 0; i < 2; ++i) {
    Response red = chat(body);
    ASSERT_EQ(red.status, 200) << red.body;
    EXPECT_EQ(red.header("x-ferry-cache"), "hit");
  }
  json other = chat_body("chat", "Something new, please.");
  other["temperature"] = 0;
  Response refused = chat(other);
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.body_json()["error"]["param"], "red-cap") << refused.body;
  EXPECT_EQ(upstream_requests(), 1);
  const auto cache = column("cache");
  const auto costs = column("cost_total");
  ASSERT_GE(cache.size(), 3u);
  ASSERT_GE(costs.size(), 3u);
  EXPECT_EQ(cache[1], "hit");
  EXPECT_EQ(cache[2], "hit");
  EXPECT_EQ(costs[1], "0");
  EXPECT_EQ(costs[2], "0");
}

// Hits take from the rate limits as the rule says: `exempt` hits take nothing, `count` hits take
// a request as a miss would (team red: one request a minute).
TEST_F(LeversTest, CacheHitsCountAgainstRateLimitsAsConfigured) {
  start(
      "  - { id: counted, when: { model: chat, claimed_tags: counted }, route: [gpu], "
      "cache: { ttl: 10m, scope: global, rate_limits: count } }\n"
      "  - { id: exempt, when: { model: chat }, route: [gpu], cache: { ttl: 10m, scope: global, "
      "rate_limits: exempt } }\n",
      "rate_limits:\n  - { name: red-rpm, scope: team, match: red, requests_per_minute: 1 }\n");
  json free = chat_body("chat", "Exempt question.");
  free["temperature"] = 0;
  ASSERT_EQ(chat(free, auth_headers(kOtherKey)).status, 200);  // blue: the miss
  for (int i = 0; i < 3; ++i) {
    Response r = chat(free);
    ASSERT_EQ(r.status, 200) << i << " " << r.body;
    EXPECT_EQ(r.header("x-ferry-cache"), "hit");
  }
  json counted = chat_body("chat", "Counted question.");
  counted["temperature"] = 0;
  std::vector<std::string> blue = auth_headers(kOtherKey);
  blue.push_back("x-ferry-tags: counted");
  ASSERT_EQ(chat(counted, blue).status, 200);
  std::vector<std::string> red = auth_headers();
  red.push_back("x-ferry-tags: counted");
  Response first = chat(counted, red);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.header("x-ferry-cache"), "hit");
  EXPECT_EQ(first.header("x-ratelimit-remaining-requests"), "0");
  Response second = chat(counted, red);
  EXPECT_EQ(second.status, 429) << second.body;
  EXPECT_EQ(second.body_json()["error"]["code"], "rate_limit_exceeded") << second.body;
  EXPECT_EQ(upstream_requests(), 2);
}

// `cache: { persist }`: kept answers are written to a SQLite file and read back at start-up, so
// a restarted server answers from them; an entry whose TTL passed meanwhile is gone; with
// `per_price_version`, a new price for the target expires what the old one made.
TEST_F(LeversTest, CachePersistsAcrossARestartAndExpires) {
  const std::string file = (dir_.path() / "cache.db").string();
  const std::string rules =
      "  - { id: long, when: { model: chat, claimed_tags: long }, route: [gpu], cache: { ttl: 10m "
      "} }\n"
      "  - { id: short, when: { model: chat }, route: [gpu], cache: { ttl: 1s } }\n";
  const std::string persist =
      "cache: { per_price_version: true, persist: { path: " + file + " } }\n";
  start(rules, persist);
  json kept = chat_body("chat", "Remember the lighthouse.");
  kept["temperature"] = 0;
  json brief = chat_body("chat", "Forget the fog.");
  brief["temperature"] = 0;
  std::vector<std::string> long_lived = auth_headers();
  long_lived.push_back("x-ferry-tags: long");
  Response first = chat(kept, long_lived);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.header("x-ferry-cache"), "miss");
  EXPECT_EQ(chat(kept, long_lived).header("x-ferry-cache"), "hit");
  EXPECT_EQ(chat(brief).header("x-ferry-cache"), "miss");
  ASSERT_TRUE(ferry_.process);
  EXPECT_EQ(ferry_.process->stop(Ms(15000)), 0);  // the writer's queue is in the file
  ferry_.process.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // past the short TTL
  start(rules, persist);
  Response again = chat(kept, long_lived);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.header("x-ferry-cache"), "hit") << "read back from the file";
  EXPECT_EQ(again.body_json()["choices"][0]["message"]["content"],
            first.body_json()["choices"][0]["message"]["content"]);
  EXPECT_EQ(upstream_requests(), 2);
  EXPECT_EQ(chat(brief).header("x-ferry-cache"), "miss") << "expired while the server was down";
  EXPECT_EQ(upstream_requests(), 3);

  // A new price for gpu (in effect since February, the list in start() goes on): a miss.
  EXPECT_EQ(ferry_.process->stop(Ms(15000)), 0);
  ferry_.process.reset();
  start(rules,
        "  - { model: gpu, effective_from: 2026-02-01, input: 4.00, output: 15.00 }\n" + persist);
  EXPECT_EQ(chat(kept, long_lived).header("x-ferry-cache"), "miss") << "another price version";
  EXPECT_EQ(upstream_requests(), 4);
}

// A Qwen3-style template that starts the model's thinking for it (the prompt ends with
// `<think>\n`, as Qwen3's thinking releases do) unless enable_thinking is false: random weights
// are inside the think block from their first token and never close it themselves.
constexpr const char* kThinkingTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{'<|im_start|>assistant\\n'}}{% if enable_thinking is defined and enable_thinking is false "
    "%}{{'<think>\\n\\n</think>\\n\\n'}}{% else %}{{'<think>\\n'}}{% endif %}{% endif %}";

TEST_F(LeversTest, ThinkBudgetClosesALocalQwen3ThinkBlockAndTheAnswerFollows) {
  const std::string qwen3 = (dir_.path() / "qwen3.gguf").string();
  ASSERT_EQ(run_command(ferry_binary() + " model synth --preset tiny --arch qwen3 --type Q8_0 " +
                        "--seed 5 '" + qwen3 + "' > /dev/null 2>&1"),
            0);
  constexpr int kBudget = 12;
  constexpr int kMaxTokens = 40;
  start(
      "  - { id: capped, when: { model: chat }, route: [local], set: { reasoning: { "
      "max_tokens: " +
          std::to_string(kBudget) +
          " } } }\n"
          "  - { id: free, when: { model: plain }, route: [local] }\n",
      "", "model: " + qwen3 + ", threads: 1, chat_template: " + json(kThinkingTemplate).dump());
  // The closing marker's tokens as the model's tokenizer spells it (the engine forces them).
  std::string marker = dir_.write("marker.txt", "</think>");
  std::string out = (dir_.path() / "marker.out").string();
  ASSERT_EQ(run_command(ferry_binary() + " tokenize --tokenizer '" + qwen3 + "' '" + marker +
                        "' > '" + out + "'"),
            0);
  const int64_t close_tokens = std::stoll(read_file(out));
  ASSERT_GT(close_tokens, 0);

  auto ask = [&](bool capped) {
    json body = {
        {"model", capped ? "chat" : "plain"},
        {"messages", json::array({{{"role", "user"}, {"content", "Think, then answer."}}})},
        {"max_tokens", kMaxTokens},
        {"temperature", 0},
        {"ignore_eos", true}};  // random weights: every token up to max_tokens
    return body;
  };

  // Capped: the think block ends after the budget (its closing tokens forced), the answer
  // follows, and the usage counts the block's tokens (the budget and the marker) as reasoning.
  Response capped = chat(ask(true));
  ASSERT_EQ(capped.status, 200) << capped.body;
  EXPECT_EQ(capped.header("x-ferry-reasoning"), "max_tokens:" + std::to_string(kBudget));
  const json answer = capped.body_json();
  const json& message = answer["choices"][0]["message"];
  ASSERT_TRUE(message["reasoning_content"].is_string()) << answer.dump();
  EXPECT_FALSE(message["reasoning_content"].get<std::string>().empty());
  ASSERT_TRUE(message["content"].is_string()) << answer.dump();
  EXPECT_FALSE(message["content"].get<std::string>().empty()) << "the answer follows";
  EXPECT_EQ(message["content"].get<std::string>().find("</think>"), std::string::npos);
  EXPECT_EQ(answer["usage"]["completion_tokens"], kMaxTokens);
  EXPECT_EQ(answer["usage"]["completion_tokens_details"]["reasoning_tokens"],
            kBudget + close_tokens)
      << answer.dump();
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "length");

  // Streamed (the prompt's KV now from the prefix cache): the same reasoning, then the same
  // answer, as deltas.
  json stream_body = ask(true);
  stream_body["stream"] = true;
  stream_body["stream_options"] = {{"include_usage", true}};
  StreamResult streamed = stream_request(ferry_.address, "/v1/chat/completions", stream_body);
  ASSERT_TRUE(streamed.head);
  ASSERT_EQ(streamed.head->status, 200);
  EXPECT_EQ(streamed.head->header("x-ferry-reasoning"), "max_tokens:" + std::to_string(kBudget));
  std::string reasoning, content;
  json usage;
  for (const json& chunk : streamed.chunks) {
    if (chunk.contains("usage") && chunk["usage"].is_object()) usage = chunk["usage"];
    if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) {
      reasoning += delta["reasoning_content"].get<std::string>();
    }
    if (delta.contains("content") && delta["content"].is_string()) {
      content += delta["content"].get<std::string>();
    }
  }
  EXPECT_EQ(reasoning, message["reasoning_content"]);
  EXPECT_EQ(content, message["content"]);
  EXPECT_EQ(usage["completion_tokens_details"]["reasoning_tokens"], kBudget + close_tokens);
  EXPECT_GT(usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0) << usage.dump();

  // Without the budget the block never closes: every token is thinking, shown as content.
  Response free = chat(ask(false));
  ASSERT_EQ(free.status, 200) << free.body;
  EXPECT_FALSE(free.header("x-ferry-reasoning"));
  const json free_message = free.body_json()["choices"][0]["message"];
  EXPECT_EQ(free_message["content"].get<std::string>().find("</think>"), std::string::npos);
  EXPECT_TRUE(free_message["content"].get<std::string>().rfind(
                  message["reasoning_content"].get<std::string>(), 0) == 0)
      << "the same thoughts, up to the budget";

  // The ledger records the budget applied and the reasoning tokens of each row.
  EXPECT_EQ(column("reasoning_budget"),
            (std::vector<std::string>{"max_tokens:" + std::to_string(kBudget),
                                      "max_tokens:" + std::to_string(kBudget), "<null>"}));
  EXPECT_EQ(column("reasoning_tokens"),
            (std::vector<std::string>{std::to_string(kBudget + close_tokens),
                                      std::to_string(kBudget + close_tokens), "0"}));
}

}  // namespace
}  // namespace ferry::itest
