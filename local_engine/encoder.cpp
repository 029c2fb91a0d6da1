#include "local_engine/encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "local_engine/kernels/attend_invariant.h"
#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/matmul.h"
#include "local_engine/kernels/ops.h"
#include "local_engine/kernels/packed.h"
#include "local_engine/tensor_loader.h"

namespace ferry::engine {
namespace {

// ---- loading ---------------------------------------------------------------------------------

Result<EncoderConfig> read_encoder_config(const ModelSource& source) {
  EncoderConfig c;
  c.arch_name = source.get_string("general.architecture").value_or("");
  if (c.arch_name != "bert" && c.arch_name != "nomic-bert") {
    return load_error("encoder architecture '" + c.arch_name +
                      "' is not supported yet (encoders: bert, nomic-bert)");
  }
  c.rope = c.arch_name == "nomic-bert";
  const std::string p = c.arch_name + ".";
  const auto need = [&](const std::string& key, int64_t& out, int64_t max) -> Status {
    const auto v = source.get_int(p + key);
    if (!v) return load_error("missing " + p + key);
    if (*v <= 0 || *v > max) return load_error(p + key + " out of range: " + std::to_string(*v));
    out = *v;
    return {};
  };
  constexpr int64_t kMaxDim = int64_t{1} << 20;
  for (const auto& [key, out, max] :
       {std::tuple<const char*, int64_t*, int64_t>{"embedding_length", &c.n_embd, kMaxDim},
        {"block_count", &c.n_layer, 4096},
        {"feed_forward_length", &c.n_ff, kMaxDim},
        {"attention.head_count", &c.n_head, 4096},
        {"context_length", &c.n_ctx_train, kMaxDim}}) {
    if (Status s = need(key, *out, max); !s) return s.error();
  }
  if (c.n_embd % c.n_head != 0) return load_error("head_count does not divide embedding_length");
  c.head_dim = c.n_embd / c.n_head;
  const int64_t n_head_kv = source.get_int(p + "attention.head_count_kv").value_or(c.n_head);
  if (n_head_kv != c.n_head) return load_error("grouped-query attention in an encoder");
  c.norm_eps =
      static_cast<float>(source.get_float(p + "attention.layer_norm_epsilon").value_or(1e-12));
  if (!(c.norm_eps > 0.0f)) return load_error("layer_norm_epsilon must be positive");
  if (source.get_int(p + "attention.causal").value_or(0) != 0) {
    return load_error(p + "attention.causal is true: not a bidirectional encoder");
  }
  c.pooling_type = source.get_int(p + "pooling_type").value_or(-1);
  if (c.rope) {
    c.rope_dim = source.get_int(p + "rope.dimension_count").value_or(c.head_dim);
    c.rope_theta = static_cast<float>(source.get_float(p + "rope.freq_base").value_or(10000.0));
    if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0 || !(c.rope_theta > 0))
      return load_error("bad rope.dimension_count or rope.freq_base");
    if (source.get_int(p + "moe_every_n_layers").value_or(0) > 0)
      return load_error("mixture-of-experts layers are not supported");
  }
  return c;
}

// Attention: q/k/v apart or fused (attn_qkv: q, k and v rows one after the other); biases
// required by bert, optional for nomic-bert (which has none).
Status load_encoder_attention(const TensorLoader& r, const EncoderConfig& c, const std::string& b,
                              EncoderLayer& l) {
  const int64_t e = c.n_embd;
  const bool opt = c.rope;
  FERRY_LOAD(l.wqkv, r.get(b + "attn_qkv.weight", e, 3 * e, true));
  if (l.wqkv.data == nullptr) {
    FERRY_LOAD(l.wq, r.get(b + "attn_q.weight", e, e));
    FERRY_LOAD(l.wk, r.get(b + "attn_k.weight", e, e));
    FERRY_LOAD(l.wv, r.get(b + "attn_v.weight", e, e));
  }
  FERRY_LOAD(l.bq, r.get_f32(b + "attn_q.bias", e, opt || l.wqkv.data != nullptr));
  FERRY_LOAD(l.bk, r.get_f32(b + "attn_k.bias", e, opt || l.wqkv.data != nullptr));
  FERRY_LOAD(l.bv, r.get_f32(b + "attn_v.bias", e, opt || l.wqkv.data != nullptr));
  FERRY_LOAD(l.wo, r.get(b + "attn_output.weight", e, e));
  FERRY_LOAD(l.bo, r.get_f32(b + "attn_output.bias", e, true));
  FERRY_LOAD(l.attn_norm, r.get_f32(b + "attn_output_norm.weight", e));
  FERRY_LOAD(l.attn_norm_b, r.get_f32(b + "attn_output_norm.bias", e));
  return {};
}

// The FFN (bert: gelu(up x); nomic-bert: silu(gate x) * up x) and the layer's output norm.
Status load_encoder_layer(const TensorLoader& r, const EncoderConfig& c, int64_t i,
                          EncoderLayer& l) {
  const std::string b = "blk." + std::to_string(i) + ".";
  const int64_t e = c.n_embd;
  if (Status s = load_encoder_attention(r, c, b, l); !s) return s;
  FERRY_LOAD(l.w_up, r.get(b + "ffn_up.weight", e, c.n_ff));
  FERRY_LOAD(l.b_up, r.get_f32(b + "ffn_up.bias", c.n_ff, true));
  if (c.rope) FERRY_LOAD(l.w_gate, r.get(b + "ffn_gate.weight", e, c.n_ff));
  FERRY_LOAD(l.w_down, r.get(b + "ffn_down.weight", c.n_ff, e));
  FERRY_LOAD(l.b_down, r.get_f32(b + "ffn_down.bias", e, true));
  FERRY_LOAD(l.out_norm, r.get_f32(b + "layer_output_norm.weight", e));
  FERRY_LOAD(l.out_norm_b, r.get_f32(b + "layer_output_norm.bias", e));
  return {};
}

const float* floats(const WeightView& w) {
  return w.data == nullptr ? nullptr : static_cast<const float*>(w.data);
}

}  // namespace

