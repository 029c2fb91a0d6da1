// Routing policies through the real server: aliases, fallbacks with the attempts visible in
// headers, rejects, parameter clamps, admin reloads (PUT, SIGHUP, file change) that swap
// atomically under traffic, explain, and admin endpoints refusing non-admin keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <set>
#include <thread>

#include "ledger/sqlite_db.h"
#include "ledger/store.h"
#include "tests/integration/ferry_test_base.h"
#include "tests/integration/metrics_check.h"

namespace ferry::itest {
namespace {

constexpr const char* kPolicyA = R"(
targets:
  good: gpt-test
  other: chunky
  fail: fail-500
  dead: dead-model
  tight: no-usage
models: [auto, broken-first, rejectme, clamp, shadowed, breaker]
rules:
  - id: shadowed
    when: { model: shadowed }
    route: [good]
    shadow: other
  - id: breaker
    when: { model: breaker }
    route: [fail, good]
  - id: reject-it
    when: { model: rejectme }
    reject: { status: 400, message: "no thanks" }
  - id: fallback
    when: { model: broken-first }
    route: [fail, dead, good]
  - id: clamp
    when: { model: clamp }
    set: { max_tokens: { at_most: 7 } }
    route: [tight]
default: { route: [good] }
)";

std::string policy_b() {
  // Same aliases; the default goes to `other` instead.
  std::string p = kPolicyA;
  auto at = p.find("default: { route: [good] }");
  p.replace(at, std::string("default: { route: [good] }").size(), "default: { route: [other] }");
  return p;
}

class RoutingTest : public ::testing::Test {
 protected:
  void SetUp() override { upstream_ = start_upstream(); }
  void TearDown() override {
    if (ferry_.process) {
      int status = ferry_.process->stop(Ms(15000));
      EXPECT_EQ(status, 0) << "ferry did not exit cleanly";
      if (HasFailure()) std::cerr << "---- ferry stderr ----\n" << ferry_.process->stderr_text();
    }
    if (upstream_.process) upstream_.process->stop();
  }

  void start(bool watch = false) {
    policy_path_ = dir_.write("policies.yaml", kPolicyA);
    std::string cfg = standard_config(upstream_.address) + "policy:\n  file: " + policy_path_ +
                      "\n  watch: " + (watch ? "true" : "false") + "\n  debounce_ms: 50\n";
    ferry_ = start_ferry(dir_, cfg);
  }

  static std::string header(const Response& r, const char* name) {
    return r.header(name).value_or("<none>");
  }

  json wait_for_requests(int64_t n) {
    json stats;
    for (int i = 0; i < 250; ++i) {
      stats = upstream_stats(upstream_.address);
      if (stats.value("requests", 0) >= n) break;
      std::this_thread::sleep_for(Ms(20));
    }
    return stats;
  }

  std::string active_version() {
    auto r = http_request(ferry_.address, "GET", "/admin/policy", "", auth_headers(kAdminKey));
    if (!r || r->status != 200) return "";
    json j = r->body_json();
    return j.value("version", "");
  }

  TempDir dir_;
  Server upstream_;
  Server ferry_;
  std::string policy_path_;
};

TEST_F(RoutingTest, ModelsAreThePolicyAliasesAndUnknownAliasesAre404) {
  start();
  auto r = http_request(ferry_.address, "GET", "/v1/models", "", auth_headers());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::set<std::string> ids;
  json models = r->body_json();
  for (const auto& m : models["data"]) ids.insert(m["id"].get<std::string>());
  EXPECT_EQ(ids, (std::set<std::string>{"auto", "broken-first", "rejectme", "clamp", "shadowed",
                                        "breaker"}))
      << r->body;
  auto bad = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "x"));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 404);
  EXPECT_TRUE(is_openai_error(*bad));
  EXPECT_NE(bad->body.find("auto, broken-first, rejectme, clamp, shadowed, breaker"),
            std::string::npos)
      << bad->body;
}

