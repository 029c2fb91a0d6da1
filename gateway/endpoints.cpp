#include "gateway/endpoints.h"

#include "adapters/backend.h"
#include "common/clock.h"
#include "gateway/console.h"
#include "gateway/errors.h"
#include "gateway/frontend.h"
#include "gateway/metrics.h"
#include "gateway/openai_request.h"
#include "gateway/responses_front.h"

namespace ferry::gateway {

namespace {

// ---- the table ------------------------------------------------------------------------------

// Every endpoint ferry serves. A path not here is 404; a path here with another method is 405
// with `Allow` (the open endpoints excepted: they answer GET and HEAD, anything else there is
// an unknown URL). HEAD is answered as GET, without the body, where the reply is direct (the
// open endpoints and the models); elsewhere it is 405.
constexpr Endpoint kEndpoints[] = {
    {"GET", "/healthz", Access::kOpen, Handler::kHealthz},
    {"GET", "/readyz", Access::kOpen, Handler::kReadyz},
    {"GET", "/metrics", Access::kOpen, Handler::kMetrics},
    {"POST", "/v1/chat/completions", Access::kApp, Handler::kChatCompletions, AdminRoute::kNone,
     api::Endpoint::kChatCompletions},
    {"POST", "/v1/completions", Access::kApp, Handler::kCompletions, AdminRoute::kNone,
     api::Endpoint::kCompletions},
    {"POST", "/v1/messages", Access::kApp, Handler::kApi, AdminRoute::kNone,
     api::Endpoint::kMessages},
    {"POST", "/v1/messages/count_tokens", Access::kApp, Handler::kCountTokens, AdminRoute::kNone,
     api::Endpoint::kMessages},
    {"POST", "/v1/embeddings", Access::kApp, Handler::kApi, AdminRoute::kNone,
     api::Endpoint::kEmbeddings},
    {"POST", "/v1/responses", Access::kApp, Handler::kApi, AdminRoute::kNone,
     api::Endpoint::kResponses},
    {"GET", "/v1/models", Access::kApp, Handler::kModels},
    {"GET", "/v1/models/", Access::kApp, Handler::kModel},
    {"GET", "/admin/policy", Access::kAdmin, Handler::kAdmin, AdminRoute::kPolicyGet},
    {"PUT", "/admin/policy", Access::kAdmin, Handler::kAdmin, AdminRoute::kPolicyPut},
    {"POST", "/admin/policy/reload", Access::kAdmin, Handler::kAdmin, AdminRoute::kPolicyReload},
    {"POST", "/admin/route/explain", Access::kAdmin, Handler::kAdmin, AdminRoute::kRouteExplain},
    {"GET", "/v1/ledger/report", Access::kFinance, Handler::kAdmin, AdminRoute::kLedgerReport},
    {"GET", "/v1/ledger/export.csv", Access::kFinance, Handler::kExport, AdminRoute::kLedgerExport},
    {"GET", "/v1/ledger/attempts.csv", Access::kFinance, Handler::kExport,
     AdminRoute::kLedgerAttempts},
    // Tasks and the console's pages (gateway/console_api.cpp); /console itself: console.cpp.
    {"POST", "/v1/tasks/", Access::kApp, Handler::kAdmin, AdminRoute::kTaskMark},
    {"GET", "/v1/ledger/tasks", Access::kFinance, Handler::kAdmin, AdminRoute::kLedgerTasks},
    {"GET", "/v1/ledger/top_tasks", Access::kFinance, Handler::kAdmin, AdminRoute::kTopTasks},
    {"GET", "/v1/ledger/task_requests", Access::kFinance, Handler::kAdmin,
     AdminRoute::kTaskRequests},
    {"GET", "/v1/ledger/spend", Access::kFinance, Handler::kAdmin, AdminRoute::kSpend},
    {"GET", "/v1/ledger/local", Access::kFinance, Handler::kAdmin, AdminRoute::kLocalShare},
    {"GET", "/v1/ledger/budgets", Access::kFinance, Handler::kAdmin, AdminRoute::kBudgets},
    {"GET", "/admin/policy/source", Access::kAdmin, Handler::kAdmin, AdminRoute::kPolicySource},
    {"POST", "/admin/policy/validate", Access::kAdmin, Handler::kAdmin,
     AdminRoute::kPolicyValidate},
    {"POST", "/admin/policy/whatif", Access::kAdmin, Handler::kAdmin, AdminRoute::kPolicyWhatIf},
    {"GET", "/admin/backends", Access::kAdmin, Handler::kAdmin, AdminRoute::kBackends},
    {"GET", "/admin/keys", Access::kAdmin, Handler::kAdmin, AdminRoute::kKeys},
    {"GET", "/admin/route/recent", Access::kAdmin, Handler::kAdmin, AdminRoute::kRecentRequests},
    {"GET", "/admin/route/explain_recorded", Access::kAdmin, Handler::kAdmin,
     AdminRoute::kExplainRecorded},
    {"POST", "/admin/keys", Access::kAdmin, Handler::kAdmin, AdminRoute::kKeyCreate},
    {"DELETE", "/admin/keys/", Access::kAdmin, Handler::kAdmin, AdminRoute::kKeyRevoke},
};

bool path_matches(const Endpoint& e, std::string_view path) {
  if (e.path.ends_with('/')) return path.starts_with(e.path);
  return path == e.path;
}

// HEAD is GET without the body where the reply is direct.
bool head_as_get(const Endpoint& e) {
  return e.access == Access::kOpen || e.handler == Handler::kModels || e.handler == Handler::kModel;
}

bool method_matches(const Endpoint& e, std::string_view method) {
  return e.method == method || (method == "HEAD" && e.method == "GET" && head_as_get(e));
}

Reply text_reply(int status, std::string content_type, std::string body) {
  Reply r;
  r.status = status;
  r.content_type = std::move(content_type);
  r.body = std::move(body);
  return r;
}

// The routing headers ferry stores in the ledger: UTF-8, and the task as long as
// metadata.task_id may be.
constexpr size_t kMaxTaskBytes = 256;

Status check_ferry_headers(std::string_view task, std::string_view tags) {
  if (task.size() > kMaxTaskBytes) {
    return Error::make(
        ErrorCode::kInvalidRequest,
        "the x-ferry-task header must be at most " + std::to_string(kMaxTaskBytes) + " bytes",
        "x-ferry-task", "invalid_value");
  }
  for (auto [name, value] : {std::pair{"x-ferry-task", task}, std::pair{"x-ferry-tags", tags}}) {
    if (!is_valid_utf8(value)) {
      return Error::make(ErrorCode::kInvalidRequest,
                         std::string("the ") + name + " header is not valid UTF-8", name,
                         "invalid_value");
    }
  }
  return {};
}

}  // namespace

std::span<const Endpoint> endpoint_table() {
  return kEndpoints;
}

const Endpoint* find_endpoint(std::string_view method, std::string_view path, std::string& allow) {
  allow.clear();
  for (const auto& e : kEndpoints) {
    if (!path_matches(e, path)) continue;
    if (method_matches(e, method)) return &e;
    if (e.access == Access::kOpen) continue;  // not offered: see kEndpoints
    allow += (allow.empty() ? "" : ", ") + std::string(e.method);
  }
  return nullptr;
}

const FrontEnd* frontend_for_target(std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
  for (const auto& e : kEndpoints) {
    if (e.method == "POST" && path_matches(e, path)) return &frontend(e.api);
  }
  return nullptr;
}

Status authorize(const Endpoint& e, const Principal& principal) {
  if (e.access == Access::kOpen || e.access == Access::kApp) return {};
  bool ledger = e.access == Access::kFinance;
  bool ok = principal.role == config::Role::kAdmin ||
            (ledger && principal.role == config::Role::kFinance);
  if (ok) return {};
  return Error::make(ErrorCode::kForbidden,
                     std::string("this endpoint needs a key with the ") +
                         (ledger ? "finance or admin" : "admin") + " role; key '" +
                         principal.key_id + "' has the role '" +
                         std::string(config::role_name(principal.role)) + "'",
                     "", "insufficient_role");
}

Reply error_reply(const Error& error) {
  HttpError e = to_http_error(error);
  Reply r;
  r.status = e.status;
  r.body = std::move(e.body);
  return r;
}

Reply reply_error(RequestRecord& record, const Error& error, const FrontEnd* frontend) {
  record.error = error.message;
  Reply r;
  if (frontend != nullptr) {
    api::WireBody body = frontend->error_body(error, record.request_id);
    r.status = body.status;
    r.body = std::move(body.body);
  } else {
    r = error_reply(error);
  }
  for (auto& h : retry_headers(error)) r.headers.push_back(std::move(h));
  return r;
}

// ---- dispatch -------------------------------------------------------------------------------

Endpoints::Endpoints(Authenticator& auth, Metrics& metrics, Gateway& gateway,
                     const std::atomic<bool>& draining)
    : auth_(auth),
      metrics_(metrics),
      gateway_(gateway),
      draining_(draining),
      console_(std::make_unique<Console>(auth, gateway.config())) {}

Endpoints::~Endpoints() = default;

std::optional<Reply> Endpoints::dispatch(HttpRequestView& req, RequestRecord& rec, Job& job) {
  std::string_view path = req.target;
  std::string_view query;
  if (auto q = path.find('?'); q != std::string_view::npos) {
    query = path.substr(q + 1);
    path = path.substr(0, q);
  }
  rec.path = std::string(path);
  rec.method = std::string(req.method);
  if (!is_clean_target(req.target)) {
    return reply_error(rec, Error::make(ErrorCode::kInvalidRequest,
                                        "the request target holds bytes that are not printable "
                                        "ASCII; percent-encode them",
                                        "", "invalid_target"));
  }
  // The console: its files and session here; its API calls go on as the row they name, signed
  // in by the session's cookie instead of a key.
  std::optional<Principal> session;
  std::string console_path;
  if (Console::owns(path)) {
    ConsoleRoute route = console_->route(req, path, unix_micros_now());
    if (route.reply) return std::move(route.reply);
    console_path = std::move(route.inner_path);
    path = console_path;
    session = std::move(route.principal);
  }
  if (auto open = open_endpoint(req, path)) return open;
  std::string allow;
  const Endpoint* endpoint = find_endpoint(req.method, path, allow);
  // Errors from here on are in the endpoint's front-end shape (Anthropic's on /v1/messages).
  const FrontEnd* fe = endpoint != nullptr ? &frontend(endpoint->api) : nullptr;
  if (draining_.load()) {
    Error e = Error::make(ErrorCode::kUnavailable, "ferry is shutting down");
    e.retry_after_s = 1;
    return reply_error(rec, e, fe);
  }
  if (endpoint == nullptr && allow.empty()) {
    return reply_error(
        rec, Error::make(ErrorCode::kNotFound,
                         "Unknown request URL: " + rec.method + " " + rec.path, "", "unknown_url"));
  }
  if (endpoint == nullptr) {
    Reply r =
        reply_error(rec, Error::make(ErrorCode::kInvalidRequest,
                                     "Method " + rec.method + " is not allowed on " + rec.path, "",
                                     "method_not_allowed"));
    r.status = 405;
    r.headers.emplace_back("allow", std::move(allow));
    return r;
  }
  // One auth path: the bearer token, else Anthropic's x-api-key header.
  auto principal = session ? Result<Principal>(*session)
                   : req.authorization.empty() && !req.api_key.empty()
                       ? auth_.authenticate_key(req.api_key)
                       : auth_.authenticate(req.authorization);
  if (!principal) return reply_error(rec, principal.error(), fe);
  rec.key_id = principal->key_id;
  if (auto ok = authorize(*endpoint, *principal); !ok) return reply_error(rec, ok.error(), fe);
  job.ctx.request_id = rec.request_id;
  job.ctx.principal = std::move(*principal);
  switch (endpoint->handler) {
    case Handler::kModels:
    case Handler::kModel:
      return models(*endpoint, path, rec);
    case Handler::kChatCompletions:
    case Handler::kCompletions:
    case Handler::kApi:
      rec.api = api::endpoint_name(endpoint->api);
      return completion(*endpoint, req, rec, job);
    case Handler::kCountTokens:
      return count_tokens(*endpoint, req, rec, job);
    case Handler::kAdmin:
    case Handler::kExport:
      if (endpoint->path.ends_with('/'))
        job.path_arg = std::string(path.substr(endpoint->path.size()));
      return worker_job(*endpoint, query, req, rec, job);
    case Handler::kHealthz:
    case Handler::kReadyz:
    case Handler::kMetrics:
      break;  // open: answered above
  }
  return reply_error(rec, Error::make(ErrorCode::kInternal, "no handler for " + rec.path), fe);
}

// The open endpoints, answered before anything else (while draining too).
std::optional<Reply> Endpoints::open_endpoint(const HttpRequestView& req, std::string_view path) {
  std::string allow;
  const Endpoint* e = find_endpoint(req.method, path, allow);
  if (e == nullptr || e->access != Access::kOpen) return std::nullopt;
  switch (e->handler) {
    case Handler::kHealthz:
      return text_reply(200, "text/plain", "ok\n");
    case Handler::kReadyz:
      if (draining_.load()) return text_reply(503, "text/plain", "draining\n");
      return text_reply(200, "text/plain", "ready\n");
    case Handler::kMetrics:
      return text_reply(200, "text/plain; version=0.0.4", metrics_.render());
    default:
      return std::nullopt;
  }
}

std::optional<Reply> Endpoints::models(const Endpoint& endpoint, std::string_view path,
                                       RequestRecord& rec) {
  if (endpoint.handler == Handler::kModels) {
    return text_reply(200, "application/json", gateway_.planner().models_json());
  }
  std::string id(path.substr(endpoint.path.size()));
  auto m = gateway_.planner().model_json(id);
  if (!m) return reply_error(rec, m.error());
  return text_reply(200, "application/json", std::move(*m));
}

std::optional<Reply> Endpoints::worker_job(const Endpoint& endpoint, std::string_view query,
                                           HttpRequestView& req, RequestRecord& rec, Job& job) {
  job.admin = endpoint.admin;
  job.query = std::string(query);
  if (endpoint.handler == Handler::kAdmin) {
    job.body = std::move(req.body);
    job.kind = Job::Kind::kAdmin;
    return std::nullopt;
  }
  if (gateway_.ledger() == nullptr) {
    return reply_error(
        rec, Error::make(ErrorCode::kNotFound, "no ledger is configured (config key 'ledger')"));
  }
  auto filter = export_filter(query);
  if (!filter) return reply_error(rec, filter.error());
  job.filter = std::move(*filter);
  job.kind = Job::Kind::kExport;
  return std::nullopt;
}

// The routing headers of a request through a front-end (x-ferry-task, else Claude Code's
// session id as the task; x-ferry-tags), checked, into the job's context.
Status Endpoints::take_routing_headers(const HttpRequestView& req, Job& job) {
  std::string_view task = !req.task_header.empty() ? req.task_header : req.session_header;
  if (auto ok = check_ferry_headers(task, req.tags_header); !ok) return ok;
  job.ctx.task_header = std::string(task);
  job.ctx.tags_header = std::string(req.tags_header);
  // x-ferry-cache: a comma-separated list of no-store and no-cache; anything else is refused.
  for (std::string_view rest = req.cache_header; !rest.empty();) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item != "no-store" && item != "no-cache") {
      return Error::make(ErrorCode::kInvalidRequest,
                         "x-ferry-cache must be no-store, no-cache or both (comma-separated)",
                         "x-ferry-cache", "invalid_value");
    }
  }
  job.ctx.cache_header = std::string(req.cache_header);
  return {};
}

