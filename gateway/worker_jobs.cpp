#include "gateway/worker_jobs.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "api/responses_parse.h"
#include "common/clock.h"
#include "gateway/admin.h"
#include "gateway/gateway.h"
#include "gateway/response_writer.h"
#include "ledger/ledger.h"
#include "ledger/report.h"
#include "ledger/response_store.h"

namespace ferry::gateway {

namespace {

// Runs `fn` on the worker thread and resumes here with its result; an exception `fn` throws
// comes back as an internal error (it would end the process on the worker thread).
template <typename T>
asio::awaitable<Result<T>> offload(ServerState& server, std::function<T()> fn) {
  auto notifier = std::make_shared<Notifier>(co_await asio::this_coro::executor);
  auto result = std::make_shared<std::optional<Result<T>>>();
  asio::post(server.workers, [notifier, result, fn = std::move(fn)] {
    try {
      *result = fn();
    } catch (const std::exception& e) {
      *result = Error::make(ErrorCode::kInternal, std::string("internal error: ") + e.what());
    }
    notifier->notify();
  });
  co_await notifier->wait();
  co_return std::move(**result);
}

// CSV export chunks handed from the worker thread to the connection, with back-pressure.
struct ChunkPipe {
  static constexpr size_t kMaxChunks = 4;  // queued before the worker waits
  std::mutex mu;
  std::condition_variable space;
  std::deque<std::string> chunks;  // guarded by mu
  bool done = false;               // guarded by mu
  bool cancelled = false;          // guarded by mu
  Status status;                   // guarded by mu; set with done
  std::shared_ptr<Notifier> notifier;
};

// On the worker thread: the export's CSV chunks (rows, or `attempts`) into `pipe`, waiting
// while it is full.
Status export_rows(const ServerState& server, const std::string& path,
                   const ledger::ReportFilter& filter, bool attempts, ChunkPipe& pipe) {
  auto export_csv = attempts ? ledger::export_attempts_csv : ledger::export_csv;
  return export_csv(
      path, filter,
      [&](std::string_view chunk) {
        std::unique_lock lock(pipe.mu);
        while (pipe.chunks.size() >= ChunkPipe::kMaxChunks && !pipe.cancelled &&
               !server.stopped.load()) {
          pipe.space.wait_for(lock, std::chrono::milliseconds(100));
        }
        if (pipe.cancelled || server.stopped.load()) return false;
        pipe.chunks.emplace_back(chunk);
        lock.unlock();
        pipe.notifier->notify();
        return true;
      },
      64 * 1024);
}

// Starts the export on the worker thread; it fills `pipe` and marks it done.
void start_export(ServerState& server, const std::shared_ptr<ChunkPipe>& pipe,
                  const ledger::ReportFilter& filter, bool attempts) {
  std::string path = server.gateway->ledger()->config().path;
  asio::post(server.workers, [pipe, path, filter, attempts, &server] {
    Status st;
    try {
      st = export_rows(server, path, filter, attempts, *pipe);
    } catch (const std::exception& e) {
      st = Error::make(ErrorCode::kInternal, std::string("internal error: ") + e.what());
    }
    {
      std::lock_guard lock(pipe->mu);
      pipe->done = true;
      pipe->status = st;
    }
    pipe->notifier->notify();
  });
}

}  // namespace

template <typename Stream>
asio::awaitable<bool> run_admin_job(ServerState& server, Stream& stream, Job& job,
                                    RequestRecord& rec, bool keep_alive) {
  std::function<AdminReply()> fn = [&server, &job] {
    AdminReply reply = run_admin(*server.gateway, job.admin, job.ctx.principal, job.query, job.body,
                                 job.ctx.request_id, job.path_arg);
    // A key made or revoked here holds here at once (the other instances: their next poll).
    if ((job.admin == AdminRoute::kKeyCreate || job.admin == AdminRoute::kKeyRevoke) &&
        reply.status < 300) {
      server.auth.refresh_stored();
    }
    return reply;
  };
  Result<AdminReply> done = co_await offload<AdminReply>(server, std::move(fn));
  Reply r;
  if (done) {
    r.status = done->status;
    r.content_type = std::move(done->content_type);
    r.body = std::move(done->body);
  } else {
    r = reply_error(rec, done.error());
  }
  rec.status = r.status;
  bool ok = co_await write_reply(server, stream, r, rec.request_id, keep_alive);
  co_return ok&& keep_alive;
}

template <typename Stream>
asio::awaitable<bool> run_export(ServerState& server, Stream& stream, Job& job, RequestRecord& rec,
                                 bool keep_alive) {
  auto pipe = std::make_shared<ChunkPipe>();
  pipe->notifier = std::make_shared<Notifier>(co_await asio::this_coro::executor);
  const bool attempts = job.admin == AdminRoute::kLedgerAttempts;
  start_export(server, pipe, job.filter, attempts);
  HeaderList headers = {{"content-disposition", attempts
                                                    ? "attachment; filename=\"ferry-attempts.csv\""
                                                    : "attachment; filename=\"ferry-ledger.csv\""}};
  ChunkedSink<Stream> sink(server, stream, rec.request_id, rec, &headers);
  sink.set_content_type("text/csv; charset=utf-8");
  bool ok = true;
  for (;;) {
    std::deque<std::string> ready;
    bool done = false;
    Status status;
    {
      std::lock_guard lock(pipe->mu);
      ready.swap(pipe->chunks);
      done = pipe->done;
      status = pipe->status;
    }
    pipe->space.notify_all();
    for (auto& chunk : ready) {
      if (ok) ok = co_await sink.write(chunk);
    }
    if (!ok) {
      std::lock_guard lock(pipe->mu);
      pipe->cancelled = true;
    }
    if (done || !ok) {
      if (ok && !status) {
        // Headers may already be out: end the body short; the client sees a cut transfer.
        rec.error = status.error().message;
        if (!sink.started()) {
          Reply r = reply_error(rec, status.error());
          rec.status = r.status;
          bool w = co_await write_reply(server, stream, r, rec.request_id, keep_alive);
          co_return w&& keep_alive;
        }
        co_return false;
      }
      break;
    }
    co_await pipe->notifier->wait();
  }
  if (!ok) {
    pipe->space.notify_all();
    rec.status = 499;
    co_return false;
  }
  rec.status = 200;
  if (!sink.started()) {
    bool w = co_await sink.write("");
    if (!w) co_return false;
  }
  co_await sink.finish_plain();
  co_return !sink.broken() && keep_alive;
}

asio::awaitable<std::optional<Reply>> run_lookup(ServerState& server, Job& job,
                                                 RequestRecord& rec) {
  using Stored = Result<std::optional<ledger::StoredResponse>>;
  ledger::ResponseStore* store = server.gateway->responses();
  std::function<Stored()> fn = [store, &job]() -> Stored {
    return store->get(job.pending->responses->previous_response_id, job.ctx.principal.key_id,
                      unix_micros_now());
  };
  Result<Stored> done = co_await offload<Stored>(server, std::move(fn));
  Stored stored = done ? std::move(*done) : Stored(done.error());
  co_return server.endpoints->after_lookup(stored, rec, job);
}

template asio::awaitable<bool> run_admin_job(ServerState&, PlainStream&, Job&, RequestRecord&,
                                             bool);
template asio::awaitable<bool> run_admin_job(ServerState&, TlsStream&, Job&, RequestRecord&, bool);
template asio::awaitable<bool> run_export(ServerState&, PlainStream&, Job&, RequestRecord&, bool);
template asio::awaitable<bool> run_export(ServerState&, TlsStream&, Job&, RequestRecord&, bool);

}  // namespace ferry::gateway