TEST_F(RoutingTest, ResponsesCarryTargetRulePolicyAndAttempts) {
  start();
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("auto", "hi"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: hi");
  EXPECT_EQ(header(*r, "x-ferry-target"), "good");
  EXPECT_EQ(header(*r, "x-ferry-rule"), "default");
  EXPECT_EQ(header(*r, "x-ferry-attempts"), "1");
  EXPECT_EQ(header(*r, "x-ferry-policy").size(), 12u) << header(*r, "x-ferry-policy");
}

TEST_F(RoutingTest, FailingHopsFallBackBeforeAnythingIsSent) {
  start();
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("broken-first", "fb"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: fb");
  EXPECT_EQ(header(*r, "x-ferry-target"), "good");
  EXPECT_EQ(header(*r, "x-ferry-rule"), "fallback");
  EXPECT_EQ(header(*r, "x-ferry-attempts"), "3");  // fail-500, dead (refused), good

  // Streaming: the headers go out with the first byte, after the fallbacks.
  auto s = stream_request(ferry_.address, "/v1/chat/completions",
                          chat_body("broken-first", "streamed", true));
  ASSERT_TRUE(s.head);
  EXPECT_EQ(s.head->status, 200);
  EXPECT_EQ(s.content(), "echo: streamed");
  EXPECT_TRUE(s.saw_done);
  EXPECT_EQ(header(*s.head, "x-ferry-attempts"), "3");
  EXPECT_EQ(header(*s.head, "x-ferry-target"), "good");

  auto metrics = http_request(ferry_.address, "GET", "/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("ferry_route_fallbacks_total{from=\"fail\",to=\"dead\"} 2"),
            std::string::npos)
      << metrics->body;
}

TEST_F(RoutingTest, RejectAnswersWithTheRulesStatusAndMessage) {
  start();
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("rejectme", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_TRUE(is_openai_error(*r));
  EXPECT_EQ(r->body_json()["error"]["message"], "no thanks");
  EXPECT_EQ(header(*r, "x-ferry-rule"), "reject-it");
  EXPECT_EQ(upstream_stats(upstream_.address).value("requests", 0), 0) << "no backend is called";
}

TEST_F(RoutingTest, SetClampsMaxTokensUpstream) {
  start();
  json body = chat_body("clamp", "x");
  body["max_tokens"] = 500;
  auto r = post_json(ferry_.address, "/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json seen = upstream_last_request(upstream_.address);
  EXPECT_EQ(seen["body"]["max_tokens"], 7) << seen.dump();
  EXPECT_EQ(seen["body"]["model"], "no-usage");
}

TEST_F(RoutingTest, AdminEndpointsRefuseAppKeys) {
  start();
  for (auto [method, path] :
       {std::pair{"GET", "/admin/policy"}, std::pair{"PUT", "/admin/policy"},
        std::pair{"POST", "/admin/route/explain"}, std::pair{"GET", "/v1/ledger/report"}}) {
    auto r = http_request(ferry_.address, method, path, "{}", auth_headers(kAppKey));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403) << method << " " << path << ": " << r->body;
    EXPECT_TRUE(is_openai_error(*r));
    auto anon = http_request(ferry_.address, method, path, "{}");
    ASSERT_TRUE(anon);
    EXPECT_EQ(anon->status, 401) << method << " " << path;
  }
}

TEST_F(RoutingTest, PutPolicySwapsOrRejectsAndGetShowsIt) {
  start();
  std::string v1 = active_version();
  ASSERT_FALSE(v1.empty());
  // A broken policy is rejected with located errors; the old one keeps serving.
  auto bad = http_request(ferry_.address, "PUT", "/admin/policy",
                          "targets: { good: gpt-test }\nrules: []\n", auth_headers(kAdminKey));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 422) << bad->body;
  EXPECT_NE(bad->body.find("default"), std::string::npos) << bad->body;
  EXPECT_EQ(active_version(), v1);
  auto status = http_request(ferry_.address, "GET", "/admin/policy", "", auth_headers(kAdminKey));
  ASSERT_TRUE(status);
  EXPECT_FALSE(status->body_json()["last_rejected"].is_null()) << status->body;
  auto still = post_json(ferry_.address, "/v1/chat/completions", chat_body("auto", "x"));
  ASSERT_TRUE(still);
  EXPECT_EQ(still->status, 200);

  auto good =
      http_request(ferry_.address, "PUT", "/admin/policy", policy_b(), auth_headers(kAdminKey));
  ASSERT_TRUE(good);
  ASSERT_EQ(good->status, 200) << good->body;
  std::string v2 = active_version();
  EXPECT_NE(v2, v1);
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("auto", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(header(*r, "x-ferry-target"), "other");
  EXPECT_TRUE(v2.starts_with(header(*r, "x-ferry-policy")));
  // Persisted: the file now holds the new policy.
  std::ifstream in(policy_path_);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("route: [other]"), std::string::npos);
}

TEST_F(RoutingTest, SighupReloadsTheFile) {
  start(/*watch=*/false);
  std::string v1 = active_version();
  dir_.write("policies.yaml", policy_b());
  ferry_.process->send_signal(SIGHUP);
  std::string v2;
  for (int i = 0; i < 200 && (v2.empty() || v2 == v1); ++i) {
    std::this_thread::sleep_for(Ms(25));
    v2 = active_version();
  }
  EXPECT_NE(v2, v1);
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("auto", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(header(*r, "x-ferry-target"), "other");
}

TEST_F(RoutingTest, FileChangeReloadsWhenWatching) {
  start(/*watch=*/true);
  std::string v1 = active_version();
  dir_.write("policies.yaml", policy_b());
  std::string v2;
  for (int i = 0; i < 400 && (v2.empty() || v2 == v1); ++i) {
    std::this_thread::sleep_for(Ms(25));
    v2 = active_version();
  }
  ASSERT_NE(v2, v1) << "the watcher never applied the changed file";
  // A broken edit is rejected; the last good policy keeps serving. Wait until the watcher has
  // seen it (a new rejected attempt, triggered by the file change), so that the version check
  // below cannot pass merely because the watcher never ran.
  auto policy_status = [&] {
    auto r = http_request(ferry_.address, "GET", "/admin/policy", "", auth_headers(kAdminKey));
    return (r && r->status == 200) ? r->body_json() : json();
  };
  const int64_t rejected_before = policy_status().value("reloads_rejected", int64_t{-1});
  ASSERT_GE(rejected_before, 0);
  dir_.write("policies.yaml", "rules: [\n");
  json status;
  for (int i = 0; i < 400; ++i) {
    status = policy_status();
    if (status.value("reloads_rejected", int64_t{0}) > rejected_before) break;
    std::this_thread::sleep_for(Ms(25));
  }
  ASSERT_GT(status.value("reloads_rejected", int64_t{0}), rejected_before)
      << "the watcher never saw the broken edit: " << status.dump();
  ASSERT_TRUE(status["last_rejected"].is_object()) << status.dump();
  EXPECT_EQ(status["last_rejected"].value("trigger", ""), "file change") << status.dump();
  EXPECT_FALSE(status["last_rejected"]["errors"].empty()) << status.dump();
  EXPECT_EQ(status.value("version", ""), v2);
  EXPECT_EQ(active_version(), v2);
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("auto", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(RoutingTest, ReloadUnderTrafficNeverMixesVersions) {
  start();
  std::string va = active_version();
  // Learn policy B's version, then go back to A.
  ASSERT_EQ(http_request(ferry_.address, "PUT", "/admin/policy?persist=false", policy_b(),
                         auth_headers(kAdminKey))
                ->status,
            200);
  std::string vb = active_version();
  ASSERT_EQ(http_request(ferry_.address, "PUT", "/admin/policy?persist=false", kPolicyA,
                         auth_headers(kAdminKey))
                ->status,
            200);
  ASSERT_NE(va, vb);

  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<int> mixed{0};
  std::atomic<int> done{0};
  std::set<std::string> seen;
  std::mutex seen_mu;
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < 40; ++i) {
        auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("auto", "t"));
        if (!r || r->status != 200) {
          ++failures;
          continue;
        }
        std::string v = header(*r, "x-ferry-policy");
        std::string target = header(*r, "x-ferry-target");
        bool a = va.starts_with(v) && target == "good";
        bool b = vb.starts_with(v) && target == "other";
        if (!a && !b) ++mixed;
        std::lock_guard lock(seen_mu);
        seen.insert(v);
        ++done;
      }
    });
  }
  std::thread admin([&] {
    for (int i = 0; i < 20; ++i) {
      auto r =
          http_request(ferry_.address, "PUT", "/admin/policy?persist=false",
                       i % 2 == 0 ? policy_b() : std::string(kPolicyA), auth_headers(kAdminKey));
      if (!r || r->status != 200) ++failures;
      std::this_thread::sleep_for(Ms(10));
    }
  });
  for (auto& c : clients) c.join();
  admin.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mixed.load(), 0);
  EXPECT_EQ(done.load(), 160);
  EXPECT_GE(seen.size(), 1u);
}

