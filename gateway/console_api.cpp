#include "gateway/console_api.h"

#include <charconv>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "adapters/health.h"
#include "adapters/local_backend.h"
#include "common/clock.h"
#include "gateway/errors.h"
#include "gateway/gateway.h"
#include "gateway/http_wire.h"
#include "ledger/any_db.h"
#include "ledger/keys.h"
#include "ledger/ledger.h"
#include "ledger/report.h"
#include "ledger/tasks.h"
#include "policies/facts.h"
#include "policies/loader.h"
#include "policies/policy.h"
#include "policies/store.h"
#include "replay/replay.h"

namespace ferry::gateway {

namespace {

using Json = nlohmann::ordered_json;

AdminReply fail(const Error& e) {
  HttpError h = to_http_error(e);
  return AdminReply{h.status, "application/json", std::move(h.body)};
}

Error bad(const std::string& param, const std::string& message) {
  return Error::make(ErrorCode::kInvalidRequest, message, param, "invalid_value");
}

AdminReply json_reply(const Json& j, int status = 200) {
  return AdminReply{status, "application/json",
                    j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)};
}

AdminReply csv_reply(std::string text) {
  return AdminReply{200, "text/csv; charset=utf-8", std::move(text)};
}

Result<std::string> ledger_path(Gateway& gateway) {
  if (gateway.ledger() == nullptr) {
    return Error::make(ErrorCode::kNotFound, "no ledger is configured (config key 'ledger')");
  }
  return gateway.ledger()->config().path;
}

// The targets the in-process engine answers (their backend's kind is local).
std::set<std::string> local_targets(const config::Config& cfg) {
  std::set<std::string> local_backends;
  for (const auto& b : cfg.backends) {
    if (b.kind == "local") local_backends.insert(b.name);
  }
  std::set<std::string> out;
  for (const auto& m : cfg.models) {
    if (local_backends.count(m.backend)) out.insert(m.name);
  }
  return out;
}

// An integer query parameter within [lo, hi], `fallback` when absent.
Result<int64_t> int_param(const std::map<std::string, std::string>& q, const std::string& name,
                          int64_t fallback, int64_t lo, int64_t hi) {
  auto it = q.find(name);
  if (it == q.end() || it->second.empty()) return fallback;
  int64_t v = 0;
  const auto& t = it->second;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size() || v < lo || v > hi) {
    return bad(name, "'" + name + "' must be an integer from " + std::to_string(lo) + " to " +
                         std::to_string(hi) + ", got '" + t + "'");
  }
  return v;
}

Result<bool> wants_csv(const std::map<std::string, std::string>& q) {
  auto it = q.find("format");
  if (it == q.end() || it->second == "json") return false;
  if (it->second == "csv") return true;
  return bad("format", "'format' must be json or csv");
}

// ---- tasks ----------------------------------------------------------------------------------

constexpr size_t kMaxTaskIdBytes = 256;

Result<std::map<std::string, std::string>> parse_labels(const nlohmann::json& labels) {
  std::map<std::string, std::string> out;
  if (!labels.is_object()) return bad("labels", "'labels' must be an object of strings");
  if (labels.size() > ledger::kMaxTaskLabels) {
    return bad("labels", "at most " + std::to_string(ledger::kMaxTaskLabels) + " labels");
  }
  for (const auto& [k, v] : labels.items()) {
    if (!ledger::is_label_name(k)) {
      return bad("labels", "label name '" + k + "' must be 1-64 of A-Z a-z 0-9 _ . -");
    }
    if (!v.is_string() || v.get<std::string>().size() > ledger::kMaxLabelBytes) {
      return bad("labels." + k, "label '" + k + "' must be a string of at most " +
                                    std::to_string(ledger::kMaxLabelBytes) + " bytes");
    }
    out[k] = v.get<std::string>();
  }
  return out;
}

