#include "policies/facts.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/json_text.h"

namespace ferry::policies {

const TargetFacts* Facts::find_target(std::string_view ref) const {
  for (const auto& t : targets) {
    if (t.ref == ref) return &t;
  }
  return nullptr;
}

namespace {

using nlohmann::json;

Error bad(const std::string& field, const std::string& message) {
  return Error::make(ErrorCode::kInvalidRequest, "facts: " + field + ": " + message, field);
}

// Reads fields from one JSON object, remembering the first error.
class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  bool check_keys(const std::vector<const char*>& allowed) {
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

  // One reader per recorded member type (fact_table.h FERRY_RECORDED_FACTS).
  void read(const char* key, std::string& out) { str(key, out); }
  void read(const char* key, bool& out) { boolean(key, out); }
  void read(const char* key, int64_t& out) { integer(key, out); }
  void read(const char* key, std::optional<int64_t>& out) { opt_integer(key, out); }
  void read(const char* key, std::optional<double>& out) { opt_number(key, out); }
  void read(const char* key, uint64_t& out) { unsigned_integer(key, out); }
  void read(const char* key, std::vector<std::string>& out) { str_list(key, out); }

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

// Calls visit(key, &Facts::member) for each recorded member of Facts (fact_table.h), in order.
template <typename Visit>
void for_each_recorded(Visit&& visit) {
#define FERRY_VISIT_MEMBER(member) visit(#member, &Facts::member);
  FERRY_RECORDED_FACTS(FERRY_VISIT_MEMBER)
#undef FERRY_VISIT_MEMBER
}

// The same over TargetFacts.
template <typename Visit>
void for_each_recorded_target(Visit&& visit) {
#define FERRY_VISIT_MEMBER(member) visit(#member, &TargetFacts::member);
  FERRY_RECORDED_TARGET_FACTS(FERRY_VISIT_MEMBER)
#undef FERRY_VISIT_MEMBER
}

template <typename T>
json value_or_null(const T& v) {
  return json(v);
}
template <typename T>
json value_or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json target_to_json(const TargetFacts& t) {
  json tj;
  for_each_recorded_target(
      [&](const char* key, auto member) { tj[key] = value_or_null(t.*member); });
  return tj;
}

// Without the members at their defaults (absent, false, 0, "", [], healthy); `ref` always.
json target_to_compact_json(const TargetFacts& t) {
  static const TargetFacts kDefaults;
  json tj;
  for_each_recorded_target([&](const char* key, auto member) {
    if (std::string_view(key) == "ref" || !(t.*member == kDefaults.*member)) {
      tj[key] = value_or_null(t.*member);
    }
  });
  return tj;
}

// The keys facts_from_json accepts: the recorded members, then `targets`.
const std::vector<const char*>& fact_keys() {
  static const std::vector<const char*> keys = [] {
    std::vector<const char*> k;
    for_each_recorded([&k](const char* key, auto) { k.push_back(key); });
    k.push_back("targets");
    return k;
  }();
  return keys;
}

const std::vector<const char*>& target_keys() {
  static const std::vector<const char*> keys = [] {
    std::vector<const char*> k;
    for_each_recorded_target([&k](const char* key, auto) { k.push_back(key); });
    return k;
  }();
  return keys;
}

}  // namespace

json facts_to_json(const Facts& f) {
  json j;
  for_each_recorded([&](const char* key, auto member) { j[key] = value_or_null(f.*member); });
  json targets = json::array();
  for (const auto& t : f.targets) targets.push_back(target_to_json(t));
  j["targets"] = targets;
  return j;
}

json facts_to_compact_json(const Facts& f) {
  static const Facts kDefaults;
  json j = json::object();
  for_each_recorded([&](const char* key, auto member) {
    if (!(f.*member == kDefaults.*member)) j[key] = value_or_null(f.*member);
  });
  if (!f.targets.empty()) {
    json targets = json::array();
    for (const auto& t : f.targets) targets.push_back(target_to_compact_json(t));
    j["targets"] = std::move(targets);
  }
  return j;
}

namespace {

// ---- facts_to_compact_text: facts_to_compact_json(f).dump() without the tree ---------------

void write_value(std::string& out, const std::string& v) {
  append_json_string(out, v);
}
void write_value(std::string& out, bool v) {
  out.append(v ? "true" : "false");
}
template <typename Int>
void write_int(std::string& out, Int v) {
  char buf[24];
  auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  out.append(buf, end);
}
void write_value(std::string& out, int64_t v) {
  write_int(out, v);
}
void write_value(std::string& out, uint64_t v) {
  write_int(out, v);
}
void write_value(std::string& out, double v) {
  // An integral value below 1e15 (an error rate of 0, a round temperature): nlohmann writes its
  // digits and ".0" (from 1e15 on, an exponent), so no json is built for it.
  if (v == std::trunc(v) && std::fabs(v) < 1e15) {
    if (std::signbit(v)) out.push_back('-');
    write_int(out, static_cast<int64_t>(std::fabs(v)));
    out.append(".0");
    return;
  }
  if (!std::isfinite(v)) {
    out.append("null");  // as dump() writes a NaN or an infinity
    return;
  }
  // What dump() writes of a double: nlohmann's shortest round-trip form (its serializer calls
  // this with a buffer of 64), without a json and a string made for it.
  char buf[64];
  const char* end = nlohmann::detail::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(end - buf));
}
void write_value(std::string& out, const std::vector<std::string>& v) {
  out.push_back('[');
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out.push_back(',');
    append_json_string(out, v[i]);
  }
  out.push_back(']');
}
template <typename T>
void write_value(std::string& out, const std::optional<T>& v) {
  if (v) {
    write_value(out, *v);
  } else {
    out.append("null");
  }
}

// One member of the written object: its `"key":` text and its index among the recorded members
// (-1: the extra key).
struct Member {
  std::string key_text;
  int index;
};

// The members in the order a std::map-backed json dumps them (keys sorted); `extra` is one more
// key (Facts' `targets`) written by the caller.
template <typename ForEach>
std::vector<Member> sorted_members(ForEach&& for_each, std::string_view extra) {
  std::vector<std::pair<std::string_view, int>> keys;
  for_each([&](const char* key, auto) { keys.emplace_back(key, static_cast<int>(keys.size())); });
  if (!extra.empty()) keys.emplace_back(extra, -1);
  std::sort(keys.begin(), keys.end());
  std::vector<Member> members;
  for (const auto& [key, index] : keys) {
    std::string text;
    append_json_string(text, key);
    text.push_back(':');
    members.push_back({std::move(text), index});
  }
  return members;
}

constexpr size_t kMaxMembers = 32;

// Writes the members of `s` that differ from `defaults` (and `always`, when not empty), keys
// sorted; `write_extra` writes the value of the extra key when it returns true.
template <typename Struct, typename ForEach, typename WriteExtra>
void write_compact(std::string& out, const Struct& s, const Struct& defaults, ForEach&& for_each,
                   const std::vector<Member>& order, std::string_view always,
                   WriteExtra&& write_extra) {
  // Each member's value written once into `values`, then the members copied out in key order.
  thread_local std::string values;
  values.clear();
  std::array<std::pair<size_t, size_t>, kMaxMembers> spans{};
  std::array<bool, kMaxMembers> written{};
  int index = 0;
  for_each([&](const char* key, auto member) {
    const int i = index++;
    if (key == always || !(s.*member == defaults.*member)) {
      const size_t begin = values.size();
      write_value(values, s.*member);
      spans[i] = {begin, values.size()};
      written[i] = true;
    }
  });
  out.push_back('{');
  bool first = true;
  for (const Member& m : order) {
    const int i = m.index;
    if (i >= 0 && !written[i]) continue;
    const size_t mark = out.size();
    if (!first) out.push_back(',');
    out.append(m.key_text);
    if (i < 0) {
      if (!write_extra(out)) {
        out.resize(mark);
        continue;
      }
    } else {
      out.append(values, spans[i].first, spans[i].second - spans[i].first);
    }
    first = false;
  }
  out.push_back('}');
}

}  // namespace

