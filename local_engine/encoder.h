// An encoder-only transformer (GGUF "bert": BERT, bge, MiniLM; "nomic-bert") for embeddings:
// the model as read from a ModelSource (EncoderModel, immutable, shareable between threads) and
// Encoder, which
// runs one bidirectional forward pass over a batch of inputs and pools each input's final hidden
// states into one L2-normalized vector. One thread drives an Encoder; it uses its own compute
// pool inside embed().
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "local_engine/embeddings.h"
#include "local_engine/kernels/packed.h"
#include "local_engine/kernels/thread_pool.h"
#include "local_engine/model_source.h"
#include "local_engine/weights.h"

namespace ferry::engine {

// Whether general.architecture names an encoder ferry knows of ("bert" and "nomic-bert" run;
// "jina-bert-v2" and "t5encoder" are refused by name at load).
bool is_encoder_arch(std::string_view arch);

struct EncoderConfig {
  std::string arch_name;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t head_dim = 0;  // n_embd / n_head
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;    // rows of the position embedding: the longest input
  int64_t n_token_types = 0;  // rows of token_types.weight (0: none; type 0 is used)
  float norm_eps = 1e-12f;    // attention.layer_norm_epsilon
  int64_t pooling_type = -1;  // <arch>.pooling_type as the file says (llama.cpp's numbering)
  // nomic-bert: no position embedding; q and k rotated (NeoX pairs) by position in the input.
  bool rope = false;
  int64_t rope_dim = 0;
  float rope_theta = 10000.0f;
};

struct EncoderLayer {
  WeightView wqkv;                    // (3 * n_embd, n_embd): q, k, v fused; absent when apart
  WeightView wq, wk, wv, wo;          // (n_embd, n_embd)
  WeightView bq, bk, bv, bo;          // (n_embd) F32; absent in nomic-bert
  WeightView attn_norm, attn_norm_b;  // post-attention LayerNorm (n_embd) F32
  WeightView w_up;                    // (n_ff, n_embd)
  WeightView w_gate;                  // (n_ff, n_embd): nomic-bert's SwiGLU gate; else absent
  WeightView b_up;                    // (n_ff) F32
  WeightView w_down;                  // (n_embd, n_ff)
  WeightView b_down;                  // (n_embd) F32
  WeightView out_norm, out_norm_b;    // post-FFN LayerNorm (n_embd) F32
};

class EncoderModel {
 public:
  // Reads and checks the hyper-parameters and every tensor's type and shape. Errors
  // (kInvalidRequest) name what is wrong; the source must outlive nothing (it is kept).
  static Result<std::unique_ptr<EncoderModel>> load(std::shared_ptr<const ModelSource> source);

  const EncoderConfig& config() const { return config_; }

  WeightView token_embd;              // (n_vocab, n_embd)
  WeightView token_types;             // (n_token_types, n_embd); rows == 0 when absent
  WeightView position_embd;           // (n_ctx_train, n_embd); absent in nomic-bert
  WeightView embd_norm, embd_norm_b;  // (n_embd) F32
  std::vector<EncoderLayer> layers;

 private:
  std::shared_ptr<const ModelSource> source_;
  EncoderConfig config_;
};

// The pooling of an encoder's pooling_type: 1 mean, 2 cls. Errors (kInvalidRequest) name the
// others (absent, none, last, rank) and why /v1/embeddings cannot use them.
Result<Pooling> encoder_pooling(const EncoderConfig& config);

class Encoder {
 public:
  // n_threads 0: hardware concurrency. Fails when the model's pooling is not one it runs.
  static Result<std::unique_ptr<Encoder>> create(std::unique_ptr<EncoderModel> model,
                                                 int n_threads);
  const EncoderModel& model() const { return *model_; }
  const EncoderConfig& config() const { return model_->config(); }
  Pooling pooling() const { return pooling_; }
  int64_t n_ctx() const { return config().n_ctx_train; }

  // One forward pass over every input (each its own attention span, computed exactly as if it
  // were alone); returns one L2-normalized vector of n_embd floats per input. Errors
  // (kInvalidRequest): an empty input, a token outside the vocabulary; (kContextOverflow): an
  // input longer than n_ctx(), with the numbers.
  Result<std::vector<std::vector<float>>> embed(std::span<const std::vector<int32_t>> inputs);

 private:
  Encoder(std::unique_ptr<EncoderModel> model, Pooling pooling, int n_threads);
  Status check(std::span<const std::vector<int32_t>> inputs) const;
  // x_ = LayerNorm(token + position + type-0 embeddings), rows in input order.
  void embed_tokens(std::span<const std::vector<int32_t>> inputs);
  void layer(const EncoderLayer& l);
  // q_, k_, v_ from x_ (three products, or one fused and split).
  void project_qkv(const EncoderLayer& l);
  // RoPE on q_ and k_ at each row's position in its input (nomic-bert).
  void rotate_qk();
  // attn_ = softmax(q k^T / sqrt(head_dim)) v per input and head.
  void attention();
  // x_ = LayerNorm(tmp_ + x_) row by row (the sublayer's output added to its input).
  void add_and_norm(const WeightView& w, const WeightView& b);
  // One matrix product of the n_rows_ rows of an input: y = W x + b (bias nullptr: none).
  struct Product {
    const WeightView* w;
    const float* bias;
    float* y;
  };
  // The products of one input x: the packed ones in one job on the pool over all their row
  // groups, x quantized once (on the pool) and each bias added as the rows are stored; the
  // others one by one, the bias after.
  void linear(std::initializer_list<Product> products, const float* x);

  std::unique_ptr<EncoderModel> model_;
  Pooling pooling_;
  kernels::ThreadPool pool_;
  int64_t n_rows_ = 0;
  std::vector<int64_t> starts_;  // each input's first row, and the total at the end
  std::vector<float> x_, q_, k_, v_, attn_, tmp_, ffn_, gate_, qkv_;
  // Packed Q8_0 weights by their data pointer (AVX-512 VNNI only; else empty).
  std::unordered_map<const void*, std::unique_ptr<kernels::PackedWeights>> packed_;
};

// gelu as ggml's CPU backend computes it: the tanh form, through an F16 table (the argument
// and the result rounded to F16) for |x| < 10; 0 at or below -10 and x at or above 10.
float gelu_ggml(float x);
// gelu_ggml of each of x[0, n), in place (AVX-512 where the CPU has it; the same values).
void gelu_ggml_row(int64_t n, float* x);
// out = (x - mean) / sqrt(var + eps) * w + b over n elements, the mean and variance summed in
// double as ggml_norm does. out may alias x.
void layer_norm_row(int64_t n, const float* x, const float* w, const float* b, float eps,
                    float* out);
// layer_norm_row of each of `rows` rows of n floats at x, in place: the same bits, several rows'
// sums at once.
void layer_norm_rows(int64_t rows, int64_t n, float* x, const float* w, const float* b, float eps);

}  // namespace ferry::engine