bool is_encoder_arch(std::string_view arch) {
  return arch == "bert" || arch == "nomic-bert" || arch == "jina-bert-v2" || arch == "t5encoder";
}

Result<std::unique_ptr<EncoderModel>> EncoderModel::load(
    std::shared_ptr<const ModelSource> source) {
  if (!source) return load_error("no source");
  auto config = read_encoder_config(*source);
  if (!config) return std::move(config).error();
  auto model = std::unique_ptr<EncoderModel>(new EncoderModel());
  model->source_ = std::move(source);
  EncoderConfig& c = model->config_;
  c = std::move(config).value();
  const SourceTensor* embd = model->source_->tensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() < 2) return load_error("missing token_embd.weight");
  c.n_vocab = embd->dims[1];
  if (c.n_vocab <= 0 || c.n_vocab > (int64_t{1} << 24)) return load_error("bad vocabulary size");
  if (const SourceTensor* types = model->source_->tensor("token_types.weight"))
    c.n_token_types = types->dims.size() >= 2 ? types->dims[1] : 1;
  const TensorLoader r(*model->source_);
  FERRY_LOAD(model->token_embd, r.get("token_embd.weight", c.n_embd, c.n_vocab));
  FERRY_LOAD(model->token_types, r.get("token_types.weight", c.n_embd, c.n_token_types, true));
  FERRY_LOAD(model->position_embd,
             r.get("position_embd.weight", c.n_embd, c.n_ctx_train, /*optional=*/c.rope));
  FERRY_LOAD(model->embd_norm, r.get_f32("token_embd_norm.weight", c.n_embd));
  FERRY_LOAD(model->embd_norm_b, r.get_f32("token_embd_norm.bias", c.n_embd));
  model->layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    if (Status s = load_encoder_layer(r, c, i, model->layers[static_cast<size_t>(i)]); !s)
      return s.error();
  }
  return model;
}
#undef FERRY_LOAD

Result<Pooling> encoder_pooling(const EncoderConfig& config) {
  const std::string key = config.arch_name + ".pooling_type";
  switch (config.pooling_type) {
    case 1:
      return Pooling::kMean;
    case 2:
      return Pooling::kCls;
    case -1:
      return load_error(key +
                        " is absent: an encoder's embedding needs its pooling (1 mean, "
                        "2 cls) in the file");
    case 0:
      return load_error(key +
                        " is 0 (none: one vector per token), which /v1/embeddings "
                        "cannot answer");
    case 3:
      return load_error(key + " is 3 (last), which a bidirectional encoder does not use");
    case 4:
      return load_error(key + " is 4 (rank: a reranker), not an embedding model");
    default:
      return load_error(key + " " + std::to_string(config.pooling_type) +
                        " is not one ferry knows");
  }
}