Result<ledger::TaskMark> parse_mark(std::string_view path_arg, const std::string& body,
                                    const Principal& principal) {
  ledger::TaskMark mark;
  // A path segment: '+' is itself there, not a space as in a query.
  std::string segment;
  for (char c : path_arg) segment += c == '+' ? std::string("%2B") : std::string(1, c);
  mark.task_id = url_decode(segment);
  if (mark.task_id.empty() || mark.task_id.size() > kMaxTaskIdBytes ||
      !is_valid_utf8(mark.task_id)) {
    return bad("task",
               "the task id (POST /v1/tasks/{id}, percent-encoded) must be 1-256 bytes of UTF-8");
  }
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object()) return bad("body", "the body must be a JSON object");
  for (const auto& [k, v] : j.items()) {
    if (k != "status" && k != "labels") return bad(k, "unknown member '" + k + "'");
  }
  auto st = j.contains("status") && j["status"].is_string()
                ? ledger::parse_task_status(j["status"].get<std::string>())
                : std::nullopt;
  if (!st) return bad("status", "'status' must be completed, failed or abandoned");
  mark.status = *st;
  if (j.contains("labels")) {
    auto labels = parse_labels(j["labels"]);
    if (!labels) return labels.error();
    mark.labels = std::move(*labels);
  }
  mark.key_id = principal.key_id;
  mark.marked_us = unix_micros_now();
  return mark;
}

Json mark_json(const ledger::TaskMark& m) {
  Json labels = Json::object();
  for (const auto& [k, v] : m.labels) labels[k] = v;
  return {{"task", m.task_id},
          {"status", ledger::task_status_name(m.status)},
          {"labels", labels},
          {"marked_by", m.key_id},
          {"marked_at_us", m.marked_us}};
}

// POST /v1/tasks/{id}: an app key may mark a task whose ledger rows are all its own.
AdminReply mark_task(Gateway& gateway, const Principal& principal, const std::string& body,
                     std::string_view path_arg) {
  auto db = ledger_path(gateway);
  if (!db) return fail(db.error());
  auto mark = parse_mark(path_arg, body, principal);
  if (!mark) return fail(mark.error());
  if (principal.role == config::Role::kApp) {
    auto keys = ledger::task_key_ids(*db, mark->task_id);
    if (!keys) return fail(keys.error());
    if (keys->empty()) {
      return fail(Error::make(ErrorCode::kNotFound,
                              "no ledger row has the task '" + mark->task_id + "'", "task",
                              "task_not_found"));
    }
    if (keys->size() != 1 || *keys->begin() != principal.key_id) {
      return fail(Error::make(ErrorCode::kForbidden,
                              "the task '" + mark->task_id +
                                  "' has requests of other keys; only their finance or admin "
                                  "keys may mark it",
                              "task", "not_your_task"));
    }
  }
  auto done = ledger::mark_task(*db, *mark);
  if (!done) return fail(done.error());
  Json j = mark_json(done->stored);
  if (done->result == ledger::MarkResult::kConflict) {
    HttpError h =
        to_http_error(Error::make(ErrorCode::kInvalidRequest,
                                  "the task '" + mark->task_id + "' is already marked " +
                                      std::string(ledger::task_status_name(done->stored.status)) +
                                      " (with its labels); a task is marked once",
                                  "status", "task_already_marked"));
    auto err = nlohmann::json::parse(h.body);
    err["task"] = nlohmann::json::parse(j.dump());
    return AdminReply{409, "application/json", err.dump(2)};
  }
  j["created"] = done->result == ledger::MarkResult::kCreated;
  return json_reply(j);
}

Result<ledger::TaskReportQuery> task_query(Gateway& gateway, std::string_view query,
                                           std::initializer_list<std::string_view> extra) {
  auto filter = export_filter(query, extra);
  if (!filter) return filter.error();
  ledger::TaskReportQuery q;
  q.filter = std::move(*filter);
  q.local_targets = local_targets(gateway.config());
  return q;
}

AdminReply ledger_tasks(Gateway& gateway, std::string_view query) {
  auto db = ledger_path(gateway);
  if (!db) return fail(db.error());
  auto q = task_query(gateway, query, {});
  if (!q) return fail(q.error());
  auto params = parse_query(query);
  q->by = params.count("by") ? params["by"] : "";
  auto csv = wants_csv(params);
  if (!csv) return fail(csv.error());
  auto report = ledger::task_report(*db, *q);
  if (!report) return fail(report.error());
  if (*csv) return csv_reply(ledger::task_report_csv(*report));
  return AdminReply{200, "application/json", ledger::task_report_json(*report)};
}

