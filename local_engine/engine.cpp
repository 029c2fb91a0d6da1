#include "local_engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "local_engine/kernels/kernels.h"

namespace ferry::engine {
namespace {

constexpr int64_t kDefaultCtxCap = 8192;
// A sequence with at least this many queries in a batch gets its cache converted to F32 first.
constexpr int64_t kConvertMinEntries = 8;

Error batch_error(std::string message) {
  return Error::make(ErrorCode::kInvalidRequest, "forward: " + std::move(message));
}

// out = x / rms(x) * weight, row by row.
void rms_norm(const float* x, const WeightView& weight, float eps, int64_t n, int64_t dim,
              float* out) {
  const auto* w = static_cast<const float*>(weight.data);
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * dim;
    float* yr = out + t * dim;
    const float sum = kernels::dot_f32(dim, xr, xr);
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * scale * w[i];
  }
}

// y += a * x, sixteen lanes at a time (GCC vector extension), cloned per ISA and chosen at load
// time by the dynamic loader; no reduction, so every clone gives the same result.
using Float16Lanes = float __attribute__((vector_size(64)));

__attribute__((target_clones("avx512f", "avx2", "default"))) void axpy_f32(int64_t n, float a,
                                                                          const float* x,
                                                                          float* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    Float16Lanes xv, yv;
    std::memcpy(&xv, x + i, sizeof(xv));
    std::memcpy(&yv, y + i, sizeof(yv));
    yv += a * xv;
    std::memcpy(y + i, &yv, sizeof(yv));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

void add_bias(float* y, const WeightView& bias, int64_t n, int64_t dim) {
  if (bias.data == nullptr) return;
  const auto* b = static_cast<const float*>(bias.data);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < dim; ++i) y[t * dim + i] += b[i];
  }
}

// Per-head RMSNorm (qwen3) applied in place to (n, n_heads, head_dim).
void head_norm(float* y, const WeightView& weight, float eps, int64_t n, int64_t n_heads,
               int64_t head_dim) {
  if (weight.data == nullptr) return;
  rms_norm(y, weight, eps, n * n_heads, head_dim, y);
}

void rope(float* y, int64_t n_heads, int64_t head_dim, int64_t pos, const Model& model) {
  const ModelConfig& c = model.config();
  const int64_t n_freq = c.rope_dim / 2;
  for (int64_t i = 0; i < n_freq; ++i) {
    const float angle = static_cast<float>(pos) * model.rope_inv_freq[static_cast<size_t>(i)];
    const float cos_a = std::cos(angle), sin_a = std::sin(angle);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* head = y + h * head_dim;
      const int64_t a = c.rope_layout == RopeLayout::kNormal ? 2 * i : i;
      const int64_t b = c.rope_layout == RopeLayout::kNormal ? 2 * i + 1 : i + n_freq;
      const float x0 = head[a], x1 = head[b];
      head[a] = x0 * cos_a - x1 * sin_a;
      head[b] = x0 * sin_a + x1 * cos_a;
    }
  }
}

}  // namespace

Engine::Engine(std::unique_ptr<Model> model, const EngineOptions& options)
    : model_(std::move(model)),
      pool_(options.n_threads),
      kv_(model_->config().n_layer, model_->config().kv_dim(),
          options.n_ctx > 0 ? options.n_ctx
                            : std::min(model_->config().n_ctx_train, kDefaultCtxCap)) {}

Status Engine::check_batch(std::span<const BatchEntry> batch) const {
  const ModelConfig& c = config();
  std::unordered_map<SeqId, int64_t> next_pos;
  for (const BatchEntry& e : batch) {
    if (e.token < 0 || e.token >= c.n_vocab) {
      return batch_error("token " + std::to_string(e.token) + " out of vocabulary");
    }
    auto it = next_pos.find(e.seq);
    if (it == next_pos.end()) {
      if (!kv_.seq_exists(e.seq)) return batch_error("no sequence " + std::to_string(e.seq));
      it = next_pos.emplace(e.seq, kv_.seq_len(e.seq)).first;
    }
    if (e.pos != it->second) {
      return batch_error("sequence " + std::to_string(e.seq) + " expects position " +
                         std::to_string(it->second) + ", got " + std::to_string(e.pos));
    }
    if (e.pos >= kv_.n_ctx()) {
      return Error::make(ErrorCode::kContextOverflow,
                         "context of " + std::to_string(kv_.n_ctx()) + " tokens is full");
    }
    ++it->second;
  }
  return {};
}

