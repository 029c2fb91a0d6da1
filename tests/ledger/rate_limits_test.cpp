// RateBook: token buckets per limit, driven with explicit times (exact: no clock in the test);
// the shared bucket in PostgreSQL when FERRY_TEST_PG_URL is set.
#include "ledger/rate_limits.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "common/yaml_util.h"
#include "ledger/pg_db.h"
#include "ledger/pg_store.h"

namespace ferry::ledger {
namespace {

constexpr int64_t kT0 = 1'780'000'000'000'000;  // some unix micros
constexpr int64_t kSecond = 1'000'000;

RateLimitDef limit(int64_t rpm, int64_t tpm, CacheHits hits = CacheHits::kCount) {
  RateLimitDef d;
  d.name = "team-a-rate";
  d.scope = BudgetScope::kTeam;
  d.match = "team-a";
  d.requests_per_minute = rpm;
  d.tokens_per_minute = tpm;
  d.cache_hits = hits;
  return d;
}

const Subject kTeamA{"app-key", "team-a", "proj-x"};
const Subject kTeamB{"other-key", "team-b", "proj-y"};

TEST(RateBook, RequestsPerMinuteAdmitsExactlyTheLimitThenRefusesWithRetryAfter) {
  RateBook book({limit(3, 0)});
  for (int i = 0; i < 3; ++i) {
    auto hold = book.reserve(kTeamA, 10, kT0);
    ASSERT_TRUE(hold) << i;
    ASSERT_TRUE(hold->requests);
    EXPECT_EQ(hold->requests->limit, 3);
    EXPECT_EQ(hold->requests->remaining, 2 - i);
    EXPECT_EQ(hold->requests->reset_ms, (i + 1) * 20000);  // one request refills in 20 s
    EXPECT_FALSE(hold->tokens_view);
  }
  auto refused = book.reserve(kTeamA, 10, kT0);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kRateLimited);
  EXPECT_EQ(refused.error().param, "team-a-rate");
  EXPECT_EQ(refused.error().type_code, "rate_limit_exceeded");
  EXPECT_EQ(refused.error().retry_after_s, 20);
  // Another team is not limited; 19 s later still refused (Retry-After 1), 20 s later admitted.
  EXPECT_TRUE(book.reserve(kTeamB, 10, kT0));
  auto later = book.reserve(kTeamA, 10, kT0 + 19 * kSecond);
  ASSERT_FALSE(later);
  EXPECT_EQ(later.error().retry_after_s, 1);
  EXPECT_TRUE(book.reserve(kTeamA, 10, kT0 + 20 * kSecond));
  EXPECT_FALSE(book.reserve(kTeamA, 10, kT0 + 20 * kSecond));
}

TEST(RateBook, TokensAreReservedAtAdmissionAndCorrectedAtSettle) {
  RateBook book({limit(0, 1000)});
  auto a = book.reserve(kTeamA, 600, kT0);  // prompt + max_tokens
  ASSERT_TRUE(a);
  EXPECT_EQ(a->tokens_view->remaining, 400);
  auto b = book.reserve(kTeamA, 600, kT0);
  ASSERT_FALSE(b) << "600 more tokens do not fit in 400";
  EXPECT_EQ(b.error().retry_after_s, 12);  // 200 tokens at 1000/min: 12 s
  book.settle(*a, 150, false, kT0);        // the row billed 150: 450 come back
  auto c = book.reserve(kTeamA, 600, kT0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->tokens_view->remaining, 250);
  // A settle that used more than reserved takes the rest (the bucket may go below zero).
  book.settle(*c, 900, false, kT0);
  auto d = book.reserve(kTeamA, 1, kT0);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().retry_after_s, 4);  // from -50, 1 token needs 51: 3.06 s, rounded up
}

TEST(RateBook, ARequestLargerThanTheWholeLimitIsRefusedWithoutRetryAfter) {
  RateBook book({limit(0, 1000)});
  auto r = book.reserve(kTeamA, 1001, kT0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().retry_after_s, 0);
  EXPECT_NE(r.error().message.find("max_tokens"), std::string::npos) << r.error().message;
}