AdminReply top_tasks(Gateway& gateway, std::string_view query) {
  auto db = ledger_path(gateway);
  if (!db) return fail(db.error());
  auto q = task_query(gateway, query, {"status", "limit", "offset"});
  if (!q) return fail(q.error());
  auto params = parse_query(query);
  std::optional<ledger::TaskStatus> status;
  if (auto s = params.find("status"); s != params.end() && !s->second.empty()) {
    status = s->second == "open" ? std::optional(ledger::TaskStatus::kOpen)
                                 : ledger::parse_task_status(s->second);
    if (!status)
      return fail(bad("status", "'status' must be open, completed, failed or abandoned"));
  }
  auto limit = int_param(params, "limit", 50, 1, 1000);
  if (!limit) return fail(limit.error());
  auto offset = int_param(params, "offset", 0, 0, INT64_MAX / 2);
  if (!offset) return fail(offset.error());
  auto csv = wants_csv(params);
  if (!csv) return fail(csv.error());
  auto top = ledger::top_tasks(*db, *q, status, *limit, *offset);
  if (!top) return fail(top.error());
  if (*csv) return csv_reply(ledger::top_tasks_csv(*top));
  return AdminReply{200, "application/json",
                    ledger::top_tasks_json(*top, gateway.ledger()->currency())};
}

AdminReply task_requests(Gateway& gateway, std::string_view query) {
  auto db = ledger_path(gateway);
  if (!db) return fail(db.error());
  auto filter = export_filter(query, {"limit", "offset"});
  if (!filter) return fail(filter.error());
  if (!filter->task_id) return fail(bad("task", "'task' names the task"));
  auto params = parse_query(query);
  auto limit = int_param(params, "limit", 200, 1, 1000);
  if (!limit) return fail(limit.error());
  auto offset = int_param(params, "offset", 0, 0, INT64_MAX / 2);
  if (!offset) return fail(offset.error());
  auto text = ledger::task_requests_json(*db, *filter->task_id, *limit, *offset);
  if (!text) return fail(text.error());
  return AdminReply{200, "application/json", std::move(*text)};
}

// ---- spend, local versus GPU ------------------------------------------------------------------

// Monday of the ISO week holding `day` ("YYYY-MM-DD").
std::string week_of(const std::string& day) {
  auto d = ledger::parse_civil_date(day);
  if (!d) return day;
  int64_t days = ledger::days_from_civil(*d);
  // 1970-01-01 was a Thursday: (days + 3) mod 7 is the weekday counted from Monday.
  int64_t monday = days - (((days + 3) % 7) + 7) % 7;
  return ledger::utc_day(monday * ledger::kMicrosPerDay);
}

Result<ledger::Report> report_by(Gateway& gateway, const ledger::ReportFilter& filter,
                                 std::vector<ledger::ReportBy> by) {
  auto db = ledger_path(gateway);
  if (!db) return db.error();
  ledger::ReportQuery rq;
  rq.filter = filter;
  rq.by = std::move(by);
  return ledger::run_report(*db, rq);
}

Json money_row(const ledger::ReportRow& r) {
  return {{"requests", r.requests},           {"input_tokens", r.input_tokens},
          {"output_tokens", r.output_tokens}, {"cost", r.total.to_string()},
          {"avoided", r.avoided.to_string()}, {"saved", r.saved().to_string()}};
}

