// Replay: requests recorded through the real ledger (SQLite file in a temp dir) with the facts
// the old policy decided on, re-decided by a new policy; the move matrix and the exact cost
// difference at current prices, with unpriced requests kept out of the sums.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <random>

#include <nlohmann/json.hpp>

#include "common/yaml_util.h"
#include "ledger/ledger.h"
#include "replay/replay.h"
#include "tests/policies/test_util.h"

namespace ferry::replay {
namespace {

using policies::Decision;
using policies::Facts;
using policies::facts_from_json;
using policies::facts_to_json;
using policies::Policy;
using policies::TargetFacts;
using policies::testing::must_load;

// 2026-06-15T12:00:00Z
constexpr int64_t kJune15 = 1781524800LL * 1000000;
constexpr int64_t kDay = 86400LL * 1000000;

// Per million tokens: gpu-m 3 / 0.30 / 15 micro-units a token (input / cached / output and
// reasoning); local-m 0.01 / 0.01 / 0.02; mid-m has no price.
const char* kPrices = R"(
- {model: gpu-m, effective_from: 2026-01-01, input: 3.00, cached_input: 0.30, output: 15.00}
- {model: local-m, effective_from: 2026-01-01, internal: true, input: 0.01, output: 0.02}
)";

const char* kOldPolicy = R"(targets: { small: local-m, large: gpu-m, mid: mid-m }
models: [auto]
rules:
  - id: huge
    when: { prompt_tokens: { gt: 500000 } }
    reject: { status: 400, message: too long }
default: { route: [large, small] }
)";

const char* kNewPolicy = R"(targets: { small: local-m, large: gpu-m, mid: mid-m }
models: [auto]
rules:
  - id: too-long
    when: { prompt_tokens: { gt: 100000 } }
    reject: { status: 400, message: too long }
  - id: research-to-mid
    when: { team: research }
    route: [mid, large]
  - id: short-stays-local
    when: { prompt_tokens: { lte: 1000 } }
    route: [small, large]
default: { route: [large, small] }
)";

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ferry_replay_XXXXXX").string();
    EXPECT_NE(mkdtemp(pattern.data()), nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

ledger::PriceCatalog prices() {
  return ledger::PriceCatalog::from_yaml(yaml::parse(kPrices, "prices.yaml"), "prices.yaml");
}

Facts facts_for(int64_t prompt_tokens, const std::string& team, int64_t at_us) {
  Facts f;
  f.model = "auto";
  f.prompt_tokens = prompt_tokens;
  f.max_tokens = 256;
  f.team = team;
  f.role = "app";
  f.unix_seconds = at_us / 1000000;
  for (const char* ref : {"local-m", "gpu-m", "mid-m"}) {
    TargetFacts t;
    t.ref = ref;
    f.targets.push_back(t);
  }
  return f;
}

ledger::Tokens tokens(int64_t input, int64_t cached, int64_t output, int64_t reasoning) {
  auto kind = [](int64_t n) {
    return ledger::TokenCount{n,
                              n > 0 ? ledger::TokenSource::kBackend : ledger::TokenSource::kNone};
  };
  return ledger::Tokens{kind(input), kind(cached), kind(output), kind(reasoning)};
}

class ReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("ledger.db");
    old_ = must_load(kOldPolicy);
    ASSERT_NE(old_, nullptr);
    ledger::LedgerConfig config;
    config.path = path_;
    auto opened = ledger::Ledger::open(config, prices(), {});
    ASSERT_TRUE(opened) << opened.error().message;
    ledger_ = std::move(*opened);
  }

  // Routes `facts` with the old policy, as the gateway does, and records the outcome with
  // the facts; with `facts_json` set, records that text instead.
  void record(const Facts& facts, const ledger::Tokens& used, int64_t at_us,
              const std::optional<std::string>& facts_json = std::nullopt) {
    Decision d = old_->decide(facts);
    ledger::RequestRecord r;
    r.started_us = at_us;
    r.ended_us = at_us + 1000000;
    r.team = facts.team;
    r.requested_model = facts.model;
    r.rule_id = d.rule_id;
    r.policy_version = d.policy_version;
    if (d.reject) {
      r.status = ledger::RequestStatus::kRefused;
      r.http_status = d.reject->status;
    } else {
      r.target = d.route.front().ref;
      r.upstream_model = r.target;
      r.tokens = used;
    }
    r.facts_json = facts_json ? *facts_json : facts_to_compact_json(facts).dump();
    std::promise<Status> done;
    ledger_->record(std::move(r), [&](const Status& st) { done.set_value(st); });
    ASSERT_TRUE(done.get_future().get());
  }

  TempDir dir_;
  std::string path_;
  std::shared_ptr<const Policy> old_;
  std::unique_ptr<ledger::Ledger> ledger_;
};

