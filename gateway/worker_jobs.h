// Requests answered on the worker pool, off the I/O threads: admin calls (policy, explain,
// ledger reports: one blocking call, one reply) and the ledger's CSV exports, read by the
// worker in chunks and streamed to the client through a bounded pipe (back-pressure from a
// slow client reaches the SQLite reader).
// Thread-safety: the coroutines run on the connection's loop; the jobs on the worker thread;
// they meet only in the pipe (a mutex) and a Notifier.
#pragma once

#include "gateway/endpoints.h"
#include "gateway/net.h"
#include "gateway/request_record.h"
#include "gateway/server_state.h"

namespace ferry::gateway {

// A Job::Kind::kAdmin: runs the admin call on the worker and writes its reply. Returns
// whether the connection may be kept alive.
template <typename Stream>
asio::awaitable<bool> run_admin_job(ServerState& server, Stream& stream, Job& job,
                                    RequestRecord& record, bool keep_alive);

// A Job::Kind::kExport (GET /v1/ledger/export.csv, /v1/ledger/attempts.csv): the worker reads
// the ledger in chunks; each chunk goes out as it comes, with at most a few in between.
template <typename Stream>
asio::awaitable<bool> run_export(ServerState& server, Stream& stream, Job& job,
                                 RequestRecord& record, bool keep_alive);

// A Job::Kind::kLookup (a Responses request with previous_response_id): reads the stored
// response on the worker, then plans the request (Endpoints::after_lookup). Returns the reply
// when it is answered here (a 404, a refusal), else nullopt with `job` a kProxy job.
asio::awaitable<std::optional<Reply>> run_lookup(ServerState& server, Job& job,
                                                 RequestRecord& record);

}  // namespace ferry::gateway
