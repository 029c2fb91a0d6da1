#include "policies/facts.h"

#include <algorithm>
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

// One recorded member of Struct as the compact text writes it: `write` appends `"key":value`
// (after a comma unless `first`) when the member differs from its default or is `always`
// written.
template <typename Struct>
struct MemberText {
  std::string_view key;
  std::string key_text;  // "key": as JSON
  bool always = false;
  void (*write)(std::string& out, const Struct& s, const Struct& defaults, const MemberText& m,
                bool& first) = nullptr;
};

template <typename T>
struct ClassOf;
template <typename C, typename M>
struct ClassOf<M C::*> {
  using type = C;
};

void open_member(std::string& out, std::string_view key_text, bool& first) {
  if (!first) out.push_back(',');
  first = false;
  out.append(key_text);
}

template <auto Member, typename Struct = typename ClassOf<decltype(Member)>::type>
void write_member(std::string& out, const Struct& s, const Struct& defaults,
                  const MemberText<Struct>& m, bool& first) {
  if (!m.always && s.*Member == defaults.*Member) return;
  open_member(out, m.key_text, first);
  write_value(out, s.*Member);
}

template <typename Struct>
MemberText<Struct> member_text(std::string_view key, bool always,
                               decltype(MemberText<Struct>::write) write) {
  MemberText<Struct> m{key, {}, always, write};
  append_json_string(m.key_text, key);
  m.key_text.push_back(':');
  return m;
}

// The members in the order a std::map-backed json dumps them: keys sorted.
template <typename Struct>
std::vector<MemberText<Struct>> sorted(std::vector<MemberText<Struct>> members) {
  std::sort(members.begin(), members.end(),
            [](const auto& a, const auto& b) { return a.key < b.key; });
  return members;
}

// Writes `{...}` of the members `order` lists, each as its `write` decides.
template <typename Struct>
void write_compact(std::string& out, const Struct& s, const Struct& defaults,
                   const std::vector<MemberText<Struct>>& order) {
  out.push_back('{');
  bool first = true;
  for (const MemberText<Struct>& m : order) m.write(out, s, defaults, m, first);
  out.push_back('}');
}

const std::vector<MemberText<TargetFacts>>& target_texts() {
  static const auto texts = sorted<TargetFacts>({
#define FERRY_MEMBER_TEXT(member)                                       \
  member_text<TargetFacts>(#member, std::string_view(#member) == "ref", \
                           &write_member<&TargetFacts::member>),
      FERRY_RECORDED_TARGET_FACTS(FERRY_MEMBER_TEXT)
#undef FERRY_MEMBER_TEXT
  });
  return texts;
}

// Facts' `targets`: written when there are any, each target without its defaults but `ref`.
void write_targets(std::string& out, const Facts& f, const Facts&, const MemberText<Facts>& m,
                   bool& first) {
  static const TargetFacts kTargetDefaults;
  if (f.targets.empty()) return;
  open_member(out, m.key_text, first);
  out.push_back('[');
  for (size_t i = 0; i < f.targets.size(); ++i) {
    if (i > 0) out.push_back(',');
    write_compact(out, f.targets[i], kTargetDefaults, target_texts());
  }
  out.push_back(']');
}

const std::vector<MemberText<Facts>>& fact_texts() {
  static const auto texts = sorted<Facts>({
#define FERRY_MEMBER_TEXT(member) member_text<Facts>(#member, false, &write_member<&Facts::member>),
      FERRY_RECORDED_FACTS(FERRY_MEMBER_TEXT)
#undef FERRY_MEMBER_TEXT
          member_text<Facts>("targets", false, &write_targets),
  });
  return texts;
}

}  // namespace

std::string facts_to_compact_text(const Facts& f) {
  static const Facts kDefaults;
  std::string out;
  out.reserve(256);
  write_compact(out, f, kDefaults, fact_texts());
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
