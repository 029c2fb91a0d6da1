// Hostile input through the real `ferry` binary: bytes that are not UTF-8 in query parameters,
// routing headers, admin bodies and rows an older ferry stored; bytes >= 0x80 in the request
// target; many pipelined requests in one write; a client half-close; garbage from the upstream
// (a 200 body that is not an answer, stream events that are not JSON, two Content-Types); HEAD;
// the Bearer scheme in any case; the x-ferry-task length. Each gets a clear answer and ferry keeps
// serving.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/socket.h>

#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "tests/integration/ferry_test_base.h"

namespace ferry::itest {
namespace {

constexpr const char* kFinanceKey = "sk-test-finance-7777";

constexpr const char* kPolicy = R"(
targets:
  good: gpt-test
  garbage: garbage-body
  nochoices: no-choices
  badfirst: bad-event-first
models: [auto, garbage-then-good, nochoices-then-good, badfirst-then-good]
rules:
  - id: garbage-fallback
    when: { model: garbage-then-good }
    route: [garbage, good]
  - id: nochoices-fallback
    when: { model: nochoices-then-good }
    route: [nochoices, good]
  - id: badfirst-fallback
    when: { model: badfirst-then-good }
    route: [badfirst, good]
default: { route: [good] }
)";

class HostileTest : public OwnConfigTest {
 protected:
  // The standard config plus a finance key, the garbage models, a ledger and (optionally) a
  // policy whose aliases fall back from a garbage target to a good one.
  std::string config(bool policy) {
    std::string cfg = standard_config(upstream_.address);
    std::string admin = "    - id: admin-key\n";
    cfg.insert(cfg.find(admin), std::string("    - id: finance-key\n      key: ") + kFinanceKey +
                                    "\n      team: money\n      role: finance\n");
    std::string models;
    for (const char* m : {"garbage-body", "no-choices", "bad-event-first", "bad-event-mid",
                          "json-type-after", "json-type-before"}) {
      models += std::string("  - {name: ") + m + ", backend: up, upstream_model: " + m + "}\n";
    }
    cfg.insert(cfg.find("log:\n"), models);
    cfg += "ledger:\n  path: " + db_ + "\n";
    if (policy) {
      cfg += "policy:\n  file: " + dir_.write("policies.yaml", kPolicy) + "\n  watch: false\n";
    }
    return cfg;
  }

  void start(bool policy = false) { ferry_ = start_ferry(dir_, config(policy)); }

  // A normal request on a fresh connection still succeeds.
  void expect_serving(const std::string& model = "gpt-test") {
    auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body(model, "still ok"));
    ASSERT_TRUE(r) << "ferry no longer answers";
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: still ok");
  }

  std::optional<Response> get(const std::string& target, const char* key) {
    return http_request(ferry_.address, "GET", target, "", auth_headers(key));
  }

  // Every ledger row, keyed by task id (the export as CSV: header line, then one line a row;
  // the fields used here hold no commas or quotes).
  std::map<std::string, std::map<std::string, std::string>> rows_by_task() {
    std::map<std::string, std::map<std::string, std::string>> out;
    auto r = get("/v1/ledger/export.csv", kAdminKey);
    EXPECT_TRUE(r);
    if (!r) return out;
    EXPECT_EQ(r->status, 200) << r->body;
    std::istringstream in(r->body);
    std::string line;
    std::vector<std::string> names;
    auto split = [](const std::string& l) {
      std::vector<std::string> f;
      std::string cur;
      for (char c : l) {
        if (c == ',') {
          f.push_back(cur);
          cur.clear();
        } else if (c != '\r') {
          cur += c;
        }
      }
      f.push_back(cur);
      return f;
    };
    while (std::getline(in, line)) {
      auto fields = split(line);
      if (names.empty()) {
        names = fields;
        continue;
      }
      std::map<std::string, std::string> row;
      for (size_t i = 0; i < names.size() && i < fields.size(); ++i) row[names[i]] = fields[i];
      out[row["task_id"]] = row;
    }
    return out;
  }