Status Engine::forward(std::span<const BatchEntry> batch, std::vector<float>& logits) {
  if (auto s = check_batch(batch); !s) return s;
  const ModelConfig& c = config();
  const Model& m = *model_;
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t d = c.n_embd, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  auto fit = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
  };
  fit(x_, n * d);
  fit(h_, n * d);
  fit(tmp_, n * d);
  fit(q_, n * q_dim);
  fit(att_, n * q_dim);
  fit(k_, n * kv_dim);
  fit(v_, n * kv_dim);
  fit(gate_, n * c.n_ff);
  fit(up_, n * c.n_ff);

  for (int64_t t = 0; t < n; ++t) kernels::dequantize_row(m.token_embd, batch[t].token, x_.data() + t * d);
  for (const BatchEntry& e : batch) kv_.seq_extend(e.seq, e.pos + 1);

  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    const LayerWeights& w = m.layers[static_cast<size_t>(layer)];
    rms_norm(x_.data(), w.attn_norm, c.rms_eps, n, d, h_.data());
    matmuls({{&w.wq, q_.data()}, {&w.wk, k_.data()}, {&w.wv, v_.data()}}, h_.data(), n);
    add_bias(q_.data(), w.bq, n, q_dim);
    add_bias(k_.data(), w.bk, n, kv_dim);
    add_bias(v_.data(), w.bv, n, kv_dim);
    head_norm(q_.data(), w.q_norm, c.rms_eps, n, c.n_head, c.head_dim);
    head_norm(k_.data(), w.k_norm, c.rms_eps, n, c.n_head_kv, c.head_dim);
    for (int64_t t = 0; t < n; ++t) {
      rope(q_.data() + t * q_dim, c.n_head, c.head_dim, batch[t].pos, m);
      rope(k_.data() + t * kv_dim, c.n_head_kv, c.head_dim, batch[t].pos, m);
      kernels::fp32_to_fp16_row(k_.data() + t * kv_dim, kv_.k(batch[t].seq, layer, batch[t].pos),
                                kv_dim);
      kernels::fp32_to_fp16_row(v_.data() + t * kv_dim, kv_.v(batch[t].seq, layer, batch[t].pos),
                                kv_dim);
    }
    attention(batch, layer);
    kernels::matmul(w.wo, att_.data(), n, tmp_.data(), pool_);
    for (int64_t i = 0; i < n * d; ++i) x_[i] += tmp_[i];

    rms_norm(x_.data(), w.ffn_norm, c.rms_eps, n, d, h_.data());
    matmuls({{&w.w_gate, gate_.data()}, {&w.w_up, up_.data()}}, h_.data(), n);
    for (int64_t i = 0; i < n * c.n_ff; ++i) {
      const float g = gate_[i];
      gate_[i] = g / (1.0f + std::exp(-g)) * up_[i];
    }
    kernels::matmul(w.w_down, gate_.data(), n, tmp_.data(), pool_);
    for (int64_t i = 0; i < n * d; ++i) x_[i] += tmp_[i];
  }

  // Final norm and output projection, only for the entries that want logits.
  int64_t n_out = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (!batch[t].logits) continue;
    std::copy_n(x_.data() + t * d, d, h_.data() + n_out * d);
    ++n_out;
  }
  logits.resize(static_cast<size_t>(n_out * c.n_vocab));
  if (n_out == 0) return {};
  rms_norm(h_.data(), m.output_norm, c.rms_eps, n_out, d, tmp_.data());
  kernels::matmul(m.output, tmp_.data(), n_out, logits.data(), pool_);
  return {};
}

void Engine::matmuls(std::initializer_list<MatmulJob> jobs, const float* x, int64_t n) {
  struct Part {
    const WeightView* w;
    float* y;
    const kernels::QuantizedActivations* qa;
    int64_t first_row;  // in the combined row range
  };
  std::vector<kernels::QuantizedActivations> quantized;
  quantized.reserve(jobs.size());
  std::vector<Part> parts;
  int64_t total_rows = 0;
  for (const MatmulJob& job : jobs) {
    const WeightType act_type = kernels::kernels_for(job.w->type)->vec_dot_type;
    const kernels::QuantizedActivations* qa = nullptr;
    for (const auto& q : quantized) {
      if (q.type == act_type) qa = &q;
    }
    if (qa == nullptr) {
      quantized.push_back(kernels::quantize_activations(job.w->type, x, n, job.w->cols));
      qa = &quantized.back();
    }
    parts.push_back({job.w, job.y, qa, total_rows});
    total_rows += job.w->rows;
  }
  pool_.parallel_for(total_rows, 16, [&](int64_t begin, int64_t end) {
    for (const Part& part : parts) {
      const int64_t lo = std::max(begin, part.first_row);
      const int64_t hi = std::min(end, part.first_row + part.w->rows);
      if (lo < hi) {
        kernels::matmul_rows(*part.w, *part.qa, part.y, lo - part.first_row, hi - part.first_row);
      }
    }
  });
}

