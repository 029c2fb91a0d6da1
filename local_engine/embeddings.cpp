#include "local_engine/embeddings.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ferry::engine {

using Clock = std::chrono::steady_clock;

namespace {

int64_t micros(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

}  // namespace

std::string_view pooling_name(Pooling pooling) {
  switch (pooling) {
    case Pooling::kMean:
      return "mean";
    case Pooling::kCls:
      return "cls";
    case Pooling::kLast:
      return "last";
  }
  return "?";
}

Result<Pooling> pooling_for(const ModelConfig& config) {
  switch (config.pooling_type) {
    case -1:
    case 3:
      return Pooling::kLast;
    case 1:
      return Pooling::kMean;
    case 2:
      return Pooling::kCls;
    case 0:
      return Error::make(ErrorCode::kInvalidRequest,
                         "the model's " + config.arch_name +
                             ".pooling_type is 0 (none: one vector per token), which "
                             "/v1/embeddings cannot answer");
    case 4:
      return Error::make(ErrorCode::kInvalidRequest, "the model's " + config.arch_name +
                                                         ".pooling_type is 4 (rank: a reranker), "
                                                         "not an embedding model");
    default:
      return Error::make(ErrorCode::kInvalidRequest,
                         "the model's " + config.arch_name + ".pooling_type " +
                             std::to_string(config.pooling_type) + " is not one ferry knows");
  }
}

bool PoolAccumulator::wants(int64_t pos, int64_t n) const {
  switch (pooling_) {
    case Pooling::kMean:
      return true;
    case Pooling::kCls:
      return pos == 0;
    case Pooling::kLast:
      return pos == n - 1;
  }
  return false;
}

void PoolAccumulator::add(std::span<const float> hidden) {
  for (size_t i = 0; i < sum_.size() && i < hidden.size(); ++i) sum_[i] += hidden[i];
  ++count_;
}

std::vector<float> PoolAccumulator::result() const {
  std::vector<float> out(sum_.size());
  const double scale = count_ > 0 ? 1.0 / static_cast<double>(count_) : 0.0;
  for (size_t i = 0; i < sum_.size(); ++i) out[i] = static_cast<float>(sum_[i] * scale);
  return out;
}

void l2_normalize(std::span<float> v) {
  double sq = 0;
  for (const float x : v) sq += static_cast<double>(x) * static_cast<double>(x);
  if (!(sq > 0)) return;
  const double inv = 1.0 / std::sqrt(sq);
  for (float& x : v) x = static_cast<float>(static_cast<double>(x) * inv);
}

void EmbeddingRunner::add(uint64_t id, EmbeddingRequest request, Clock::time_point submitted) {
  Job job;
  job.id = id;
  job.submitted = submitted;
  job.result.vectors.resize(request.inputs.size());
  for (const auto& in : request.inputs) job.result.tokens += static_cast<int64_t>(in.size());
  job.req = std::move(request);
  jobs_.push_back(std::move(job));
}

EmbeddingRunner::Job* EmbeddingRunner::find(uint64_t id) {
  for (Job& j : jobs_) {
    if (j.id == id) return &j;
  }
  return nullptr;
}

std::vector<EmbeddingRunner::Input>::iterator EmbeddingRunner::drop(
    Engine& engine, std::vector<Input>::iterator it) {
  engine.kv().seq_remove(it->seq);
  kv_bytes_ -= it->kv_bytes;
  return running_.erase(it);
}

int64_t EmbeddingRunner::next_kv_bytes(const Engine& engine) const {
  for (const Job& j : jobs_) {
    if (j.next_input < j.req.inputs.size()) {
      return engine.kv().allocation_bytes(static_cast<int64_t>(j.req.inputs[j.next_input].size()));
    }
  }
  return 0;
}

void EmbeddingRunner::end(Engine& engine, uint64_t id, std::optional<Error> error) {
  for (auto it = running_.begin(); it != running_.end();) {
    if (it->job == id) {
      it = drop(engine, it);
    } else {
      ++it;
    }
  }
  const auto it =
      std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.id == id; });
  if (it == jobs_.end()) return;
  Job job = std::move(*it);
  jobs_.erase(it);
  const auto now = Clock::now();
  job.result.queued_us = micros(job.started.value_or(now) - job.submitted);
  job.result.total_us = micros(now - job.submitted);
  if (!job.req.on_done) return;
  if (error) {
    job.req.on_done(std::move(*error));
  } else {
    job.req.on_done(std::move(job.result));
  }
}