TEST(RateBook, CacheHitsCountAsConfigured) {
  RateBook book({limit(2, 1000, CacheHits::kFree), limit(2, 1000, CacheHits::kRequestsOnly)});
  // Two definitions with one name cannot come from YAML; here they stand for two teams' rules.
  auto hit = book.reserve(kTeamA, 500, kT0);
  ASSERT_TRUE(hit);
  book.settle(*hit, 300, /*cache_hit=*/true, kT0);
  auto states = book.snapshot();
  // free: the request and its tokens come back; requests_only: the tokens only.
  EXPECT_EQ(states[RateBook::bucket(0, RateDimension::kRequests)].level, 2 * kUnitsPerQuota);
  EXPECT_EQ(states[RateBook::bucket(0, RateDimension::kTokens)].level, 1000 * kUnitsPerQuota);
  EXPECT_EQ(states[RateBook::bucket(1, RateDimension::kRequests)].level, 1 * kUnitsPerQuota);
  EXPECT_EQ(states[RateBook::bucket(1, RateDimension::kTokens)].level, 1000 * kUnitsPerQuota);
  RateBook counting({limit(0, 1000, CacheHits::kCount)});
  auto counted = counting.reserve(kTeamA, 500, kT0);
  ASSERT_TRUE(counted);
  counting.settle(*counted, 300, true, kT0);
  EXPECT_EQ(counting.snapshot()[1].level, 700 * kUnitsPerQuota);
}

TEST(RateBook, ReleaseGivesTheRequestAndTokensBack) {
  RateBook book({limit(1, 100)});
  auto a = book.reserve(kTeamA, 100, kT0);
  ASSERT_TRUE(a);
  EXPECT_FALSE(book.reserve(kTeamA, 1, kT0));
  book.release(*a, kT0);
  EXPECT_TRUE(book.reserve(kTeamA, 100, kT0));
}

TEST(RateBook, SharedAdmitsOnlyWithinTheLeaseAndAsksForMore) {
  RateBook book({limit(100, 0)});
  book.set_shared(true);
  auto none = book.reserve(kTeamA, 0, kT0);
  ASSERT_FALSE(none) << "no lease yet";
  EXPECT_EQ(none.error().retry_after_s, 1);
  const size_t b = RateBook::bucket(0, RateDimension::kRequests);
  EXPECT_EQ(book.snapshot()[b].wanted, kUnitsPerQuota);
  book.add_lease(b, 2 * kUnitsPerQuota, 90 * kUnitsPerQuota, kT0 + 5 * kSecond, true);
  auto first = book.reserve(kTeamA, 0, kT0);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->requests->remaining, 91);  // the lease left plus the shared bucket
  EXPECT_TRUE(book.reserve(kTeamA, 0, kT0));
  auto out = book.reserve(kTeamA, 0, kT0);
  ASSERT_FALSE(out) << "the lease is used up";
  EXPECT_EQ(out.error().retry_after_s, 1) << "the shared bucket has more: retry soon";
  // Past the lease's time, nothing is admitted until it is renewed.
  book.add_lease(b, 5 * kUnitsPerQuota, 80 * kUnitsPerQuota, kT0 + 5 * kSecond, false);
  EXPECT_FALSE(book.reserve(kTeamA, 0, kT0 + 5 * kSecond));
  // Renewed after the database stopped counting it (reset): the old slice is gone, the grant
  // is the whole lease.
  book.add_lease(b, 3 * kUnitsPerQuota, 70 * kUnitsPerQuota, kT0 + 10 * kSecond, true);
  EXPECT_EQ(book.take_lease(b), 3 * kUnitsPerQuota);
}