void Engine::attend_f16(std::span<const BatchEntry> batch, const std::vector<int64_t>& entries,
                        int64_t layer) {
  const ModelConfig& c = config();
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), hd = c.head_dim;
  const int64_t group = c.n_head / c.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t n_tasks = static_cast<int64_t>(entries.size()) * c.n_head;
  pool_.parallel_for(n_tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t t = entries[static_cast<size_t>(task / c.n_head)];
      const int64_t head = task % c.n_head;
      const int64_t kv_off = (head / group) * hd;
      const BatchEntry& e = batch[static_cast<size_t>(t)];
      const float* q = q_.data() + t * q_dim + head * hd;
      const int64_t n_keys = e.pos + 1;
      scores.resize(static_cast<size_t>(n_keys));
      const uint16_t* keys = kv_.k(e.seq, layer, 0) + kv_off;
      float max_score = -INFINITY;
      for (int64_t p = 0; p < n_keys; ++p) {
        const float s = kernels::dot_f16_f32(hd, keys + p * kv_dim, q) * scale;
        scores[static_cast<size_t>(p)] = s;
        max_score = std::max(max_score, s);
      }
      float sum = 0.0f;
      for (float& s : scores) {
        s = std::exp(s - max_score);
        sum += s;
      }
      float* out = att_.data() + t * q_dim + head * hd;
      std::fill_n(out, hd, 0.0f);
      const float inv_sum = 1.0f / sum;
      const uint16_t* values = kv_.v(e.seq, layer, 0) + kv_off;
      for (int64_t p = 0; p < n_keys; ++p) {
        kernels::axpy_f16(hd, scores[static_cast<size_t>(p)] * inv_sum, values + p * kv_dim, out);
      }
    }
  });
}

void Engine::attention(std::span<const BatchEntry> batch, int64_t layer) {
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), hd = c.head_dim;
  const int64_t group = c.n_head / c.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  // One sequence at a time. With many queries (prefill), its cached keys become F32 transposed
  // per head (kt_: kv_head, dim, position) and its values F32 (vf_: position, kv_dim), so both
  // inner loops are long, reduction-free vector updates; with few (decode), the queries read
  // the F16 cache directly.
  std::vector<SeqId> seqs;
  for (const BatchEntry& e : batch) {
    if (std::find(seqs.begin(), seqs.end(), e.seq) == seqs.end()) seqs.push_back(e.seq);
  }
  std::vector<int64_t> entries;
  for (const SeqId seq : seqs) {
    entries.clear();
    int64_t len = 0;
    for (int64_t t = 0; t < n; ++t) {
      if (batch[static_cast<size_t>(t)].seq != seq) continue;
      entries.push_back(t);
      len = std::max(len, batch[static_cast<size_t>(t)].pos + 1);
    }
    if (static_cast<int64_t>(entries.size()) < kConvertMinEntries) {
      attend_f16(batch, entries, layer);
      continue;
    }
    if (static_cast<int64_t>(kt_.size()) < len * kv_dim) {
      kt_.resize(static_cast<size_t>(len * kv_dim));
      vf_.resize(static_cast<size_t>(len * kv_dim));
    }
    pool_.parallel_for(len, 32, [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(kv_dim));
      for (int64_t p = begin; p < end; ++p) {
        kernels::fp16_to_fp32_row(kv_.k(seq, layer, p), row.data(), kv_dim);
        for (int64_t i = 0; i < kv_dim; ++i) kt_[static_cast<size_t>(i * len + p)] = row[static_cast<size_t>(i)];
        kernels::fp16_to_fp32_row(kv_.v(seq, layer, p), vf_.data() + p * kv_dim, kv_dim);
      }
    });
    const int64_t n_tasks = static_cast<int64_t>(entries.size()) * c.n_head;
    pool_.parallel_for(n_tasks, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scores(static_cast<size_t>(len));
      for (int64_t task = begin; task < end; ++task) {
        const int64_t t = entries[static_cast<size_t>(task / c.n_head)];
        const int64_t head = task % c.n_head;
        const int64_t kv_head = head / group;
        const float* q = q_.data() + t * q_dim + head * hd;
        const int64_t n_keys = batch[static_cast<size_t>(t)].pos + 1;
        // scores[p] = q . k_p, as hd updates of the whole score row.
        std::fill_n(scores.begin(), n_keys, 0.0f);
        const float* kt = kt_.data() + kv_head * hd * len;
        for (int64_t i = 0; i < hd; ++i) axpy_f32(n_keys, q[i] * scale, kt + i * len, scores.data());
        float max_score = -INFINITY;
        for (int64_t p = 0; p < n_keys; ++p) max_score = std::max(max_score, scores[static_cast<size_t>(p)]);
        float sum = 0.0f;
        for (int64_t p = 0; p < n_keys; ++p) {
          const float e = std::exp(scores[static_cast<size_t>(p)] - max_score);
          scores[static_cast<size_t>(p)] = e;
          sum += e;
        }
        float* out = att_.data() + t * q_dim + head * hd;
        std::fill_n(out, hd, 0.0f);
        const float inv_sum = 1.0f / sum;
        const float* v = vf_.data() + kv_head * hd;
        for (int64_t p = 0; p < n_keys; ++p) {
          axpy_f32(hd, scores[static_cast<size_t>(p)] * inv_sum, v + p * kv_dim, out);
        }
      }
    });
  }
}

}  // namespace ferry::engine
