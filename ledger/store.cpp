#include "ledger/store.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>

#include "common/json_text.h"
#include "common/saturating.h"
#include "common/sha256.h"
#include "ledger/time_util.h"

namespace ferry::ledger {

namespace detail {

std::string join_placeholders(size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) out += i == 0 ? "?" : ",?";
  return out;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ",") + name;
  return out;
}

// ---------------------------------------------------------------------------------------
// The canonical encoding, shared by the append path (values that point into the entry) and
// verification (values read back from the file), so both hash exactly the same bytes.

void encode_int(std::string& out, int64_t value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  (void)ec;  // 24 bytes always hold an int64
  out.append(buf, end);
}

void encode_value(std::string& out, const ValueRef& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) {
    out += 'I';
    encode_int(out, *i);
  } else if (const auto* s = std::get_if<std::string_view>(&value)) {
    out += 'T';
    encode_int(out, static_cast<int64_t>(s->size()));
    out += ':';
    out.append(*s);
  } else {
    out += 'N';
  }
  out += ';';
}

ValueRef ref_of(const Value& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return *i;
  if (const auto* s = std::get_if<std::string>(&value)) return std::string_view(*s);
  return std::monostate{};
}

constexpr std::string_view kHashTag = "ferry-ledger-v1\n";

// ---------------------------------------------------------------------------------------
// Tags as a JSON array of strings (common/json_text): byte for byte what nlohmann::json::dump()
// writes for valid UTF-8, which the hash chain covers; invalid UTF-8 (a client's header can
// carry any bytes) becomes U+FFFD instead of an exception on the writer thread.

void tags_json(std::string& out, const std::vector<std::string>& tags) {
  out.clear();
  out += '[';
  for (size_t i = 0; i < tags.size(); ++i) {
    if (i != 0) out += ',';
    append_json_string(out, tags[i]);
  }
  out += ']';
}

// ---------------------------------------------------------------------------------------
// One row's column values (see RowScratch).

ValueRef money_or_null(const Cost& cost, Money part) {
  if (cost.pricing == Pricing::kUnpriced) return std::monostate{};
  return part.micros();
}

void push_tokens(std::vector<ValueRef>& v, const Tokens& t) {
  for (const TokenCount* c : {&t.input, &t.cached_input, &t.output, &t.reasoning}) {
    v.emplace_back(c->count);
    v.emplace_back(token_source_name(c->source));
  }
}

void push_cost(std::vector<ValueRef>& v, const Cost& cost, int64_t& total_out) {
  v.emplace_back(pricing_name(cost.pricing));
  v.emplace_back(std::string_view(cost.price_version));
  v.push_back(money_or_null(cost, cost.input));
  v.push_back(money_or_null(cost, cost.cached_input));
  v.push_back(money_or_null(cost, cost.output));
  v.push_back(money_or_null(cost, cost.reasoning));
  total_out = cost.total().micros();
  v.push_back(money_or_null(cost, cost.total()));
}