TEST_F(RoutingTest, ExplainShowsFactsClausesAndTheDecision) {
  start();
  auto r = http_request(ferry_.address, "POST", "/admin/route/explain",
                        chat_body("broken-first", "why").dump(), auth_headers(kAdminKey));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = r->body_json();
  EXPECT_EQ(j["decision"]["rule"], "fallback");
  EXPECT_EQ(j["decision"]["route"][0]["target"], "fail");
  EXPECT_EQ(j["facts"]["team"], "ops");
  EXPECT_EQ(upstream_stats(upstream_.address).value("requests", 0), 0) << "no backend is called";
  // As another key would be routed.
  auto as_app = http_request(ferry_.address, "POST", "/admin/route/explain?key=app-key",
                             chat_body("auto", "why").dump(), auth_headers(kAdminKey));
  ASSERT_TRUE(as_app);
  EXPECT_EQ(as_app->body_json()["facts"]["team"], "team-a") << as_app->body;
}

TEST_F(RoutingTest, ReportsCountServedRequestsApartAndTheAttemptsExportHasEveryHop) {
  policy_path_ = dir_.write("policies.yaml", kPolicyA);
  std::string cfg = standard_config(upstream_.address) + "policy:\n  file: " + policy_path_ +
                    "\n  watch: false\nledger:\n  path: " + (dir_.path() / "l.db").string() + "\n";
  ferry_ = start_ferry(dir_, cfg);
  auto fallback =
      post_json(ferry_.address, "/v1/chat/completions", chat_body("broken-first", "hops"));
  ASSERT_TRUE(fallback);
  ASSERT_EQ(fallback->status, 200) << fallback->body;
  auto shadowed = post_json(ferry_.address, "/v1/chat/completions", chat_body("shadowed", "twice"));
  ASSERT_TRUE(shadowed);
  ASSERT_EQ(shadowed->status, 200) << shadowed->body;
  auto refused = post_json(ferry_.address, "/v1/chat/completions", chat_body("rejectme", "no"));
  ASSERT_TRUE(refused);
  ASSERT_EQ(refused->status, 400) << refused->body;

  // The shadow's and the refusal's rows are queued without waiting for them: wait for both.
  json totals;
  EXPECT_TRUE(eventually([&] {
    totals = report_totals(ferry_.address);
    return totals.is_null() ||
           (totals.value("shadow_requests", 0) == 1 && totals.value("refused_requests", 0) == 1);
  }));
  EXPECT_EQ(totals["requests"], 2) << totals.dump();  // served: the fallback and the shadowed
  EXPECT_EQ(totals["refused_requests"], 1) << totals.dump();
  EXPECT_EQ(totals["shadow_requests"], 1) << totals.dump();
  EXPECT_EQ(totals["unpriced_requests"], 2) << totals.dump();  // no prices: the served ones

  auto rows =
      http_request(ferry_.address, "GET", "/v1/ledger/export.csv", "", auth_headers(kAdminKey));
  ASSERT_TRUE(rows);
  EXPECT_EQ(std::count(rows->body.begin(), rows->body.end(), '\n'), 1 + 4) << rows->body;
  auto attempts = http_request(ferry_.address, "GET", "/v1/ledger/attempts.csv?rule=fallback", "",
                               auth_headers(kAdminKey));
  ASSERT_TRUE(attempts);
  ASSERT_EQ(attempts->status, 200) << attempts->body;
  EXPECT_EQ(attempts->body.rfind("request_seq,request_id,attempt,target,", 0), 0u)
      << attempts->body;
  // fail-500, dead (refused connection), good: one line each after the header.
  EXPECT_EQ(std::count(attempts->body.begin(), attempts->body.end(), '\n'), 1 + 3)
      << attempts->body;
  for (const char* target : {",fail-500,", ",dead-model,", ",gpt-test,"}) {
    EXPECT_NE(attempts->body.find(target), std::string::npos) << target << attempts->body;
  }
}

