#include "local_engine/engine.h"

#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "local_engine/kernels/attend_invariant.h"
#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/ops.h"
#include "local_engine/kernels/trace.h"

namespace ferry::engine {
namespace {

constexpr int64_t kDefaultCtxCap = 8192;
Error batch_error(std::string message) {
  return Error::make(ErrorCode::kInvalidRequest, "forward: " + std::move(message));
}

// out = x / rms(x) * weight, row by row (llama.cpp's numerics: kernels/ops.h).
void rms_norm(const float* x, const WeightView& weight, float eps, int64_t n, int64_t dim,
              float* out) {
  kernels::rms_norm_rows(n, dim, x, static_cast<const float*>(weight.data), eps, out);
}

// An intermediate tensor for op-by-op comparisons with llama.cpp (off unless FERRY_TRACE_DIR).
void trace(const char* name, int64_t layer, const float* p, int64_t rows, int64_t cols) {
  if (kernels::trace_enabled()) kernels::trace_tensor(name, layer, p, rows, cols);
}

// The scores' scale: 1 / sqrt(head_dim), or 1 where the queries were scaled already (gemma).
float attention_scale(const ModelConfig& c) {
  return c.q_scale > 0.0f ? 1.0f : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
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

// RoPE (cos, sin) tables of the batch's positions, rope_dim floats each, for one frequency base
// and scale (global layers use the model's, sliding ones their own) and the engine's factors.
std::vector<float> rope_tables(std::span<const BatchEntry> batch, const ModelConfig& c, float theta,
                               float freq_scale, const float* factors) {
  const float theta_scale = kernels::rope_theta_scale(theta, c.rope_dim);
  std::vector<float> tables(batch.size() * static_cast<size_t>(c.rope_dim));
  for (size_t t = 0; t < batch.size(); ++t) {
    kernels::rope_cache(batch[t].pos, c.rope_dim, theta_scale, freq_scale, factors,
                        tables.data() + t * static_cast<size_t>(c.rope_dim), c.rope_attn_factor);
  }
  return tables;
}

// x[i] += y[i] for i < n, four floats at a time (GCC does not vectorize at -O2): each element's
// one addition, the bits of the plain loop.
void add_to(int64_t n, float* x, const float* y) {
  using F4 = float __attribute__((vector_size(16)));
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    F4 a, b;
    std::memcpy(&a, x + i, sizeof a);
    std::memcpy(&b, y + i, sizeof b);
    a += b;
    std::memcpy(x + i, &a, sizeof a);
  }
  for (; i < n; ++i) x[i] += y[i];
}

// The RoPE frequency factors of an engine of context n_ctx: Llama 3's when the file has them,
// else LongRoPE's long ones above the original context and short ones up to it (llama.cpp's
// get_rope_factors), else none.
const float* rope_factors(const Model& m, int64_t n_ctx) {
  if (!m.rope_freq_factors.empty()) return m.rope_freq_factors.data();
  if (m.rope_factors_long.empty()) return nullptr;
  return n_ctx > m.config().n_ctx_orig ? m.rope_factors_long.data() : m.rope_factors_short.data();
}

}  // namespace

namespace {

// Asks the kernel to reclaim the whole pages inside [data, data + bytes) (MADV_PAGEOUT never
// changes what the memory reads: file pages are dropped, anonymous ones swapped or kept).
void release_pages(const void* data, size_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  auto begin = reinterpret_cast<uintptr_t>(data);
  uintptr_t first = (begin + page - 1) / page * page;
  uintptr_t last = (begin + bytes) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_PAGEOUT);
}

// The work a per-row step's float costs, in the pool's units (multiply-adds of a product): a
// norm's, SwiGLU's or a quantization's element costs about as much as 100 multiply-adds of a
// packed 8-token product; 32 keeps two rows of 960 on the calling thread, where the hand-off
// would cost about what sharing them saves.
constexpr int64_t kRowElemWork = 32;

// Bytes of a matrix's panels (TypeKernels::pack_panels) when its type has them and its rows
// are whole groups of 16; 0 otherwise.
int64_t panel_bytes(const WeightView& w) {
  const kernels::TypeKernels* k = kernels::kernels_for(w.type);
  if (k == nullptr || k->gemm_panels == nullptr || w.rows % 16 != 0) return 0;
  const int64_t per_block = model_format::block_elems(w.type);
  if (per_block <= 0 || w.cols % per_block != 0) return 0;
  return w.rows / 16 * (w.cols / per_block) * k->panel_bytes;
}

}  // namespace

