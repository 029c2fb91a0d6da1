// The admin and finance handlers, apart from the socket code: they block (policy files,
// SQLite reports) and therefore run on the server's worker thread, never an I/O thread. Which
// path needs which role is the endpoint table's (gateway/endpoints.cpp); the query helpers are
// stateless. Thread-safety: run_admin() is called from the one worker thread.
//
//   GET  /admin/policy           admin    active version, load time, last rejected attempt
//   PUT  /admin/policy           admin    body = policy YAML; ?persist=false keeps the file
//   POST /admin/route/explain    admin    body = an OpenAI request; ?key=ID routes as that key
//   POST /admin/policy/reload    admin    re-read the policy file
//   GET  /v1/ledger/report       finance  ?by=team,day&from=&to=&format=json|csv|table&savings=1
//   GET  /v1/ledger/export.csv   finance  ?from=&to=&team=&project=&key=&task=&model=&target=&rule=
//   GET  /v1/ledger/attempts.csv finance  the same filter: every attempt of those requests
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "gateway/auth.h"
#include "ledger/report.h"

namespace ferry::gateway {

class Gateway;

enum class AdminRoute {
  kNone,  // not an admin path
  kPolicyGet,
  kPolicyPut,
  kPolicyReload,
  kRouteExplain,
  kLedgerReport,
  kLedgerExport,
  kLedgerAttempts,  // the attempts of the exported requests (failed fallback hops included)
  // gateway/console_api.h: tasks and the console's pages
  kTaskMark,
  kLedgerTasks,
  kTopTasks,
  kTaskRequests,
  kSpend,
  kLocalShare,
  kBudgets,
  kPolicySource,
  kPolicyValidate,
  kPolicyWhatIf,
  kBackends,
  kKeys,
  kKeyCreate,        // POST /admin/keys: a key kept in the ledger's database (ledger/keys.h)
  kKeyRevoke,        // DELETE /admin/keys/{id}
  kRecentRequests,   // GET /admin/route/recent: rows the explain playground can pick
  kExplainRecorded,  // GET /admin/route/explain_recorded?request=ID: a row's recorded facts
};

struct AdminReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

// Runs a (blocking) admin request. Errors come back as OpenAI-style error replies.
// `path_arg`: the rest of a prefix row's path (the task id of /v1/tasks/{id}), percent-encoded.
AdminReply run_admin(Gateway& gateway, AdminRoute route, const Principal& principal,
                     std::string_view query, const std::string& body, const std::string& request_id,
                     std::string_view path_arg = {});

// The percent-decoded text ("a%20b" -> "a b"; '+' is a space).
std::string url_decode(std::string_view text);

// Query strings: "a=1&b=x%20y" -> {a: 1, b: "x y"}. Repeated keys: the last wins.
std::map<std::string, std::string> parse_query(std::string_view query);

// 400 naming the field when a percent-decoded query parameter or the body is not UTF-8.
Status check_utf8_input(std::string_view query, std::string_view body);

// The export's filter from its query string (400 naming the bad field); `extra` names the
// other parameters the caller reads.
Result<ledger::ReportFilter> export_filter(std::string_view query,
                                           std::initializer_list<std::string_view> extra = {});

}  // namespace ferry::gateway