std::string facts_to_compact_text(const Facts& f) {
  static const Facts kDefaults;
  static const TargetFacts kTargetDefaults;
  static const auto kOrder =
      sorted_members([](auto&& visit) { for_each_recorded(visit); }, "targets");
  static const auto kTargetOrder =
      sorted_members([](auto&& visit) { for_each_recorded_target(visit); }, "");
  std::string out;
  out.reserve(256);
  // The targets are written into their own buffer first: write_compact keeps one scratch of
  // values a thread, which the nested call would overwrite.
  std::string targets;
  if (!f.targets.empty()) {
    targets.push_back('[');
    for (size_t i = 0; i < f.targets.size(); ++i) {
      if (i > 0) targets.push_back(',');
      write_compact(
          targets, f.targets[i], kTargetDefaults,
          [](auto&& visit) { for_each_recorded_target(visit); }, kTargetOrder, "ref",
          [](std::string&) { return false; });
    }
    targets.push_back(']');
  }
  write_compact(
      out, f, kDefaults, [](auto&& visit) { for_each_recorded(visit); }, kOrder, "",
      [&](std::string& o) {
        if (targets.empty()) return false;
        o.append(targets);
        return true;
      });
  return out;
}

Result<Facts> facts_from_json(const json& j) {
  Facts f;
  Reader r(j, "");
  if (!r.check_keys(fact_keys())) return *r.error();
  for_each_recorded([&](const char* key, auto member) { r.read(key, f.*member); });
  if (!r.ok()) return *r.error();
  if (j.contains("targets") && !j.at("targets").is_null()) {
    const json& arr = j.at("targets");
    if (!arr.is_array()) return bad("targets", "must be a list of objects");
    for (size_t i = 0; i < arr.size(); ++i) {
      TargetFacts t;
      Reader tr(arr[i], "targets[" + std::to_string(i) + "]");
      if (!tr.check_keys(target_keys())) return *tr.error();
      for_each_recorded_target([&](const char* key, auto member) { tr.read(key, t.*member); });
      if (!tr.ok()) return *tr.error();
      if (t.ref.empty()) return bad("targets[" + std::to_string(i) + "].ref", "is required");
      f.targets.push_back(std::move(t));
    }
  }
  return f;
}

}  // namespace ferry::policies