Engine::Engine(std::unique_ptr<Model> model, const EngineOptions& options)
    : model_(std::move(model)),
      forms_(options.batch_invariant ? kernels::BatchForms::kInvariant
                                     : kernels::BatchForms::kLlamaCpp),
      pool_(options.n_threads, options.serial_work),
      kv_(model_->config().n_layer, model_->config().kv_dim(),
          options.n_ctx > 0 ? options.n_ctx
                            : std::min(model_->config().n_ctx_train, kDefaultCtxCap)) {
  if (forms_ != kernels::BatchForms::kInvariant || !kernels::packed_supported()) return;
  // The matrices a step reads, in one allocation (kernels::allocate_streamed: on huge pages
  // where the system gives them) in the order a decode step reads them: Q8_0 and Q5_0 ones
  // packed (kernels/packed.h), Q4_K and Q6_K ones in panels (TypeKernels::pack_panels: 16
  // rows interleaved, rearranged once here instead of on every call), the others (F16, ...)
  // copied as they are
  // and their views pointed at the copy. A step streams every byte once; with 4 KiB pages each
  // page costs a TLB walk.
  std::vector<WeightView*> views;
  for (LayerWeights& l : model_->layers) {
    for (WeightView* w : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      if (w->data != nullptr && w->rows > 0) views.push_back(w);
    }
  }
  if (model_->output.data != nullptr) views.push_back(&model_->output);
  struct Placed {
    const WeightView* first;  // the first view of these bytes
    int64_t offset;
    size_t bytes;  // of the original
  };
  std::unordered_map<const void*, Placed> placed;
  std::vector<const void*> order;
  int64_t arena_bytes = 0;
  for (const WeightView* w : views) {
    if (placed.contains(w->data)) continue;
    const auto bytes = static_cast<size_t>(w->rows) * w->row_bytes;
    placed.emplace(w->data, Placed{w, arena_bytes, bytes});
    order.push_back(w->data);
    int64_t need = panel_bytes(*w);
    if (kernels::packable(*w)) need = kernels::PackedWeights::packed_bytes(*w);
    if (need == 0) need = static_cast<int64_t>(bytes);
    arena_bytes += (need + 63) / 64 * 64;
  }
  if (order.empty()) return;
  packed_arena_ = kernels::allocate_streamed(static_cast<size_t>(arena_bytes));
  std::unordered_map<const void*, const uint8_t*> copies;
  for (const void* data : order) {
    const Placed& p = placed.at(data);
    uint8_t* at = packed_arena_.get() + p.offset;
    const WeightView& w = *p.first;
    if (kernels::packable(w)) {
      packed_.emplace(data, std::make_unique<kernels::PackedWeights>(w, &pool_, at));
    } else if (const int64_t bytes = panel_bytes(w); bytes > 0) {
      const kernels::TypeKernels* k = kernels::kernels_for(w.type);
      const int64_t per_group = bytes / (w.rows / 16);
      pool_.parallel_for(w.rows / 16, 1, [&](int64_t g0, int64_t g1) {
        k->pack_panels(w.cols, w.row(g0 * 16), static_cast<int64_t>(w.row_bytes), (g1 - g0) * 16,
                       at + g0 * per_group);
      });
      panels_.emplace(data, Panels{at, per_group, k});
    } else {
      std::memcpy(at, data, p.bytes);
      copies.emplace(data, at);
    }
    // The copy is what the matrix products read from now on: let the kernel reclaim the
    // original bytes at once (file-backed pages are dropped and re-read if ever touched again,
    // e.g. a tied output's token_embd rows; other memory keeps its contents), so resident
    // memory stays near one copy of the weights during the load too, not two.
    release_pages(data, p.bytes);
  }
  for (WeightView* w : views) {
    if (const auto it = copies.find(w->data); it != copies.end()) w->data = it->second;
  }
}