void EmbeddingRunner::fail(Engine& engine, uint64_t id, const Error& error) {
  if (find(id) != nullptr) end(engine, id, error);
}

void EmbeddingRunner::expire(Engine& engine, Clock::time_point now) {
  std::vector<uint64_t> late;
  for (const Job& j : jobs_) {
    if (now >= j.req.deadline) late.push_back(j.id);
  }
  for (const uint64_t id : late) {
    end(engine, id,
        Error::make(ErrorCode::kTimeout, "the local engine did not finish before the deadline"));
  }
}

void EmbeddingRunner::fail_all(Engine& engine, const Error& error) {
  while (!jobs_.empty()) end(engine, jobs_.front().id, error);
}

int64_t EmbeddingRunner::add_tokens(size_t i, int64_t room) {
  Input& in = running_[i];
  const Job* job = find(in.job);
  const auto& tokens = job->req.inputs[in.index];
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t k = std::min(n - in.pos, room);
  for (int64_t p = in.pos; p < in.pos + k; ++p) {
    const bool keep = in.acc.wants(p, n);
    batch_.push_back({in.seq, p, tokens[static_cast<size_t>(p)], keep});
    if (keep) rows_.push_back(i);
  }
  in.pos += k;
  return k;
}

int64_t EmbeddingRunner::start_inputs(Engine& engine, SeqId& next_seq, int64_t room,
                                      int64_t kv_room) {
  const int64_t dim = engine.config().n_embd;
  KvCache& kv = engine.kv();
  waiting_for_kv_ = false;
  for (Job& j : jobs_) {
    while (room > 0 && j.next_input < j.req.inputs.size()) {
      const auto n = static_cast<int64_t>(j.req.inputs[j.next_input].size());
      const int64_t bytes = kv.allocation_bytes(n);
      if (bytes > kv_room) {  // inputs start in order: the rest wait for KV to be freed
        waiting_for_kv_ = true;
        return room;
      }
      kv_room -= bytes;
      if (!j.started) j.started = Clock::now();
      Input in{j.id, j.next_input, next_seq++, 0, bytes, PoolAccumulator(j.req.pooling, dim)};
      ++j.next_input;
      (void)kv.seq_add(in.seq);  // ids are never reused: cannot fail
      // Storage for the whole input at once (exact, no doubling), marked empty again.
      kv.seq_extend(in.seq, n);
      kv.seq_truncate(in.seq, 0);
      kv_bytes_ += bytes;
      running_.push_back(std::move(in));
      room -= add_tokens(running_.size() - 1, room);
    }
    if (room <= 0) break;
  }
  return room;
}

void EmbeddingRunner::finish_inputs(Engine& engine) {
  std::vector<uint64_t> complete;
  for (auto it = running_.begin(); it != running_.end();) {
    Job* job = find(it->job);
    if (it->pos < static_cast<int64_t>(job->req.inputs[it->index].size())) {
      ++it;
      continue;
    }
    std::vector<float> v = it->acc.result();
    l2_normalize(v);
    job->result.vectors[it->index] = std::move(v);
    if (++job->done_inputs == job->req.inputs.size()) complete.push_back(job->id);
    it = drop(engine, it);
  }
  for (const uint64_t id : complete) end(engine, id, std::nullopt);
}

int64_t EmbeddingRunner::step(Engine& engine, SeqId& next_seq, int64_t kv_room) {
  batch_.clear();
  rows_.clear();
  int64_t room = batch_tokens_;
  // Inputs already running continue first (their KV is held), then new ones start.
  for (size_t i = 0; i < running_.size() && room > 0; ++i) room -= add_tokens(i, room);
  room = start_inputs(engine, next_seq, room, kv_room);
  if (batch_.empty()) return 0;
  last_pass_kv_bytes_ = static_cast<int64_t>(engine.kv().memory_bytes());
  const Status s = engine.forward_hidden(batch_, hidden_);
  if (!s) {  // not expected (inputs are checked at submit): ends every request
    fail_all(engine, Error::make(ErrorCode::kInternal, "local engine: " + s.error().message));
    return static_cast<int64_t>(batch_.size());
  }
  const auto dim = static_cast<size_t>(engine.config().n_embd);
  for (size_t k = 0; k < rows_.size(); ++k) {
    running_[rows_[k]].acc.add(std::span<const float>(hidden_.data() + k * dim, dim));
  }
  finish_inputs(engine);
  return static_cast<int64_t>(batch_.size());
}

}  // namespace ferry::engine
