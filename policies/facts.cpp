#include "policies/facts.h"

#include <nlohmann/json.hpp>

namespace ferry::policies {

const TargetFacts* Facts::find_target(std::string_view ref) const {
  for (const auto& t : targets) {
    if (t.ref == ref) return &t;
  }
  return nullptr;
}

namespace {

using nlohmann::json;

template <typename T>
void put_opt(json& j, const char* key, const std::optional<T>& v) {
  j[key] = v ? json(*v) : json(nullptr);
}

Error bad(const std::string& field, const std::string& message) {
  return Error::make(ErrorCode::kInvalidRequest, "facts: " + field + ": " + message, field);
}

// Reads fields from one JSON object, remembering the first error.
class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  bool check_keys(std::initializer_list<const char*> allowed) {
    if (!j_.is_object()) return fail(where_.empty() ? "facts" : where_, "must be an object");
    for (const auto& [key, value] : j_.items()) {
      bool ok = false;
      for (const char* a : allowed) ok = ok || key == a;
      if (!ok) return fail(name(key), "unknown key");
    }
    return true;
  }

  void str(const char* key, std::string& out) {
    if (!present(key)) return;
    const json& v = j_.at(key);
    if (!v.is_string()) {
      fail(name(key), "must be a string");
      return;
    }
    out = v.get<std::string>();
  }
  void boolean(const char* key, bool& out) {
    if (!present(key)) return;
    const json& v = j_.at(key);
    if (!v.is_boolean()) {
      fail(name(key), "must be true or false");
      return;
    }
    out = v.get<bool>();
  }
  void integer(const char* key, int64_t& out) {
    if (!present(key)) return;
    const json& v = j_.at(key);
    if (!v.is_number_integer()) {
      fail(name(key), "must be an integer");
      return;
    }
    out = v.get<int64_t>();
  }
  void opt_integer(const char* key, std::optional<int64_t>& out) {
    if (!present(key)) return;
    int64_t v = 0;
    integer(key, v);
    out = v;
  }
  void opt_number(const char* key, std::optional<double>& out) {
    if (!present(key)) return;
    const json& v = j_.at(key);
    if (!v.is_number()) {
      fail(name(key), "must be a number");
      return;
    }
    out = v.get<double>();
  }
  void unsigned_integer(const char* key, uint64_t& out) {
    if (!present(key)) return;
    const json& v = j_.at(key);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
      fail(name(key), "must be a non-negative integer");
      return;
    }
    out = v.get<uint64_t>();
  }
  void str_list(const char* key, std::vector<std::string>& out) {
    if (!present(key)) return;
    const json& v = j_.at(key);
    if (!v.is_array()) {
      fail(name(key), "must be a list of strings");
      return;
    }
    for (const auto& item : v) {
      if (!item.is_string()) {
        fail(name(key), "must be a list of strings");
        return;
      }
      out.push_back(item.get<std::string>());
    }
  }

  bool ok() const { return !error_; }
  const std::optional<Error>& error() const { return error_; }
  bool fail(const std::string& field, const std::string& message) {
    if (!error_) error_ = bad(field, message);
    return false;
  }

 private:
  bool present(const char* key) const {
    return j_.is_object() && j_.contains(key) && !j_.at(key).is_null();
  }
  std::string name(const std::string& key) const {
    return where_.empty() ? key : where_ + "." + key;
  }

  const json& j_;
  std::string where_;
  std::optional<Error> error_;
};

}  // namespace

json facts_to_json(const Facts& f) {
  json j;
  j["model"] = f.model;
  j["prompt_tokens"] = f.prompt_tokens;
  put_opt(j, "max_tokens", f.max_tokens);
  put_opt(j, "temperature", f.temperature);
  put_opt(j, "top_p", f.top_p);
  j["stream"] = f.stream;
  j["tools"] = f.tools;
  j["response_format"] = f.response_format;
  j["task_id"] = f.task_id;
  j["key"] = f.key;
  j["team"] = f.team;
  j["project"] = f.project;
  j["role"] = f.role;
  j["tags"] = f.tags;
  j["claimed_tags"] = f.claimed_tags;
  j["unix_seconds"] = f.unix_seconds;
  put_opt(j, "budget_left_pct", f.budget_left_pct);
  j["split"] = f.split;
  json targets = json::array();
  for (const auto& t : f.targets) {
    json tj;
    tj["ref"] = t.ref;
    put_opt(tj, "prompt_tokens", t.prompt_tokens);
    tj["context_length"] = t.context_length;
    tj["healthy"] = t.healthy;
    put_opt(tj, "queue_depth", t.queue_depth);
    put_opt(tj, "est_wait_ms", t.est_wait_ms);
    put_opt(tj, "p90_ttft_ms", t.p90_ttft_ms);
    put_opt(tj, "error_rate", t.error_rate);
    targets.push_back(std::move(tj));
  }
  j["targets"] = targets;
  return j;
}