// In request_columns() order; `facts`, when the entry has some, is appended after them.
void request_values(const LedgerEntry& e, std::string_view prev_hash, RowScratch& s) {
  const RequestRecord& r = e.record;
  std::vector<ValueRef>& v = s.values;
  v.clear();
  v.emplace_back(std::string_view(r.id));
  v.emplace_back(std::string_view(e.kind == EntryKind::kRequest ? "request" : "adjustment"));
  if (e.kind == EntryKind::kAdjustment) {
    v.emplace_back(std::string_view(e.adjusts_id));
    v.emplace_back(std::string_view(e.note));
  } else {
    v.emplace_back(std::monostate{});
    v.emplace_back(std::monostate{});
  }
  v.emplace_back(r.started_us);
  v.emplace_back(r.ended_us);
  s.day = utc_day(r.started_us);
  v.emplace_back(std::string_view(s.day));
  v.emplace_back(std::string_view(r.key_id));
  v.emplace_back(std::string_view(r.team));
  v.emplace_back(std::string_view(r.project));
  v.emplace_back(std::string_view(r.task_id));
  tags_json(s.trusted_tags, r.trusted_tags);
  v.emplace_back(std::string_view(s.trusted_tags));
  tags_json(s.claimed_tags, r.claimed_tags);
  v.emplace_back(std::string_view(s.claimed_tags));
  v.emplace_back(std::string_view(r.requested_model));
  v.emplace_back(std::string_view(r.target));
  v.emplace_back(std::string_view(r.upstream_model));
  v.emplace_back(std::string_view(r.rule_id));
  v.emplace_back(std::string_view(r.policy_version));
  v.emplace_back(static_cast<int64_t>(std::max<size_t>(1, r.attempts.size())));
  v.emplace_back(request_status_name(r.status));
  v.emplace_back(static_cast<int64_t>(r.http_status));
  v.emplace_back(std::string_view(r.error_code));
  v.emplace_back(static_cast<int64_t>(r.stream ? 1 : 0));
  v.emplace_back(std::string_view(r.finish_reason));
  push_tokens(v, r.tokens);
  int64_t total = 0;
  push_cost(v, e.cost, total);
  if (e.avoided) {
    v.emplace_back(e.avoided->micros());
  } else {
    v.emplace_back(std::monostate{});
  }
  v.emplace_back(std::string_view(e.avoided_version));
  v.emplace_back(r.timings.queue_us);
  v.emplace_back(r.timings.routing_us);
  v.emplace_back(r.timings.ttft_us);
  v.emplace_back(r.timings.total_us);
  v.emplace_back(prev_hash);
  if (!r.facts_json.empty()) v.emplace_back(std::string_view(r.facts_json));
  if (!r.usage_check.empty()) {
    v.emplace_back(std::string_view(kUsageCheckColumn));
    v.emplace_back(std::string_view(r.usage_check));
  }
  if (!r.constraint_mode.empty()) {
    v.emplace_back(std::string_view(kConstraintColumn));
    v.emplace_back(std::string_view(r.constraint_mode));
    if (!r.schema_hash.empty()) v.emplace_back(std::string_view(r.schema_hash));
  }
  if (r.has_levers()) {
    v.emplace_back(std::string_view(kLeversColumn));
    lever_values(e, v);
  }
}

void lever_values(const LedgerEntry& e, std::vector<ValueRef>& v) {
  const RequestRecord& r = e.record;
  auto money = [&](const std::optional<Money>& m) {
    if (m) {
      v.emplace_back(m->micros());
    } else {
      v.emplace_back(std::monostate{});
    }
  };
  if (r.trimmed_tokens >= 0) {
    v.emplace_back(r.trimmed_tokens);
  } else {
    v.emplace_back(std::monostate{});
  }
  money(e.trim_avoided);
  if (!r.cache.empty()) {
    v.emplace_back(std::string_view(r.cache));
    const Tokens& t = r.cache_tokens;
    v.emplace_back(saturating_add(saturating_add(t.input.count, t.cached_input.count),
                                  saturating_add(t.output.count, t.reasoning.count)));
  } else {
    v.emplace_back(std::monostate{});
    v.emplace_back(std::monostate{});
  }
  money(e.cache_avoided);
  if (!r.reasoning_budget.empty()) {
    v.emplace_back(std::string_view(r.reasoning_budget));
  } else {
    v.emplace_back(std::monostate{});
  }
}

void attempt_values(std::string_view request_id, size_t index, const AttemptRecord& a,
                    const Cost& cost, std::vector<ValueRef>& v) {
  v.clear();
  v.emplace_back(request_id);
  v.emplace_back(static_cast<int64_t>(index + 1));
  v.emplace_back(std::string_view(a.target));
  v.emplace_back(std::string_view(a.upstream_model));
  v.emplace_back(request_status_name(a.status));
  v.emplace_back(static_cast<int64_t>(a.http_status));
  v.emplace_back(std::string_view(a.error_code));
  v.emplace_back(a.started_us);
  v.emplace_back(a.ended_us);
  push_tokens(v, a.tokens);
  int64_t total = 0;
  push_cost(v, cost, total);
}