const Engine::Panels* Engine::panels(const WeightView& w) const {
  if (panels_.empty()) return nullptr;
  const auto it = panels_.find(w.data);
  return it == panels_.end() ? nullptr : &it->second;
}

const kernels::PackedWeights* Engine::packed(const WeightView& w) const {
  if (packed_.empty()) return nullptr;
  const auto it = packed_.find(w.data);
  return it == packed_.end() ? nullptr : it->second.get();
}

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

// The forward pass reads top to bottom like the math, as llama2.c's forward() does: run_layers
// (embed; per layer attention_block: norm, QKV, RoPE, KV write, attention, output; ffn_block;
// final norm), then the output projection; each step is one call into kernels/.
Status Engine::forward(std::span<const BatchEntry> batch, std::vector<float>& logits) {
  int64_t n_out = 0;
  if (auto s = run_layers(batch, n_out); !s) return s;
  logits.resize(static_cast<size_t>(n_out * config().n_vocab));
  if (n_out == 0) return {};
  project(model_->output, tmp_.data(), n_out, logits.data());
  if (config().final_softcap > 0.0f) {  // gemma2: cap * tanh(logit / cap)
    kernels::softcap_row(n_out * config().n_vocab, config().final_softcap, logits.data());
  }
  if (kernels::trace_enabled()) {
    kernels::trace_tensor("result_output", -1, logits.data(), n_out, config().n_vocab);
  }
  return {};
}

Status Engine::forward_hidden(std::span<const BatchEntry> batch, std::vector<float>& hidden) {
  int64_t n_out = 0;
  if (auto s = run_layers(batch, n_out); !s) return s;
  const int64_t d = config().n_embd;
  hidden.assign(tmp_.begin(), tmp_.begin() + n_out * d);
  return {};
}

Status Engine::run_layers(std::span<const BatchEntry> batch, int64_t& n_out) {
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
  fit(up_, n * c.n_ff * (m.layers[0].w_gate.data == nullptr ? 2 : 1));  // phi3: gate and up

  if (kernels::trace_enabled()) kernels::trace_next_step();
  for (int64_t t = 0; t < n; ++t)
    kernels::dequantize_row(m.token_embd, batch[t].token, x_.data() + t * d);
  trace("embd", -1, x_.data(), n, d);
  if (c.embd_scaled) {  // gemma: ggml_scale by sqrtf(n_embd)
    const float scale = std::sqrt(static_cast<float>(d));
    for (int64_t i = 0; i < n * d; ++i) x_[i] *= scale;
    trace("inp_scaled", -1, x_.data(), n, d);
  }
  for (const BatchEntry& e : batch) kv_.seq_extend(e.seq, e.pos + 1);
  const float* factors = rope_factors(m, kv_.n_ctx());
  rope_tab_ = rope_tables(batch, c, c.rope_theta, c.rope_freq_scale, factors);
  if (c.n_swa > 0) {
    rope_tab_swa_ = rope_tables(batch, c, c.rope_theta_swa, c.rope_freq_scale_swa, factors);
  }

  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    attention_block(batch, layer);
    // The last layer's feed-forward only matters for the entries that want logits: like
    // llama.cpp, keep just those rows (in batch order) from here on. Besides saving work, this
    // gives its matrix products the same batch shape as llama.cpp's (which picks kernels by it).
    int64_t rows = n;
    if (layer == c.n_layer - 1) {
      rows = 0;
      for (int64_t t = 0; t < n; ++t) {
        if (!batch[t].logits) continue;
        if (rows != t) std::copy_n(x_.data() + t * d, d, x_.data() + rows * d);
        ++rows;
      }
    }
    trace("ffn_inp", layer, x_.data(), rows, d);
    ffn_block(layer, rows);
  }

  // Final norm; x_ holds just the rows that want logits now, tmp_ their normed states.
  n_out = 0;
  for (const BatchEntry& e : batch) n_out += e.logits ? 1 : 0;
  if (n_out == 0) return {};
  rms_norm(x_.data(), m.output_norm, c.rms_eps, n_out, d, tmp_.data());
  trace("result_norm", -1, tmp_.data(), n_out, d);
  return {};
}