// An answer through the endpoint's front-end (OpenAI chat, completions and embeddings,
// Anthropic Messages, ...): parse the body once, plan the route; a refusal
// is answered here, in the front-end's shape.
std::optional<Reply> Endpoints::completion(const Endpoint& endpoint, HttpRequestView& req,
                                           RequestRecord& rec, Job& job) {
  const FrontEnd& fe = frontend(endpoint.api);
  auto parsed = fe.parse(std::move(req.body), {req.anthropic_version, req.anthropic_beta}, false);
  if (!parsed) return reply_error(rec, parsed.error(), &fe);
  rec.model = parsed->model;
  rec.stream = parsed->stream;
  if (auto ok = take_routing_headers(req, job); !ok) return reply_error(rec, ok.error(), &fe);
  job.ctx.started_us = rec.started_unix_us;
  if (parsed->responses && !parsed->responses->previous_response_id.empty()) {
    if (gateway_.responses() == nullptr) {
      return reply_error(rec,
                         Error::make(ErrorCode::kInvalidRequest,
                                     "previous_response_id needs stored responses, and this ferry "
                                     "has no ledger (config key 'ledger') to keep them",
                                     "previous_response_id", "invalid_value"),
                         &fe);
    }
    job.pending = std::move(*parsed);  // the stored response is read on the worker pool
    job.kind = Job::Kind::kLookup;
    return std::nullopt;
  }
  return plan_parsed(fe, *parsed, rec, job);
}

