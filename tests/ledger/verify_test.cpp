#include <gtest/gtest.h>

#include <limits>

#include "common/sha256.h"
#include "ledger/store.h"

#include "ledger/row_log.h"
#include "ledger/sqlite_db.h"
#include "ledger/verify.h"
#include "test_util.h"

namespace ferry::ledger {
namespace {

using testing::catalog_from;
using testing::record_durably;
using testing::simple_record;
using testing::TempDir;
using testing::tokens_of;

const char* kPrices = R"(
- {model: gpu-large, effective_from: 2026-01-01, input: 3.00, output: 15.00}
)";

class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("l.db");
    write_rows(5);
  }

  void write_rows(int count) {
    LedgerConfig config;
    config.path = path_;
    auto ledger = Ledger::open(config, catalog_from(kPrices), {});
    ASSERT_TRUE(ledger);
    for (int i = 0; i < count; ++i) {
      RequestRecord r = simple_record(i == 2 ? "nope" : "gpu-large", tokens_of(100 + i, 0, 10, 0));
      if (i == 1) {
        AttemptRecord a;
        a.target = "gpu-large";
        a.tokens = r.tokens;
        r.attempts = {a, a};
      }
      std::string id;
      ASSERT_TRUE(record_durably(**ledger, r, &id));
      ids_.push_back(id);
    }
    Adjustment adj;
    adj.adjusts_id = ids_[0];
    adj.output = Money::from_micros(-5);
    std::promise<Status> done;
    (*ledger)->adjust(adj, [&](const Status& st) { done.set_value(st); });
    ASSERT_TRUE(done.get_future().get());
  }

  // Tampering needs the append-only triggers out of the way first.
  void tamper(const std::string& sql) {
    auto db = ledger_db_open(path_, false);
    ASSERT_TRUE(db);
    ASSERT_TRUE(
        db->exec("DROP TRIGGER requests_no_update; DROP TRIGGER requests_no_delete;"
                 "DROP TRIGGER attempts_no_update;" +
                 sql));
  }

  VerifyResult verify() {
    auto result = verify_ledger(path_);
    EXPECT_TRUE(result) << result.error().message;
    return result ? *result : VerifyResult{};
  }

  static bool mentions(const VerifyResult& r, const std::string& text) {
    for (const auto& p : r.problems) {
      if (p.find(text) != std::string::npos) return true;
    }
    return false;
  }

  TempDir dir_;
  std::string path_;
  std::vector<std::string> ids_;
};

TEST_F(VerifyTest, CleanLedgerPasses) {
  VerifyResult r = verify();
  EXPECT_TRUE(r.ok()) << (r.problems.empty() ? "" : r.problems[0]);
  EXPECT_EQ(r.rows, 6);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.adjustments, 1);
}

TEST_F(VerifyTest, DetectsATamperedRow) {
  tamper("UPDATE requests SET output_tokens = output_tokens - 1 WHERE id = '" + ids_[3] + "'");
  VerifyResult r = verify();
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(mentions(r, "hash mismatch"));
  EXPECT_TRUE(mentions(r, ids_[3]));
}

TEST_F(VerifyTest, DetectsABrokenTotal) {
  tamper("UPDATE requests SET cost_total = cost_total + 1 WHERE id = '" + ids_[4] + "'");
  VerifyResult r = verify();
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(mentions(r, "cost_total"));
  EXPECT_TRUE(mentions(r, "daily aggregate"));
}

TEST_F(VerifyTest, DetectsATamperedAttempt) {
  tamper(
      "UPDATE attempts SET cost_output = cost_output + 7, cost_total = cost_total + 7 "
      "WHERE attempt = 2");
  VerifyResult r = verify();
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(mentions(r, "hash mismatch"));
  EXPECT_TRUE(mentions(r, "cost_output != sum over its attempts"));
}

TEST_F(VerifyTest, DetectsRemovedRows) {
  tamper("DELETE FROM requests WHERE id = '" + ids_[2] + "'");
  VerifyResult middle = verify();
  EXPECT_TRUE(mentions(middle, "prev_hash"));
}

TEST_F(VerifyTest, DetectsATruncatedTail) {
  tamper("DELETE FROM requests WHERE seq = (SELECT MAX(seq) FROM requests)");
  VerifyResult r = verify();
  EXPECT_TRUE(mentions(r, "chain head"));
}

TEST_F(VerifyTest, ChainContinuesAfterReopen) {
  std::string head_before = verify().head;
  write_rows(3);
  VerifyResult r = verify();
  EXPECT_TRUE(r.ok()) << (r.problems.empty() ? "" : r.problems[0]);
  EXPECT_EQ(r.rows, 10);
  auto db = ledger_db_open(path_, true);
  auto stmt = db->prepare("SELECT prev_hash FROM requests WHERE seq = 7");
  ASSERT_TRUE(stmt);
  ASSERT_TRUE(*stmt->step());
  EXPECT_EQ(stmt->text_at(0), head_before.substr(head_before.find(':') + 1));
}