// GET /v1/ledger/spend: the report by period and stack (ledger::run_report, as `ferry ledger
// report --by day,team`); weeks are the report's days added up per ISO week.
AdminReply spend(Gateway& gateway, std::string_view query) {
  auto filter = export_filter(query, {"bucket", "stack"});
  if (!filter) return fail(filter.error());
  auto params = parse_query(query);
  std::string bucket = params.count("bucket") ? params["bucket"] : "day";
  std::string stack = params.count("stack") ? params["stack"] : "team";
  if (bucket != "day" && bucket != "week" && bucket != "month") {
    return fail(bad("bucket", "'bucket' must be day, week or month"));
  }
  std::vector<ledger::ReportBy> by = {bucket == "month" ? ledger::ReportBy::kMonth
                                                        : ledger::ReportBy::kDay};
  if (stack != "none") {
    auto s = ledger::parse_report_by(stack);
    if (!s || *s == ledger::ReportBy::kDay || *s == ledger::ReportBy::kMonth ||
        *s == ledger::ReportBy::kTask) {
      return fail(bad("stack", "'stack' must be team, project, key, model, target, rule or none"));
    }
    by.push_back(*s);
  }
  auto csv = wants_csv(params);
  if (!csv) return fail(csv.error());
  auto report = report_by(gateway, *filter, by);
  if (!report) return fail(report.error());
  std::map<std::pair<std::string, std::string>, ledger::ReportRow> cells;
  for (const auto& row : report->rows) {
    std::string period = bucket == "week" ? week_of(row.group[0]) : row.group[0];
    cells[{period, stack == "none" ? "" : row.group[1]}].add(row);
  }
  std::string text = "period,group,requests,cost\n";
  Json series = Json::array();
  for (const auto& [k, row] : cells) {
    text += ledger::csv_field(k.first, true) + "," + ledger::csv_field(k.second, true) + "," +
            std::to_string(row.requests) + "," + row.total.to_string() + "\n";
    Json cell = money_row(row);
    cell["period"] = k.first;
    cell["group"] = k.second;
    series.push_back(cell);
  }
  if (*csv) return csv_reply(std::move(text));
  return json_reply({{"bucket", bucket},
                     {"stack", stack},
                     {"currency", report->currency},
                     {"series", series},
                     {"totals", money_row(report->totals)}});
}

// Per-mille of part in whole, as "12.3" (integer arithmetic; "0.0" for an empty whole).
std::string share_text(int64_t part, int64_t whole) {
  if (whole <= 0) return "0.0";
  __int128 pm = (static_cast<__int128>(part) * 1000 + whole / 2) / whole;
  int64_t v = static_cast<int64_t>(pm);
  return std::to_string(v / 10) + "." + std::to_string(v % 10);
}

// GET /v1/ledger/local: what the in-process engine answered against the GPU backends, and what
// the reference model would have charged for it.
AdminReply local_share(Gateway& gateway, std::string_view query) {
  auto filter = export_filter(query, {"format"});
  if (!filter) return fail(filter.error());
  auto csv = wants_csv(parse_query(query));
  if (!csv) return fail(csv.error());
  auto report = report_by(gateway, *filter, {ledger::ReportBy::kDay, ledger::ReportBy::kTarget});
  if (!report) return fail(report.error());
  const auto local = local_targets(gateway.config());
  ledger::ReportRow on_local, on_gpu;
  std::map<std::string, std::pair<ledger::ReportRow, ledger::ReportRow>> days;
  for (const auto& row : report->rows) {
    bool is_local = local.count(row.group[1]) > 0;
    (is_local ? on_local : on_gpu).add(row);
    auto& day = days[row.group[0]];
    (is_local ? day.first : day.second).add(row);
  }
  Json series = Json::array();
  std::string text = "day,local_requests,gpu_requests,local_cost,gpu_cost,saved\n";
  for (const auto& [day, pair] : days) {
    text += ledger::csv_field(day, true) + "," + std::to_string(pair.first.requests) + "," +
            std::to_string(pair.second.requests) + "," + pair.first.total.to_string() + "," +
            pair.second.total.to_string() + "," + pair.first.saved().to_string() + "\n";
    series.push_back({{"day", day},
                      {"local_requests", pair.first.requests},
                      {"gpu_requests", pair.second.requests},
                      {"local_cost", pair.first.total.to_string()},
                      {"gpu_cost", pair.second.total.to_string()},
                      {"saved", pair.first.saved().to_string()}});
  }
  if (*csv) return csv_reply(std::move(text));
  const int64_t tokens_local = on_local.input_tokens + on_local.output_tokens;
  const int64_t tokens_all = tokens_local + on_gpu.input_tokens + on_gpu.output_tokens;
  Json targets = Json::array();
  for (const auto& t : local) targets.push_back(t);
  return json_reply({{"currency", report->currency},
                     {"local_targets", targets},
                     {"local", money_row(on_local)},
                     {"gpu", money_row(on_gpu)},
                     {"local_request_share_pct",
                      share_text(on_local.requests, on_local.requests + on_gpu.requests)},
                     {"local_token_share_pct", share_text(tokens_local, tokens_all)},
                     {"totals", money_row(report->totals)},
                     {"series", series}});
}

// ---- budgets --------------------------------------------------------------------------------