// ---- numerics --------------------------------------------------------------------------------

namespace {

// The formula of gelu_ggml at an F16 value h, rounded to F16 as ggml's table holds it.
float gelu_of_f16(float h) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  const float g = 0.5f * h * (1.0f + std::tanh(kSqrt2OverPi * h * (1.0f + kCoefA * h * h)));
  return kernels::fp16_to_fp32(kernels::fp32_to_fp16(g));
}

// gelu_of_f16 of every F16 bit pattern (ggml's table_gelu_f16), made once (~1 ms).
const float* gelu_table() {
  static const std::unique_ptr<float[]> table = [] {
    auto t = std::make_unique<float[]>(65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      t[i] = gelu_of_f16(kernels::fp16_to_fp32(static_cast<uint16_t>(i)));
    }
    return t;
  }();
  return table.get();
}

}  // namespace

float gelu_ggml(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  // The argument rounded to F16, then the table: the same bits as the formula on it.
  return gelu_table()[kernels::fp32_to_fp16(x)];
}

void layer_norm_row(int64_t n, const float* x, const float* w, const float* b, float eps,
                    float* out) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  const auto mean = static_cast<float>(sum / static_cast<double>(n));
  double sum2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] - mean;
    out[i] = v;
    sum2 += static_cast<double>(v) * static_cast<double>(v);
  }
  const auto variance = static_cast<float>(sum2 / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(variance + eps);
  for (int64_t i = 0; i < n; ++i) {
    out[i] *= scale;
    if (w != nullptr) out[i] *= w[i];
    if (b != nullptr) out[i] += b[i];
  }
}

namespace {

// GCC vector types: 8 and 16 floats, each lane rounded as scalar code rounds.
using F8 = float __attribute__((vector_size(32)));
using F16 = float __attribute__((vector_size(64)));

// out[i] = out[i] * scale * w[i] + b[i] (w or b may be absent), each operation rounded in turn as
// layer_norm_row's loop does, 8 lanes at a time.
void scale_affine(int64_t n, float* out, float scale, const float* w, const float* b) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    F8 v, wv = {1, 1, 1, 1, 1, 1, 1, 1}, bv = {};
    std::memcpy(&v, out + i, sizeof(v));
    v = v * scale;
    if (w != nullptr) {
      std::memcpy(&wv, w + i, sizeof(wv));
      v = v * wv;
    }
    if (b != nullptr) {
      std::memcpy(&bv, b + i, sizeof(bv));
      v = v + bv;
    }
    std::memcpy(out + i, &v, sizeof(v));
  }
  for (; i < n; ++i) {
    out[i] *= scale;
    if (w != nullptr) out[i] *= w[i];
    if (b != nullptr) out[i] += b[i];
  }
}

// layer_norm_row of R rows of n (x + r * n) in place, their sums as R independent chains (each
// row's in its own order, so the same bits), which overlap where one row's would wait on each
// add.
template <int R>
void layer_norm_group(int64_t n, float* x, const float* w, const float* b, float eps) {
  double sum[R] = {};
  for (int64_t i = 0; i < n; ++i) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) sum[r] += static_cast<double>(x[r * n + i]);
  }
  float mean[R];
  double sum2[R] = {};
  for (int r = 0; r < R; ++r) mean[r] = static_cast<float>(sum[r] / static_cast<double>(n));
  for (int64_t i = 0; i < n; ++i) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float v = x[r * n + i] - mean[r];
      x[r * n + i] = v;
      sum2[r] += static_cast<double>(v) * static_cast<double>(v);
    }
  }
  for (int r = 0; r < R; ++r) {
    const auto variance = static_cast<float>(sum2[r] / static_cast<double>(n));
    scale_affine(n, x + r * n, 1.0f / std::sqrt(variance + eps), w, b);
  }
}

}  // namespace

void layer_norm_rows(int64_t rows, int64_t n, float* x, const float* w, const float* b, float eps) {
  constexpr int kRows = 8;
  int64_t t = 0;
  for (; t + kRows <= rows; t += kRows) layer_norm_group<kRows>(n, x + t * n, w, b, eps);
  for (; t < rows; ++t) layer_norm_row(n, x + t * n, w, b, eps, x + t * n);
}

// ---- the forward pass ------------------------------------------------------------------------