namespace {

// encode_value's bytes written at `p`, which has room for them (value_room).
char* put_int(char* p, int64_t value) {
  return std::to_chars(p, p + 20, value).ptr;  // 20 characters hold any int64
}

char* put_value(char* p, const ValueRef& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) {
    *p++ = 'I';
    p = put_int(p, *i);
  } else if (const auto* s = std::get_if<std::string_view>(&value)) {
    *p++ = 'T';
    p = put_int(p, static_cast<int64_t>(s->size()));
    *p++ = ':';
    if (!s->empty()) std::memcpy(p, s->data(), s->size());
    p += s->size();
  } else {
    *p++ = 'N';
  }
  *p++ = ';';
  return p;
}

// At least the bytes put_value writes for the value, with its one-byte tag before it.
size_t value_room(const ValueRef& value) {
  const auto* s = std::get_if<std::string_view>(&value);
  return 24 + (s != nullptr ? s->size() : 0);
}

}  // namespace

// The request id follows an 'R' (never the first byte of a value), so it cannot be taken for
// the facts or an attempt; the chain (a PostgreSQL row's instance) follows a 'C' after it.
// The same bytes as encode_value's appends, written into room made once (a row's text is a
// few KiB: its values one by one through std::string's appends cost several times as much).
void hash_text(const std::vector<ValueRef>& request, std::string_view request_id,
               const std::vector<ValueRef>* attempts, size_t attempt_count, std::string& out,
               std::string_view chain) {
  const ValueRef id_ref = request_id;
  const ValueRef chain_ref = chain;
  size_t room = kHashTag.size() + value_room(id_ref) + value_room(chain_ref);
  for (const ValueRef& value : request) room += value_room(value);
  for (size_t a = 0; a < attempt_count; ++a) {
    room += 1;
    for (const ValueRef& value : attempts[a]) room += value_room(value);
  }
  out.resize(room);
  char* const begin = out.data();
  char* p = begin;
  std::memcpy(p, kHashTag.data(), kHashTag.size());
  p += kHashTag.size();
  for (const ValueRef& value : request) p = put_value(p, value);
  if (!request_id.empty()) {
    *p++ = 'R';
    p = put_value(p, id_ref);
  }
  if (!chain.empty()) {
    *p++ = 'C';
    p = put_value(p, chain_ref);
  }
  for (size_t a = 0; a < attempt_count; ++a) {
    *p++ = 'A';
    for (const ValueRef& value : attempts[a]) p = put_value(p, value);
  }
  out.resize(static_cast<size_t>(p - begin));
}

// The aggregates' group columns; the sums follow them in every aggregate table.
constexpr const char* kSumColumns[] = {
    "requests",      "unpriced",         "input_tokens", "cached_tokens",
    "output_tokens", "reasoning_tokens", "cost_input",   "cost_cached",
    "cost_output",   "cost_reasoning",   "cost_total",   "avoided_total",
    "avoided_base",  "refused",          "shadows",      "unpriced_served"};