TEST(RateLimitsYaml, ParsesAndRejectsWhatItCannotHonour) {
  auto parse = [](const std::string& text) {
    return parse_rate_limits(YAML::Load(text), "test.yaml");
  };
  auto defs = parse(
      "- {name: a, scope: key, match: app-key, requests_per_minute: 60}\n"
      "- {name: b, scope: project, match: p, tokens_per_minute: 5000, cache_hits: free}\n");
  ASSERT_EQ(defs.size(), 2u);
  EXPECT_EQ(defs[0].requests_per_minute, 60);
  EXPECT_EQ(defs[0].tokens_per_minute, 0);
  EXPECT_EQ(defs[1].cache_hits, CacheHits::kFree);
  EXPECT_THROW(parse("- {name: a, scope: key, match: k}\n"), yaml::YamlError);
  EXPECT_THROW(parse("- {name: a, scope: org, match: k, requests_per_minute: 1}\n"),
               yaml::YamlError);
  EXPECT_THROW(parse("- {name: a, scope: key, match: k, requests_per_minute: 0}\n"),
               yaml::YamlError);
  EXPECT_THROW(parse("- {name: a, scope: key, match: k, requests_per_minute: 1, burst: 2}\n"),
               yaml::YamlError);
  EXPECT_THROW(parse("- {name: a, scope: key, match: k, requests_per_minute: 1}\n"
                     "- {name: a, scope: key, match: j, requests_per_minute: 1}\n"),
               yaml::YamlError);
}

TEST(RateLimits, ResetIsWrittenAsOpenAIDoes) {
  EXPECT_EQ(format_reset(0), "0ms");
  EXPECT_EQ(format_reset(250), "250ms");
  EXPECT_EQ(format_reset(1000), "1s");
  EXPECT_EQ(format_reset(1500), "1.5s");
  EXPECT_EQ(format_reset(360000), "6m0s");
  EXPECT_EQ(format_reset(61250), "1m1.25s");
}

}  // namespace
}  // namespace ferry::ledger