Result<std::unique_ptr<Encoder>> Encoder::create(std::unique_ptr<EncoderModel> model,
                                                 int n_threads) {
  if (!model) return load_error("no model");
  auto pooling = encoder_pooling(model->config());
  if (!pooling) return std::move(pooling).error();
  return std::unique_ptr<Encoder>(new Encoder(std::move(model), *pooling, n_threads));
}

Encoder::Encoder(std::unique_ptr<EncoderModel> model, Pooling pooling, int n_threads)
    : model_(std::move(model)), pooling_(pooling), pool_(n_threads) {
  // On AVX-512 VNNI, Q8_0 and Q5_0 matrices are repacked as the batch-invariant engine's are
  // (kernels/packed.h): the weights stream once per pass whatever the batch, and every
  // row still gets one float order (the serial one) alone or in any batch.
  if (!kernels::packed_supported()) return;
  for (const EncoderLayer& l : model_->layers) {
    for (const WeightView* w :
         {&l.wqkv, &l.wq, &l.wk, &l.wv, &l.wo, &l.w_up, &l.w_gate, &l.w_down}) {
      if (w->data != nullptr && kernels::packable(*w) && !packed_.contains(w->data)) {
        packed_.emplace(w->data, std::make_unique<kernels::PackedWeights>(*w, &pool_));
      }
    }
  }
}

Status Encoder::check(std::span<const std::vector<int32_t>> inputs) const {
  const EncoderConfig& c = config();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string which = inputs.size() == 1 ? "the input" : "input " + std::to_string(i);
    if (inputs[i].empty())
      return Error::make(ErrorCode::kInvalidRequest, which + " has no tokens", "input");
    if (static_cast<int64_t>(inputs[i].size()) > c.n_ctx_train) {
      return Error::make(ErrorCode::kContextOverflow,
                         "this model's context is " + std::to_string(c.n_ctx_train) + " tokens; " +
                             which + " is " + std::to_string(inputs[i].size()) + " tokens",
                         "input", "context_length_exceeded");
    }
    for (const int32_t t : inputs[i]) {
      if (t < 0 || t >= c.n_vocab) {
        return Error::make(ErrorCode::kInvalidRequest,
                           which + " has token " + std::to_string(t) + " outside the vocabulary (" +
                               std::to_string(c.n_vocab) + ")",
                           "input");
      }
    }
  }
  return {};
}

void Encoder::linear(std::initializer_list<Product> products, const float* x) {
  struct Part {
    const kernels::PackedWeights* w;
    const float* bias;
    float* y;
    int64_t first;  // in the parts' combined rows (each part a multiple of kPackRows)
  };
  std::vector<Part> parts;
  int64_t total = 0, work = 0;
  for (const Product& p : products) {
    const WeightView& w = *p.w;
    if (const auto it = packed_.find(w.data); it != packed_.end()) {
      parts.push_back({it->second.get(), p.bias, p.y, total});
      total += w.rows;
      work += w.rows * w.cols * n_rows_;
      continue;
    }
    kernels::matmul(w, x, n_rows_, p.y, pool_, kernels::BatchForms::kInvariant);
    if (p.bias == nullptr) continue;
    pool_.parallel_for(n_rows_, 1, n_rows_ * w.rows, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float* row = p.y + t * w.rows;
        for (int64_t r = 0; r < w.rows; ++r) row[r] += p.bias[r];
      }
    });
  }
  if (parts.empty()) return;
  // Every packed type's products take Q8_0 activations: one quantization serves them all.
  const kernels::QuantizedActivations qa = kernels::quantize_activations(
      parts.front().w->type(), x, n_rows_, parts.front().w->cols(), pool_);
  pool_.parallel_for(total, kernels::kPackRows, work, [&](int64_t begin, int64_t end) {
    for (const Part& part : parts) {
      const int64_t rows = part.w->rows();
      const int64_t lo = std::max(begin, part.first), hi = std::min(end, part.first + rows);
      if (lo < hi) {
        kernels::packed_rows(*part.w, qa, part.y, rows, lo - part.first, hi - part.first,
                             part.bias);
      }
    }
  });
}

