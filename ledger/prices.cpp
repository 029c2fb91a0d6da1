#include "ledger/prices.h"

#include <algorithm>
#include <stdexcept>

#include "common/sha256.h"
#include "common/yaml_util.h"
#include "ledger/time_util.h"

namespace ferry::ledger {

namespace {

Money money_field(const yaml::Map& map, const char* key) {
  std::string text = yaml::scalar_str(map.raw(key), map.file(), key);
  auto money = Money::parse(text);
  if (!money || money->micros() < 0) {
    map.fail(key,
             "must be a non-negative decimal amount with at most 6 fractional digits, found '" +
                 text + "'");
  }
  return *money;
}

}  // namespace

PriceCatalog PriceCatalog::from_yaml(const YAML::Node& prices, const std::string& file) {
  PriceCatalog catalog;
  if (!prices || prices.IsNull()) return catalog;
  if (!prices.IsSequence()) {
    throw yaml::YamlError(file, prices.Mark(), "prices must be a list of price entries");
  }
  for (const auto& item : prices) {
    yaml::Map map(item, file, "price entry");
    map.allow_only(
        {"model", "effective_from", "input", "cached_input", "output", "reasoning", "internal"});
    PriceEntry entry;
    entry.model = map.str("model");
    if (entry.model.empty()) map.fail("model", "must not be empty");
    std::string from = map.str("effective_from");
    auto from_us = parse_utc_time(from);
    if (!from_us) map.fail("effective_from", "expected YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ");
    entry.effective_from_us = *from_us;
    if (!map.has("input")) map.fail_here("missing required key 'input'");
    if (!map.has("output")) map.fail_here("missing required key 'output'");
    entry.input = money_field(map, "input");
    entry.output = money_field(map, "output");
    entry.cached_input = map.has("cached_input") ? money_field(map, "cached_input") : entry.input;
    entry.reasoning = map.has("reasoning") ? money_field(map, "reasoning") : entry.output;
    entry.internal = map.boolean_or("internal", false);
    try {
      catalog.add(std::move(entry));
    } catch (const std::invalid_argument& e) {
      map.fail("effective_from", e.what());
    }
  }
  return catalog;
}

void PriceCatalog::add(PriceEntry entry) {
  std::string fingerprint = entry.input.to_string() + "/" + entry.cached_input.to_string() + "/" +
                            entry.output.to_string() + "/" + entry.reasoning.to_string() + "/" +
                            (entry.internal ? "internal" : "external");
  std::string from = entry.effective_from_us % kMicrosPerDay == 0
                         ? utc_day(entry.effective_from_us)
                         : std::to_string(entry.effective_from_us);
  entry.version = entry.model + "@" + from + "#" + sha256_hex(fingerprint).substr(0, 8);
  auto& list = by_model_[entry.model];
  for (const auto& existing : list) {
    if (existing.effective_from_us == entry.effective_from_us) {
      throw std::invalid_argument("model '" + entry.model +
                                  "' already has a price effective from that date");
    }
  }
  list.push_back(std::move(entry));
  std::sort(list.begin(), list.end(), [](const PriceEntry& a, const PriceEntry& b) {
    return a.effective_from_us < b.effective_from_us;
  });
}

const PriceEntry* PriceCatalog::find(std::string_view model, int64_t at_us) const {
  auto it = by_model_.find(model);
  if (it == by_model_.end()) return nullptr;
  const PriceEntry* best = nullptr;
  for (const auto& entry : it->second) {
    if (entry.effective_from_us > at_us) break;
    best = &entry;
  }
  return best;
}

Cost PriceCatalog::price(std::string_view model, const Tokens& tokens, int64_t at_us) const {
  Cost cost;
  const PriceEntry* entry = find(model, at_us);
  if (entry == nullptr) return cost;
  cost.pricing = entry->internal ? Pricing::kInternal : Pricing::kPriced;
  cost.price_version = entry->version;
  cost.input = cost_of_tokens(tokens.input.count, entry->input);
  cost.cached_input = cost_of_tokens(tokens.cached_input.count, entry->cached_input);
  cost.output = cost_of_tokens(tokens.output.count, entry->output);
  cost.reasoning = cost_of_tokens(tokens.reasoning.count, entry->reasoning);
  return cost;
}

std::optional<Money> PriceCatalog::worst_case(std::string_view model, int64_t prompt_tokens,
                                              int64_t max_tokens, int64_t at_us) const {
  const PriceEntry* entry = find(model, at_us);
  if (entry == nullptr) return std::nullopt;
  // Round each part up by pricing as if uncached: the reservation must never be too small.
  Money out_price = std::max(entry->output, entry->reasoning);
  Money in_price = std::max(entry->input, entry->cached_input);
  return cost_of_tokens(prompt_tokens, in_price) + cost_of_tokens(max_tokens, out_price) +
         Money::from_micros(3);  // covers per-kind rounding of the actual split (4 x 0.5 + 1)
}

std::vector<PriceEntry> PriceCatalog::entries() const {
  std::vector<PriceEntry> out;
  for (const auto& [model, list] : by_model_) out.insert(out.end(), list.begin(), list.end());
  return out;
}

}  // namespace ferry::ledger
