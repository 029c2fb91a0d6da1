// Fuzzes the config loader (config/config: load_config_text) and the sections it hands to the
// ledger when the server starts (ledger:, prices:, budgets:), caught as gateway/gateway.cpp
// catches them: a YamlError or another std::exception is a refused config; anything else
// escaping, a crash or undefined behaviour is a finding.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "common/yaml_util.h"
#include "config/config.h"
#include "ledger/budgets.h"
#include "ledger/ledger.h"
#include "ledger/prices.h"

using namespace ferry;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)config::parse_host_port(text);  // the `listen:` value's own parser
  auto cfg = config::load_config_text(text, "fuzz.yaml");
  if (!cfg) return 0;
  try {
    if (cfg->ledger.present()) (void)ledger::parse_ledger_config(cfg->ledger.node, cfg->source);
    if (cfg->prices.present()) (void)ledger::PriceCatalog::from_yaml(cfg->prices.node, cfg->source);
    if (cfg->budgets.present()) (void)ledger::parse_budgets(cfg->budgets.node, cfg->source);
  } catch (const yaml::YamlError&) {
  } catch (const std::exception&) {
  }
  return 0;
}
