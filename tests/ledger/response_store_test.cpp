// Stored Responses on real SQLite: a response written is read back whole by its key, from
// another connection (another instance sharing the file), until it expires; other keys and
// missing ids find nothing; the ledger's rows and the stored responses share one file.
#include "ledger/response_store.h"

#include <gtest/gtest.h>

#include <future>
#include <string>

#include "common/clock.h"
#include "ledger/sqlite_store.h"
#include "test_util.h"

namespace ferry::ledger {
namespace {

using testing::TempDir;

StoredResponse sample(const std::string& id, int64_t created_us) {
  StoredResponse r;
  r.id = id;
  r.key_id = "app";
  r.model = "m";
  r.created_us = created_us;
  r.items = R"([{"type":"message","role":"user","content":"hi"}])";
  r.output = R"([{"id":"msg_1","type":"message","role":"assistant","content":[]}])";
  r.response = R"({"id":")" + id + R"(","object":"response"})";
  return r;
}

Status put_and_wait(ResponseStore& store, StoredResponse r) {
  std::promise<Status> done;
  store.put(std::move(r), [&](const Status& s) { done.set_value(s); });
  return done.get_future().get();
}

TEST(ResponseStore, AResponseIsReadBackWholeByItsKey) {
  TempDir dir;
  auto store = ResponseStore::open(dir.file("ledger.db"));
  ASSERT_TRUE(store) << store.error().message;
  const int64_t now = unix_micros_now();
  ASSERT_TRUE(put_and_wait(**store, sample("resp_a", now)));
  auto got = (*store)->get("resp_a", "app", now + 1);
  ASSERT_TRUE(got);
  ASSERT_TRUE(*got);
  EXPECT_EQ((*got)->items, sample("resp_a", now).items);
  EXPECT_EQ((*got)->output, sample("resp_a", now).output);
  EXPECT_EQ((*got)->response, sample("resp_a", now).response);
  EXPECT_EQ((*got)->model, "m");
  EXPECT_EQ((*got)->created_us, now);
  EXPECT_EQ((*got)->expires_us, now + 30 * 86'400'000'000LL);  // the default keep: 30 days
  // Another key's, and a missing id: nothing.
  EXPECT_FALSE(*(*store)->get("resp_a", "other", now + 1));
  EXPECT_FALSE(*(*store)->get("resp_b", "app", now + 1));
}

TEST(ResponseStore, StopWritingReturnsOnceEveryQueuedCallbackRan) {
  TempDir dir;
  auto store = ResponseStore::open(dir.file("ledger.db"));
  ASSERT_TRUE(store) << store.error().message;
  const int64_t now = unix_micros_now();
  int called = 0;  // written by the writer thread, read after stop_writing joined it
  for (int i = 0; i < 10; ++i) {
    (*store)->put(sample("resp_" + std::to_string(i), now), [&](const Status& s) {
      EXPECT_TRUE(s) << s.error().message;
      ++called;
    });
  }
  (*store)->stop_writing();
  EXPECT_EQ(called, 10);
  (*store)->stop_writing();  // again: nothing to do
  EXPECT_TRUE(*(*store)->get("resp_9", "app", now + 1));
}

TEST(ResponseStore, ExpiredResponsesAreGoneAndPurged) {
  TempDir dir;
  auto store = ResponseStore::open(dir.file("ledger.db"), ResponseStoreConfig{2});
  ASSERT_TRUE(store);
  const int64_t day = 86'400'000'000LL;
  const int64_t now = unix_micros_now();
  ASSERT_TRUE(put_and_wait(**store, sample("resp_old", now - 10 * day)));  // kept for two days
  ASSERT_TRUE(put_and_wait(**store, sample("resp_new", now)));
  EXPECT_FALSE(*(*store)->get("resp_old", "app", now));  // expired (and purged by the writer)
  EXPECT_TRUE(*(*store)->get("resp_new", "app", now + day));
  EXPECT_FALSE(*(*store)->get("resp_new", "app", now + 2 * day));
  auto purged = (*store)->purge(now + 3 * day);
  ASSERT_TRUE(purged);
  EXPECT_GE(*purged, 1);                                       // resp_new at least
  EXPECT_FALSE(*(*store)->get("resp_new", "app", now + day));  // deleted
  EXPECT_EQ(*(*store)->purge(now + 3 * day), 0);
}

TEST(ResponseStore, AnotherInstanceSharingTheFileReadsIt) {
  TempDir dir;
  const std::string path = dir.file("ledger.db");
  auto a = ResponseStore::open(path);
  auto b = ResponseStore::open(path);
  ASSERT_TRUE(a && b);
  const int64_t now = unix_micros_now();
  ASSERT_TRUE(put_and_wait(**a, sample("resp_shared", now)));
  auto got = (*b)->get("resp_shared", "app", now);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((*got)->id, "resp_shared");
}

TEST(ResponseStore, ItSurvivesReopeningAndSharesTheLedgerFile) {
  TempDir dir;
  const std::string path = dir.file("ledger.db");
  auto ledger = SqliteStore::open(path, "");
  ASSERT_TRUE(ledger) << ledger.error().message;
  const int64_t now = unix_micros_now();
  {
    auto store = ResponseStore::open(path);
    ASSERT_TRUE(store);
    for (int i = 0; i < 50; ++i) (*store)->put(sample("resp_" + std::to_string(i), now), nullptr);
    (*store)->flush();
  }  // closed: durable
  auto again = ResponseStore::open(path);
  ASSERT_TRUE(again);
  for (int i = 0; i < 50; ++i) {
    EXPECT_TRUE(*(*again)->get("resp_" + std::to_string(i), "app", now)) << i;
  }
  // The ledger's own tables are untouched and still open.
  auto reopened = SqliteStore::open(path, "");
  EXPECT_TRUE(reopened) << reopened.error().message;
}

TEST(ResponseStore, TextIsKeptByteForByte) {
  TempDir dir;
  auto store = ResponseStore::open(dir.file("ledger.db"));
  ASSERT_TRUE(store);
  StoredResponse r = sample("resp_u", unix_micros_now());
  r.items = std::string(R"([{"role":"user","content":"caf\u00e9 )") + "\xe2\x9c\x93" +
            std::string(1 << 20, 'x') + "\"}]";  // a megabyte and some UTF-8
  ASSERT_TRUE(put_and_wait(**store, r));
  auto got = (*store)->get("resp_u", "app", r.created_us);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((*got)->items, r.items);
}

TEST(ResponseStore, KeepIsChecked) {
  TempDir dir;
  EXPECT_FALSE(ResponseStore::open(dir.file("a.db"), ResponseStoreConfig{0}));
  EXPECT_FALSE(ResponseStore::open(dir.file("b.db"), ResponseStoreConfig{100000}));
  EXPECT_FALSE(ResponseStore::open("/nonexistent-dir/x/ledger.db"));
}

TEST(ResponseStore, TheLedgerConfigTakesTheKeep) {
  YAML::Node node = YAML::Load("{ path: /tmp/x.db, responses: { keep_days: 7 } }");
  EXPECT_EQ(parse_ledger_config(node, "t.yaml").responses_keep_days, 7);
  EXPECT_EQ(parse_ledger_config(YAML::Load("{ path: /tmp/x.db }"), "t.yaml").responses_keep_days,
            30);
  EXPECT_ANY_THROW(
      parse_ledger_config(YAML::Load("{ path: x, responses: { keep_days: 0 } }"), "t"));
  EXPECT_ANY_THROW(parse_ledger_config(YAML::Load("{ path: x, responses: { keep: 3 } }"), "t"));
}

}  // namespace
}  // namespace ferry::ledger