// Plans a parsed request; a refusal is answered here, in the front-end's shape.
std::optional<Reply> Endpoints::plan_parsed(const FrontEnd& fe, const ParsedRequest& parsed,
                                            RequestRecord& rec, Job& job) {
  Plan& plan = job.plan.emplace();
  if (Status planned = gateway_.planner().plan_into(job.ctx, parsed, plan); !planned) {
    job.plan.reset();
    return reply_error(rec, planned.error(), &fe);
  }
  rec.rule = plan.rule_id;
  if (plan.refusal) {
    Reply r = reply_error(rec, *plan.refusal, &fe);
    for (const auto& h : plan.headers) r.headers.push_back(h);
    job.plan.reset();
    return r;
  }
  plan.responses = parsed.responses;
  job.kind = Job::Kind::kProxy;
  return std::nullopt;
}

std::optional<Reply> Endpoints::after_lookup(
    const Result<std::optional<ledger::StoredResponse>>& stored, RequestRecord& rec, Job& job) {
  const FrontEnd& fe = frontend(api::Endpoint::kResponses);
  ParsedRequest parsed = std::move(*job.pending);
  job.pending.reset();
  if (!stored) return reply_error(rec, stored.error(), &fe);
  if (!*stored) {
    return reply_error(rec, previous_response_not_found(parsed.responses->previous_response_id),
                       &fe);
  }
  if (auto ok = apply_previous_response(parsed, **stored); !ok) {
    return reply_error(rec, ok.error(), &fe);
  }
  return plan_parsed(fe, parsed, rec, job);
}

// The prompt's tokens as the model that would answer counts them: routed as the answer would
// be, no backend called, no ledger row.
std::optional<Reply> Endpoints::count_tokens(const Endpoint& endpoint, HttpRequestView& req,
                                             RequestRecord& rec, Job& job) {
  const FrontEnd& fe = frontend(endpoint.api);
  auto parsed = fe.parse(std::move(req.body), {req.anthropic_version, req.anthropic_beta}, true);
  if (!parsed) return reply_error(rec, parsed.error(), &fe);
  rec.model = parsed->model;
  if (auto ok = take_routing_headers(req, job); !ok) return reply_error(rec, ok.error(), &fe);
  job.ctx.started_us = rec.started_unix_us;
  auto counted = gateway_.planner().count_tokens(job.ctx, *parsed);
  if (!counted) return reply_error(rec, counted.error(), &fe);
  Reply r = text_reply(200, "application/json",
                       "{\"input_tokens\":" + std::to_string(counted->tokens) + "}");
  r.headers.emplace_back("x-ferry-target", counted->target);
  r.headers.emplace_back("x-ferry-token-source",
                         counted->exact ? std::string("tokenizer") : std::string("estimate"));
  return r;
}

}  // namespace ferry::gateway