// SQLite (`pg_rows` 0): one VALUES row of ? placeholders. PostgreSQL: `pg_rows` rows of $n
// placeholders, numbered from 1 (the deltas of one batch never share a group).
std::string daily_upsert_sql(const char* table, const char* key, size_t pg_rows) {
  std::string columns = key;
  size_t count = static_cast<size_t>(std::count(columns.begin(), columns.end(), ',')) + 1;
  const char* self = pg_rows == 0 ? "" : "t.";
  std::string update;
  for (const char* c : kSumColumns) {
    columns += std::string(",") + c;
    update += std::string(update.empty() ? "" : ", ") + c + "=" + self + c + "+excluded." + c;
  }
  columns += ",first_us,last_us";
  count += std::size(kSumColumns) + 2;
  std::string values;
  if (pg_rows == 0) {
    values = "(" + join_placeholders(count) + ")";
  } else {
    values = pg_value_rows(pg_rows, count, 1);
  }
  const char* low = pg_rows == 0 ? "min" : "LEAST";
  const char* high = pg_rows == 0 ? "max" : "GREATEST";
  return std::string("INSERT INTO ") + table + (pg_rows == 0 ? "" : " AS t") + "(" + columns +
         ") VALUES" + values + " ON CONFLICT(" + key + ") DO UPDATE SET " + update +
         ", first_us=" + low + "(" + self + "first_us,excluded.first_us), last_us=" + high + "(" +
         self + "last_us,excluded.last_us)";
}

std::string numbered_placeholders(const std::string& sql) {
  std::string out;
  int n = 0;
  for (char c : sql) {
    if (c == '?') {
      out += "$" + std::to_string(++n);
    } else {
      out += c;
    }
  }
  return out;
}

std::string pg_value_rows(size_t rows, size_t columns, size_t first) {
  std::string out;
  out.reserve(rows * columns * 6);
  size_t n = first;
  for (size_t r = 0; r < rows; ++r) {
    out += r == 0 ? "(" : ",(";
    for (size_t c = 0; c < columns; ++c) {
      if (c != 0) out += ',';
      out += '$';
      encode_int(out, static_cast<int64_t>(n++));
    }
    out += ')';
  }
  return out;
}

std::vector<int64_t> daily_sums(const DailyDelta& d) {
  return {d.requests,         d.unpriced,      d.input_tokens, d.cached_tokens, d.output_tokens,
          d.reasoning_tokens, d.cost_input,    d.cost_cached,  d.cost_output,   d.cost_reasoning,
          d.cost_total,       d.avoided_total, d.avoided_base, d.refused,       d.shadows,
          d.unpriced_served,  d.first_us,      d.last_us};
}

// Each part length-prefixed, so that distinct groups never share a key.
void daily_key(std::string& key, std::initializer_list<std::string_view> parts) {
  key.clear();
  for (std::string_view part : parts) {
    encode_int(key, static_cast<int64_t>(part.size()));
    key += ':';
    key.append(part);
  }
}

// A shadow copy's row: the router tags it "shadow" (gateway/recorder.cpp, settle_shadow).
bool is_shadow(const RequestRecord& r) {
  return std::find(r.trusted_tags.begin(), r.trusted_tags.end(), kShadowTag) !=
         r.trusted_tags.end();
}

// Adds one row's counts and sums (not its times) to a delta.
void add_sums(DailyDelta& d, const LedgerEntry& entry) {
  const RequestRecord& r = entry.record;
  bool is_request = entry.kind == EntryKind::kRequest;
  bool unpriced = entry.cost.pricing == Pricing::kUnpriced;
  int64_t total = unpriced ? 0 : entry.cost.total().micros();
  bool refused = is_request && r.status == RequestStatus::kRefused;
  bool shadow = is_request && !refused && is_shadow(r);
  d.requests += is_request ? 1 : 0;
  d.unpriced += is_request && unpriced ? 1 : 0;
  d.refused += refused ? 1 : 0;
  d.shadows += shadow ? 1 : 0;
  d.unpriced_served += is_request && !refused && !shadow && unpriced ? 1 : 0;
  d.input_tokens += r.tokens.input.count;
  d.cached_tokens += r.tokens.cached_input.count;
  d.output_tokens += r.tokens.output.count;
  d.reasoning_tokens += r.tokens.reasoning.count;
  if (!unpriced) {
    d.cost_input += entry.cost.input.micros();
    d.cost_cached += entry.cost.cached_input.micros();
    d.cost_output += entry.cost.output.micros();
    d.cost_reasoning += entry.cost.reasoning.micros();
  }
  d.cost_total += total;
  if (entry.avoided) {
    d.avoided_total += entry.avoided->micros();
    d.avoided_base += total;
  }
}