json facts_to_compact_json(const Facts& f) {
  json j = json::object();
  auto put = [&j](const char* key, const auto& value, bool is_default) {
    if (!is_default) j[key] = value;
  };
  auto put_opt_if = [](json& into, const char* key, const auto& value) {
    if (value) into[key] = *value;
  };
  put("model", f.model, f.model.empty());
  put("prompt_tokens", f.prompt_tokens, f.prompt_tokens == 0);
  put_opt_if(j, "max_tokens", f.max_tokens);
  put_opt_if(j, "temperature", f.temperature);
  put_opt_if(j, "top_p", f.top_p);
  put("stream", f.stream, !f.stream);
  put("tools", f.tools, !f.tools);
  put("response_format", f.response_format, !f.response_format);
  put("task_id", f.task_id, !f.task_id);
  put("key", f.key, f.key.empty());
  put("team", f.team, f.team.empty());
  put("project", f.project, f.project.empty());
  put("role", f.role, f.role.empty());
  put("tags", f.tags, f.tags.empty());
  put("claimed_tags", f.claimed_tags, f.claimed_tags.empty());
  put("unix_seconds", f.unix_seconds, f.unix_seconds == 0);
  put_opt_if(j, "budget_left_pct", f.budget_left_pct);
  put("split", f.split, f.split == 0);
  if (!f.targets.empty()) {
    json targets = json::array();
    for (const auto& t : f.targets) {
      json tj;
      tj["ref"] = t.ref;
      put_opt_if(tj, "prompt_tokens", t.prompt_tokens);
      if (t.context_length != 0) tj["context_length"] = t.context_length;
      if (!t.healthy) tj["healthy"] = false;
      put_opt_if(tj, "queue_depth", t.queue_depth);
      put_opt_if(tj, "est_wait_ms", t.est_wait_ms);
      put_opt_if(tj, "p90_ttft_ms", t.p90_ttft_ms);
      put_opt_if(tj, "error_rate", t.error_rate);
      targets.push_back(std::move(tj));
    }
    j["targets"] = std::move(targets);
  }
  return j;
}

Result<Facts> facts_from_json(const json& j) {
  Facts f;
  Reader r(j, "");
  if (!r.check_keys({"model", "prompt_tokens", "max_tokens", "temperature", "top_p", "stream",
                     "tools", "response_format", "task_id", "key", "team", "project", "role",
                     "tags", "claimed_tags", "unix_seconds", "budget_left_pct", "split",
                     "targets"})) {
    return *r.error();
  }
  r.str("model", f.model);
  r.integer("prompt_tokens", f.prompt_tokens);
  r.opt_integer("max_tokens", f.max_tokens);
  r.opt_number("temperature", f.temperature);
  r.opt_number("top_p", f.top_p);
  r.boolean("stream", f.stream);
  r.boolean("tools", f.tools);
  r.boolean("response_format", f.response_format);
  r.boolean("task_id", f.task_id);
  r.str("key", f.key);
  r.str("team", f.team);
  r.str("project", f.project);
  r.str("role", f.role);
  r.str_list("tags", f.tags);
  r.str_list("claimed_tags", f.claimed_tags);
  r.integer("unix_seconds", f.unix_seconds);
  r.opt_number("budget_left_pct", f.budget_left_pct);
  r.unsigned_integer("split", f.split);
  if (!r.ok()) return *r.error();
  if (j.contains("targets") && !j.at("targets").is_null()) {
    const json& arr = j.at("targets");
    if (!arr.is_array()) return bad("targets", "must be a list of objects");
    for (size_t i = 0; i < arr.size(); ++i) {
      TargetFacts t;
      Reader tr(arr[i], "targets[" + std::to_string(i) + "]");
      if (!tr.check_keys({"ref", "prompt_tokens", "context_length", "healthy", "queue_depth",
                          "est_wait_ms", "p90_ttft_ms", "error_rate"})) {
        return *tr.error();
      }
      tr.str("ref", t.ref);
      tr.opt_integer("prompt_tokens", t.prompt_tokens);
      tr.integer("context_length", t.context_length);
      tr.boolean("healthy", t.healthy);
      tr.opt_integer("queue_depth", t.queue_depth);
      tr.opt_integer("est_wait_ms", t.est_wait_ms);
      tr.opt_integer("p90_ttft_ms", t.p90_ttft_ms);
      tr.opt_number("error_rate", t.error_rate);
      if (!tr.ok()) return *tr.error();
      if (t.ref.empty()) return bad("targets[" + std::to_string(i) + "].ref", "is required");
      f.targets.push_back(std::move(t));
    }
  }
  return f;
}

}  // namespace ferry::policies