  static std::vector<std::string> with_task(const std::string& task) {
    auto h = auth_headers();
    h.push_back("x-ferry-task: " + task);
    return h;
  }
};

void expect_400_naming(const std::optional<Response>& r, const std::string& param) {
  ASSERT_TRUE(r) << "no answer (the connection was closed)";
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_TRUE(is_openai_error(*r));
  EXPECT_EQ(r->body_json()["error"]["param"], param) << r->body;
}

// ---- invalid UTF-8 ---------------------------------------------------------------------

TEST_F(HostileTest, InvalidUtf8InAdminQueriesAndBodiesIs400NamingTheField) {
  start(/*policy=*/true);
  expect_400_naming(get("/v1/ledger/report?%ff=1", kFinanceKey), "query");
  expect_400_naming(get("/v1/ledger/report?from=%ff", kFinanceKey), "from");
  expect_400_naming(get("/v1/ledger/export.csv?task=%ff%fe", kFinanceKey), "task");
  expect_400_naming(http_request(ferry_.address, "POST", "/admin/route/explain?key=%ff",
                                 chat_body("auto", "x").dump(), auth_headers(kAdminKey)),
                    "key");
  std::string policy = std::string(kPolicy) + "# \xff\n";
  expect_400_naming(
      http_request(ferry_.address, "PUT", "/admin/policy", policy, auth_headers(kAdminKey)),
      "body");
  expect_serving("auto");
}

TEST_F(HostileTest, InvalidUtf8InRoutingHeadersIs400AndNothingIsStored) {
  start(/*policy=*/true);
  auto task = post_json(ferry_.address, "/v1/chat/completions", chat_body("auto", "x"),
                        with_task("\xff\xfe"));
  expect_400_naming(task, "x-ferry-task");
  auto h = auth_headers();
  h.push_back("x-ferry-tags: \xff\xfe");
  expect_400_naming(post_json(ferry_.address, "/v1/chat/completions", chat_body("auto", "x"), h),
                    "x-ferry-tags");
  // Nothing reached the ledger, and the report by task still renders.
  auto report = get("/v1/ledger/report?by=task", kFinanceKey);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->status, 200) << report->body;
  EXPECT_EQ(report->body_json()["totals"]["requests"], 0) << report->body;
  expect_serving("auto");
}

TEST_F(HostileTest, TaskHeaderIsLimitedTo256BytesLikeMetadataTaskId) {
  start();
  auto at_limit = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "x"),
                            with_task(std::string(256, 't')));
  ASSERT_TRUE(at_limit);
  EXPECT_EQ(at_limit->status, 200) << at_limit->body;
  expect_400_naming(post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "x"),
                              with_task(std::string(257, 't'))),
                    "x-ferry-task");
  expect_400_naming(post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "x"),
                              with_task(std::string(10000, 't'))),
                    "x-ferry-task");
  auto rows = rows_by_task();
  EXPECT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows.count(std::string(256, 't')), 1u);
}