TEST_F(ReplayTest, MatrixAndExactCostDifference) {
  int64_t t = kJune15;
  // 1: short, gpu-m -> local-m. gpu: 500x3 + 100x15 = 3000; local: 500x0.01 + 100x0.02 = 7.
  record(facts_for(500, "a", t), tokens(500, 0, 100, 0), t);
  // 2: short with every kind, gpu-m -> local-m.
  //    gpu: 700x3 + 100x0.3 + 50x15 + 50x15 = 3630; local: 7 + 1 + 1 + 1 = 10.
  record(facts_for(800, "a", t + 1), tokens(700, 100, 50, 50), t + 1);
  // 3: long, stays on gpu-m: 5000x3 + 300x15 = 19500 on both sides.
  record(facts_for(5000, "a", t + 2), tokens(5000, 0, 300, 0), t + 2);
  // 4: research, gpu-m -> mid-m, which has no price: unpriced, out of the sums.
  record(facts_for(2000, "research", t + 3), tokens(2000, 0, 100, 0), t + 3);
  // 5: too long for the new policy, gpu-m -> rejected: 200000x3 + 10x15 = 600150 -> 0.
  record(facts_for(200000, "a", t + 4), tokens(200000, 0, 10, 0), t + 4);
  // 6: refused by the old policy (over 500000), and by the new one (over 100000).
  record(facts_for(600000, "a", t + 5), tokens(0, 0, 0, 0), t + 5);
  // 7: recorded without facts; 8: facts that do not parse.
  record(facts_for(300, "a", t + 6), tokens(300, 0, 10, 0), t + 6, std::string());
  record(facts_for(300, "a", t + 7), tokens(300, 0, 10, 0), t + 7, std::string("{\"model\":"));
  // 9: the day before the range.
  record(facts_for(300, "a", t - kDay), tokens(300, 0, 10, 0), t - kDay);
  ledger_->flush();

  auto policy = must_load(kNewPolicy);
  ASSERT_NE(policy, nullptr);
  ReplayOptions options;
  options.from_us = kJune15 - 12 * 3600LL * 1000000;  // 2026-06-15T00:00Z
  options.to_us = options.from_us.value() + kDay;
  options.prices_at_us = kJune15;
  auto result = replay_ledger(*policy, path_, prices(), options);
  ASSERT_TRUE(result) << result.error().message;
  const ReplayResult& r = *result;
  EXPECT_EQ(r.currency, "USD");
  EXPECT_EQ(r.policy_version, policy->short_version());
  EXPECT_EQ(r.rows, 8);
  EXPECT_EQ(r.without_facts, 1);
  EXPECT_EQ(r.unreadable_facts, 1);
  EXPECT_NE(r.first_facts_error.find("facts"), std::string::npos);
  EXPECT_EQ(r.replayed, 6);

  struct Want {
    std::string from, to;
    int64_t requests, unpriced, old_cost, new_cost;
  };
  // Row 6 (600000 tokens, refused before) is rejected by the new policy as well.
  std::vector<Want> want = {
      {kReplayRejected, kReplayRejected, 1, 0, 0, 0},
      {"gpu-m", kReplayRejected, 1, 0, 600150, 0},
      {"gpu-m", "gpu-m", 1, 0, 19500, 19500},
      {"gpu-m", "local-m", 2, 0, 3000 + 3630, 7 + 10},
      {"gpu-m", "mid-m", 1, 1, 0, 0},
  };
  ASSERT_EQ(r.cells.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].from + " -> " + want[i].to);
    EXPECT_EQ(r.cells[i].from, want[i].from);
    EXPECT_EQ(r.cells[i].to, want[i].to);
    EXPECT_EQ(r.cells[i].requests, want[i].requests);
    EXPECT_EQ(r.cells[i].unpriced, want[i].unpriced);
    EXPECT_EQ(r.cells[i].old_cost, Money::from_micros(want[i].old_cost));
    EXPECT_EQ(r.cells[i].new_cost, Money::from_micros(want[i].new_cost));
  }
  EXPECT_EQ(r.moved, 4);
  EXPECT_EQ(r.unpriced, 1);
  EXPECT_EQ(r.old_cost, Money::from_micros(600150 + 19500 + 6630));
  EXPECT_EQ(r.new_cost, Money::from_micros(19500 + 17));
  EXPECT_EQ(r.difference(), Money::from_micros(-(600150 + 6630 - 17)));

  nlohmann::json j = replay_to_json(r);
  EXPECT_EQ(j["difference"], "-0.606763");
  EXPECT_EQ(j["matrix"][3]["from"], "gpu-m");
  EXPECT_EQ(j["matrix"][3]["to"], "local-m");
  EXPECT_EQ(j["matrix"][3]["old_cost"], "0.006630");
  EXPECT_EQ(j["matrix"][3]["new_cost"], "0.000017");
  EXPECT_TRUE(j["matrix"][4]["old_cost"].is_null());  // only unpriced requests: no figure
  std::string text = replay_to_text(r);
  EXPECT_NE(text.find("would move: 4"), std::string::npos);
  EXPECT_NE(text.find("-0.606763"), std::string::npos);
  EXPECT_NE(text.find("n/a"), std::string::npos);
}