void Engine::attention_block(std::span<const BatchEntry> batch, int64_t layer) {
  const ModelConfig& c = config();
  const LayerWeights& w = model_->layers[static_cast<size_t>(layer)];
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t d = c.n_embd, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const RowFn norm = [&](int64_t begin, int64_t end) {
    rms_norm(x_.data() + begin * d, w.attn_norm, c.rms_eps, end - begin, d, h_.data() + begin * d);
  };
  if (w.wqkv.data != nullptr) {  // phi3: one product, then its Q, K and V columns apart
    const int64_t qkv_dim = q_dim + 2 * kv_dim;
    if (static_cast<int64_t>(qkv_.size()) < n * qkv_dim) {
      qkv_.resize(static_cast<size_t>(n * qkv_dim));
    }
    project(w.wqkv, h_.data(), n, qkv_.data(), norm);
    trace("attn_norm", layer, h_.data(), n, d);
    for (int64_t t = 0; t < n; ++t) {
      const float* row = qkv_.data() + t * qkv_dim;
      std::copy_n(row, q_dim, q_.data() + t * q_dim);
      std::copy_n(row + q_dim, kv_dim, k_.data() + t * kv_dim);
      std::copy_n(row + q_dim + kv_dim, kv_dim, v_.data() + t * kv_dim);
    }
  } else {
    matmuls({{&w.wq, q_.data()}, {&w.wk, k_.data()}, {&w.wv, v_.data()}}, h_.data(), n, norm);
    trace("attn_norm", layer, h_.data(), n, d);
  }
  add_bias(q_.data(), w.bq, n, q_dim);
  add_bias(k_.data(), w.bk, n, kv_dim);
  add_bias(v_.data(), w.bv, n, kv_dim);
  head_norm(q_.data(), w.q_norm, c.rms_eps, n, c.n_head, c.head_dim);
  head_norm(k_.data(), w.k_norm, c.rms_eps, n, c.n_head_kv, c.head_dim);
  trace("Qcur", layer, q_.data(), n, q_dim);
  trace("Kcur", layer, k_.data(), n, kv_dim);
  trace("Vcur", layer, v_.data(), n, kv_dim);
  const bool neox = c.rope_layout == RopeLayout::kNeox;
  const std::vector<float>& tab = c.is_swa(layer) ? rope_tab_swa_ : rope_tab_;
  per_row(n, q_dim + 2 * kv_dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (c.uses_rope(layer)) {  // smollm3's NoPE layers skip it
        const float* cs = tab.data() + t * c.rope_dim;
        kernels::rope_apply(cs, c.rope_dim, neox, c.n_head, c.head_dim, q_.data() + t * q_dim);
        kernels::rope_apply(cs, c.rope_dim, neox, c.n_head_kv, c.head_dim, k_.data() + t * kv_dim);
      }
      const BatchEntry& e = batch[static_cast<size_t>(t)];
      kernels::fp32_to_fp16_row(k_.data() + t * kv_dim, kv_.k(e.seq, layer, e.pos), kv_dim);
      kernels::fp32_to_fp16_row(v_.data() + t * kv_dim, kv_.v(e.seq, layer, e.pos), kv_dim);
    }
  });
  trace("Qrope", layer, q_.data(), n, q_dim);
  trace("Krope", layer, k_.data(), n, kv_dim);
  if (c.q_scale > 0.0f) {  // gemma: ggml_scale of the queries; attention then unscaled
    for (int64_t i = 0; i < n * q_dim; ++i) q_[i] *= c.q_scale;
  }
  attention(batch, layer);
  trace("attn", layer, att_.data(), n, q_dim);
  project(w.wo, att_.data(), n, tmp_.data());
  trace("attn_out", layer, tmp_.data(), n, d);
  add_branch(w.attn_post_norm, "attn_post_norm", layer, n);
}

void Engine::add_branch(const WeightView& post_norm, const char* post_name, int64_t layer,
                        int64_t rows) {
  const int64_t d = config().n_embd;
  per_row(rows, d, [&](int64_t begin, int64_t end) {
    float* branch = tmp_.data() + begin * d;
    if (post_norm.data != nullptr)
      rms_norm(branch, post_norm, config().rms_eps, end - begin, d, branch);
    add_to((end - begin) * d, x_.data() + begin * d, branch);
  });
  if (post_norm.data != nullptr) trace(post_name, layer, tmp_.data(), rows, d);
}