// Rows an older ferry stored with bytes that are not UTF-8 render with U+FFFD, over HTTP and
// from the command line, also after a restart.
TEST_F(HostileTest, StoredRowsWithInvalidBytesRenderAsReplacementCharacters) {
  start();
  auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "x"),
                     with_task("t-old"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  ASSERT_EQ(ferry_.process->stop(Ms(15000)), 0);
  {
    // What an older ferry stored unchecked: the append-only trigger is set aside for the
    // edit, as if the row had been written with those bytes.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
    auto exec = [&](const char* sql) {
      char* err = nullptr;
      int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
      EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (err ? err : "");
      sqlite3_free(err);
    };
    exec("DROP TRIGGER requests_no_update");
    exec("UPDATE requests SET task_id = CAST(x'fffe' AS TEXT) WHERE task_id = 't-old'");
    EXPECT_EQ(sqlite3_changes(db), 1);
    // The report by task reads task_totals, which the migration builds from those rows.
    exec("UPDATE task_totals SET task_id = CAST(x'fffe' AS TEXT) WHERE task_id = 't-old'");
    EXPECT_EQ(sqlite3_changes(db), 1);
    exec(
        "CREATE TRIGGER requests_no_update BEFORE UPDATE ON requests BEGIN SELECT "
        "RAISE(ABORT, 'ledger rows are append-only; add an adjustment row'); END");
    sqlite3_close(db);
  }
  start();
  for (int i = 0; i < 2; ++i) {
    auto report = get("/v1/ledger/report?by=task", kFinanceKey);
    ASSERT_TRUE(report) << "no answer to the report (round " << i << ")";
    ASSERT_EQ(report->status, 200) << report->body;
    json j = report->body_json();
    ASSERT_FALSE(j.is_discarded()) << report->body;
    ASSERT_EQ(j["groups"].size(), 1u) << report->body;
    EXPECT_EQ(j["groups"][0]["task"], "\xef\xbf\xbd\xef\xbf\xbd") << report->body;
  }
  std::string out = (dir_.path() / "report.json").string();
  ASSERT_EQ(run_command(ferry_binary() + " ledger report --db " + db_ +
                        " --by task --format json > " + out),
            0);
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  json cli = json::parse(text.str(), nullptr, false);
  ASSERT_FALSE(cli.is_discarded()) << text.str();
  EXPECT_EQ(cli["groups"][0]["task"], "\xef\xbf\xbd\xef\xbf\xbd") << text.str();
  expect_serving();
}

// ---- the request target ----------------------------------------------------------------

TEST_F(HostileTest, TargetWithBytesAbove0x7fIs400WithAnAccessLogLine) {
  start();
  for (const char* target : {"/h\xe9"
                             "alth",
                             "/v1/models/\xff"}) {
    auto c = Connection::open(ferry_.address.host, ferry_.address.port);
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->send(make_request("GET", target, "", auth_headers())));
    auto r = c->read_response(Ms(20000));
    ASSERT_TRUE(r) << "no answer for a target with a byte >= 0x80: " << target;
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_TRUE(is_openai_error(*r));
  }
  auto line = ferry_.process->wait_for_line_containing("\"/v1/models/\xef\xbf\xbd\"", Ms(10000));
  ASSERT_TRUE(line) << "no access-log line for the refused target";
  json logged = json::parse(*line, nullptr, false);
  ASSERT_FALSE(logged.is_discarded()) << *line;
  EXPECT_EQ(logged["status"], 400) << *line;
  expect_serving();
}

// ---- pipelining and half-close ---------------------------------------------------------

void expect_pipelined_chats_answered(const ListenAddress& ferry, int count) {
  auto c = Connection::open(ferry.host, ferry.port);
  ASSERT_TRUE(c);
  std::string batch;
  for (int i = 0; i < count; ++i) {
    batch += make_request("POST", "/v1/chat/completions",
                          chat_body("gpt-test", "p" + std::to_string(i)).dump(),
                          {std::string("Authorization: Bearer ") + kAppKey,
                           "X-Request-Id: pipe-" + std::to_string(i)});
  }
  // One write, from another thread: the answers are read meanwhile, so neither side's socket
  // buffers have to hold everything.
  bool sent = false;
  std::thread writer([&] { sent = c->send(batch); });
  int answered = 0;
  for (; answered < count; ++answered) {
    auto r = c->read_response(Ms(20000));
    if (!r) break;
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->header("x-request-id").value_or(""), "pipe-" + std::to_string(answered));
    EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"],
              "echo: p" + std::to_string(answered));
  }
  if (answered < count) ::shutdown(c->fd(), SHUT_RDWR);  // ends a writer blocked on a dead peer
  writer.join();
  EXPECT_TRUE(sent);
  EXPECT_EQ(answered, count) << "pipelined answers missing";
}

TEST_F(HostileTest, PipelinedChatRequestsInOneWriteAreAllAnsweredInOrder) {
  start();
  expect_pipelined_chats_answered(ferry_.address, 101);
  expect_pipelined_chats_answered(ferry_.address, 500);
  expect_serving();
}

