// The endpoint table: every method and path ferry answers, who may call it and what answers
// it, in one place (endpoints.cpp, kEndpoints); and the dispatch of one request through it,
// up to a reply or a job (a plan to proxy, an admin call, an export). No sockets, no Beast.
// Thread-safety: dispatch() is called from every I/O thread at once; Endpoints holds only
// references to thread-safe parts (auth, metrics, the gateway, the draining flag).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "api/chat_request.h"
#include "common/error.h"
#include "gateway/admin.h"
#include "gateway/auth.h"
#include "gateway/gateway.h"
#include "gateway/http_wire.h"
#include "gateway/openai_request.h"
#include "gateway/request_record.h"
#include "ledger/report.h"
#include "ledger/response_store.h"

namespace ferry::gateway {

class Metrics;

// A response that is ready to write in one piece.
struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HeaderList headers;
  bool head_only = false;  // HEAD: the head of the GET answer (its Content-Length), no body
};

struct FrontEnd;

// The OpenAI-shaped error reply for `error` (status from errors.cpp).
Reply error_reply(const Error& error);
// The same, noted in the request's record (its error text) and with the retry headers; in the
// front-end's shape when given (gateway/frontend.h: Anthropic's on /v1/messages).
Reply reply_error(RequestRecord& record, const Error& error, const FrontEnd* frontend = nullptr);

// What the dispatch reads of an HTTP request (the connection fills it from Beast's parser).
struct HttpRequestView {
  std::string_view method;  // as sent, e.g. "GET"
  std::string_view target;  // path and query
  std::string_view authorization;
  std::string_view task_header;        // x-ferry-task
  std::string_view tags_header;        // x-ferry-tags
  std::string body;                    // moved in: the dispatch keeps what it needs
  std::string_view api_key;            // x-api-key (Anthropic's header; Authorization wins)
  std::string_view session_header;     // X-Claude-Code-Session-Id: the task without x-ferry-task
  std::string_view anthropic_version;  // passed to backends that speak Messages natively
  std::string_view anthropic_beta;
  std::string_view cookie;         // the console's session (gateway/console.h)
  std::string_view csrf_header;    // x-ferry-csrf: the console's CSRF token
  std::string_view if_none_match;  // the console's files answer 304 on their ETag
  std::string_view cache_header;   // x-ferry-cache: no-store, no-cache
};

// Who may call an endpoint.
enum class Access {
  kOpen,     // no key; answered while draining too (health, readiness, metrics)
  kApp,      // any valid key
  kFinance,  // a key with the finance or admin role
  kAdmin,    // a key with the admin role
};

// What answers an endpoint.
enum class Handler {
  kHealthz,
  kReadyz,
  kMetrics,
  kModels,
  kModel,  // /v1/models/{id}
  kChatCompletions,
  kCompletions,
  kApi,          // an answer through the front-end of the row's `api` (Messages, ...)
  kCountTokens,  // the prompt's token count as the row's `api` front-end would route it
  kAdmin,        // a blocking admin call on the worker pool (Endpoint::admin says which)
  kExport,       // a CSV export streamed from the worker pool
};

struct Endpoint {
  std::string_view method;  // "GET" answers HEAD too where the reply is direct (kOpen, models)
  std::string_view path;    // exact, or a prefix when it ends in '/'
  Access access;
  Handler handler;
  AdminRoute admin = AdminRoute::kNone;  // kAdmin and kExport: which call
  // The front-end (gateway/frontend.h): the parser and the error shape of the endpoint's answers.
  api::Endpoint api = api::Endpoint::kChatCompletions;
};

// Every endpoint, in the order dispatch looks them up.
std::span<const Endpoint> endpoint_table();

// The endpoint for `method` and `path`. With no match on the method, nullptr, and `allow`
// lists the methods the path takes ("" when no endpoint has the path: 404).
const Endpoint* find_endpoint(std::string_view method, std::string_view path, std::string& allow);

// The front-end of the endpoint a request target (path and query) names, for the errors of
// the request's read (413, 408); null when none does.
const FrontEnd* frontend_for_target(std::string_view target);

// 403 unless the principal's role may call the endpoint (finance or admin for the ledger,
// admin for the rest of /admin).
Status authorize(const Endpoint& endpoint, const Principal& principal);

// What to do with a request once dispatched: proxy it along its plan, or run a worker job.
struct Job {
  // kLookup: a Responses request whose previous_response_id is read on the worker pool first
  // (gateway/worker_jobs.h run_lookup), then planned (Endpoints::after_lookup).
  enum class Kind { kNone, kProxy, kAdmin, kExport, kLookup } kind = Kind::kNone;
  RequestContext ctx;
  std::optional<Plan> plan;
  AdminRoute admin = AdminRoute::kNone;
  std::string query;
  std::string body;  // the admin call's body
  ledger::ReportFilter filter;
  std::optional<ParsedRequest> pending;  // kLookup: the request waiting for its history
  std::string path_arg;                  // a prefix row's rest of the path (/v1/tasks/{id})
};

class Console;

class Endpoints {
 public:
  Endpoints(Authenticator& auth, Metrics& metrics, Gateway& gateway,
            const std::atomic<bool>& draining);
  ~Endpoints();

  // Dispatches a request without any I/O. Returns the reply for everything that needs no
  // backend and no worker; otherwise fills `job` and returns nullopt. (Plain code apart from
  // the coroutines on purpose: no temporaries inside co_await expressions, which g++ 12
  // miscompiles.)
  std::optional<Reply> dispatch(HttpRequestView& request, RequestRecord& record, Job& job);

  // A kLookup job once its stored response was read: a 404 when there is none, else the
  // stored conversation goes in front of the input and the request is planned (a reply, or
  // nullopt with `job` a kProxy job).
  std::optional<Reply> after_lookup(const Result<std::optional<ledger::StoredResponse>>& stored,
                                    RequestRecord& record, Job& job);

 private:
  std::optional<Reply> open_endpoint(const HttpRequestView& request, std::string_view path);
  std::optional<Reply> worker_job(const Endpoint& endpoint, std::string_view query,
                                  HttpRequestView& request, RequestRecord& record, Job& job);
  std::optional<Reply> models(const Endpoint& endpoint, std::string_view path,
                              RequestRecord& record);
  std::optional<Reply> completion(const Endpoint& endpoint, HttpRequestView& request,
                                  RequestRecord& record, Job& job);
  std::optional<Reply> count_tokens(const Endpoint& endpoint, HttpRequestView& request,
                                    RequestRecord& record, Job& job);
  static Status take_routing_headers(const HttpRequestView& request, Job& job);
  std::optional<Reply> plan_parsed(const FrontEnd& fe, const ParsedRequest& parsed,
                                   RequestRecord& record, Job& job);

  Authenticator& auth_;
  Metrics& metrics_;
  Gateway& gateway_;
  const std::atomic<bool>& draining_;
  std::unique_ptr<Console> console_;  // /console: files, sessions, API calls by cookie
};

}  // namespace ferry::gateway
