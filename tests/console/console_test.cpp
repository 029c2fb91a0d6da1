// The console through the real server: its embedded files with their CSP and ETag, sign-in
// with a finance or admin key into a session cookie (flags, expiry, sign-out), the CSRF token
// on every state-changing call, app keys and anonymous visitors refused; and task outcomes
// (POST /v1/tasks/{id}): stored once, idempotent, 409 on a different outcome, an app key only on
// its own tasks, and cost per completed task from the ledger.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>
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
  void start(const std::string& extra_server = "", const std::string& extra_config = "") {
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
    cfg += extra_config;
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

// A session configured to last 2 s ends: the cookie that worked is refused once the server's
// clock passes its expiry (polled: no sleep beyond what the expiry needs, no timing assertion).
TEST_F(ConsoleTest, ShortSessionExpiresAndIsRefused) {
  start("  console_session_seconds: 2\n");
  Response r;
  auto [cookie, csrf] = sign_in(kAdminKey, &r);
  EXPECT_NE(r.header("set-cookie").value_or("").find("Max-Age=2"), std::string::npos);
  const int64_t expires = r.body_json()["expires_at_us"].get<int64_t>();
  auto first = call("GET", "/console/api/v1/ledger/report?by=team", "", {"Cookie: " + cookie});
  ASSERT_TRUE(first);
  // Signed in: 200 unless the machine was so slow that the 2 s passed already.
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  if (now() < expires) {
    EXPECT_EQ(first->status, 200) << first->body;
  }
  while (now() <= expires) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto after = call("GET", "/console/api/v1/ledger/report?by=team", "", {"Cookie: " + cookie});
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 401) << after->body;
  auto who = call("GET", "/console/api/session", "", {"Cookie: " + cookie});
  ASSERT_TRUE(who);
  EXPECT_EQ(who->status, 401);
}

// Wrong keys are limited: after 10 failed sign-ins in a minute the next one is 429 with
// Retry-After, even with a right key; the API with keys keeps serving meanwhile.
TEST_F(ConsoleTest, FailedSignInsAreLimited) {
  start();
  for (int i = 0; i < 10; ++i) {
    auto wrong = call("POST", "/console/api/session",
                      json{{"key", "sk-guess-" + std::to_string(i)}}.dump(), {});
    ASSERT_TRUE(wrong);
    EXPECT_EQ(wrong->status, 401) << i;
  }
  auto limited = call("POST", "/console/api/session", json{{"key", kAdminKey}}.dump(), {});
  ASSERT_TRUE(limited);
  EXPECT_EQ(limited->status, 429) << limited->body;
  EXPECT_NE(limited->body.find("sign_in_rate_limited"), std::string::npos);
  ASSERT_TRUE(limited->header("retry-after"));
  EXPECT_GT(std::stoi(*limited->header("retry-after")), 0);
  EXPECT_FALSE(limited->header("set-cookie"));
  auto api = call("GET", "/v1/ledger/report?by=team", "", auth_headers(kAdminKey));
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 200);
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

