#include <gtest/gtest.h>

#include "test_util.h"

namespace ferry::ledger {
namespace {

using testing::catalog_from;
using testing::kJune15;
using testing::tokens_of;

const char* kPrices = R"(
- model: gpt-big
  effective_from: 2026-01-01
  input: 2.50
  cached_input: 1.25
  output: 10.00
  reasoning: 12.00
- model: gpt-big
  effective_from: 2026-07-01
  input: "2.00"
  cached_input: "0.50"
  output: "8.00"
- model: local-small
  effective_from: 2026-01-01
  internal: true
  input: 0.05
  output: 0.10
)";

TEST(Prices, EveryKindAtItsOwnRate) {
  PriceCatalog catalog = catalog_from(kPrices);
  // 1,000,000 uncached, 400,000 cached, 300,000 output, 100,000 reasoning.
  Cost cost = catalog.price("gpt-big", tokens_of(1000000, 400000, 300000, 100000), kJune15);
  EXPECT_EQ(cost.pricing, Pricing::kPriced);
  EXPECT_EQ(cost.input, Money::from_micros(2500000));
  EXPECT_EQ(cost.cached_input, Money::from_micros(500000));
  EXPECT_EQ(cost.output, Money::from_micros(3000000));
  EXPECT_EQ(cost.reasoning, Money::from_micros(1200000));
  EXPECT_EQ(cost.total(), Money::from_micros(7200000));
  EXPECT_EQ(cost.price_version.rfind("gpt-big@2026-01-01#", 0), 0u) << cost.price_version;
}

TEST(Prices, SmallCountsRoundHalfAwayPerKind) {
  PriceCatalog catalog = catalog_from(kPrices);
  // 1 token at 2.50/M = 2.5 micro -> 3; 1 cached at 1.25/M = 1.25 -> 1; 3 output at 10/M = 30.
  Cost cost = catalog.price("gpt-big", tokens_of(1, 1, 3, 0), kJune15);
  EXPECT_EQ(cost.input.micros(), 3);
  EXPECT_EQ(cost.cached_input.micros(), 1);
  EXPECT_EQ(cost.output.micros(), 30);
  EXPECT_EQ(cost.reasoning.micros(), 0);
  EXPECT_EQ(cost.total().micros(), 34);
}

TEST(Prices, PriceChangeAtEffectiveDate) {
  PriceCatalog catalog = catalog_from(kPrices);
  int64_t before = *parse_utc_time("2026-06-30T23:59:59Z");
  int64_t after = *parse_utc_time("2026-07-01T00:00:00Z");
  Tokens t = tokens_of(1000000, 1000000, 1000000, 1000000);
  Cost old_cost = catalog.price("gpt-big", t, before);
  Cost new_cost = catalog.price("gpt-big", t, after);
  EXPECT_EQ(old_cost.total(), Money::from_micros(2500000 + 1250000 + 10000000 + 12000000));
  // Reasoning defaults to the output price in the new version.
  EXPECT_EQ(new_cost.total(), Money::from_micros(2000000 + 500000 + 8000000 + 8000000));
  EXPECT_NE(old_cost.price_version, new_cost.price_version);
  EXPECT_EQ(new_cost.price_version.rfind("gpt-big@2026-07-01#", 0), 0u);
  // Before any entry the model is unpriced.
  EXPECT_EQ(catalog.price("gpt-big", t, *parse_utc_time("2025-12-31")).pricing, Pricing::kUnpriced);
}

TEST(Prices, UnpricedIsNotZero) {
  PriceCatalog catalog = catalog_from(kPrices);
  Cost cost = catalog.price("mystery", tokens_of(10, 0, 10, 0), kJune15);
  EXPECT_EQ(cost.pricing, Pricing::kUnpriced);
  EXPECT_TRUE(cost.price_version.empty());
  EXPECT_FALSE(catalog.worst_case("mystery", 10, 10, kJune15));
}

TEST(Prices, InternalRateAndDefaults) {
  PriceCatalog catalog = catalog_from(kPrices);
  Cost cost = catalog.price("local-small", tokens_of(1000000, 1000000, 1000000, 1000000), kJune15);
  EXPECT_EQ(cost.pricing, Pricing::kInternal);
  // cached_input defaults to input, reasoning to output.
  EXPECT_EQ(cost.cached_input, Money::from_micros(50000));
  EXPECT_EQ(cost.reasoning, Money::from_micros(100000));
}

TEST(Prices, WorstCaseCoversAnySplit) {
  PriceCatalog catalog = catalog_from(kPrices);
  auto worst = catalog.worst_case("gpt-big", 1001, 333, kJune15);
  ASSERT_TRUE(worst);
  for (int64_t cached = 0; cached <= 1001; cached += 77) {
    for (int64_t reasoning = 0; reasoning <= 333; reasoning += 37) {
      Cost c = catalog.price("gpt-big",
                             tokens_of(1001 - cached, cached, 333 - reasoning, reasoning), kJune15);
      EXPECT_LE(c.total(), *worst);
    }
  }
}

TEST(Prices, SplitsOpenAiUsage) {
  Tokens t = split_openai_usage(1000, 600, 500, 200, TokenSource::kBackend);
  EXPECT_EQ(t.input.count, 400);
  EXPECT_EQ(t.cached_input.count, 600);
  EXPECT_EQ(t.output.count, 300);
  EXPECT_EQ(t.reasoning.count, 200);
  EXPECT_EQ(t.output.source, TokenSource::kBackend);
  Tokens none = split_openai_usage(10, 0, 5, 0, TokenSource::kTokenizer);
  EXPECT_EQ(none.cached_input.source, TokenSource::kNone);
  EXPECT_EQ(none.input.source, TokenSource::kTokenizer);
  Tokens clamped = split_openai_usage(10, 50, 5, 9, TokenSource::kBackend);
  EXPECT_EQ(clamped.input.count, 0);
  EXPECT_EQ(clamped.cached_input.count, 10);
  EXPECT_EQ(clamped.output.count, 0);
  EXPECT_EQ(clamped.reasoning.count, 5);
}

TEST(Prices, YamlErrorsAreLocated) {
  try {
    catalog_from("- model: a\n  effective_from: 2026-01-01\n  input: 0.1234567\n  output: 1\n");
    FAIL() << "expected an error";
  } catch (const yaml::YamlError& e) {
    EXPECT_EQ(e.line(), 3);
    EXPECT_NE(std::string(e.what()).find("input"), std::string::npos);
  }
  EXPECT_THROW(catalog_from("- model: a\n  effective_from: 2026-01-01\n  input: 1\n"),
               yaml::YamlError);
  EXPECT_THROW(catalog_from("- model: a\n  effective_from: 2026-01-01\n  input: 1\n  output: 1\n"
                            "  colour: red\n"),
               yaml::YamlError);
  EXPECT_THROW(catalog_from("- model: a\n  effective_from: 2026-01-01\n  input: 1\n  output: 1\n"
                            "- model: a\n  effective_from: 2026-01-01\n  input: 2\n  output: 2\n"),
               yaml::YamlError);
  EXPECT_THROW(catalog_from("- model: a\n  effective_from: 2026-01-01\n  input: -1\n  output: 1\n"),
               yaml::YamlError);
  EXPECT_THROW(catalog_from("- model: a\n  effective_from: 1e3\n  input: 1\n  output: 1\n"),
               yaml::YamlError);
}

}  // namespace
}  // namespace ferry::ledger