void Engine::ffn_block(int64_t layer, int64_t rows) {
  const ModelConfig& c = config();
  const LayerWeights& w = model_->layers[static_cast<size_t>(layer)];
  const int64_t d = c.n_embd, ff = c.n_ff;
  const RowFn norm = [&](int64_t begin, int64_t end) {
    rms_norm(x_.data() + begin * d, w.ffn_norm, c.rms_eps, end - begin, d, h_.data() + begin * d);
  };
  // The gate and up halves of row t: apart, or phi3's fused [gate, up] rows of 2 n_ff (up_ is
  // sized for them in run_layers).
  const bool fused = w.w_gate.data == nullptr;
  if (fused) {
    project(w.w_up, h_.data(), rows, up_.data(), norm);
    trace("ffn_norm", layer, h_.data(), rows, d);
  } else {
    matmuls({{&w.w_gate, gate_.data()}, {&w.w_up, up_.data()}}, h_.data(), rows, norm);
    trace("ffn_norm", layer, h_.data(), rows, d);
    trace("ffn_gate", layer, gate_.data(), rows, ff);
  }
  trace("ffn_up", layer, up_.data(), rows, fused ? 2 * ff : ff);
  const float* gates = fused ? up_.data() : gate_.data();
  const int64_t stride = fused ? 2 * ff : ff;
  const RowFn act = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* g = gates + t * stride;
      const float* u = fused ? g + ff : up_.data() + t * ff;
      if (c.ffn_act == FfnAct::kGeluTanh) {
        kernels::geglu_row(ff, g, u, gate_.data() + t * ff);
      } else {
        kernels::swiglu_row(ff, g, u, gate_.data() + t * ff);
      }
    }
  };
  project(w.w_down, gate_.data(), rows, tmp_.data(), act);
  trace(c.ffn_act == FfnAct::kGeluTanh ? "ffn_geglu" : "ffn_swiglu", layer, gate_.data(), rows, ff);
  trace("ffn_out", layer, tmp_.data(), rows, d);
  add_branch(w.ffn_post_norm, "ffn_post_norm", layer, rows);
  trace("l_out", layer, x_.data(), rows, d);
}

void Engine::per_row(int64_t n, int64_t row_elems, const RowFn& fn) {
  pool_.parallel_for(n, 1, n * row_elems * kRowElemWork, fn);
}

void Engine::project(const WeightView& w, const float* x, int64_t n, float* y,
                     const RowFn& prologue) {
  if (packed(w) != nullptr || panels(w) != nullptr) {
    matmuls({{&w, y}}, x, n, prologue);
  } else {
    if (prologue) per_row(n, w.cols, prologue);
    kernels::matmul(w, x, n, y, pool_, forms_);
  }
}

