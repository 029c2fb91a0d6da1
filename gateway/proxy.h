// The proxy: a planned request sent along its hops (the fallback loop: a hop whose breaker
// is open is skipped, a failure before anything reached the client tries the next one), the
// client watched for a hang-up while a backend works, the ledger row made durable before the
// last byte, the answer written; and the shadow copy, sent beside it and tracked
// (ShadowTracker) so that shutdown waits for it or cancels it.
// Thread-safety: runs on the connection's loop; a shadow runs on the same loop.
#pragma once

#include <memory>

#include "gateway/endpoints.h"
#include "gateway/http_reader.h"
#include "gateway/net.h"
#include "gateway/request_record.h"
#include "gateway/server_state.h"

namespace ferry::gateway {

// Runs job.plan (a Job::Kind::kProxy). Returns whether the connection may be kept alive.
template <typename Stream>
asio::awaitable<bool> proxy(ServerState& server, Stream& stream, Job& job, RequestRecord& record,
                            bool keep_alive, std::shared_ptr<EarlyRead>& early,
                            const beast::flat_buffer& buffer);

}  // namespace ferry::gateway