TEST_F(VerifyTest, FlagsANegativeCostOnARequestButNotOnAnAdjustment) {
  // What an overflowed price x tokens (or a negative usage figure) used to leave behind: a
  // request that cost less than nothing. Its hash is intact; verify must still refuse it.
  {
    LedgerConfig config;
    config.path = path_;
    auto ledger = Ledger::open(config, catalog_from(kPrices), {});
    ASSERT_TRUE(ledger);
    ASSERT_TRUE(record_durably(**ledger, simple_record("gpu-large", tokens_of(-7, 0, -3, 0))));
  }
  VerifyResult r = verify();
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(mentions(r, "negative cost_input"));
  EXPECT_TRUE(mentions(r, "negative cost_output"));
  EXPECT_TRUE(mentions(r, "negative cost_total"));
  EXPECT_FALSE(mentions(r, "hash mismatch"));
  EXPECT_EQ(r.problems.size(), 3u) << "the -5 adjustment is a credit, not a defect";
}

TEST_F(VerifyTest, UsageCheckIsHashedAndOlderFilesMigrate) {
  // A version 2 file (before usage_check) with rows in it: verify reads it as it is, and opening
  // it migrates it without touching the rows' hashes.
  tamper(std::string(testing::kUndoSchemaFive) +
         "DROP INDEX requests_request_id; ALTER TABLE requests DROP COLUMN request_id; "
         "ALTER TABLE requests DROP COLUMN usage_check; PRAGMA user_version=2;");
  EXPECT_TRUE(verify().ok());
  {
    LedgerConfig config;
    config.path = path_;
    auto ledger = Ledger::open(config, catalog_from(kPrices), {});
    ASSERT_TRUE(ledger) << ledger.error().message;
    RequestRecord checked =
        simple_record("gpu-large", tokens_of(11, 0, 4, 0, TokenSource::kTokenizer));
    checked.usage_check = R"([{"attempt":1,"problem":"prompt_tokens -5 is negative or missing"}])";
    std::string id;
    ASSERT_TRUE(record_durably(**ledger, checked, &id));
    ids_.push_back(id);
    // A row without facts or a check hashes as before.
    ASSERT_TRUE(record_durably(**ledger, simple_record("gpu-large", tokens_of(1, 0, 1, 0))));
  }
  VerifyResult r = verify();
  EXPECT_TRUE(r.ok()) << (r.problems.empty() ? "" : r.problems[0]);
  EXPECT_EQ(r.rows, 8);
  {
    auto db = ledger_db_open(path_, true);
    auto stmt = db->prepare("SELECT usage_check FROM requests WHERE id = '" + ids_.back() + "'");
    ASSERT_TRUE(stmt);
    ASSERT_TRUE(*stmt->step());
    EXPECT_NE(stmt->text_at(0).find("negative or missing"), std::string::npos);
  }
  {
    auto db = ledger_db_open(path_, false);  // the triggers went with the first tamper()
    ASSERT_TRUE(db);
    ASSERT_TRUE(
        db->exec("UPDATE requests SET usage_check = NULL WHERE id = '" + ids_.back() + "'"));
  }
  VerifyResult tampered = verify();
  EXPECT_TRUE(mentions(tampered, "hash mismatch"));
  EXPECT_TRUE(mentions(tampered, ids_.back()));
}

// The bytes a row's hash covers, spelled out: every ledger written so far verifies against this
// encoding, so a faster writer of it must produce exactly these bytes (and row_hash, which
// verification uses, the same).
TEST(HashText, EncodesEveryKindOfValueAsItAlwaysHas) {
  const std::string long_text(300, 'x');
  std::vector<ValueRef> request = {std::string_view("id-1"),
                                   int64_t{0},
                                   int64_t{-42},
                                   std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max(),
                                   std::monostate{},
                                   std::string_view(""),
                                   std::string_view("a;b:T1"),
                                   std::string_view(long_text)};
  std::vector<ValueRef> attempt = {std::string_view("id-1"), int64_t{1}, std::monostate{}};
  std::vector<std::vector<ValueRef>> attempts = {attempt, attempt};
  const std::string expected_request =
      "ferry-ledger-v1\nT4:id-1;I0;I-42;I-9223372036854775808;I9223372036854775807;N;T0:;"
      "T6:a;b:T1;T300:" +
      long_text + ";";
  const std::string expected_attempts = "AT4:id-1;I1;N;AT4:id-1;I1;N;";
  std::string text = "left over";
  detail::hash_text(request, "req-7", attempts.data(), attempts.size(), text);
  EXPECT_EQ(text, expected_request + "RT5:req-7;" + expected_attempts);
  detail::hash_text(request, "", attempts.data(), 1, text, "inst");
  EXPECT_EQ(text, expected_request + "CT4:inst;AT4:id-1;I1;N;");
  detail::hash_text(request, "", nullptr, 0, text);
  EXPECT_EQ(text, expected_request);

  std::vector<Value> owned_request;
  for (const ValueRef& v : request) {
    if (const auto* i = std::get_if<int64_t>(&v)) {
      owned_request.emplace_back(*i);
    } else if (const auto* t = std::get_if<std::string_view>(&v)) {
      owned_request.emplace_back(std::string(*t));
    } else {
      owned_request.emplace_back(std::monostate{});
    }
  }
  std::vector<std::vector<Value>> owned_attempts(
      2, std::vector<Value>{std::string("id-1"), int64_t{1}, std::monostate{}});
  EXPECT_EQ(row_hash(owned_request, owned_attempts, "req-7", ""),
            sha256_hex(expected_request + "RT5:req-7;" + expected_attempts));
}

}  // namespace
}  // namespace ferry::ledger