TEST_F(RoutingTest, ShadowCopiesGoToTheShadowTargetAndAreDiscarded) {
  start();
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("shadowed", "twice"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: twice");
  EXPECT_EQ(header(*r, "x-ferry-target"), "good");
  json stats = wait_for_requests(2);
  EXPECT_EQ(stats.value("requests", 0), 2) << stats.dump();  // the answer and its shadow
  std::string m;
  for (int i = 0; i < 200; ++i) {
    auto metrics = http_request(ferry_.address, "GET", "/metrics");
    m = metrics ? metrics->body : "";
    if (m.find("ferry_shadow_requests_total{target=\"other\",outcome=\"ok\"} 1") !=
        std::string::npos)
      break;
    std::this_thread::sleep_for(Ms(20));
  }
  EXPECT_NE(m.find("ferry_shadow_requests_total{target=\"other\",outcome=\"ok\"} 1"),
            std::string::npos)
      << m;
}

// Shadow copies are tracked: shutdown waits for them within its grace and cancels the rest,
// and either way the copy's row reaches the ledger. (Untracked, a copy still running when the
// last request ended was dropped with the event loop, its row lost.)
constexpr const char* kShadowPolicy = R"(
targets:
  good: gpt-test
  slowpoke: slowpoke
  hang: hang
models: [waits, cancelled]
rules:
  - id: waits
    when: { model: waits }
    route: [good]
    shadow: slowpoke
  - id: cancelled
    when: { model: cancelled }
    route: [good]
    shadow: hang
default: { route: [good] }
)";

