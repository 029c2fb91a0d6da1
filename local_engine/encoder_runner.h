// Serves an Encoder: embeddings requests queued from any thread, run on one thread of its own in
// forward passes of up to `batch_tokens` input tokens (several inputs share a pass, of one request
// or of several queued ones; an input never spans two: the encoder attends over the whole input
// at once). Thread-safe: submit and
// cancel from any thread; on_done runs on the runner's thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/error.h"
#include "local_engine/embeddings.h"
#include "local_engine/encoder.h"

namespace ferry::engine {

class EncoderRunner {
 public:
  EncoderRunner(std::unique_ptr<Encoder> encoder, int64_t batch_tokens, int64_t max_queue);
  // Ends queued requests with kUnavailable and joins the thread.
  ~EncoderRunner();
  EncoderRunner(const EncoderRunner&) = delete;
  EncoderRunner& operator=(const EncoderRunner&) = delete;

  const EncoderConfig& config() const { return encoder_->config(); }
  Pooling pooling() const { return encoder_->pooling(); }
  int64_t n_ctx() const { return encoder_->n_ctx(); }
  int64_t queue_depth() const;

  // Queues a request (its pooling is the encoder's; request.pooling is ignored). Errors:
  // kInvalidRequest / kContextOverflow (Encoder::embed's checks, up front), kUnavailable with
  // retry_after_s (max_queue requests waiting).
  Result<uint64_t> submit(EmbeddingRequest request);
  // A request not yet started ends with kCancelled; a running one finishes (one pass at most).
  void cancel(uint64_t id);

 private:
  struct Job {
    uint64_t id = 0;
    EmbeddingRequest req;
    std::chrono::steady_clock::time_point submitted;
  };
  void loop();
  // Every input of `job`, in passes of at most batch_tokens_ tokens.
  Result<EmbeddingResult> run(Job& job);
  // Requests whose inputs fit one pass together, answered from that one pass.
  void run_together(std::vector<Job>& jobs);
  static int64_t job_tokens(const Job& job);

  std::unique_ptr<Encoder> encoder_;
  int64_t batch_tokens_;
  int64_t max_queue_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after everything above is built
};

}  // namespace ferry::engine
