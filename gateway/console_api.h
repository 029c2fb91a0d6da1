// The JSON endpoints behind the console's pages, which scripts call with a key too: task
// outcomes (POST /v1/tasks/{id}), cost per task, top tasks and one task's requests, spend over
// time, local versus GPU, budgets; and for admins policy validation, the what-if replay of an
// edited policy, backends and keys. They block (SQLite, replay) and run on the worker pool.
// Thread-safety: run_console_admin() is called from the one worker thread.
//
//   POST /v1/tasks/{id}            app      {"status": "completed|failed|abandoned", "labels": {}}
//   GET  /v1/ledger/tasks          finance  ?by=team|project|day|month|label:NAME&format=json|csv
//   GET  /v1/ledger/top_tasks      finance  ?status=&limit=50&offset=0&format=json|csv
//   GET  /v1/ledger/task_requests  finance  ?task=ID&limit=&offset=
//   GET  /v1/ledger/spend          finance  ?bucket=day|week|month&stack=team|...|none&format=
//   GET  /v1/ledger/local          finance  local versus GPU: shares, internal and avoided cost
//   GET  /v1/ledger/budgets        finance  limit, spent, reserved, reset, projection
//   GET  /admin/policy/source      admin    the policy file's text (the editor starts from it)
//   POST /admin/policy/validate    admin    body = policy YAML: errors at line:column
//   POST /admin/policy/whatif      admin    body = policy YAML; ?days=N or ?from=&to=: replay
//   GET  /admin/backends           admin    health, breaker, queue, TTFT p90, errors, local load
//   GET  /admin/keys               admin    the configured keys (never their hashes)
// Every one also takes the ledger's filters (team, project, key, model, target, rule, from, to)
// where it reads rows.
#pragma once

#include <string>
#include <string_view>

#include "gateway/admin.h"

namespace ferry::gateway {

class Gateway;

AdminReply run_console_admin(Gateway& gateway, AdminRoute route, const Principal& principal,
                             std::string_view query, const std::string& body,
                             std::string_view path_arg);

}  // namespace ferry::gateway