// spent × the period's length / the time gone, saturating: where the period ends at this pace.
Money projection(Money spent, const ledger::PeriodBounds& b, int64_t now_us) {
  int64_t gone = now_us - b.start_us;
  int64_t length = b.end_us - b.start_us;
  if (gone <= 0 || length <= 0) return spent;
  __int128 p = static_cast<__int128>(spent.micros()) * length / gone;
  if (p > INT64_MAX) return Money::max();
  if (p < INT64_MIN) return Money::min();
  return Money::from_micros(static_cast<int64_t>(p));
}

AdminReply budgets(Gateway& gateway, std::string_view query) {
  if (gateway.ledger() == nullptr) {
    return fail(Error::make(ErrorCode::kNotFound, "no ledger is configured (config key 'ledger')"));
  }
  auto csv = wants_csv(parse_query(query));
  if (!csv) return fail(csv.error());
  const int64_t now = unix_micros_now();
  Json list = Json::array();
  std::string text =
      "budget,scope,match,kind,period,limit,spent,reserved,left,resets_at,projected\n";
  for (const auto& b : gateway.ledger()->budgets()) {
    if (b.def == nullptr) continue;
    Money left = b.def->amount - b.spent - b.reserved;
    text += ledger::csv_field(b.def->name, true) + "," +
            std::string(ledger::budget_scope_name(b.def->scope)) + "," +
            ledger::csv_field(b.def->match, true) + "," + (b.def->hard ? "hard" : "soft") + "," +
            std::string(ledger::budget_period_name(b.def->period)) + "," +
            b.def->amount.to_string() + "," + b.spent.to_string() + "," + b.reserved.to_string() +
            "," + left.to_string() + "," + format_utc_micros(b.bounds.end_us) + "," +
            projection(b.spent, b.bounds, now).to_string() + "\n";
    list.push_back({{"name", b.def->name},
                    {"scope", ledger::budget_scope_name(b.def->scope)},
                    {"match", b.def->match},
                    {"hard", b.def->hard},
                    {"period", ledger::budget_period_name(b.def->period)},
                    {"limit", b.def->amount.to_string()},
                    {"spent", b.spent.to_string()},
                    {"reserved", b.reserved.to_string()},
                    {"left", left.to_string()},
                    {"period_start_us", b.bounds.start_us},
                    {"resets_at_us", b.bounds.end_us},
                    {"resets_at", format_utc_micros(b.bounds.end_us)},
                    {"projected", projection(b.spent, b.bounds, now).to_string()}});
  }
  if (*csv) return csv_reply(std::move(text));
  return json_reply({{"currency", gateway.ledger()->currency()}, {"budgets", list}});
}

// ---- admins: policy, backends, keys ---------------------------------------------------------

policies::LoadOptions load_options(const Gateway& gateway) {
  policies::LoadOptions options;
  std::vector<std::string> names;
  for (const auto& m : gateway.config().models) names.push_back(m.name);
  options.known_targets = std::move(names);
  return options;
}

Json diagnostics(const std::vector<policies::Diagnostic>& ds) {
  Json a = Json::array();
  for (const auto& d : ds) {
    a.push_back(
        {{"line", d.line}, {"column", d.column}, {"message", d.message}, {"text", d.to_string()}});
  }
  return a;
}