class ShadowShutdownTest : public RoutingTest {
 protected:
  void start_with_grace(int grace_ms) {
    policy_path_ = dir_.write("policies.yaml", kShadowPolicy);
    db_ = (dir_.path() / "l.db").string();
    std::string cfg = standard_config(upstream_.address);
    auto grace = cfg.find("shutdown_grace_ms: 10000");
    ASSERT_NE(grace, std::string::npos);
    cfg.replace(grace, std::string("shutdown_grace_ms: 10000").size(),
                "shutdown_grace_ms: " + std::to_string(grace_ms));
    auto models = cfg.find("models:\n");
    ASSERT_NE(models, std::string::npos);
    cfg.insert(models + 8, "  - {name: slowpoke, backend: up, upstream_model: slow-1500}\n");
    cfg += "policy:\n  file: " + policy_path_ + "\n  watch: false\nledger:\n  path: " + db_ + "\n";
    ferry_ = start_ferry(dir_, cfg);
  }

  // Answers `model` (its shadow starts beside it), then SIGTERM; ferry must exit 0.
  void answer_then_sigterm(const std::string& model) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body(model, "twice"));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(header(*r, "x-ferry-target"), "good");
    ferry_.process->send_signal(SIGTERM);
    auto status = ferry_.process->wait_exit(Ms(30000));
    ASSERT_TRUE(status) << "ferry did not exit after SIGTERM";
    EXPECT_EQ(*status, 0);
  }

  // The shadow rows of the ledger: status and error code of each.
  std::vector<std::pair<std::string, std::string>> shadow_rows() {
    std::vector<std::pair<std::string, std::string>> rows;
    if (ferry_.process) wait_ledger_committed(ferry_.address);
    auto db = ledger::Db::open(db_, true);
    EXPECT_TRUE(db) << db.error().message;
    if (!db) return rows;
    auto stmt = db->prepare("SELECT status, error_code FROM requests WHERE kind='request' AND " +
                            ledger::shadow_row_sql(/*pg=*/false) + " ORDER BY seq");
    EXPECT_TRUE(stmt);
    if (!stmt) return rows;
    for (;;) {
      auto has = stmt->step();
      if (!has || !*has) break;
      rows.emplace_back(std::get<std::string>(stmt->value_at(0)),
                        std::get<std::string>(stmt->value_at(1)));
    }
    return rows;
  }

  std::string db_;
};