TEST_F(HostileTest, AfterAClientHalfCloseEveryRequestSentIsAnswered) {
  start();
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c);
  // Chat requests and health checks in turn; the first chat is slow at the upstream.
  std::string batch;
  constexpr int kCount = 10;
  for (int i = 0; i < kCount; ++i) {
    if (i % 2 == 1) {
      batch += make_request("GET", "/healthz", "");
      continue;
    }
    batch += make_request("POST", "/v1/chat/completions",
                          chat_body(i == 0 ? "slow" : "gpt-test", "h" + std::to_string(i)).dump(),
                          auth_headers());
  }
  ASSERT_TRUE(c->send(batch));
  // Half-close once the first request is at the upstream: ferry then reads the end of stream
  // while it waits for the answer, with nine requests still buffered.
  for (int i = 0; i < 1000 && upstream_stats(upstream_.address).value("in_flight", 0) < 1; ++i) {
    std::this_thread::sleep_for(Ms(10));
  }
  ASSERT_EQ(::shutdown(c->fd(), SHUT_WR), 0);
  for (int i = 0; i < kCount; ++i) {
    auto r = c->read_response(Ms(20000));
    ASSERT_TRUE(r) << "request " << i << " of " << kCount << " sent before the half-close "
                   << "was not answered";
    EXPECT_EQ(r->status, 200) << r->body;
    if (i % 2 == 1) {
      EXPECT_EQ(r->body, "ok\n");
    } else {
      EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: h" + std::to_string(i));
    }
  }
  EXPECT_TRUE(c->wait_closed(Ms(10000))) << "ferry should close once everything is answered";
  expect_serving();
}

// ---- garbage from the upstream ---------------------------------------------------------

TEST_F(HostileTest, NonJsonOrChoicelessAnswerIs502BackendErrorRecordedAsError) {
  start();
  for (const char* model : {"garbage-body", "no-choices"}) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body(model, "x"),
                       with_task(std::string("t-") + model));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 502) << model << ": " << r->body;
    ASSERT_TRUE(is_openai_error(*r));
    EXPECT_EQ(r->body_json()["error"]["code"], "backend_error") << r->body;
  }
  auto rows = rows_by_task();
  for (const char* model : {"garbage-body", "no-choices"}) {
    std::string task = std::string("t-") + model;
    ASSERT_EQ(rows.count(task), 1u) << task;
    EXPECT_EQ(rows[task]["status"], "error") << task;
  }
  expect_serving();
}

TEST_F(HostileTest, StreamEventThatIsNotJsonIsABackendError) {
  start();
  // Before anything was sent: a plain 502.
  StreamResult first =
      stream_request(ferry_.address, "/v1/chat/completions",
                     chat_body("bad-event-first", "a b c", true), with_task("t-first"));
  ASSERT_TRUE(first.head);
  EXPECT_EQ(first.head->status, 502) << first.head->body;
  // Mid-stream: the stream ends with an error event; the bad event is never forwarded.
  StreamResult mid =
      stream_request(ferry_.address, "/v1/chat/completions",
                     chat_body("bad-event-mid", "a b c d", true), with_task("t-mid"));
  ASSERT_TRUE(mid.head);
  EXPECT_EQ(mid.head->status, 200);
  EXPECT_NE(mid.end, ReadStatus::kTimeout);
  EXPECT_TRUE(mid.has_error_event());
  EXPECT_FALSE(mid.saw_done);
  for (const auto& e : mid.events) {
    EXPECT_FALSE(json::parse(e.data, nullptr, false).is_discarded())
        << "non-JSON data forwarded to the client: " << e.data;
  }
  auto rows = rows_by_task();
  ASSERT_EQ(rows.count("t-first"), 1u);
  EXPECT_EQ(rows["t-first"]["status"], "error");
  ASSERT_EQ(rows.count("t-mid"), 1u);
  EXPECT_EQ(rows["t-mid"]["status"], "upstream_cut") << "a stream the upstream broke";
  expect_serving();
}

