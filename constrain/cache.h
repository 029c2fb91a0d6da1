// ferry::constrain::GrammarCache: compiled grammars by the SHA-256 of what they were compiled
// from (mode, options, schema or tools), so a schema sent again is not compiled again. Bounded
// (least recently used out); thread-safe: lookups under a mutex, compilation outside it (two
// threads missing together may both compile; one result is kept).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/error.h"
#include "constrain/grammar.h"
#include "constrain/schema.h"
#include "constrain/tools.h"

namespace ferry::constrain {

struct CompiledGrammar {
  std::shared_ptr<const Grammar> grammar;
  std::string hash;  // lower-case hex SHA-256 of the cache key (for the ledger)
};

class GrammarCache {
 public:
  explicit GrammarCache(std::size_t capacity = 256) : capacity_(capacity) {}

  Result<CompiledGrammar> json_schema(std::string_view schema_json,
                                      const CompileOptions& options = {},
                                      const ThinkBlock& think = {});
  Result<CompiledGrammar> json_object(const CompileOptions& options = {},
                                      const ThinkBlock& think = {});
  Result<CompiledGrammar> tools(const ToolSpec& spec, const CompileOptions& options = {});

  std::size_t size() const;
  std::uint64_t hits() const;
  // Called on the compiling thread before each compilation (a miss) with the cache key (it
  // starts with the mode: "json_schema\n", "json_object\n", "tools\n"); tests observe where
  // and when compilation runs. An empty observer ends the observation.
  void observe_compiles(std::function<void(std::string_view key)> observer);

 private:
  Result<CompiledGrammar> get(const std::string& key,
                              const std::function<Result<Grammar>()>& compile);

  struct Entry {
    std::shared_ptr<const Grammar> grammar;
    std::list<std::string>::iterator lru;
  };
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;  // by hash
  std::list<std::string> lru_;                      // most recent first
  std::uint64_t hits_ = 0;
  std::shared_ptr<const std::function<void(std::string_view)>> observer_;  // under mu_
};

}  // namespace ferry::constrain