void Encoder::embed_tokens(std::span<const std::vector<int32_t>> inputs) {
  const EncoderModel& m = *model_;
  const int64_t e = config().n_embd;
  std::vector<float> type0(static_cast<size_t>(e), 0.0f), row(static_cast<size_t>(e));
  if (m.token_types.data != nullptr) kernels::dequantize_row(m.token_types, 0, type0.data());
  int64_t t = 0;
  for (const auto& in : inputs) {
    for (size_t pos = 0; pos < in.size(); ++pos, ++t) {
      float* x = x_.data() + t * e;
      kernels::dequantize_row(m.token_embd, in[pos], x);
      // As llama.cpp adds them: (token + type 0) first, then position + that.
      for (int64_t d = 0; d < e; ++d) x[d] += type0[static_cast<size_t>(d)];
      if (m.position_embd.data != nullptr) {  // bert; nomic-bert rotates q and k instead
        kernels::dequantize_row(m.position_embd, static_cast<int64_t>(pos), row.data());
        for (int64_t d = 0; d < e; ++d) x[d] = row[static_cast<size_t>(d)] + x[d];
      }
      layer_norm_row(e, x, floats(m.embd_norm), floats(m.embd_norm_b), config().norm_eps, x);
    }
  }
}

namespace {

// The queries of one head against the n keys of their input: each query's scores (a row of
// `scores`, n rounded up to 16 floats), then out = softmax(scores * scale) v, the softmax's exps
// and sum kernels::softmax_weights' (vector exps, the sum in 16 lanes). `kt` holds the keys
// transposed (kt[d * n + j]), `v` the values (row j at v + j * v_stride). W keys (scores) or W
// dimensions (weighted values) go together, each lane in the plain loop's float order: a dot
// summed over d from 0, a weighted sum over j from 0, every product rounded before it is added:
// the same bits as scalar loops, whichever queries share a pass. Queries go kQueries at a time:
// each key (or value) vector loaded serves all of them, and their sums are independent chains,
// so the adds' latency overlaps.
constexpr int kQueries = 8;

// The largest power of two <= min(kQueries, acc / nv): how many queries' NV output vectors fit in
// `acc` accumulators at once.
constexpr int queries_per_pass(int acc, int nv) {
  int g = 1;
  while (g * 2 <= kQueries && g * 2 * nv <= acc) g *= 2;
  return g;
}

// out_i[0, NV * W) = sum over j < n of w_i[j] * (row j of v)[0, NV * W) for the NQ queries i
// (weights w + i * w_stride, output out + i * out_stride), each lane summed over j from 0 (the
// plain loop's order), the NQ * NV vectors held in registers across the keys.
template <typename V, int NV, int NQ>
[[gnu::always_inline]] inline void weighted_values(const float* w, int64_t w_stride, int64_t n,
                                                   const float* v, int64_t v_stride, float* out,
                                                   int64_t out_stride) {
  constexpr int64_t W = sizeof(V) / sizeof(float);
  V acc[NQ][NV] = {};
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = v + j * v_stride;
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) {
      V x;
      std::memcpy(&x, vj + c * W, sizeof(x));
#pragma GCC unroll 8
      for (int i = 0; i < NQ; ++i) {
        const V prod = w[i * w_stride + j] * x;
        acc[i][c] = acc[i][c] + prod;
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) std::memcpy(out + i * out_stride + c * W, &acc[i][c], sizeof(V));
  }
}

// weighted_values for NQ queries, as many at a time as `acc` registers hold.
template <typename V, int NV, int NQ>
[[gnu::always_inline]] inline void weighted_values_all(const float* w, int64_t w_stride, int64_t n,
                                                       const float* v, int64_t v_stride, float* out,
                                                       int64_t out_stride) {
  constexpr int kAcc = sizeof(V) == 64 ? 16 : 8;  // of AVX-512's 32 registers, of AVX2's 16
  constexpr int G = std::min(NQ, queries_per_pass(kAcc, NV));
  static_assert(NQ % G == 0);
  for (int i = 0; i < NQ; i += G) {
    weighted_values<V, NV, G>(w + i * w_stride, w_stride, n, v, v_stride, out + i * out_stride,
                              out_stride);
  }
}