void Engine::matmuls(std::initializer_list<MatmulJob> jobs, const float* x, int64_t n,
                     const RowFn& prologue) {
  if (n <= 0) return;
  struct Part {
    const WeightView* w;
    float* y;
    const kernels::QuantizedActivations* qa;
    int64_t first_row;  // in the combined row range
    const kernels::PackedWeights* packed;
    const Panels* panels;  // or nullptr
  };
  std::vector<kernels::QuantizedActivations> quantized;
  quantized.reserve(jobs.size());
  std::vector<kernels::QuantizedActivations*> to_quantize;  // prepared, rows not made yet
  std::vector<Part> parts;
  int64_t total_rows = 0;
  for (const MatmulJob& job : jobs) {
    const WeightType act_type = kernels::kernels_for(job.w->type)->vec_dot_type;
    const kernels::QuantizedActivations* qa = nullptr;
    for (const auto& q : quantized) {
      if (q.type == act_type) qa = &q;
    }
    if (qa == nullptr) {
      kernels::QuantizedActivations& q = quantized.emplace_back();
      if (kernels::prepare_activations(job.w->type, x, n, job.w->cols, q))
        to_quantize.push_back(&q);
      qa = &q;
    }
    const kernels::PackedWeights* p = packed(*job.w);
    const Panels* pn = panels(*job.w);
    // A packed part starts on a multiple of the grain (16 rows: one group of the packing).
    constexpr int64_t kGroup = kernels::kPackRows;
    if (p != nullptr || pn != nullptr) total_rows = (total_rows + kGroup - 1) / kGroup * kGroup;
    parts.push_back({job.w, job.y, qa, total_rows, p, pn});
    total_rows += job.w->rows;
  }
  // The rows of x (the prologue's) and their quantizations, on the pool's threads.
  if (prologue || !to_quantize.empty()) {
    per_row(n, jobs.begin()->w->cols * (1 + static_cast<int64_t>(to_quantize.size())),
            [&](int64_t begin, int64_t end) {
              if (prologue) prologue(begin, end);
              for (kernels::QuantizedActivations* q : to_quantize)
                kernels::quantize_rows(x, *q, begin, end);
            });
  }
  int64_t work = 0;
  for (const MatmulJob& job : jobs) work += job.w->rows * job.w->cols * n;
  pool_.parallel_for(total_rows, 16, work, [&](int64_t begin, int64_t end) {
    for (const Part& part : parts) {
      const int64_t lo = std::max(begin, part.first_row);
      const int64_t hi = std::min(end, part.first_row + part.w->rows);
      if (lo >= hi) continue;
      if (part.packed != nullptr) {
        kernels::packed_rows(*part.packed, *part.qa, part.y, part.w->rows, lo - part.first_row,
                             hi - part.first_row);
      } else if (part.panels != nullptr) {
        const int64_t r0 = lo - part.first_row;
        part.panels->kernels->gemm_panels(
            part.w->cols, part.panels->data + r0 / 16 * part.panels->group_bytes, hi - lo,
            part.qa->data, static_cast<int64_t>(part.qa->row_stride), part.qa->n_tokens,
            part.y + r0, part.w->rows, part.qa->id);
      } else {
        kernels::matmul_rows(*part.w, *part.qa, part.y, lo - part.first_row, hi - part.first_row,
                             forms_);
      }
    }
  });
}

void Engine::attend_f16(std::span<const BatchEntry> batch, const std::vector<int64_t>& entries,
                        int64_t layer) {
  const ModelConfig& c = config();
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), hd = c.head_dim;
  const int64_t group = c.n_head / c.n_head_kv;
  const float scale = attention_scale(c);
  int64_t work = 0;  // scores and weighted sums
  for (const int64_t t : entries) work += 2 * (batch[static_cast<size_t>(t)].pos + 1) * q_dim;
  if (forms_ == kernels::BatchForms::kInvariant && kernels::attend_invariant_supported(hd)) {
    // A task: one entry's query heads that share a KV head.
    const int64_t n_groups = static_cast<int64_t>(entries.size()) * c.n_head_kv;
    pool_.parallel_for(n_groups, 1, work, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t t = entries[static_cast<size_t>(task / c.n_head_kv)];
        const int64_t kv_head = task % c.n_head_kv;
        const BatchEntry& e = batch[static_cast<size_t>(t)];
        const int64_t q_off = t * q_dim + kv_head * group * hd;
        const int64_t first = c.first_key(layer, e.pos);
        kernels::attend_group_invariant(
            hd, group, q_.data() + q_off, hd, kv_.k(e.seq, layer, first) + kv_head * hd, kv_dim,
            kv_.v(e.seq, layer, first) + kv_head * hd, kv_dim, e.pos + 1 - first, scale,
            att_.data() + q_off, hd, c.attn_softcap);
      }
    });
    return;
  }
  const int64_t n_tasks = static_cast<int64_t>(entries.size()) * c.n_head;
  pool_.parallel_for(n_tasks, 1, work, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t t = entries[static_cast<size_t>(task / c.n_head)];
      const int64_t head = task % c.n_head;
      const int64_t kv_off = (head / group) * hd;
      const BatchEntry& e = batch[static_cast<size_t>(t)];
      // llama.cpp skips masked keys: a window's attention starts at its first position.
      const int64_t first = c.first_key(layer, e.pos);
      kernels::attend_head_f16(hd, q_.data() + t * q_dim + head * hd,
                               kv_.k(e.seq, layer, first) + kv_off, kv_dim,
                               kv_.v(e.seq, layer, first) + kv_off, kv_dim, e.pos + 1 - first,
                               scale, att_.data() + t * q_dim + head * hd, c.attn_softcap);
    }
  });
}

