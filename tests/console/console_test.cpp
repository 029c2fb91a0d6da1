// The console through the real server: its embedded files with their CSP and ETag, sign-in
// with a finance or admin key into a session cookie (flags, expiry, sign-out), the CSRF token
// on every state-changing call, app keys and anonymous visitors refused; and task outcomes
// (POST /v1/tasks/{id}): stored once, idempotent, 409 on a different outcome, an app key only on
// its own tasks, and cost per completed task from the ledger.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tests/integration/ferry_test_base.h"

namespace ferry::itest {
namespace {

constexpr const char* kFinanceKey = "sk-test-finance-7777";

// "12.345678" -> 12345678 micro-units.
int64_t micros(const std::string& decimal) {
  bool neg = !decimal.empty() && decimal[0] == '-';
  std::string s = neg ? decimal.substr(1) : decimal;
  auto dot = s.find('.');
  std::string frac = dot == std::string::npos ? "" : s.substr(dot + 1);
  frac.resize(6, '0');
  int64_t v = std::stoll(s.substr(0, dot)) * 1000000 + std::stoll(frac);
  return neg ? -v : v;
}

class ConsoleTest : public OwnConfigTest {
 protected:
  void start(const std::string& extra_server = "") {
    std::string cfg = standard_config(upstream_.address);
    const std::string keys = "auth:\n  keys:\n";
    cfg.insert(cfg.find(keys) + keys.size(), std::string("    - id: finance-key\n      key: ") +
                                                 kFinanceKey +
                                                 "\n      team: money\n      role: finance\n");
    if (!extra_server.empty()) {
      cfg.insert(cfg.find("server:\n") + 8, extra_server);
    }
    cfg += "ledger:\n  path: " + db_ + "\n";
    cfg +=
        "prices:\n  - { model: gpt-test, effective_from: 2026-01-01, input: 1.50, output: "
        "10.00 }\n";
    ferry_ = start_ferry(dir_, cfg);
  }

  std::optional<Response> call(const std::string& method, const std::string& target,
                               const std::string& body, const std::vector<std::string>& headers) {
    return http_request(ferry_.address, method, target, body, headers);
  }

  // Signs in; returns {cookie header value, csrf token}.
  std::pair<std::string, std::string> sign_in(const char* key, Response* out = nullptr) {
    auto r = call("POST", "/console/api/session", json{{"key", key}}.dump(),
                  {"Content-Type: application/json"});
    EXPECT_TRUE(r);
    if (!r) return {};
    if (out != nullptr) *out = *r;
    EXPECT_EQ(r->status, 200) << r->body;
    auto set = r->header("set-cookie");
    EXPECT_TRUE(set);
    if (!set) return {};
    std::string cookie = set->substr(0, set->find(';'));
    return {cookie, r->body_json().value("csrf_token", "")};
  }

  void chat(const std::string& task, const char* key = kAppKey) {
    auto h = auth_headers(key);
    h.push_back("x-ferry-task: " + task);
    auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "a b c"), h);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }

  std::optional<Response> mark(const std::string& task, const json& body,
                               const char* key = kAppKey) {
    auto h = auth_headers(key);
    h.push_back("Content-Type: application/json");
    return call("POST", "/v1/tasks/" + task, body.dump(), h);
  }
};

TEST_F(ConsoleTest, FilesAreEmbeddedWithCspAndEtag) {
  start();
  auto index = call("GET", "/console/", "", {});
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_NE(index->body.find("<title>ferry console</title>"), std::string::npos);
  EXPECT_EQ(index->header("content-type").value_or(""), "text/html; charset=utf-8");
  auto csp = index->header("content-security-policy").value_or("");
  EXPECT_NE(csp.find("default-src 'self'"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos) << csp;
  EXPECT_EQ(index->body.find("<script>"), std::string::npos) << "no inline script";
  EXPECT_EQ(index->header("x-content-type-options").value_or(""), "nosniff");
  auto js = call("GET", "/console/app.js", "", {});
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  EXPECT_EQ(js->header("content-type").value_or(""), "text/javascript; charset=utf-8");
  auto etag = js->header("etag");
  ASSERT_TRUE(etag);
  auto again = call("GET", "/console/app.js", "", {"If-None-Match: " + *etag});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 304);
  EXPECT_TRUE(again->body.empty());
  auto missing = call("GET", "/console/nothing.js", "", {});
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(is_openai_error(*missing));
  auto post = call("POST", "/console/app.js", "", {});
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
}