// Adds one appended row to its group's delta (`key_id`/`rule_id` "" for daily_team).
void add_to_daily(std::map<std::string, DailyDelta>& deltas, LastGroup<DailyDelta>& last,
                  std::string& key, std::initializer_list<std::string_view> group,
                  const std::string& day, const LedgerEntry& entry, const std::string& key_id,
                  const std::string& rule_id) {
  const RequestRecord& r = entry.record;
  bool inserted = false;
  DailyDelta& d = group_delta(deltas, last, key, group, inserted);
  if (inserted) {
    d.day = day;
    d.key_id = key_id;
    d.team = r.team;
    d.project = r.project;
    d.model = r.upstream_model;
    d.target = r.target;
    d.rule_id = rule_id;
    d.first_us = r.started_us;
    d.last_us = r.ended_us;
  }
  add_sums(d, entry);
  d.first_us = std::min(d.first_us, r.started_us);
  d.last_us = std::max(d.last_us, r.ended_us);
}

namespace {

void add_to_task(TaskDelta& d, bool fresh, const LedgerEntry& entry, const std::string& day) {
  const RequestRecord& r = entry.record;
  if (fresh) {
    d.task_id = r.task_id;
    d.team = r.team;
    d.project = r.project;
    d.day = day;
    d.first_us = r.started_us;
    d.last_us = r.ended_us;
  }
  d.team = std::min(d.team, r.team);
  d.project = std::min(d.project, r.project);
  d.day = std::min(d.day, day);
  d.first_us = std::min(d.first_us, r.started_us);
  d.last_us = std::max(d.last_us, r.ended_us);
  d.requests += entry.kind == EntryKind::kRequest ? 1 : 0;
  d.tokens += r.tokens.input.count + r.tokens.output.count;
  d.cost += entry.cost.pricing == Pricing::kUnpriced ? 0 : entry.cost.total().micros();
}

std::string sums_sql(const char* const* columns, size_t count, const char* prefix) {
  std::string out;
  for (size_t i = 0; i < count; ++i) out += std::string(i == 0 ? "" : ",") + prefix + columns[i];
  return out;
}

// "INSERT INTO table(columns) VALUES ... ON CONFLICT(key) DO UPDATE SET" and the updates:
// `sums` added, `lows` and `highs` kept at their smallest and largest.
std::string rollup_upsert(const char* table, const std::vector<const char*>& columns,
                          const char* key, const std::vector<const char*>& sums,
                          const std::vector<const char*>& lows,
                          const std::vector<const char*>& highs, size_t pg_rows) {
  std::vector<std::string> names(columns.begin(), columns.end());
  const char* self = pg_rows == 0 ? "" : "t.";
  std::string update;
  auto set = [&](const char* column, const std::string& value) {
    update += std::string(update.empty() ? "" : ", ") + column + "=" + value;
  };
  for (const char* c : sums) set(c, std::string(self) + c + "+excluded." + c);
  for (const char* c : lows) {
    set(c, std::string(pg_rows == 0 ? "min" : "LEAST") + "(" + self + c + ",excluded." + c + ")");
  }
  for (const char* c : highs) {
    set(c,
        std::string(pg_rows == 0 ? "max" : "GREATEST") + "(" + self + c + ",excluded." + c + ")");
  }
  std::string values = pg_rows == 0 ? "(" + join_placeholders(names.size()) + ")"
                                    : pg_value_rows(pg_rows, names.size(), 1);
  return std::string("INSERT INTO ") + table + (pg_rows == 0 ? "" : " AS t") + "(" +
         join_names(names) + ") VALUES" + values + " ON CONFLICT(" + key + ") DO UPDATE SET " +
         update;
}

}  // namespace