TEST_F(ReplayTest, RefusedRequestsThatWouldRunAreUnpricedAndTheRangeIsHonoured) {
  int64_t t = kJune15;
  record(facts_for(600000, "a", t), tokens(0, 0, 0, 0), t);  // refused by the old policy
  record(facts_for(500, "a", t + 1), tokens(500, 0, 100, 0), t + 1);
  ledger_->flush();
  // A new policy with no size limit: the refused request would now run on gpu-m.
  auto policy = must_load(R"(targets: { small: local-m, large: gpu-m }
models: [auto]
default: { route: [large, small] }
)");
  ReplayOptions options;
  options.prices_at_us = kJune15;
  auto all = replay_ledger(*policy, path_, prices(), options);
  ASSERT_TRUE(all);
  ASSERT_EQ(all->cells.size(), 2u);
  EXPECT_EQ(all->cells[0].from, kReplayRejected);
  EXPECT_EQ(all->cells[0].to, "gpu-m");
  EXPECT_EQ(all->cells[0].unpriced, 1);
  EXPECT_EQ(all->cells[1].from, "gpu-m");
  EXPECT_EQ(all->cells[1].to, "gpu-m");
  EXPECT_EQ(all->cells[1].old_cost, Money::from_micros(3000));
  EXPECT_EQ(all->difference(), Money());
  EXPECT_EQ(all->moved, 1);
  options.from_us = t + 1000000 + 1;  // only the second request ended by then... and after
  auto later = replay_ledger(*policy, path_, prices(), options);
  ASSERT_TRUE(later);
  EXPECT_EQ(later->rows, 1);
  EXPECT_EQ(later->moved, 0);
  // Prices before the catalog's first date: nothing can be priced, nothing is zero.
  options.from_us.reset();
  options.prices_at_us = kJune15 - 365 * kDay;
  auto early = replay_ledger(*policy, path_, prices(), options);
  ASSERT_TRUE(early);
  EXPECT_EQ(early->unpriced, 2);
  EXPECT_TRUE(replay_to_json(*early)["old_cost"].is_null());
}

// The compact form the ledger keeps must read back to exactly the facts, whatever is set.
TEST(FactsJson, CompactFormRoundTripsExactly) {
  std::mt19937_64 rng(7);
  auto maybe = [&](auto value) {
    using T = decltype(value);
    return rng() % 2 == 0 ? std::optional<T>() : std::optional<T>(value);
  };
  auto text = [&](const char* base) {
    return rng() % 3 == 0 ? std::string() : base + std::to_string(rng() % 100);
  };
  size_t full_bytes = 0;
  size_t compact_bytes = 0;
  for (int i = 0; i < 500; ++i) {
    Facts f;
    f.model = text("m");
    f.prompt_tokens = static_cast<int64_t>(rng() % 3) * 1000;
    f.max_tokens = maybe(static_cast<int64_t>(rng() % 2048));
    f.temperature = maybe(0.25 * static_cast<double>(rng() % 8));
    f.top_p = maybe(0.5);
    f.stream = rng() % 2 == 0;
    f.tools = rng() % 2 == 0;
    f.response_format = rng() % 2 == 0;
    f.task_id = rng() % 2 == 0;
    f.key = text("k");
    f.team = text("t");
    f.project = text("p");
    f.role = text("r");
    for (uint64_t n = rng() % 3; n > 0; --n) f.tags.push_back(text("tag"));
    for (uint64_t n = rng() % 3; n > 0; --n) f.claimed_tags.push_back(text("c"));
    f.unix_seconds = static_cast<int64_t>(rng() % 2) * 1781524800;
    f.budget_left_pct = maybe(static_cast<double>(rng() % 100));
    f.split = rng() % 2 == 0 ? 0 : rng();
    for (uint64_t n = rng() % 4; n > 0; --n) {
      TargetFacts t;
      t.ref = "ref" + std::to_string(n);
      t.prompt_tokens = maybe(static_cast<int64_t>(rng() % 5000));
      t.context_length = static_cast<int64_t>(rng() % 2) * 32768;
      t.healthy = rng() % 4 != 0;
      t.queue_depth = maybe(static_cast<int64_t>(rng() % 10));
      t.est_wait_ms = maybe(static_cast<int64_t>(rng() % 1000));
      t.p90_ttft_ms = maybe(static_cast<int64_t>(rng() % 1000));
      t.error_rate = maybe(0.125);
      f.targets.push_back(t);
    }
    std::string compact = facts_to_compact_json(f).dump();
    auto back = facts_from_json(nlohmann::json::parse(compact));
    ASSERT_TRUE(back) << back.error().message << "\n" << compact;
    ASSERT_EQ(facts_to_json(*back), facts_to_json(f)) << compact;
    full_bytes += facts_to_json(f).dump().size();
    compact_bytes += compact.size();
  }
  EXPECT_LT(compact_bytes, full_bytes);
}

}  // namespace
}  // namespace ferry::replay