TEST_F(ConsoleTest, SessionCookieFlagsAndSignOut) {
  start();
  Response signed_in;
  auto [cookie, csrf] = sign_in(kFinanceKey, &signed_in);
  ASSERT_FALSE(cookie.empty());
  std::string set = signed_in.header("set-cookie").value_or("");
  EXPECT_NE(set.find("HttpOnly"), std::string::npos) << set;
  EXPECT_NE(set.find("SameSite=Strict"), std::string::npos) << set;
  EXPECT_NE(set.find("Path=/console"), std::string::npos) << set;
  EXPECT_NE(set.find("Max-Age=28800"), std::string::npos) << set;  // 8 h by default
  EXPECT_EQ(set.find("Secure"), std::string::npos) << "plain HTTP: no Secure flag";
  // The cookie holds a random id, never the key.
  EXPECT_EQ(set.find(kFinanceKey), std::string::npos);
  EXPECT_EQ(signed_in.body.find(kFinanceKey), std::string::npos);
  EXPECT_EQ(csrf.size(), 64u);
  auto who = call("GET", "/console/api/session", "", {"Cookie: " + cookie});
  ASSERT_TRUE(who);
  EXPECT_EQ(who->status, 200);
  EXPECT_EQ(who->body_json()["role"], "finance");
  EXPECT_EQ(who->body_json()["key_id"], "finance-key");
  // The session reads the finance endpoints through /console/api.
  auto report = call("GET", "/console/api/v1/ledger/report?by=team", "", {"Cookie: " + cookie});
  ASSERT_TRUE(report);
  EXPECT_EQ(report->status, 200) << report->body;
  // ... but not the admin ones: the role is checked on each endpoint.
  auto policy = call("GET", "/console/api/admin/keys", "", {"Cookie: " + cookie});
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->status, 403) << policy->body;
  // Signing out needs the CSRF token.
  auto no_csrf = call("DELETE", "/console/api/session", "", {"Cookie: " + cookie});
  ASSERT_TRUE(no_csrf);
  EXPECT_EQ(no_csrf->status, 403);
  auto out =
      call("DELETE", "/console/api/session", "", {"Cookie: " + cookie, "x-ferry-csrf: " + csrf});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->status, 200);
  EXPECT_NE(out->header("set-cookie").value_or("").find("Max-Age=0"), std::string::npos);
  auto after = call("GET", "/console/api/v1/ledger/report?by=team", "", {"Cookie: " + cookie});
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 401);
}

TEST_F(ConsoleTest, SessionsExpire) {
  start("  console_session_minutes: 1\n");
  Response r;
  auto [cookie, csrf] = sign_in(kAdminKey, &r);
  EXPECT_NE(r.header("set-cookie").value_or("").find("Max-Age=60"), std::string::npos);
  int64_t expires = r.body_json()["expires_at_us"].get<int64_t>();
  auto who = call("GET", "/console/api/session", "", {"Cookie: " + cookie});
  ASSERT_TRUE(who);
  EXPECT_EQ(who->body_json()["expires_at_us"].get<int64_t>(), expires);
  // The expiry is one minute after sign-in (as the server's clock says).
  int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  EXPECT_LE(expires, now_us + 60 * 1000000LL);
  EXPECT_GT(expires, now_us);
}

TEST_F(ConsoleTest, AppKeysAnonymousAndForgedCallsAreRefused) {
  start();
  auto app = call("POST", "/console/api/session", json{{"key", kAppKey}}.dump(), {});
  ASSERT_TRUE(app);
  EXPECT_EQ(app->status, 403);
  EXPECT_FALSE(app->header("set-cookie"));
  auto wrong = call("POST", "/console/api/session", json{{"key", "sk-nope"}}.dump(), {});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto junk = call("POST", "/console/api/session", "not json", {});
  ASSERT_TRUE(junk);
  EXPECT_EQ(junk->status, 400);
  auto anon = call("GET", "/console/api/v1/ledger/report", "", {});
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 401);
  auto forged =
      call("GET", "/console/api/v1/ledger/report", "", {"Cookie: ferry_console=0123456789abcdef"});
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 401);
  // A bearer key does not open /console/api: only a session does.
  auto bearer = call("GET", "/console/api/v1/ledger/report", "", auth_headers(kAdminKey));
  ASSERT_TRUE(bearer);
  EXPECT_EQ(bearer->status, 401);
  // A state-changing call without the CSRF token, or with another one, is refused and changes
  // nothing.
  auto [cookie, csrf] = sign_in(kAdminKey);
  std::string body = "version: 1\n";
  auto no_csrf = call("PUT", "/console/api/admin/policy", body, {"Cookie: " + cookie});
  ASSERT_TRUE(no_csrf);
  EXPECT_EQ(no_csrf->status, 403);
  EXPECT_EQ(no_csrf->body_json()["error"]["code"], "csrf_token_missing");
  auto bad_csrf = call("POST", "/console/api/admin/policy/validate", body,
                       {"Cookie: " + cookie, "x-ferry-csrf: " + std::string(64, 'a')});
  ASSERT_TRUE(bad_csrf);
  EXPECT_EQ(bad_csrf->status, 403);
  // App endpoints are not offered through the console.
  auto chat = call("POST", "/console/api/v1/chat/completions", chat_body("gpt-test", "x").dump(),
                   {"Cookie: " + cookie, "x-ferry-csrf: " + csrf});
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 404);
  // The server keeps serving.
  auto ok = call("GET", "/console/api/admin/keys", "", {"Cookie: " + cookie});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  const json keys = ok->body_json();
  for (const auto& k : keys["keys"]) EXPECT_FALSE(k.contains("sha256"));
  EXPECT_EQ(ok->body.find(kAdminKey), std::string::npos);
}