void add_to_rollups(Rollups& rollups, std::string& key, const std::string& day,
                    const LedgerEntry& entry) {
  const RequestRecord& r = entry.record;
  add_to_daily(rollups.daily_key, rollups.last_daily_key, key, {day, r.key_id, r.team, r.project},
               day, entry, r.key_id, "");
  if (r.task_id.empty()) {
    add_to_daily(rollups.untasked, rollups.last_untasked, key, {day}, day, entry, "", "");
    return;
  }
  auto [task, fresh_task] = rollups.tasks.try_emplace(r.task_id);
  add_to_task(task->second, fresh_task, entry, day);
  add_sums(task->second.sums, entry);
  bool fresh_target = false;
  TaskDelta& target = group_delta(rollups.task_targets, rollups.last_task_target, key,
                                  {r.task_id, r.target}, fresh_target);
  add_to_task(target, fresh_target, entry, day);
  target.target = r.target;
}

std::string task_totals_upsert_sql(size_t pg_rows) {
  std::vector<const char*> columns = {"task_id", "team",     "project", "day", "first_us",
                                      "last_us", "requests", "tokens",  "cost"};
  std::vector<const char*> sums = {"requests", "tokens", "cost"};
  for (const char* c : kTaskReportSums) {
    columns.push_back(c);
    sums.push_back(c);
  }
  return rollup_upsert("task_totals", columns, "task_id", sums,
                       {"team", "project", "day", "first_us"}, {"last_us"}, pg_rows);
}

std::string task_targets_upsert_sql(size_t pg_rows) {
  return rollup_upsert("task_targets", {"target", "task_id", "requests", "tokens", "cost"},
                       "target,task_id", {"requests", "tokens", "cost"}, {}, {}, pg_rows);
}

std::string daily_key_upsert_sql(size_t pg_rows) {
  return daily_upsert_sql("daily_key", kDailyKeyKey, pg_rows);
}

std::string daily_untasked_upsert_sql(size_t pg_rows) {
  return daily_upsert_sql("daily_untasked", "day", pg_rows);
}

void task_total_values(const TaskDelta& d, std::vector<ValueRef>& out) {
  out.insert(out.end(),
             {std::string_view(d.task_id), std::string_view(d.team), std::string_view(d.project),
              std::string_view(d.day), d.first_us, d.last_us, d.requests, d.tokens, d.cost});
  const DailyDelta& x = d.sums;
  out.insert(out.end(), {x.unpriced_served, x.refused, x.shadows, x.input_tokens, x.cached_tokens,
                         x.output_tokens, x.reasoning_tokens, x.cost_input, x.cost_cached,
                         x.cost_output, x.cost_reasoning, x.avoided_total, x.avoided_base});
}

void task_target_values(const TaskDelta& d, std::vector<ValueRef>& out) {
  out.insert(out.end(), {std::string_view(d.target), std::string_view(d.task_id), d.requests,
                         d.tokens, d.cost});
}

void daily_key_values(const DailyDelta& d, std::vector<ValueRef>& out) {
  out.insert(out.end(), {std::string_view(d.day), std::string_view(d.key_id),
                         std::string_view(d.team), std::string_view(d.project)});
  for (int64_t v : daily_sums(d)) out.emplace_back(v);
}

void daily_untasked_values(const DailyDelta& d, std::vector<ValueRef>& out) {
  out.emplace_back(std::string_view(d.day));
  for (int64_t v : daily_sums(d)) out.emplace_back(v);
}

std::string task_status_sql(size_t count) {
  return "UPDATE task_totals SET status = (SELECT status FROM tasks WHERE tasks.task_id = "
         "task_totals.task_id) WHERE status = 'open' AND task_id IN (" +
         join_placeholders(count) + ") AND task_id IN (SELECT task_id FROM tasks)";
}

