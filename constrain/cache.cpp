#include "constrain/cache.h"

#include "common/sha256.h"

namespace ferry::constrain {
namespace {

std::string options_key(const CompileOptions& o) {
  return std::to_string(o.max_whitespace) + "," + std::to_string(o.max_string_chars) + "," +
         std::to_string(o.max_array_items) + "," + std::to_string(o.max_object_members) + "," +
         std::to_string(o.max_any_depth) + "," + std::to_string(o.max_integer_digits) + "," +
         std::to_string(o.regex.max_repeat) + "," + std::to_string(o.regex.max_states) + "," +
         std::to_string(o.max_schema_depth) + "\n";
}

// Length-prefixed, so that no two different specs give the same key.
void add_field(std::string& key, std::string_view field) {
  key += std::to_string(field.size());
  key += ':';
  key += field;
}

// The think block's part of a key ("" without one, so that older keys stay as they were).
std::string think_key(const ThinkBlock& think) {
  if (think.begin.empty()) return {};
  std::string key = "think\n";
  add_field(key, think.begin);
  add_field(key, think.end);
  for (const std::string& m : think.token_markers) add_field(key, m);
  return key + "\n";
}

}  // namespace

Result<CompiledGrammar> GrammarCache::json_schema(std::string_view schema_json,
                                                  const CompileOptions& options,
                                                  const ThinkBlock& think) {
  std::string key = "json_schema\n" + options_key(options) + think_key(think);
  key += schema_json;
  return get(key, [&] { return compile_json_schema(schema_json, options, think); });
}

Result<CompiledGrammar> GrammarCache::json_object(const CompileOptions& options,
                                                  const ThinkBlock& think) {
  return get("json_object\n" + options_key(options) + think_key(think),
             [&]() -> Result<Grammar> { return compile_json_object(options, think); });
}

Result<CompiledGrammar> GrammarCache::tools(const ToolSpec& spec, const CompileOptions& options) {
  std::string key = "tools\n" + options_key(options);
  key += std::to_string(static_cast<int>(spec.choice)) + (spec.parallel_tool_calls ? "p" : "s") +
         std::to_string(spec.max_calls) + "l" +
         std::to_string(static_cast<int>(spec.syntax.layout));
  for (const std::string* s :
       {&spec.named, &spec.syntax.begin, &spec.syntax.end, &spec.syntax.name_key,
        &spec.syntax.arguments_key, &spec.syntax.think_begin, &spec.syntax.think_end})
    add_field(key, *s);
  for (const std::string& m : spec.syntax.token_markers) add_field(key, "token:" + m);
  for (const ToolFunction& f : spec.functions) {
    add_field(key, f.name);
    add_field(key, f.parameters_json);
  }
  return get(key, [&] { return compile_tools(spec, options); });
}

Result<CompiledGrammar> GrammarCache::get(const std::string& key,
                                          const std::function<Result<Grammar>()>& compile) {
  const std::string hash = sha256_hex(key);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = entries_.find(hash); it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      ++hits_;
      return CompiledGrammar{it->second.grammar, hash};
    }
  }
  std::shared_ptr<const std::function<void(std::string_view)>> observer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    observer = observer_;
  }
  if (observer) (*observer)(key);
  auto grammar = compile();
  if (!grammar) return std::move(grammar).error();
  auto shared = std::make_shared<const Grammar>(std::move(grammar).value());
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto it = entries_.find(hash); it != entries_.end()) {
    return CompiledGrammar{it->second.grammar, hash};  // compiled meanwhile by another thread
  }
  lru_.push_front(hash);
  entries_.emplace(hash, Entry{shared, lru_.begin()});
  while (entries_.size() > capacity_ && !lru_.empty()) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
  return CompiledGrammar{shared, hash};
}

void GrammarCache::observe_compiles(std::function<void(std::string_view key)> observer) {
  std::shared_ptr<const std::function<void(std::string_view)>> shared;
  if (observer) {
    shared = std::make_shared<const std::function<void(std::string_view)>>(std::move(observer));
  }
  std::lock_guard<std::mutex> lock(mu_);
  observer_ = std::move(shared);
}

std::size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::uint64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

}  // namespace ferry::constrain