// NQ queries (rows q + i * q_stride) of one head: scores (rows of `scores`, s_stride apart), the
// softmax, and the weighted values into out + i * out_stride.
template <typename V, int NQ>
[[gnu::always_inline]] inline void attend_queries(const float* q, int64_t q_stride, const float* kt,
                                                  int64_t n, int64_t hd, const float* v,
                                                  int64_t v_stride, float scale, float* scores,
                                                  int64_t s_stride, float* out,
                                                  int64_t out_stride) {
  constexpr int64_t W = sizeof(V) / sizeof(float);
  const int64_t nw = n / W * W;
  for (int64_t j = 0; j < nw; j += W) {
    V dot[NQ] = {};
    for (int64_t d = 0; d < hd; ++d) {
      V k;
      std::memcpy(&k, kt + d * n + j, sizeof(k));
#pragma GCC unroll 8
      for (int i = 0; i < NQ; ++i) {
        const V prod = q[i * q_stride + d] * k;
        dot[i] = dot[i] + prod;
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NQ; ++i) std::memcpy(scores + i * s_stride + j, &dot[i], sizeof(V));
  }
  for (int i = 0; i < NQ; ++i) {
    const float* qi = q + i * q_stride;
    float* s = scores + i * s_stride;
    for (int64_t j = nw; j < n; ++j) {
      float dot = 0.0f;
      for (int64_t d = 0; d < hd; ++d) dot += qi[d] * kt[d * n + j];
      s[j] = dot;
    }
    for (int64_t j = 0; j < n; ++j) s[j] *= scale;
    const float inv = kernels::softmax_weights(n, s);
    for (int64_t j = 0; j < n; ++j) s[j] *= inv;  // the weights
  }
  // The weighted values, up to 4 vectors of each output at a time over all the keys.
  const int64_t hw = hd / W * W;
  int64_t d = 0;
  for (; d + 4 * W <= hw; d += 4 * W) {
    weighted_values_all<V, 4, NQ>(scores, s_stride, n, v + d, v_stride, out + d, out_stride);
  }
  switch ((hw - d) / W) {
    case 3:
      weighted_values_all<V, 3, NQ>(scores, s_stride, n, v + d, v_stride, out + d, out_stride);
      break;
    case 2:
      weighted_values_all<V, 2, NQ>(scores, s_stride, n, v + d, v_stride, out + d, out_stride);
      break;
    case 1:
      weighted_values_all<V, 1, NQ>(scores, s_stride, n, v + d, v_stride, out + d, out_stride);
      break;
    default:
      break;
  }
  for (int i = 0; i < NQ; ++i) {
    const float* s = scores + i * s_stride;
    for (d = hw; d < hd; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n; ++j) acc += s[j] * v[j * v_stride + d];
      out[i * out_stride + d] = acc;
    }
  }
}

// Every one of the n queries of one head (rows q + i * stride, outputs out + i * stride; keys
// and values as above), kQueries at a time, the rest one by one. `scores` holds kQueries rows
// of n rounded up to 16 floats.
template <typename V>
[[gnu::always_inline]] inline void attend_head(const float* q, const float* kt, int64_t n,
                                               int64_t hd, const float* v, int64_t stride,
                                               float scale, float* scores, float* out) {
  const int64_t s_stride = (n + 15) / 16 * 16;
  int64_t i = 0;
  for (; i + kQueries <= n; i += kQueries) {
    attend_queries<V, kQueries>(q + i * stride, stride, kt, n, hd, v, stride, scale, scores,
                                s_stride, out + i * stride, stride);
  }
  for (; i < n; ++i) {
    attend_queries<V, 1>(q + i * stride, stride, kt, n, hd, v, stride, scale, scores, s_stride,
                         out + i * stride, stride);
  }
}