// Every console table exports CSV with the JSON's (and the CLI's) numbers: tasks, top tasks,
// local versus GPU, budgets; the spend CSV's total is `ferry ledger report`'s.
TEST_F(ConsoleTest, TablesExportCsvWithTheSameNumbers) {
  start();
  chat("t-a");
  chat("t-a");
  chat("t-b");
  ASSERT_EQ(mark("t-a", {{"status", "completed"}})->status, 200);
  auto get = [&](const std::string& target) {
    auto r = call("GET", target, "", auth_headers(kFinanceKey));
    EXPECT_TRUE(r);
    EXPECT_EQ(r ? r->status : 0, 200) << target << (r ? r->body : "");
    return r ? *r : Response{};
  };
  // Lines of a CSV, its header first.
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::string line;
    for (char c : text) {
      if (c == '\n') {
        out.push_back(line);
        line.clear();
      } else {
        line += c;
      }
    }
    return out;
  };
  const json tasks = get("/v1/ledger/tasks").body_json();
  auto tasks_csv = lines(get("/v1/ledger/tasks?format=csv").body);
  ASSERT_EQ(tasks_csv.size(), tasks["rows"].size() + 1);
  for (size_t i = 0; i < tasks["rows"].size(); ++i) {
    const json& row = tasks["rows"][i];
    EXPECT_EQ(tasks_csv[i + 1],
              row["group"].get<std::string>() + "," + row["status"].get<std::string>() + "," +
                  std::to_string(row["tasks"].get<int64_t>()) + "," +
                  std::to_string(row["requests"].get<int64_t>()) + "," +
                  row["cost"].get<std::string>() + "," + row["cost_per_task"].get<std::string>() +
                  "," + row["local_cost"].get<std::string>() + "," +
                  std::to_string(row["local_requests"].get<int64_t>()) + "," +
                  std::to_string(row["tokens"].get<int64_t>()) + "," +
                  std::to_string(row["local_tokens"].get<int64_t>()));
  }
  const json top = get("/v1/ledger/top_tasks").body_json();
  auto top_csv = lines(get("/v1/ledger/top_tasks?format=csv").body);
  ASSERT_EQ(top_csv.size(), top["tasks"].size() + 1);
  EXPECT_EQ(top_csv[1].substr(0, top_csv[1].find(',')), top["tasks"][0]["task"].get<std::string>());
  const json local = get("/v1/ledger/local").body_json();
  auto local_csv = lines(get("/v1/ledger/local?format=csv").body);
  ASSERT_EQ(local_csv.size(), local["series"].size() + 1);
  EXPECT_EQ(local_csv[0], "day,local_requests,gpu_requests,local_cost,gpu_cost,saved");
  for (size_t i = 0; i < local["series"].size(); ++i) {
    const json& d = local["series"][i];
    EXPECT_EQ(local_csv[i + 1], d["day"].get<std::string>() + "," +
                                    std::to_string(d["local_requests"].get<int64_t>()) + "," +
                                    std::to_string(d["gpu_requests"].get<int64_t>()) + "," +
                                    d["local_cost"].get<std::string>() + "," +
                                    d["gpu_cost"].get<std::string>() + "," +
                                    d["saved"].get<std::string>());
  }
  const json budgets = get("/v1/ledger/budgets").body_json();
  auto budgets_csv = lines(get("/v1/ledger/budgets?format=csv").body);
  ASSERT_EQ(budgets_csv.size(), budgets["budgets"].size() + 1);
  auto xml = call("GET", "/v1/ledger/budgets?format=xml", "", auth_headers(kFinanceKey));
  ASSERT_TRUE(xml);
  EXPECT_EQ(xml->status, 400);  // refused, not ignored
  // The spend CSV adds up to the CLI's report total, to the micro-unit.
  auto spend_csv = lines(get("/v1/ledger/spend?format=csv&stack=team").body);
  int64_t spend_total = 0;
  for (size_t i = 1; i < spend_csv.size(); ++i) {
    spend_total += micros(spend_csv[i].substr(spend_csv[i].rfind(',') + 1));
  }
  std::string out = (dir_.path() / "report.json").string();
  ASSERT_EQ(run_command(ferry_binary() + " ledger report --db " + db_ +
                        " --by team --format json > " + out),
            0);
  std::ifstream in(out);
  json cli = json::parse(in);
  EXPECT_EQ(spend_total, micros(cli["totals"]["cost"]["total"].get<std::string>()));
  EXPECT_GT(spend_total, 0);
}

// A budget's row: its limit, what its scope spent (the ledger report's figure), nothing
// reserved once the requests settled, what is left, the period's reset (the next first of the
// month, UTC) and the burn-rate projection (spent × the period's length / the time gone, within
// what the clock said before and after the call).
TEST_F(ConsoleTest, BudgetsShowLimitSpentReservedResetAndProjection) {
  start("",
        "budgets:\n  - { name: team-a-month, scope: team, match: team-a, amount: 250.00, "
        "period: month }\n");
  chat("b-1");
  chat("b-2");
  auto now_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const int64_t before = now_us();
  auto r = call("GET", "/v1/ledger/budgets", "", auth_headers(kFinanceKey));
  const int64_t after = now_us();
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  ASSERT_EQ(r->body_json()["budgets"].size(), 1u) << r->body;
  const json b = r->body_json()["budgets"][0];
  EXPECT_EQ(b["name"], "team-a-month");
  EXPECT_EQ(b["period"], "month");
  auto report = call("GET", "/v1/ledger/report?by=team&team=team-a&format=json", "",
                     auth_headers(kFinanceKey));
  ASSERT_TRUE(report);
  const int64_t spent = micros(b["spent"].get<std::string>());
  EXPECT_EQ(spent, micros(report->body_json()["totals"]["cost"]["total"].get<std::string>()));
  EXPECT_GT(spent, 0);
  EXPECT_EQ(micros(b["limit"].get<std::string>()), 250'000'000);
  EXPECT_EQ(micros(b["reserved"].get<std::string>()), 0);
  EXPECT_EQ(micros(b["left"].get<std::string>()), 250'000'000 - spent);
  // The period: this month, UTC, from its first day to the next month's.
  using namespace std::chrono;
  const int64_t start_us = b["period_start_us"].get<int64_t>();
  const int64_t end_us = b["resets_at_us"].get<int64_t>();
  auto day_of = [](int64_t us) {
    return year_month_day(floor<days>(sys_time<microseconds>(microseconds(us))));
  };
  const year_month_day today = day_of(before);
  EXPECT_EQ(day_of(start_us), today.year() / today.month() / 1);
  EXPECT_EQ(day_of(end_us), (today.year() / today.month() + months(1)) / 1);
  EXPECT_EQ(start_us % 86'400'000'000LL, 0);
  EXPECT_EQ(end_us % 86'400'000'000LL, 0);
  // Projected: spent × length / gone, for a "now" between the two clock readings.
  ASSERT_GT(before, start_us);
  const __int128 length = end_us - start_us;
  const int64_t projected = micros(b["projected"].get<std::string>());
  EXPECT_GE(projected, static_cast<int64_t>(spent * length / (after - start_us)));
  EXPECT_LE(projected, static_cast<int64_t>(spent * length / (before - start_us)));
  EXPECT_GT(projected, spent);
}

}  // namespace
}  // namespace ferry::itest