// Content-Type is one value (RFC 9110, 5.3): of two, the upstream's first is the one read, as
// Beast's field lookup gives it; the events are checked either way.
TEST_F(HostileTest, AnAnswerWithTwoContentTypesIsReadByTheFirst) {
  start();
  StreamResult after = stream_request(ferry_.address, "/v1/chat/completions",
                                      chat_body("json-type-after", "two types", true));
  ASSERT_TRUE(after.head);
  ASSERT_EQ(after.head->status, 200) << after.head->body;
  EXPECT_TRUE(after.saw_done);
  EXPECT_FALSE(after.has_error_event());
  EXPECT_EQ(after.content(), "echo: two types");
  EXPECT_NE(after.head->header("content-type").value_or("").find("text/event-stream"),
            std::string::npos);
  // Nothing was sent yet: the whole error answer, read as one.
  auto before = post_json(ferry_.address, "/v1/chat/completions",
                          chat_body("json-type-before", "two types", true), with_task("t-before"));
  ASSERT_TRUE(before);
  EXPECT_EQ(before->status, 502) << before->body;
  ASSERT_TRUE(is_openai_error(*before)) << before->body;
  EXPECT_NE(before->body_json()["error"]["message"].get<std::string>().find(
                "'application/json' instead of an event stream"),
            std::string::npos)
      << before->body;
  auto rows = rows_by_task();
  ASSERT_EQ(rows.count("t-before"), 1u);
  EXPECT_EQ(rows["t-before"]["status"], "error");
  expect_serving();
}

TEST_F(HostileTest, GarbageFromTheFirstHopFallsBackWhileNothingWasSent) {
  start(/*policy=*/true);
  for (const char* model : {"garbage-then-good", "nochoices-then-good"}) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body(model, "fb"));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << model << ": " << r->body;
    EXPECT_EQ(r->body_json()["choices"][0]["message"]["content"], "echo: fb");
    EXPECT_EQ(r->header("x-ferry-attempts").value_or(""), "2") << model;
    EXPECT_EQ(r->header("x-ferry-target").value_or(""), "good") << model;
  }
  StreamResult s = stream_request(ferry_.address, "/v1/chat/completions",
                                  chat_body("badfirst-then-good", "fb", true));
  ASSERT_TRUE(s.head);
  ASSERT_EQ(s.head->status, 200);
  EXPECT_TRUE(s.saw_done);
  EXPECT_EQ(s.content(), "echo: fb");
  EXPECT_EQ(s.head->header("x-ferry-attempts").value_or(""), "2");
}

// ---- small protocol points -------------------------------------------------------------

TEST_F(HostileTest, HeadIsAnsweredAsGetWithoutABody) {
  start();
  auto c = Connection::open(ferry_.address.host, ferry_.address.port);
  ASSERT_TRUE(c);
  for (const char* target : {"/healthz", "/v1/models"}) {
    ASSERT_TRUE(c->send(make_request("HEAD", target, "", auth_headers())));
    auto head = c->read_head(Ms(20000));
    ASSERT_TRUE(head) << target;
    EXPECT_EQ(head->status, 200) << target;
    EXPECT_NE(head->header("content-length").value_or("0"), "0") << target;
    // No body follows: the next answer on the connection starts right away.
    ASSERT_TRUE(c->send(make_request("GET", "/healthz", "")));
    auto next = c->read_response(Ms(20000));
    ASSERT_TRUE(next) << "after HEAD " << target;
    EXPECT_EQ(next->status, 200);
    EXPECT_EQ(next->body, "ok\n");
  }
}

TEST_F(HostileTest, TheBearerSchemeIsCaseInsensitive) {
  start();
  for (const char* scheme : {"bearer", "BEARER", "bEaReR"}) {
    auto r = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "k"),
                       {std::string("Authorization: ") + scheme + " " + kAppKey});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << scheme << ": " << r->body;
  }
  auto wrong = post_json(ferry_.address, "/v1/chat/completions", chat_body("gpt-test", "k"),
                         {std::string("Authorization: Basic ") + kAppKey});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
}

}  // namespace
}  // namespace ferry::itest