void attend_head_base(const float* q, const float* kt, int64_t n, int64_t hd, const float* v,
                      int64_t stride, float scale, float* scores, float* out) {
  attend_head<F8>(q, kt, n, hd, v, stride, scale, scores, out);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// 16 lanes on AVX-512; no fused multiply-add (the products are rounded as in the scalar loop).
__attribute__((target("avx512f"), optimize("fp-contract=off"))) void attend_head_avx512(
    const float* q, const float* kt, int64_t n, int64_t hd, const float* v, int64_t stride,
    float scale, float* scores, float* out) {
  attend_head<F16>(q, kt, n, hd, v, stride, scale, scores, out);
}
#endif

// gelu_ggml over a row in place: the arguments rounded to F16 (fp32_to_fp16_row, 64 at a time),
// then the table (gelu_table).
void gelu_row_base(int64_t n, float* row) {
  const float* table = gelu_table();
  uint16_t h[64];
  for (int64_t i0 = 0; i0 < n; i0 += 64) {
    const int64_t m = std::min<int64_t>(64, n - i0);
    kernels::fp32_to_fp16_row(row + i0, h, m);
    for (int64_t i = 0; i < m; ++i) {
      const float x = row[i0 + i];
      row[i0 + i] = x <= -10.0f ? 0.0f : x >= 10.0f ? x : table[h[i]];
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// The same 16 at a time: the rounding to F16 (to nearest, as fp32_to_fp16_row) and the table
// lookups in vector instructions; the same values. (GCC 12's AVX-512 intrinsics start from an
// undefined vector, which its uninitialized-use warnings flag.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void gelu_row_avx512(int64_t n, float* row) {
  const float* table = gelu_table();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(row + i);
    const __m256i half = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    __m512 g = _mm512_i32gather_ps(_mm512_cvtepu16_epi32(half), table, 4);
    g = _mm512_mask_mov_ps(g, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-10.0f), _CMP_LE_OQ),
                           _mm512_setzero_ps());
    g = _mm512_mask_mov_ps(g, _mm512_cmp_ps_mask(x, _mm512_set1_ps(10.0f), _CMP_GE_OQ), x);
    _mm512_storeu_ps(row + i, g);
  }
  gelu_row_base(n - i, row + i);
}
#pragma GCC diagnostic pop
#endif

using AttendHeadFn = void (*)(const float*, const float*, int64_t, int64_t, const float*, int64_t,
                              float, float*, float*);
using GeluRowFn = void (*)(int64_t, float*);

// The encoder's own vector kernels, chosen once from the CPU: AVX-512 forms (GCC on x86-64) or
// the base ones; the same results either way.
struct EncoderKernels {
  AttendHeadFn attend_head;
  GeluRowFn gelu_row;
};

const EncoderKernels& encoder_kernels() {
  static const EncoderKernels k = [] {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (__builtin_cpu_supports("avx512f"))
      return EncoderKernels{attend_head_avx512, gelu_row_avx512};
#endif
    return EncoderKernels{attend_head_base, gelu_row_base};
  }();
  return k;
}

}  // namespace

void gelu_ggml_row(int64_t n, float* x) {
  encoder_kernels().gelu_row(n, x);
}

void Encoder::attention() {
  const EncoderConfig& c = config();
  const int64_t e = c.n_embd, hd = c.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t n_inputs = static_cast<int64_t>(starts_.size()) - 1;
  const AttendHeadFn attend = encoder_kernels().attend_head;
  // One task per (input, head): its queries against its own keys only, the head's keys laid
  // out transposed once (attend_head).
  pool_.parallel_for(n_inputs * c.n_head, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, kt;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t in = task / c.n_head, h = task % c.n_head;
      const int64_t s0 = starts_[static_cast<size_t>(in)];
      const int64_t n = starts_[static_cast<size_t>(in) + 1] - s0;
      scores.resize(static_cast<size_t>(kQueries * ((n + 15) / 16 * 16)));  // softmax's room
      kt.resize(static_cast<size_t>(n * hd));
      for (int64_t j = 0; j < n; ++j) {
        const float* k = k_.data() + (s0 + j) * e + h * hd;
        for (int64_t d = 0; d < hd; ++d) kt[static_cast<size_t>(d * n + j)] = k[d];
      }
      const int64_t at = s0 * e + h * hd;
      attend(q_.data() + at, kt.data(), n, hd, v_.data() + at, e, scale, scores.data(),
             attn_.data() + at);
    }
  });
}

void Encoder::layer(const EncoderLayer& l) {
  project_qkv(l);
  if (config().rope) rotate_qk();
  attention();
  linear({{&l.wo, floats(l.bo), tmp_.data()}}, attn_.data());
  // x = LayerNorm(attention + x), then x = LayerNorm(FFN(x) + x).
  add_and_norm(l.attn_norm, l.attn_norm_b);
  if (l.w_gate.data != nullptr) {
    linear({{&l.w_up, floats(l.b_up), ffn_.data()}, {&l.w_gate, nullptr, gate_.data()}}, x_.data());
    const int64_t f = config().n_ff;
    pool_.parallel_for(n_rows_, 1, n_rows_ * f, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        kernels::swiglu_row(f, gate_.data() + t * f, ffn_.data() + t * f, ffn_.data() + t * f);
    });
  } else {
    linear({{&l.w_up, floats(l.b_up), ffn_.data()}}, x_.data());
    const int64_t f = config().n_ff;
    pool_.parallel_for(n_rows_, 1, [&](int64_t begin, int64_t end) {
      gelu_ggml_row((end - begin) * f, ffn_.data() + begin * f);
    });
  }
  linear({{&l.w_down, floats(l.b_down), tmp_.data()}}, ffn_.data());
  add_and_norm(l.out_norm, l.out_norm_b);
}