namespace ferry::ledger {
namespace {

// The shared bucket in PostgreSQL (PgStore::take_rate / give_rate): created full, grants never
// more than it holds, refilled by elapsed time, capped at one minute's quota counting the units
// out on the instances' live leases (rate_leases).
TEST(PgRateBucket, GrantsOnlyWhatTheSharedBucketHoldsAndRefills) {
  const char* base = std::getenv("FERRY_TEST_PG_URL");
  if (base == nullptr || *base == '\0') {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") FAIL() << "FERRY_TEST_PG_URL is not set";
    GTEST_SKIP() << "PostgreSQL tests skipped: FERRY_TEST_PG_URL is not set";
  }
  std::string url(base);
  std::string name = "ferry_rate" + std::to_string(getpid());
  auto admin = PgConn::connect(url);
  ASSERT_TRUE(admin) << admin.error().message;
  ASSERT_TRUE(admin->exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"));
  ASSERT_TRUE(admin->exec("CREATE DATABASE " + name));
  {
    const std::string db = url.substr(0, url.rfind('/') + 1) + name;
    auto a = PgStore::open(db, "USD", "gw-a");
    ASSERT_TRUE(a) << a.error().message;
    const int64_t u = kUnitsPerQuota;
    const int64_t hour = 3600 * kSecond;
    // Each take reports that gw-a holds nothing more (held 0): its lease is what it takes.
    auto take = [&](PgStore& store, const char* limit, int64_t per_minute, int64_t want,
                    int64_t held, int64_t now) {
      return store.take_rate(limit, "requests", per_minute, want, held, now, now + 10 * kSecond);
    };
    // 100 a minute (6e9 units): a first wish of 70 gets 70, a second of 70 only the 30 left.
    auto g1 = take(*a, "lim", 100, 70 * u, 0, kT0);
    ASSERT_TRUE(g1) << g1.error().message;
    EXPECT_EQ(g1->granted, 70 * u);
    EXPECT_EQ(g1->level, 30 * u);
    EXPECT_TRUE(g1->reset);  // no lease before
    auto g2 = take(*a, "lim", 100, 70 * u, 0, kT0);
    ASSERT_TRUE(g2) << g2.error().message;
    EXPECT_EQ(g2->granted, 30 * u);
    EXPECT_EQ(g2->level, 0);
    EXPECT_FALSE(g2->reset);
    // 6 s later 10 have refilled; a clock behind the last reader's refills nothing.
    auto g3 = take(*a, "lim", 100, 50 * u, 0, kT0 + 6 * kSecond);
    ASSERT_TRUE(g3);
    EXPECT_EQ(g3->granted, 10 * u);
    auto g4 = take(*a, "lim", 100, 50 * u, 0, kT0);
    ASSERT_TRUE(g4);
    EXPECT_EQ(g4->granted, 0);
    // A limit of 10 billion tokens a minute holds (6e17 units, bigint all the way).
    auto big = a->take_rate("big", "tokens", kMaxPerMinute, 5 * u, 0, kT0, kT0 + kSecond);
    ASSERT_TRUE(big) << big.error().message;
    EXPECT_EQ(big->granted, 5 * u);
    // Given back, never past full; an hour idle refills to full, not beyond.
    ASSERT_TRUE(a->give_rate("lim", "requests", 100, 500 * u, kT0 + 7 * kSecond));
    auto full = take(*a, "lim", 100, 1000 * u, 0, kT0 + hour);
    ASSERT_TRUE(full);
    EXPECT_EQ(full->granted, 100 * u);

    // Units out on a live lease are never refilled behind it: gw-a takes 30 of a fresh
    // bucket of 100 and holds them; a minute later gw-b finds only the 70 the quota leaves.
    auto b = PgStore::open(db, "USD", "gw-b");
    ASSERT_TRUE(b) << b.error().message;
    const int64_t t1 = kT0 + 2 * hour;
    auto held = a->take_rate("pair", "requests", 100, 30 * u, 0, t1, t1 + 120 * kSecond);
    ASSERT_TRUE(held) << held.error().message;
    EXPECT_EQ(held->granted, 30 * u);
    auto other =
        b->take_rate("pair", "requests", 100, 100 * u, 0, t1 + 60 * kSecond, t1 + 400 * kSecond);
    ASSERT_TRUE(other) << other.error().message;
    EXPECT_EQ(other->granted, 70 * u) << "the bucket refilled behind gw-a's lease";
    // gw-a says it used 20 of its 30 (holds 10): a minute later the bucket refills to the
    // quota less gw-b's 70 and gw-a's 10, no further.
    auto renewed = a->take_rate("pair", "requests", 100, 100 * u, 10 * u, t1 + 120 * kSecond - 1,
                                t1 + 300 * kSecond);
    ASSERT_TRUE(renewed) << renewed.error().message;
    EXPECT_FALSE(renewed->reset);
    EXPECT_EQ(renewed->granted, 20 * u);
    // gw-a used all it held (0): 30 more, the quota less gw-b's 70.
    auto later =
        a->take_rate("pair", "requests", 100, 100 * u, 0, t1 + 180 * kSecond, t1 + 300 * kSecond);
    ASSERT_TRUE(later) << later.error().message;
    EXPECT_EQ(later->granted, 30 * u);
    // gw-b's lease lapsed (it never renewed): its units no longer count, and on its next
    // take it is told its old slice is gone.
    auto lapsed = take(*b, "pair", 100, 100 * u, 70 * u, t1 + 400 * kSecond);
    ASSERT_TRUE(lapsed) << lapsed.error().message;
    EXPECT_TRUE(lapsed->reset);
    // gw-a's 30 (lease until t1 + 300 s) lapsed too: the whole quota is free.
    EXPECT_EQ(lapsed->granted, 100 * u);
    // A clean shutdown gives back what is unused, never past the quota less the others' leases,
    // and ends the lease.
    ASSERT_TRUE(b->give_rate("pair", "requests", 100, 100 * u, t1 + 401 * kSecond));
    auto after = take(*a, "pair", 100, 200 * u, 0, t1 + 401 * kSecond);
    ASSERT_TRUE(after);
    EXPECT_EQ(after->granted, 100 * u);
  }
  (void)admin->exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
}

}  // namespace
}  // namespace ferry::ledger
