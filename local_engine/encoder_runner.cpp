#include "local_engine/encoder_runner.h"

#include <algorithm>

namespace ferry::engine {

using Clock = std::chrono::steady_clock;

namespace {

int64_t micros(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

}  // namespace

EncoderRunner::EncoderRunner(std::unique_ptr<Encoder> encoder, int64_t batch_tokens,
                             int64_t max_queue)
    : encoder_(std::move(encoder)),
      batch_tokens_(std::max<int64_t>(1, batch_tokens)),
      max_queue_(std::max<int64_t>(1, max_queue)),
      thread_([this] { loop(); }) {}

EncoderRunner::~EncoderRunner() {
  std::deque<Job> left;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    left.swap(queue_);
  }
  cv_.notify_all();
  thread_.join();
  for (Job& j : left) {
    if (j.req.on_done)
      j.req.on_done(Error::make(ErrorCode::kUnavailable, "the local engine is shutting down"));
  }
}

int64_t EncoderRunner::queue_depth() const {
  std::lock_guard lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

Result<uint64_t> EncoderRunner::submit(EmbeddingRequest request) {
  if (request.inputs.empty())
    return Error::make(ErrorCode::kInvalidRequest, "no input to embed", "input");
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const auto n = static_cast<int64_t>(request.inputs[i].size());
    if (n > encoder_->n_ctx()) {
      return Error::make(ErrorCode::kContextOverflow,
                         "this model's context is " + std::to_string(encoder_->n_ctx()) +
                             " tokens; input " + std::to_string(i) + " is " + std::to_string(n) +
                             " tokens",
                         "input", "context_length_exceeded");
    }
  }
  std::lock_guard lock(mu_);
  if (stopping_) return Error::make(ErrorCode::kUnavailable, "the local engine is shutting down");
  if (static_cast<int64_t>(queue_.size()) >= max_queue_) {
    Error e = Error::make(ErrorCode::kUnavailable, "the local engine is overloaded (" +
                                                       std::to_string(queue_.size()) +
                                                       " embeddings requests queued); retry later");
    e.retry_after_s = 1;
    return e;
  }
  const uint64_t id = next_id_++;
  queue_.push_back({id, std::move(request), Clock::now()});
  cv_.notify_one();
  return id;
}

void EncoderRunner::cancel(uint64_t id) {
  Job job;
  {
    std::lock_guard lock(mu_);
    const auto it =
        std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) { return j.id == id; });
    if (it == queue_.end()) return;
    job = std::move(*it);
    queue_.erase(it);
  }
  if (job.req.on_done) job.req.on_done(Error::make(ErrorCode::kCancelled, "cancelled"));
}

Result<EmbeddingResult> EncoderRunner::run(Job& job) {
  EmbeddingResult result;
  result.queued_us = micros(Clock::now() - job.submitted);
  const auto& inputs = job.req.inputs;
  for (size_t begin = 0; begin < inputs.size();) {
    if (Clock::now() > job.req.deadline) {
      return Error::make(ErrorCode::kTimeout, "the embeddings request passed its deadline");
    }
    // As many whole inputs as fit the pass (at least one).
    size_t end = begin;
    int64_t tokens = 0;
    while (end < inputs.size() &&
           (end == begin || tokens + static_cast<int64_t>(inputs[end].size()) <= batch_tokens_)) {
      tokens += static_cast<int64_t>(inputs[end].size());
      ++end;
    }
    auto vectors = encoder_->embed(std::span(inputs).subspan(begin, end - begin));
    if (!vectors) return std::move(vectors).error();
    for (auto& v : *vectors) result.vectors.push_back(std::move(v));
    result.tokens += tokens;
    begin = end;
  }
  result.total_us = micros(Clock::now() - job.submitted);
  return result;
}

int64_t EncoderRunner::job_tokens(const Job& job) {
  int64_t n = 0;
  for (const auto& in : job.req.inputs) n += static_cast<int64_t>(in.size());
  return n;
}

// Several small requests in one pass: their inputs concatenated (each still attends only to
// itself, so every vector is what the request alone gets). If the pass fails (a request with a
// token outside the vocabulary), each request runs alone and gets its own answer.
void EncoderRunner::run_together(std::vector<Job>& jobs) {
  const auto now = Clock::now();
  std::vector<std::vector<int32_t>> inputs;
  std::vector<size_t> first(jobs.size() + 1, 0);
  for (size_t j = 0; j < jobs.size(); ++j) {
    first[j] = inputs.size();
    if (now <= jobs[j].req.deadline) {
      for (const auto& in : jobs[j].req.inputs) inputs.push_back(in);
    }
  }
  first[jobs.size()] = inputs.size();
  auto vectors = inputs.empty()
                     ? Result<std::vector<std::vector<float>>>(std::vector<std::vector<float>>())
                     : encoder_->embed(inputs);
  for (size_t j = 0; j < jobs.size(); ++j) {
    Job& job = jobs[j];
    Result<EmbeddingResult> r = [&]() -> Result<EmbeddingResult> {
      if (first[j] == first[j + 1])
        return Error::make(ErrorCode::kTimeout, "the embeddings request passed its deadline");
      if (!vectors) return run(job);
      EmbeddingResult result;
      result.queued_us = micros(now - job.submitted);
      result.tokens = job_tokens(job);
      for (size_t k = first[j]; k < first[j + 1]; ++k) result.vectors.push_back((*vectors)[k]);
      result.total_us = micros(Clock::now() - job.submitted);
      return result;
    }();
    if (job.req.on_done) job.req.on_done(std::move(r));
  }
}

void EncoderRunner::loop() {
  for (;;) {
    std::vector<Job> jobs;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      // The first request, and the ones behind it while their inputs fit the same pass.
      int64_t tokens = 0;
      while (!queue_.empty() &&
             (jobs.empty() || tokens + job_tokens(queue_.front()) <= batch_tokens_)) {
        tokens += job_tokens(queue_.front());
        jobs.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (jobs.size() > 1) {
      run_together(jobs);
      continue;
    }
    Result<EmbeddingResult> r = run(jobs[0]);
    if (jobs[0].req.on_done) jobs[0].req.on_done(std::move(r));
  }
}

}  // namespace ferry::engine
