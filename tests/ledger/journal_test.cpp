// The journal's entry codec: every field of a row survives the trip through bytes (including
// text that is not UTF-8 and NUL bytes), and damaged bytes are refused, never misread.
#include <gtest/gtest.h>

#include "ledger/journal.h"
#include "test_util.h"

namespace ferry::ledger {
namespace {

using namespace ferry::ledger::testing;

LedgerEntry full_entry() {
  LedgerEntry e;
  e.kind = EntryKind::kAdjustment;
  RequestRecord& r = e.record;
  r = simple_record("gpu-large", tokens_of(100, 20, 30, 4, TokenSource::kTokenizer));
  r.id = "row-1";
  r.request_id = "req-1";
  r.task_id = std::string("task\0with nul", 13);
  r.trusted_tags = {"a", "\xff\xfe not utf-8"};
  r.claimed_tags = {"c"};
  r.status = RequestStatus::kUpstreamCut;
  r.http_status = 502;
  r.error_code = "upstream_cut";
  r.stream = true;
  r.finish_reason = "length";
  AttemptRecord a;
  a.target = "gpu-large";
  a.upstream_model = "m";
  a.status = RequestStatus::kError;
  a.http_status = 500;
  a.error_code = "boom";
  a.tokens = tokens_of(1, 2, 3, 4, TokenSource::kEstimate);
  a.started_us = 11;
  a.ended_us = 12;
  r.attempts = {a, a};
  r.timings = Timings{1, 2, -1, 4};
  r.facts_json = R"({"api":"chat"})";
  r.usage_check = "checked";
  r.constraint_mode = "tools";
  r.schema_hash = "abc";
  r.trimmed_tokens = 120;
  r.cache = "hit";
  r.cache_tokens = tokens_of(5, 6, 7, 8);
  r.reasoning_budget = "effort:high";
  e.adjusts_id = "row-0";
  e.note = "refund";
  e.cost = Cost{Pricing::kInternal,    "v1",
                Money::from_micros(1), Money::from_micros(2),
                Money::from_micros(3), Money::from_micros(-4)};
  e.attempt_costs = {e.cost, Cost{}};
  e.avoided = Money::from_micros(99);
  e.avoided_version = "ref-v1";
  e.cache_avoided = Money::from_micros(42);
  e.charges = {BudgetCharge{"team-month", 5, 6, Money::from_micros(1000), BudgetScope::kProject,
                            "proj-a", Money::from_micros(7), true}};
  return e;
}

TEST(JournalCodec, EveryFieldSurvives) {
  const LedgerEntry e = full_entry();
  const std::string bytes = encode_entry(e);
  auto back = decode_entry(bytes);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(encode_entry(*back), bytes);  // the same bytes again: nothing dropped or changed
  // And field by field for the ones the encoding could confuse.
  EXPECT_EQ(back->kind, EntryKind::kAdjustment);
  EXPECT_EQ(back->record.task_id, e.record.task_id);
  EXPECT_EQ(back->record.trusted_tags, e.record.trusted_tags);
  EXPECT_EQ(back->record.attempts.size(), 2u);
  EXPECT_EQ(back->record.attempts[1].tokens.reasoning.source, TokenSource::kEstimate);
  EXPECT_EQ(back->record.timings.ttft_us, -1);
  EXPECT_EQ(back->cost.reasoning.micros(), -4);
  EXPECT_EQ(back->attempt_costs[1].pricing, Pricing::kUnpriced);
  ASSERT_TRUE(back->avoided);
  EXPECT_EQ(back->avoided->micros(), 99);
  ASSERT_EQ(back->charges.size(), 1u);
  EXPECT_EQ(back->charges[0].scope, BudgetScope::kProject);
  EXPECT_TRUE(back->charges[0].from_lease);
  EXPECT_EQ(back->record.constraint_mode, "tools");
  EXPECT_EQ(back->record.trimmed_tokens, 120);
  EXPECT_EQ(back->record.cache_tokens.reasoning.count, 8);
  EXPECT_FALSE(back->trim_avoided);
  ASSERT_TRUE(back->cache_avoided);
  EXPECT_EQ(back->cache_avoided->micros(), 42);
}

TEST(JournalCodec, DamagedBytesAreRefused) {
  const std::string bytes = encode_entry(full_entry());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_entry(std::string_view(bytes).substr(0, n))) << "prefix " << n;
  }
  EXPECT_FALSE(decode_entry(bytes + "x"));  // trailing bytes
  std::string bad_version = bytes;
  bad_version[0] = 9;
  EXPECT_FALSE(decode_entry(bad_version));
  std::string huge_count = bytes;
  // The first string's length (right after the version and kind bytes) made absurd.
  for (int i = 2; i < 10; ++i) huge_count[static_cast<size_t>(i)] = '\x7f';
  EXPECT_FALSE(decode_entry(huge_count));
}

// An HTTP status is an int written in 8 bytes: damaged bytes beyond int's range are refused,
// not read as a different status (found by fuzz/fuzz_ledger_codec.cpp).
TEST(JournalCodec, StatusBeyondIntIsRefused) {
  LedgerEntry e = full_entry();
  e.record.http_status = 0x1234567;  // 8 bytes that occur once in the encoding
  const std::string bytes = encode_entry(e);
  const std::string status("\x67\x45\x23\x01\0\0\0\0", 8);
  const size_t at = bytes.find(status);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(bytes.find(status, at + 1), std::string::npos);
  ASSERT_TRUE(decode_entry(bytes));
  // 0x1'01234567, and 0xffffffff'01234567 (below INT32_MIN).
  for (const std::string& high : {std::string("\x01\0\0\0", 4), std::string("\xff\xff\xff\xff")}) {
    std::string damaged = bytes;
    damaged.replace(at + 4, 4, high);
    EXPECT_FALSE(decode_entry(damaged)) << static_cast<int>(high[0]);
  }
}

TEST(Journal, KeepsRowsAcrossOpens) {
  TempDir dir;
  LedgerEntry a = full_entry(), b = full_entry();
  b.record.id = "row-2";
  {
    auto j = Journal::open(dir.file("j.db"));
    ASSERT_TRUE(j);
    std::vector<LedgerEntry*> entries{&a, &b};
    ASSERT_TRUE(j->append(entries));
  }
  auto j = Journal::open(dir.file("j.db"));
  ASSERT_TRUE(j);
  EXPECT_EQ(j->pending(), 2);
  auto rows = j->oldest(10);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].entry.record.id, "row-1");  // in the order kept
  EXPECT_EQ((*rows)[1].entry.record.id, "row-2");
  ASSERT_TRUE(j->set_aside((*rows)[0].seq, "refused for good"));
  ASSERT_TRUE(j->remove({(*rows)[1].seq}));
  EXPECT_EQ(j->pending(), 0);
  auto again = Journal::open(dir.file("j.db"));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->pending(), 0);
}

}  // namespace
}  // namespace ferry::ledger
