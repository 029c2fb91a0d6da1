// The price catalog: per target, per million tokens of each kind, with effective-from dates.
// Each entry is one price version. Immutable after loading; safe to share between threads.
//
// YAML (a list under `prices:` in the server config; see ledger/ledger.example.yaml):
//   prices:
//     - model: gpt-4o             # the target name the router uses (server config `models:`)
//       effective_from: 2026-01-01  # YYYY-MM-DD (UTC midnight) or YYYY-MM-DDTHH:MM:SSZ
//       input: 2.50               # price per million uncached input tokens (exact decimal)
//       cached_input: 1.25        # optional; defaults to `input` (no discount)
//       output: 10.00
//       reasoning: 10.00          # optional; defaults to `output`
//       internal: false           # optional; true for local models priced at an internal rate
// Amounts are read as exact decimal text (at most 6 fractional digits), never as floats.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/money.h"
#include "ledger/types.h"

namespace ferry::ledger {

struct PriceEntry {
  std::string model;
  int64_t effective_from_us = 0;
  Money input;         // per million tokens
  Money cached_input;  // per million tokens
  Money output;        // per million tokens
  Money reasoning;     // per million tokens
  bool internal = false;
  std::string version;  // "<model>@<effective_from>#<8 hex of the prices>", set by add()
};

class PriceCatalog {
 public:
  // Parses the `prices:` list. Throws ferry::yaml::YamlError (control plane).
  static PriceCatalog from_yaml(const YAML::Node& prices, const std::string& file);

  // Adds an entry and sets its version. Throws std::invalid_argument when the model already
  // has an entry with the same effective_from.
  void add(PriceEntry entry);

  // The entry in effect for `model` at the instant, or nullptr when unpriced.
  const PriceEntry* find(std::string_view model, int64_t at_us) const;

  // Prices tokens; Pricing::kUnpriced (all parts zero, no version) when there is no entry.
  Cost price(std::string_view model, const Tokens& tokens, int64_t at_us) const;

  // The most a request can cost on `model`: prompt tokens at the input price plus max_tokens
  // at the higher of the output and reasoning prices. nullopt when unpriced.
  std::optional<Money> worst_case(std::string_view model, int64_t prompt_tokens, int64_t max_tokens,
                                  int64_t at_us) const;

  std::vector<PriceEntry> entries() const;  // every version, by model then date

 private:
  std::map<std::string, std::vector<PriceEntry>, std::less<>> by_model_;  // sorted by date
};

}  // namespace ferry::ledger