AdminReply policy_source(Gateway& gateway) {
  auto* store = gateway.policy_store();
  if (store == nullptr) {
    return fail(
        Error::make(ErrorCode::kNotFound, "no routing policy is configured (config key 'policy')"));
  }
  std::ifstream in(store->path(), std::ios::binary);
  if (!in.is_open()) {
    return fail(Error::make(ErrorCode::kUnavailable, "cannot read " + store->path()));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return json_reply({{"path", store->path()}, {"text", text.str()}});
}

// POST /admin/policy/validate: the server's own loader over the text; nothing is applied.
AdminReply validate_policy(Gateway& gateway, const std::string& body) {
  auto r = policies::load_policy_text(body, "policy", load_options(gateway));
  return json_reply({{"valid", r.ok()},
                     {"version", r.ok() ? r.policy->short_version() : ""},
                     {"errors", diagnostics(r.errors)},
                     {"warnings", diagnostics(r.warnings)}});
}

// POST /admin/policy/whatif: the edited policy replayed over the ledger (replay::replay_ledger,
// as `ferry policy replay --from D --to D`), at the server's prices; nothing is applied.
AdminReply what_if(Gateway& gateway, std::string_view query, const std::string& body) {
  auto db = ledger_path(gateway);
  if (!db) return fail(db.error());
  auto params = parse_query(query);
  for (const auto& [k, v] : params) {
    if (k != "days" && k != "from" && k != "to")
      return fail(bad(k, "unknown query parameter '" + k + "'"));
  }
  replay::ReplayOptions options;
  for (auto [name, is_to] : {std::pair{"from", false}, std::pair{"to", true}}) {
    if (!params.count(name)) continue;
    auto d = ledger::parse_civil_date(params[name]);
    if (!d) return fail(bad(name, std::string("'") + name + "' must be YYYY-MM-DD"));
    int64_t midnight = ledger::days_from_civil(*d) * ledger::kMicrosPerDay;
    (is_to ? options.to_us : options.from_us) = midnight + (is_to ? ledger::kMicrosPerDay : 0);
  }
  if (params.count("days")) {
    auto days = int_param(params, "days", 7, 1, 3650);
    if (!days) return fail(days.error());
    // The last N UTC days, today included: --from (today - N + 1).
    int64_t today = ledger::floor_div(unix_micros_now(), ledger::kMicrosPerDay);
    options.from_us = (today - *days + 1) * ledger::kMicrosPerDay;
  }
  auto r = policies::load_policy_text(body, "policy", load_options(gateway));
  if (!r.ok()) {
    return json_reply({{"valid", false}, {"errors", diagnostics(r.errors)}}, 422);
  }
  auto result = replay::replay_ledger(*r.policy, *db, gateway.ledger()->prices(), options);
  if (!result) return fail(result.error());
  Json j = Json::parse(replay::replay_to_json(*result).dump());
  j["valid"] = true;
  return json_reply(j);
}

AdminReply backends(Gateway& gateway) {
  Json list = Json::array();
  const auto& cfg = gateway.config();
  for (const auto& m : cfg.models) {
    Target* t = gateway.find_target(m.name);
    if (t == nullptr) continue;
    Json b = {{"target", m.name},
              {"backend", m.backend},
              {"kind", t->backend_config ? t->backend_config->kind : ""}};
    b["circuit"] =
        t->breaker ? Json(adapters::breaker_state_name(t->breaker->state())) : Json("none");
    b["healthy"] = t->breaker ? t->breaker->healthy() : true;
    auto p90 = t->recent.p90_ttft_ms();
    b["ttft_p90_ms"] = p90 ? Json(*p90) : Json(nullptr);
    auto err = t->recent.error_rate();
    b["error_rate_pct"] =
        err ? Json(share_text(static_cast<int64_t>(*err * 1e6), 1000000)) : Json(nullptr);
    if (t->backend != nullptr) b["queue_depth"] = t->backend->load_facts().queue_depth;
    if (auto* local = dynamic_cast<adapters::LocalBackend*>(t->backend)) {
      engine::LoadSnapshot s = local->load();
      b["local"] = {{"queue_depth", s.queue_depth},
                    {"active_sequences", s.active_sequences},
                    {"max_sequences", s.max_sequences},
                    {"tokens_per_second", static_cast<int64_t>(s.tokens_per_second)},
                    {"kv_bytes_used", s.kv_bytes_used},
                    {"kv_budget_bytes", s.kv_budget_bytes},
                    {"kv_use_pct", share_text(s.kv_bytes_used, s.kv_budget_bytes)}};
    }
    list.push_back(b);
  }
  return json_reply({{"backends", list}});
}

// GET /admin/route/recent?limit=N: the latest request rows that recorded their routing facts
// (the explain playground's "pick a recent request").
AdminReply recent_requests(Gateway& gateway, std::string_view query) {
  auto db = ledger_path(gateway);
  if (!db) return fail(db.error());
  auto limit = int_param(parse_query(query), "limit", 20, 1, 200);
  if (!limit) return fail(limit.error());
  auto rows = ledger::query_rows(
      *db,
      "SELECT id, COALESCE(request_id,''), started_us, key_id, requested_model, target, rule_id "
      "FROM requests WHERE kind='request' AND facts IS NOT NULL ORDER BY ended_us DESC, id "
      "LIMIT ?",
      {*limit});
  if (!rows) return fail(rows.error());
  Json list = Json::array();
  for (const auto& r : *rows) {
    list.push_back({{"id", ledger::value_text(r[0])},
                    {"request_id", ledger::value_text(r[1])},
                    {"started_us", ledger::value_int(r[2])},
                    {"key", ledger::value_text(r[3])},
                    {"model", ledger::value_text(r[4])},
                    {"target", ledger::value_text(r[5])},
                    {"rule", ledger::value_text(r[6])}});
  }
  return json_reply({{"requests", list}});
}

// GET /admin/route/explain_recorded?request=ID: the active policy explained over the facts a
// ledger row recorded when it was routed (its id or x-request-id), as POST /admin/route/explain
// answers for a pasted body.
AdminReply explain_recorded(Gateway& gateway, std::string_view query) {
  auto db = ledger_path(gateway);
  if (!db) return fail(db.error());
  auto q = parse_query(query);
  if (q["request"].empty()) return fail(bad("request", "'request' names a ledger row (its id)"));
  auto* store = gateway.policy_store();
  auto policy = store != nullptr ? store->current() : nullptr;
  if (!policy) {
    return fail(
        Error::make(ErrorCode::kNotFound, "no routing policy is configured (config 'policy')"));
  }
  auto rows = ledger::query_rows(
      *db, "SELECT facts, target FROM requests WHERE (id = ? OR request_id = ?) AND kind='request'",
      {q["request"], q["request"]});
  if (!rows) return fail(rows.error());
  if (rows->empty() || std::holds_alternative<std::monostate>(rows->front()[0])) {
    return fail(Error::make(ErrorCode::kNotFound,
                            "no ledger row '" + q["request"] + "' with recorded routing facts",
                            "request", "request_not_found"));
  }
  auto facts_json = nlohmann::json::parse(ledger::value_text(rows->front()[0]), nullptr, false);
  auto facts = policies::facts_from_json(facts_json);
  if (!facts) return fail(facts.error());
  policies::Explanation ex = policy->explain(*facts);
  nlohmann::json j = policies::explanation_to_json(ex);
  j["text"] = policies::explanation_to_text(ex);
  j["recorded_target"] = ledger::value_text(rows->front()[1]);
  return AdminReply{200, "application/json", j.dump(2)};
}

Json stored_key_json(const ledger::StoredKey& k) {
  return {{"id", k.id},
          {"source", "store"},
          {"role", k.role},
          {"team", k.team},
          {"project", k.project},
          {"tags", k.tags},
          {"created_us", k.created_us},
          {"created_by", k.created_by},
          {"revoked_us", k.revoked_us ? Json(*k.revoked_us) : Json(nullptr)}};
}

// GET /admin/keys: the config's keys (read-only) and, with a ledger, the stored ones.
AdminReply keys(Gateway& gateway) {
  Json list = Json::array();
  for (const auto& k : gateway.config().auth.keys) {
    list.push_back({{"id", k.id},
                    {"source", "config"},
                    {"role", config::role_name(k.role)},
                    {"team", k.team},
                    {"project", k.project},
                    {"tags", k.tags}});
  }
  if (gateway.ledger() == nullptr) {
    return json_reply(
        {{"source", "config"},
         {"read_only", true},
         {"note",
          "keys live in the server config; edit it to add or revoke one (with a ledger, "
          "keys can also be kept in its database: POST /admin/keys)"},
         {"keys", list}});
  }
  auto stored = ledger::list_keys(gateway.ledger()->config().path, true);
  if (!stored) return fail(stored.error());
  for (const auto& k : *stored) list.push_back(stored_key_json(k));
  return json_reply({{"source", "store"},
                     {"read_only", false},
                     {"note",
                      "stored keys are created and revoked here (a revocation reaches "
                      "every instance within 5 s); config keys are edited in the config"},
                     {"keys", list}});
}

Result<ledger::StoredKey> parse_key_spec(const std::string& body, const Principal& principal) {
  auto j = nlohmann::json::parse(body.empty() ? std::string("{}") : body, nullptr, false);
  if (!j.is_object()) return bad("", "the body must be a JSON object");
  ledger::StoredKey k;
  for (const auto& [name, value] : j.items()) {
    if (name == "tags") {
      if (!value.is_array()) return bad("tags", "'tags' must be an array of strings");
      for (const auto& t : value) {
        if (!t.is_string()) return bad("tags", "'tags' must be an array of strings");
        k.tags.push_back(t.get<std::string>());
      }
      continue;
    }
    if (name != "id" && name != "team" && name != "project" && name != "role") {
      return bad(name, "unknown member '" + name + "' (id, role, team, project, tags)");
    }
    if (!value.is_string() || !is_valid_utf8(value.get<std::string>()) ||
        value.get<std::string>().size() > 256) {
      return bad(name, "'" + name + "' must be a string of at most 256 bytes");
    }
    std::string v = value.get<std::string>();
    (name == "id" ? k.id : name == "team" ? k.team : name == "project" ? k.project : k.role) = v;
  }
  if (k.role.empty()) k.role = "app";
  if (k.role != "app" && k.role != "finance" && k.role != "admin") {
    return bad("role", "'role' must be app, finance or admin");
  }
  k.created_by = principal.key_id;
  k.created_us = unix_micros_now();
  return k;
}

// POST /admin/keys: a stored key; its secret is in this answer only.
AdminReply create_key(Gateway& gateway, const Principal& principal, const std::string& body) {
  if (gateway.ledger() == nullptr) {
    return fail(Error::make(ErrorCode::kNotFound,
                            "keys are kept in the ledger's database: configure a ledger "
                            "(config key 'ledger'), or add the key to the config"));
  }
  auto spec = parse_key_spec(body, principal);
  if (!spec) return fail(spec.error());
  std::vector<std::string> reserved;
  for (const auto& k : gateway.config().auth.keys) reserved.push_back(k.id);
  auto made = ledger::create_key(gateway.ledger()->config().path, *spec, reserved);
  if (!made) {
    AdminReply r = fail(made.error());
    if (made.error().type_code == "key_exists") r.status = 409;
    return r;
  }
  Json j = stored_key_json(made->key);
  j["key"] = made->secret;
  j["note"] = "the key is shown once; ferry keeps only its SHA-256";
  return json_reply(j, 201);
}

// DELETE /admin/keys/{id}: revokes a stored key.
AdminReply revoke_key(Gateway& gateway, std::string_view path_arg) {
  std::string id = url_decode(path_arg);
  for (const auto& k : gateway.config().auth.keys) {
    if (k.id == id) {
      return fail(bad("id", "the key '" + id + "' lives in the config; remove it there"));
    }
  }
  if (gateway.ledger() == nullptr) {
    return fail(Error::make(ErrorCode::kNotFound, "no ledger is configured: no stored keys"));
  }
  auto done = ledger::revoke_key(gateway.ledger()->config().path, id, unix_micros_now());
  if (!done) return fail(done.error());
  Json j = stored_key_json(*done);
  j["note"] = "revoked: every instance refuses the key within 5 s";
  return json_reply(j);
}

}  // namespace