TEST_F(ConsoleTest, TasksAreMarkedOnceAndCostPerTaskFollows) {
  start();
  chat("t-done");
  chat("t-done");
  chat("t-fail");
  chat("t-open");
  chat("t-other", kAdminKey);
  auto first = mark("t-done", {{"status", "completed"}, {"labels", {{"feature", "search"}}}});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200) << first->body;
  EXPECT_EQ(first->body_json()["created"], true);
  // The same outcome again: 200, nothing changes.
  auto same = mark("t-done", {{"status", "completed"}, {"labels", {{"feature", "search"}}}});
  ASSERT_TRUE(same);
  EXPECT_EQ(same->status, 200);
  EXPECT_EQ(same->body_json()["created"], false);
  // Another outcome for a finished task: 409, the first one stays.
  auto other = mark("t-done", {{"status", "failed"}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 409) << other->body;
  EXPECT_TRUE(is_openai_error(*other));
  EXPECT_EQ(other->body_json()["task"]["status"], "completed");
  ASSERT_EQ(mark("t-fail", {{"status", "failed"}})->status, 200);
  // Bad input is a 400 naming the field; an unknown task a 404; another key's task a 403.
  EXPECT_EQ(mark("t-open", {{"status", "open"}})->status, 400);
  EXPECT_EQ(mark("t-open", {{"status", "completed"}, {"colour", "red"}})->status, 400);
  EXPECT_EQ(mark("t-open", {{"status", "completed"}, {"labels", {{"a b", "x"}}}})->status, 400);
  EXPECT_EQ(mark("t-never", {{"status", "completed"}})->status, 404);
  EXPECT_EQ(mark("t-other", {{"status", "completed"}})->status, 403);
  EXPECT_EQ(mark("t-other", {{"status", "abandoned"}}, kAdminKey)->status, 200);

  auto report = call("GET", "/v1/ledger/tasks", "", auth_headers(kFinanceKey));
  ASSERT_TRUE(report);
  ASSERT_EQ(report->status, 200) << report->body;
  std::map<std::string, json> by_status;
  const json report_body = report->body_json();
  for (const auto& row : report_body["rows"]) {
    by_status[row["status"].get<std::string>()] = row;
  }
  ASSERT_EQ(by_status.count("completed"), 1u) << report->body;
  EXPECT_EQ(by_status["completed"]["tasks"], 1);
  EXPECT_EQ(by_status["completed"]["requests"], 2);
  EXPECT_EQ(by_status["failed"]["tasks"], 1);
  EXPECT_EQ(by_status["abandoned"]["tasks"], 1);
  EXPECT_EQ(by_status["open"]["tasks"], 1);  // never marked
  // Cost per completed task = the task's rows' cost, from the export.
  auto rows = call("GET", "/v1/ledger/export.csv?task=t-done", "", auth_headers(kFinanceKey));
  ASSERT_TRUE(rows);
  int64_t done_cost = 0;
  std::string csv = rows->body;
  auto header_end = csv.find('\n');
  std::string header = csv.substr(0, header_end);
  size_t col = 0;
  for (size_t at = 0, i = 0; at <= header.size(); ++i) {
    size_t comma = header.find(',', at);
    if (header.substr(at, comma - at) == "cost_total") col = i;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  for (size_t at = header_end + 1; at < csv.size();) {
    size_t end = csv.find('\n', at);
    std::string line = csv.substr(at, end - at);
    size_t start = 0;
    for (size_t i = 0; i < col; ++i) start = line.find(',', start) + 1;
    done_cost += micros(line.substr(start, line.find(',', start) - start));
    at = end + 1;
  }
  EXPECT_GT(done_cost, 0);
  EXPECT_EQ(micros(by_status["completed"]["cost"]), done_cost);
  EXPECT_EQ(micros(by_status["completed"]["cost_per_task"]), done_cost);
  // By label: the completed task's feature.
  auto labelled = call("GET", "/v1/ledger/tasks?by=label:feature", "", auth_headers(kFinanceKey));
  ASSERT_TRUE(labelled);
  EXPECT_NE(labelled->body.find("\"search\""), std::string::npos) << labelled->body;
  // An app key reads no report.
  auto app = call("GET", "/v1/ledger/tasks", "", auth_headers(kAppKey));
  ASSERT_TRUE(app);
  EXPECT_EQ(app->status, 403);
  // One task's requests: each link of the hash chain verifies.
  auto drill = call("GET", "/v1/ledger/task_requests?task=t-done", "", auth_headers(kFinanceKey));
  ASSERT_TRUE(drill);
  ASSERT_EQ(drill->status, 200) << drill->body;
  const json drilled = drill->body_json();
  ASSERT_EQ(drilled["requests"].size(), 2u);
  for (const auto& r : drilled["requests"]) {
    EXPECT_EQ(r["chain_verifies"], true);
    EXPECT_EQ(r["attempts"], 1);
    EXPECT_EQ(r["prices"]["input"], "1.500000");
  }
}

}  // namespace
}  // namespace ferry::itest