void Engine::attention(std::span<const BatchEntry> batch, int64_t layer) {
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), hd = c.head_dim;
  const int64_t group = c.n_head / c.n_head_kv;
  const float scale = attention_scale(c);

  // llama.cpp's two flash-attention forms (kernels/ops.h): for batches of 64 queries or more
  // the tiled one, one sequence at a time, for which the sequence's cached keys become F32
  // transposed per head (kt_: kv_head, dim, position) and its values F32 (vf_: position,
  // kv_dim); below that, the queries read the F16 cache directly.
  const bool tiled = forms_ == kernels::BatchForms::kLlamaCpp && kernels::attend_tiled_ok(n, hd);
  std::vector<int64_t> entries;
  if (!tiled) {  // every (entry, head) on its own: all sequences in one pass over the pool
    for (int64_t t = 0; t < n; ++t) entries.push_back(t);
    attend_f16(batch, entries, layer);
    return;
  }
  std::vector<SeqId> seqs;
  for (const BatchEntry& e : batch) {
    if (std::find(seqs.begin(), seqs.end(), e.seq) == seqs.end()) seqs.push_back(e.seq);
  }
  for (const SeqId seq : seqs) {
    entries.clear();
    int64_t len = 0;
    for (int64_t t = 0; t < n; ++t) {
      if (batch[static_cast<size_t>(t)].seq != seq) continue;
      entries.push_back(t);
      len = std::max(len, batch[static_cast<size_t>(t)].pos + 1);
    }
    if (static_cast<int64_t>(kt_.size()) < len * kv_dim) {
      kt_.resize(static_cast<size_t>(len * kv_dim));
      vf_.resize(static_cast<size_t>(len * kv_dim));
    }
    pool_.parallel_for(len, 32, [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(kv_dim));
      for (int64_t p = begin; p < end; ++p) {
        kernels::fp16_to_fp32_row(kv_.k(seq, layer, p), row.data(), kv_dim);
        for (int64_t i = 0; i < kv_dim; ++i)
          kt_[static_cast<size_t>(i * len + p)] = row[static_cast<size_t>(i)];
        kernels::fp16_to_fp32_row(kv_.v(seq, layer, p), vf_.data() + p * kv_dim, kv_dim);
      }
    });
    // A task: one KV head's query heads for a block of entries, so the key and value tiles
    // are read once for all of them.
    constexpr int64_t kEntriesPerTask = 8;
    const int64_t n_blocks =
        (static_cast<int64_t>(entries.size()) + kEntriesPerTask - 1) / kEntriesPerTask;
    pool_.parallel_for(n_blocks * c.n_head_kv, 1, [&](int64_t begin, int64_t end) {
      std::vector<kernels::TiledRow> rows;
      for (int64_t task = begin; task < end; ++task) {
        const int64_t kv_head = task % c.n_head_kv;
        const int64_t first = (task / c.n_head_kv) * kEntriesPerTask;
        const int64_t last =
            std::min<int64_t>(first + kEntriesPerTask, static_cast<int64_t>(entries.size()));
        rows.clear();
        for (int64_t j = first; j < last; ++j) {
          const int64_t t = entries[static_cast<size_t>(j)];
          for (int64_t head = kv_head * group; head < (kv_head + 1) * group; ++head) {
            const int64_t pos = batch[static_cast<size_t>(t)].pos;
            rows.push_back({q_.data() + t * q_dim + head * hd, pos + 1,
                            att_.data() + t * q_dim + head * hd, c.first_key(layer, pos)});
          }
        }
        kernels::attend_rows_tiled(hd, static_cast<int64_t>(rows.size()), rows.data(),
                                   kt_.data() + kv_head * hd * len, len, vf_.data() + kv_head * hd,
                                   kv_dim, scale, c.attn_softcap);
      }
    });
  }
}

}  // namespace ferry::engine