AdminReply run_console_admin(Gateway& gateway, AdminRoute route, const Principal& principal,
                             std::string_view query, const std::string& body,
                             std::string_view path_arg) {
  switch (route) {
    case AdminRoute::kTaskMark:
      return mark_task(gateway, principal, body, path_arg);
    case AdminRoute::kLedgerTasks:
      return ledger_tasks(gateway, query);
    case AdminRoute::kTopTasks:
      return top_tasks(gateway, query);
    case AdminRoute::kTaskRequests:
      return task_requests(gateway, query);
    case AdminRoute::kSpend:
      return spend(gateway, query);
    case AdminRoute::kLocalShare:
      return local_share(gateway, query);
    case AdminRoute::kBudgets:
      return budgets(gateway, query);
    case AdminRoute::kPolicySource:
      return policy_source(gateway);
    case AdminRoute::kPolicyValidate:
      return validate_policy(gateway, body);
    case AdminRoute::kPolicyWhatIf:
      return what_if(gateway, query, body);
    case AdminRoute::kBackends:
      return backends(gateway);
    case AdminRoute::kKeys:
      return keys(gateway);
    case AdminRoute::kRecentRequests:
      return recent_requests(gateway, query);
    case AdminRoute::kExplainRecorded:
      return explain_recorded(gateway, query);
    case AdminRoute::kKeyCreate:
      return create_key(gateway, principal, body);
    case AdminRoute::kKeyRevoke:
      return revoke_key(gateway, path_arg);
    default:
      break;
  }
  return fail(Error::make(ErrorCode::kInternal, "console route not handled here"));
}

}  // namespace ferry::gateway