TEST_F(ShadowShutdownTest, ShutdownWaitsForAShadowCopyWithinTheGrace) {
  start_with_grace(10000);
  answer_then_sigterm("waits");
  EXPECT_EQ(upstream_stats(upstream_.address).value("completed", 0), 2)
      << "the answer and its shadow both completed";
  EXPECT_EQ(shadow_rows(), (std::vector<std::pair<std::string, std::string>>{{"ok", ""}}));
}

TEST_F(ShadowShutdownTest, ShutdownCancelsAShadowCopyStillRunningAfterTheGrace) {
  start_with_grace(200);  // far below the backend's 2 s first-byte timeout
  answer_then_sigterm("cancelled");
  // Cancelled by shutdown (not timed out, not dropped): its row says so.
  EXPECT_EQ(shadow_rows(),
            (std::vector<std::pair<std::string, std::string>>{{"error", "cancelled"}}));
}

TEST_F(RoutingTest, CircuitBreakerOpensAfterRepeatedFailuresAndSkipsTheBackend) {
  start();
  // The first five requests try `fail` (500) and then `good`; the breaker then opens and
  // later requests skip `fail` for its cool-down.
  for (int i = 0; i < 5; ++i) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("breaker", "b"));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(header(*r, "x-ferry-attempts"), "2");
  }
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("breaker", "b"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(header(*r, "x-ferry-attempts"), "1");
  EXPECT_EQ(header(*r, "x-ferry-target"), "good");
  auto metrics = http_request(ferry_.address, "GET", "/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("ferry_backend_healthy{target=\"fail-500\"} 0"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("ferry_breaker_opened_total{target=\"fail-500\"} 1"),
            std::string::npos);
  expect_metrics_declared(metrics->body);  // router and breaker series too
  // Routing sees it as a fact, too.
  auto ex = http_request(ferry_.address, "POST", "/admin/route/explain",
                         chat_body("breaker", "b").dump(), auth_headers(kAdminKey));
  ASSERT_TRUE(ex);
  EXPECT_NE(ex->body.find("unhealthy"), std::string::npos) << ex->body;
}

TEST(RoutingStartup, InvalidPolicyRefusesToStart) {
  TempDir dir;
  std::string policy = dir.write("policies.yaml", "targets: { good: no-such-model }\n");
  auto upstream = start_upstream();
  std::string cfg = standard_config(upstream.address) + "policy:\n  file: " + policy + "\n";
  std::string path = dir.write("ferry.yaml", cfg);
  Process p({ferry_binary(), "serve", "--config", path, "--listen", "127.0.0.1:0"});
  auto code = p.wait_exit(Ms(15000));
  ASSERT_TRUE(code);
  EXPECT_NE(*code, 0);
  EXPECT_NE(p.stderr_text().find("policies.yaml:"), std::string::npos) << p.stderr_text();
  upstream.process->stop();
}

}  // namespace
}  // namespace ferry::itest