const char* const kBuildRollupsSql = R"sql(
INSERT INTO daily_key(day, key_id, team, project, requests, unpriced, input_tokens,
  cached_tokens, output_tokens, reasoning_tokens, cost_input, cost_cached, cost_output,
  cost_reasoning, cost_total, avoided_total, avoided_base, refused, shadows, unpriced_served,
  first_us, last_us)
  SELECT day, key_id, team, project, SUM(requests), SUM(unpriced), SUM(input_tokens),
    SUM(cached_tokens), SUM(output_tokens), SUM(reasoning_tokens), SUM(cost_input),
    SUM(cost_cached), SUM(cost_output), SUM(cost_reasoning), SUM(cost_total),
    SUM(avoided_total), SUM(avoided_base), SUM(refused), SUM(shadows), SUM(unpriced_served),
    MIN(first_us), MAX(last_us)
  FROM daily GROUP BY day, key_id, team, project;
INSERT INTO task_totals(task_id, team, project, day, first_us, last_us, requests, tokens, cost)
  SELECT task_id, MIN(team), MIN(project), MIN(day), MIN(started_us), MAX(ended_us),
    SUM(CASE WHEN kind='request' THEN 1 ELSE 0 END), SUM(input_tokens + output_tokens),
    SUM(COALESCE(cost_total, 0))
  FROM requests WHERE task_id <> '' GROUP BY task_id;
INSERT INTO task_targets(target, task_id, requests, tokens, cost)
  SELECT target, task_id, SUM(CASE WHEN kind='request' THEN 1 ELSE 0 END),
    SUM(input_tokens + output_tokens), SUM(COALESCE(cost_total, 0))
  FROM requests WHERE task_id <> '' GROUP BY target, task_id;
UPDATE task_totals SET status = (SELECT status FROM tasks WHERE tasks.task_id = task_totals.task_id)
  WHERE task_id IN (SELECT task_id FROM tasks);
)sql";

// The sums of `daily` (kSumColumns order, named so) and first_us, last_us over the rows
// selected, as add_to_daily counts them (a shadow copy's row found by shadow_row_sql).
std::string row_sums_select(bool pg) {
  const std::string shadow = shadow_row_sql(pg);
  auto count = [](const std::string& cond) {
    return "SUM(CASE WHEN " + cond + " THEN 1 ELSE 0 END)";
  };
  const std::string request = "kind='request'";
  const std::string kept = request + " AND status<>'refused'";
  const std::string exprs[] = {
      count(request),
      count(request + " AND pricing='unpriced'"),
      "SUM(input_tokens)",
      "SUM(cached_tokens)",
      "SUM(output_tokens)",
      "SUM(reasoning_tokens)",
      "SUM(COALESCE(cost_input,0))",
      "SUM(COALESCE(cost_cached,0))",
      "SUM(COALESCE(cost_output,0))",
      "SUM(COALESCE(cost_reasoning,0))",
      "SUM(COALESCE(cost_total,0))",
      "SUM(COALESCE(avoided_cost,0))",
      "SUM(CASE WHEN avoided_cost IS NOT NULL THEN COALESCE(cost_total,0) ELSE 0 END)",
      count(request + " AND status='refused'"),
      count(kept + " AND " + shadow),
      count(kept + " AND NOT " + shadow + " AND pricing='unpriced'")};
  static_assert(std::size(exprs) == std::size(kSumColumns));
  std::string out;
  for (size_t i = 0; i < std::size(exprs); ++i) {
    out += exprs[i] + " AS " + kSumColumns[i] + ",";
  }
  return out + "MIN(started_us) AS first_us,MAX(ended_us) AS last_us";
}

