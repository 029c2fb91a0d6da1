// Makes one PostgreSQL database unreachable (no new connections, the open ones cut) and
// reachable again: what a database server that stops answering looks like to a ledger, without
// touching the other databases on the same test server. Used by the journal tests here and the
// outage test through real `ferry` binaries. Not thread-safe: call from the test's thread.
#pragma once

#include <string>

#include "common/error.h"
#include "ledger/pg_db.h"

namespace ferry::ledger::testing {

// `admin_url` reaches the server as a user allowed to ALTER DATABASE `database`.
inline Status set_pg_connections(const std::string& admin_url, const std::string& database,
                                 bool allow) {
  auto admin = PgConn::connect(admin_url);
  if (!admin) return admin.error();
  Status st = admin->exec("ALTER DATABASE " + database + " ALLOW_CONNECTIONS " +
                          (allow ? "true" : "false"));
  if (!st || allow) return st;
  auto cut = admin->run(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> "
      "pg_backend_pid()",
      {database});
  if (!cut) return cut.error();
  return {};
}

}  // namespace ferry::ledger::testing
