#include "gateway/admin.h"

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "gateway/console_api.h"
#include "gateway/errors.h"
#include "gateway/gateway.h"
#include "gateway/http_wire.h"
#include "gateway/openai_request.h"
#include "ledger/ledger.h"
#include "policies/store.h"

namespace ferry::gateway {

namespace {

AdminReply error_reply(const Error& e) {
  HttpError h = to_http_error(e);
  return AdminReply{h.status, "application/json", std::move(h.body)};
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string url_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 &&
               hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

namespace {

// Pretty JSON; bytes that are not UTF-8 (a policy file can hold any) become U+FFFD.
std::string dump_json(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json diagnostics_json(const std::vector<policies::Diagnostic>& ds) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& d : ds) {
    a.push_back({{"file", d.file},
                 {"line", d.line},
                 {"column", d.column},
                 {"message", d.message},
                 {"text", d.to_string()}});
  }
  return a;
}

AdminReply reload_reply(const policies::ReloadOutcome& o) {
  nlohmann::json j = {{"applied", o.applied},
                      {"unchanged", o.unchanged},
                      {"version", o.version},
                      {"trigger", o.trigger},
                      {"errors", diagnostics_json(o.errors)},
                      {"warnings", diagnostics_json(o.warnings)}};
  AdminReply r;
  r.status = o.ok() ? 200 : 422;
  if (!o.ok()) {
    std::string text;
    for (const auto& d : o.errors) text += (text.empty() ? "" : "\n") + d.to_string();
    j["error"] = {{"message", "the policy was rejected; the previous one keeps serving:\n" + text},
                  {"type", "invalid_request_error"},
                  {"param", nullptr},
                  {"code", "invalid_policy"}};
  }
  r.body = dump_json(j);
  return r;
}

Error bad_param(const std::string& name, const std::string& message) {
  return Error::make(ErrorCode::kInvalidRequest, message, name, "invalid_value");
}

// POST /admin/route/explain: the decision for the body, as the caller (or ?key=) would get it.
AdminReply explain_route(Gateway& gateway, const Principal& principal, std::string_view query,
                         const std::string& body, const std::string& request_id) {
  auto q = parse_query(query);
  std::string path = q.count("endpoint") ? q["endpoint"] : "/v1/chat/completions";
  auto endpoint = path == "/v1/completions" ? adapters::Endpoint::kCompletions
                                            : adapters::Endpoint::kChatCompletions;
  auto parsed = parse_request(endpoint, body);
  if (!parsed) return error_reply(parsed.error());
  RequestContext ctx;
  ctx.request_id = request_id;
  ctx.principal = principal;
  ctx.started_us = unix_micros_now();
  if (auto key = q.find("key"); key != q.end()) {
    // Explain as another caller would be routed: their key's trusted facts.
    bool found = false;
    for (const auto& k : gateway.config().auth.keys) {
      if (k.id != key->second) continue;
      ctx.principal = Principal{k.id, k.team, k.project, k.role, k.tags};
      found = true;
    }
    if (!found) return error_reply(bad_param("key", "no API key with id '" + key->second + "'"));
  }
  if (auto t = q.find("task"); t != q.end()) ctx.task_header = t->second;
  if (auto t = q.find("tags"); t != q.end()) ctx.tags_header = t->second;
  auto text = gateway.planner().explain(ctx, *parsed);
  if (!text) return error_reply(text.error());
  return AdminReply{200, "application/json", std::move(*text)};
}

// GET /v1/ledger/report: grouped totals in JSON, CSV or a table.
AdminReply ledger_report(Gateway& gateway, std::string_view query) {
  auto* ledger = gateway.ledger();
  if (ledger == nullptr) {
    return error_reply(
        Error::make(ErrorCode::kNotFound, "no ledger is configured (config key 'ledger')"));
  }
  auto filter = export_filter(query);
  if (!filter) return error_reply(filter.error());
  auto q = parse_query(query);
  ledger::ReportQuery rq;
  rq.filter = *filter;
  if (auto by = q.find("by"); by != q.end()) {
    auto list = ledger::parse_report_by_list(by->second);
    if (!list) {
      return error_reply(bad_param("by",
                                   "'by' must list task, team, project, key, model, "
                                   "target, rule, day or month (each once)"));
    }
    rq.by = *list;
  }
  auto format = ledger::ReportFormat::kJson;
  if (auto f = q.find("format"); f != q.end()) {
    auto parsed = ledger::parse_report_format(f->second);
    if (!parsed) return error_reply(bad_param("format", "'format' must be json, csv or table"));
    format = *parsed;
  }
  bool savings = q.count("savings") && q["savings"] != "0" && q["savings"] != "false";
  rq.levers = savings;
  auto report = ledger::run_report(ledger->config().path, rq);
  if (!report) return error_reply(report.error());
  const char* type = format == ledger::ReportFormat::kJson  ? "application/json"
                     : format == ledger::ReportFormat::kCsv ? "text/csv; charset=utf-8"
                                                            : "text/plain; charset=utf-8";
  return AdminReply{200, type, ledger::format_report(*report, format, savings)};
}

}  // namespace

std::map<std::string, std::string> parse_query(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    size_t eq = pair.find('=');
    std::string key = url_decode(pair.substr(0, eq));
    std::string value = eq == std::string_view::npos ? "" : url_decode(pair.substr(eq + 1));
    if (!key.empty()) out[key] = value;
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return out;
}

Status check_utf8_input(std::string_view query, std::string_view body) {
  for (const auto& [k, v] : parse_query(query)) {
    if (!is_valid_utf8(k)) {
      return bad_param("query", "a query parameter name is not valid UTF-8 once percent-decoded");
    }
    if (!is_valid_utf8(v)) {
      return bad_param(k, "query parameter '" + k + "' is not valid UTF-8 once percent-decoded");
    }
  }
  if (!is_valid_utf8(body)) return bad_param("body", "the request body is not valid UTF-8");
  return {};
}

Result<ledger::ReportFilter> export_filter(std::string_view query,
                                           std::initializer_list<std::string_view> extra) {
  if (auto ok = check_utf8_input(query, {}); !ok) return ok.error();
  auto q = parse_query(query);
  ledger::ReportFilter f;
  static const char* kKnown[] = {"from", "to",     "team",   "project", "key",
                                 "task", "model",  "target", "rule",    "request_id",
                                 "by",   "format", "savings"};
  for (const auto& [k, v] : q) {
    bool known = false;
    for (const char* n : kKnown) known = known || k == n;
    for (std::string_view n : extra) known = known || k == n;
    if (!known) return bad_param(k, "unknown query parameter '" + k + "'");
  }
  auto opt = [&](const char* name) -> std::optional<std::string> {
    auto it = q.find(name);
    if (it == q.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
  f.team = opt("team");
  f.project = opt("project");
  f.key_id = opt("key");
  f.task_id = opt("task");
  f.model = opt("model");
  f.target = opt("target");
  f.rule_id = opt("rule");
  f.request_id = opt("request_id");
  for (auto [name, slot] : {std::pair{"from", &f.from}, std::pair{"to", &f.to}}) {
    if (auto text = opt(name)) {
      auto d = ledger::parse_civil_date(*text);
      if (!d)
        return bad_param(name,
                         std::string("'") + name + "' must be YYYY-MM-DD, got '" + *text + "'");
      *slot = *d;
    }
  }
  return f;
}

AdminReply run_admin(Gateway& gateway, AdminRoute route, const Principal& principal,
                     std::string_view query, const std::string& body, const std::string& request_id,
                     std::string_view path_arg) {
  // Nothing that is not UTF-8 reaches a policy, the ledger or a JSON answer.
  if (auto ok = check_utf8_input(query, body); !ok) return error_reply(ok.error());
  auto* store = gateway.policy_store();
  switch (route) {
    case AdminRoute::kPolicyGet:
    case AdminRoute::kPolicyPut:
    case AdminRoute::kPolicyReload: {
      if (store == nullptr) {
        return error_reply(Error::make(ErrorCode::kNotFound,
                                       "no routing policy is configured (config key 'policy')"));
      }
      if (route == AdminRoute::kPolicyGet)
        return AdminReply{200, "application/json", dump_json(store->status_json())};
      if (route == AdminRoute::kPolicyReload)
        return reload_reply(store->reload("POST /admin/policy/reload"));
      auto q = parse_query(query);
      bool persist = q.count("persist") == 0 || (q["persist"] != "false" && q["persist"] != "0");
      return reload_reply(
          store->apply_text(body, "PUT /admin/policy by " + principal.key_id, persist));
    }
    case AdminRoute::kRouteExplain:
      return explain_route(gateway, principal, query, body, request_id);
    case AdminRoute::kLedgerReport:
      return ledger_report(gateway, query);
    case AdminRoute::kLedgerExport:
    case AdminRoute::kLedgerAttempts:
    case AdminRoute::kNone:
      break;
    default:
      return run_console_admin(gateway, route, principal, query, body, path_arg);
  }
  return error_reply(Error::make(ErrorCode::kInternal, "admin route not handled here"));
}

}  // namespace ferry::gateway
