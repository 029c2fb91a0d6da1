// One client connection's life, from the accepted socket to its close: the TLS handshake,
// the request loop (idle wait, read, dispatch, answer; keep-alive, pipelining and half-close),
// the graceful close after an answer and the lingering close after a refusal.
// Thread-safety: a connection runs on one loop for its whole life; the ServerState it reads
// is shared and thread-safe.
#pragma once

#include "gateway/net.h"
#include "gateway/server_state.h"

namespace ferry::gateway {

// Serves one accepted connection until it ends.
asio::awaitable<void> run_session(ServerState& server, tcp::socket socket);

// Answers 503 on a connection over server.limits.max_connections (plain connections) and
// closes it.
asio::awaitable<void> refuse_connection(ServerState& server, tcp::socket socket);

}  // namespace ferry::gateway