std::string task_report_sums_build_sql(bool pg) {
  std::string sums = sums_sql(kSumColumns, std::size(kSumColumns), "");
  std::string set;
  for (const char* c : kTaskReportSums) {
    set += std::string(set.empty() ? "" : ", ") + c + " = s." + c;
  }
  return "INSERT INTO daily_untasked(day," + sums + ",first_us,last_us) SELECT day," +
         row_sums_select(pg) + " FROM requests WHERE task_id = '' GROUP BY day;\n" +
         "UPDATE task_totals SET " + set + " FROM (SELECT task_id," + row_sums_select(pg) +
         " FROM requests WHERE task_id <> '' GROUP BY task_id) AS s WHERE s.task_id = "
         "task_totals.task_id;\n";
}

}  // namespace detail

using namespace detail;

const std::vector<std::string>& lever_columns() {
  static const std::vector<std::string> kColumns = {"trimmed_tokens", "trim_avoided",
                                                    "cache",          "cache_tokens",
                                                    "cache_avoided",  "reasoning_budget"};
  return kColumns;
}

const std::vector<std::string>& request_columns() {
  static const std::vector<std::string> kColumns = {"id",
                                                    "kind",
                                                    "adjusts_id",
                                                    "note",
                                                    "started_us",
                                                    "ended_us",
                                                    "day",
                                                    "key_id",
                                                    "team",
                                                    "project",
                                                    "task_id",
                                                    "trusted_tags",
                                                    "claimed_tags",
                                                    "requested_model",
                                                    "target",
                                                    "upstream_model",
                                                    "rule_id",
                                                    "policy_version",
                                                    "attempts",
                                                    "status",
                                                    "http_status",
                                                    "error_code",
                                                    "stream",
                                                    "finish_reason",
                                                    "input_tokens",
                                                    "input_source",
                                                    "cached_tokens",
                                                    "cached_source",
                                                    "output_tokens",
                                                    "output_source",
                                                    "reasoning_tokens",
                                                    "reasoning_source",
                                                    "pricing",
                                                    "price_version",
                                                    "cost_input",
                                                    "cost_cached",
                                                    "cost_output",
                                                    "cost_reasoning",
                                                    "cost_total",
                                                    "avoided_cost",
                                                    "avoided_version",
                                                    "queue_us",
                                                    "routing_us",
                                                    "ttft_us",
                                                    "total_us",
                                                    "prev_hash"};
  return kColumns;
}

const std::vector<std::string>& attempt_columns() {
  static const std::vector<std::string> kColumns = {
      "request_id",       "attempt",          "target",         "upstream_model", "status",
      "http_status",      "error_code",       "started_us",     "ended_us",       "input_tokens",
      "input_source",     "cached_tokens",    "cached_source",  "output_tokens",  "output_source",
      "reasoning_tokens", "reasoning_source", "pricing",        "price_version",  "cost_input",
      "cost_cached",      "cost_output",      "cost_reasoning", "cost_total"};
  return kColumns;
}

std::string canonical_values(const std::vector<Value>& values) {
  std::string out;
  out.reserve(512);
  for (const Value& value : values) encode_value(out, ref_of(value));
  return out;
}

std::string row_hash(const std::vector<Value>& request,
                     const std::vector<std::vector<Value>>& attempts, std::string_view request_id,
                     std::string_view chain) {
  std::vector<ValueRef> request_refs;
  request_refs.reserve(request.size());
  for (const Value& value : request) request_refs.push_back(ref_of(value));
  std::vector<std::vector<ValueRef>> attempt_refs;
  for (const auto& attempt : attempts) {
    auto& refs = attempt_refs.emplace_back();
    for (const Value& value : attempt) refs.push_back(ref_of(value));
  }
  std::string text;
  hash_text(request_refs, request_id, attempt_refs.data(), attempt_refs.size(), text, chain);
  return sha256_hex(text);
}

std::string shadow_row_sql(bool pg) {
  const std::string find = pg ? "strpos" : "instr";
  const std::string element = "\"" + std::string(kShadowTag) + "\"";
  return "(" + find + "(trusted_tags,'[" + element + "')>0 OR " + find + "(trusted_tags,'," +
         element + "')>0)";
}

}  // namespace ferry::ledger