void Encoder::project_qkv(const EncoderLayer& l) {
  if (l.wqkv.data == nullptr) {
    linear({{&l.wq, floats(l.bq), q_.data()},
            {&l.wk, floats(l.bk), k_.data()},
            {&l.wv, floats(l.bv), v_.data()}},
           x_.data());
    return;
  }
  const int64_t e = config().n_embd;
  linear({{&l.wqkv, nullptr, qkv_.data()}}, x_.data());
  for (int64_t t = 0; t < n_rows_; ++t) {
    const float* row = qkv_.data() + t * 3 * e;
    std::copy(row, row + e, q_.data() + t * e);
    std::copy(row + e, row + 2 * e, k_.data() + t * e);
    std::copy(row + 2 * e, row + 3 * e, v_.data() + t * e);
  }
}

void Encoder::rotate_qk() {
  const EncoderConfig& c = config();
  const float theta_scale = kernels::rope_theta_scale(c.rope_theta, c.rope_dim);
  // Rows on the pool, each rotated by its position in its own input.
  pool_.parallel_for(n_rows_, 1, n_rows_ * c.n_embd, [&](int64_t begin, int64_t end) {
    std::vector<float> cache(static_cast<size_t>(c.rope_dim));
    auto in = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) -
                                  starts_.begin() - 1);
    for (int64_t t = begin; t < end; ++t) {
      while (t >= starts_[in + 1]) ++in;
      kernels::rope_cache(t - starts_[in], c.rope_dim, theta_scale, 1.0f, nullptr, cache.data());
      kernels::rope_apply(cache.data(), c.rope_dim, /*neox=*/true, c.n_head, c.head_dim,
                          q_.data() + t * c.n_embd);
      kernels::rope_apply(cache.data(), c.rope_dim, /*neox=*/true, c.n_head, c.head_dim,
                          k_.data() + t * c.n_embd);
    }
  });
}

void Encoder::add_and_norm(const WeightView& w, const WeightView& b) {
  const int64_t e = config().n_embd;
  // Rows on the pool: each row's sums are its own, in the same order whoever runs it.
  pool_.parallel_for(n_rows_, 8, n_rows_ * e * 4, [&](int64_t begin, int64_t end) {
    float* x = x_.data() + begin * e;
    const float* sub = tmp_.data() + begin * e;
    for (int64_t i = 0; i < (end - begin) * e; ++i) x[i] = sub[i] + x[i];
    layer_norm_rows(end - begin, e, x, floats(w), floats(b), config().norm_eps);
  });
}

Result<std::vector<std::vector<float>>> Encoder::embed(
    std::span<const std::vector<int32_t>> inputs) {
  if (Status s = check(inputs); !s) return s.error();
  const EncoderConfig& c = config();
  starts_.assign(1, 0);
  for (const auto& in : inputs) starts_.push_back(starts_.back() + static_cast<int64_t>(in.size()));
  n_rows_ = starts_.back();
  const auto rows = static_cast<size_t>(n_rows_), e = static_cast<size_t>(c.n_embd);
  for (auto* buf : {&x_, &q_, &k_, &v_, &attn_, &tmp_}) buf->resize(rows * e);
  ffn_.resize(rows * static_cast<size_t>(c.n_ff));
  if (c.rope) gate_.resize(rows * static_cast<size_t>(c.n_ff));
  if (model_->layers.front().wqkv.data != nullptr) qkv_.resize(rows * 3 * e);
  embed_tokens(inputs);
  for (const EncoderLayer& l : model_->layers) layer(l);
  std::vector<std::vector<float>> out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    PoolAccumulator acc(pooling_, c.n_embd);
    const int64_t n = static_cast<int64_t>(inputs[i].size());
    for (int64_t pos = 0; pos < n; ++pos) {
      if (!acc.wants(pos, n)) continue;
      acc.add(std::span<const float>(x_.data() + (starts_[i] + pos) * c.n_embd, e));
    }
    out[i] = acc.result();
    l2_normalize(out[i]);
  }
  return out;
}

}  // namespace ferry::engine
