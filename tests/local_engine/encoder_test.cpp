// The bert encoder on small synthetic models (ferry model synth --arch bert): its embeddings
// against a straightforward double-precision forward pass written here, mean and cls pooling,
// an input's vector the same alone and in any batch, ggml's gelu, and the refusals (pooling
// types, other encoder architectures, context, vocabulary).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <future>
#include <vector>

#include "gguf/gguf_writer.h"
#include "local_engine/encoder.h"
#include "local_engine/encoder_runner.h"
#include "local_engine/gguf_source.h"
#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/matmul.h"
#include "local_engine/model.h"
#include "model_tools/model_tools.h"
#include "tests/common/temp_dir.h"
#include "tokenizer/tokenizer.h"

namespace ferry::engine {
namespace {

// Files of this test binary, removed when it exits.
std::string temp_path(const std::string& name) {
  static const ferry::testing::TempDir dir("ferry_encoder");
  return dir.file(name);
}

model_tools::SynthOptions small_bert(const std::string& pooling, const std::string& type = "F32") {
  model_tools::SynthOptions o;
  o.arch = "bert";
  o.n_embd = 64;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_ff = 128;
  o.n_ctx = 48;
  o.pooling = pooling;
  o.type = type;
  o.seed = 7;
  return o;
}

std::unique_ptr<Encoder> open_encoder(const std::string& path) {
  auto src = GgufSource::open(path);
  EXPECT_TRUE(src) << (src ? "" : src.error().message);
  if (!src) return nullptr;
  auto model = EncoderModel::load(*src);
  EXPECT_TRUE(model) << (model ? "" : model.error().message);
  if (!model) return nullptr;
  auto enc = Encoder::create(std::move(model).value(), 2);
  EXPECT_TRUE(enc) << (enc ? "" : enc.error().message);
  return enc ? std::move(enc).value() : nullptr;
}

std::unique_ptr<Encoder> synth_encoder(const model_tools::SynthOptions& o,
                                       const std::string& name) {
  const std::string path = temp_path(name);
  const Status s = model_tools::write_synth_model(o, path);
  EXPECT_TRUE(s) << (s ? "" : s.error().message);
  auto enc = open_encoder(path);
  return enc;  // the source keeps the file mapped; the path may go
}

// ---- the double-precision reference ---------------------------------------------------------

using Vec = std::vector<double>;

Vec row(const WeightView& w, int64_t r) {
  std::vector<float> f(static_cast<size_t>(w.cols));
  kernels::dequantize_row(w, r, f.data());
  return Vec(f.begin(), f.end());
}

Vec linear(const WeightView& w, const WeightView& b, const Vec& x) {
  Vec y(static_cast<size_t>(w.rows));
  const Vec bias = b.data != nullptr ? row(b, 0) : Vec(y.size(), 0.0);
  for (int64_t r = 0; r < w.rows; ++r) {
    const Vec wr = row(w, r);
    double s = bias[static_cast<size_t>(r)];
    for (size_t i = 0; i < wr.size(); ++i) s += wr[i] * x[i];
    y[static_cast<size_t>(r)] = s;
  }
  return y;
}

Vec layer_norm(const Vec& x, const WeightView& w, const WeightView& b, double eps) {
  double mean = 0, var = 0;
  for (const double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (const double v : x) var += (v - mean) * (v - mean);
  var /= static_cast<double>(x.size());
  const Vec g = row(w, 0), bb = row(b, 0);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) / std::sqrt(var + eps) * g[i] + bb[i];
  return y;
}

// q, k and v of one row at position `pos` (fused or apart; nomic-bert's NeoX RoPE).
void reference_qkv(const EncoderConfig& c, const EncoderLayer& l, const Vec& x, size_t pos, Vec& q,
                   Vec& k, Vec& v) {
  const size_t e = static_cast<size_t>(c.n_embd);
  if (l.wqkv.data != nullptr) {
    const Vec qkv = linear(l.wqkv, WeightView{}, x);
    q.assign(qkv.begin(), qkv.begin() + e);
    k.assign(qkv.begin() + e, qkv.begin() + 2 * e);
    v.assign(qkv.begin() + 2 * e, qkv.end());
  } else {
    q = linear(l.wq, l.bq, x);
    k = linear(l.wk, l.bk, x);
    v = linear(l.wv, l.bv, x);
  }
  if (!c.rope) return;
  const size_t hd = static_cast<size_t>(c.head_dim), half = static_cast<size_t>(c.rope_dim) / 2;
  for (Vec* t : {&q, &k}) {
    for (size_t h = 0; h < static_cast<size_t>(c.n_head); ++h) {
      for (size_t i = 0; i < half; ++i) {
        const double theta =
            static_cast<double>(pos) *
            std::pow(static_cast<double>(c.rope_theta),
                     -2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dim));
        double& a = (*t)[h * hd + i];
        double& b = (*t)[h * hd + i + half];
        const double a0 = a, b0 = b;
        a = a0 * std::cos(theta) - b0 * std::sin(theta);
        b = a0 * std::sin(theta) + b0 * std::cos(theta);
      }
    }
  }
}

// The FFN's inner activation: gelu(up x) (ggml's table), or silu(gate x) * up x.
Vec reference_ffn_inner(const EncoderLayer& l, const Vec& x) {
  Vec up = linear(l.w_up, l.b_up, x);
  if (l.w_gate.data == nullptr) {
    for (double& u : up) u = gelu_ggml(static_cast<float>(u));
    return up;
  }
  const Vec gate = linear(l.w_gate, WeightView{}, x);
  for (size_t i = 0; i < up.size(); ++i) up[i] *= gate[i] / (1.0 + std::exp(-gate[i]));
  return up;
}

// The embedding of one input, every step in double (ggml's F16-table gelu aside, which the
// encoder must reproduce: it is tested against the tanh formula on its own).
Vec reference_embedding(const EncoderModel& m, const std::vector<int32_t>& ids, Pooling pooling) {
  const EncoderConfig& c = m.config();
  const size_t n = ids.size(), e = static_cast<size_t>(c.n_embd),
               hd = static_cast<size_t>(c.head_dim);
  std::vector<Vec> x(n);
  const Vec type0 = row(m.token_types, 0);
  for (size_t t = 0; t < n; ++t) {
    const Vec tok = row(m.token_embd, ids[t]);
    const Vec pos = m.position_embd.data != nullptr ? row(m.position_embd, static_cast<int64_t>(t))
                                                    : Vec(e, 0.0);
    x[t].resize(e);
    for (size_t d = 0; d < e; ++d) x[t][d] = tok[d] + type0[d] + pos[d];
    x[t] = layer_norm(x[t], m.embd_norm, m.embd_norm_b, c.norm_eps);
  }
  for (const EncoderLayer& l : m.layers) {
    std::vector<Vec> q(n), k(n), v(n), a(n, Vec(e, 0.0));
    for (size_t t = 0; t < n; ++t) reference_qkv(c, l, x[t], t, q[t], k[t], v[t]);
    for (size_t h = 0; h < static_cast<size_t>(c.n_head); ++h) {
      for (size_t i = 0; i < n; ++i) {
        Vec s(n);
        double max = -1e300, sum = 0;
        for (size_t j = 0; j < n; ++j) {
          double dot = 0;
          for (size_t d = 0; d < hd; ++d) dot += q[i][h * hd + d] * k[j][h * hd + d];
          s[j] = dot / std::sqrt(static_cast<double>(hd));
          max = std::max(max, s[j]);
        }
        for (double& z : s) sum += (z = std::exp(z - max));
        for (size_t j = 0; j < n; ++j)
          for (size_t d = 0; d < hd; ++d) a[i][h * hd + d] += s[j] / sum * v[j][h * hd + d];
      }
    }
    for (size_t t = 0; t < n; ++t) {
      Vec o = linear(l.wo, l.bo, a[t]);
      for (size_t d = 0; d < e; ++d) o[d] += x[t][d];
      x[t] = layer_norm(o, l.attn_norm, l.attn_norm_b, c.norm_eps);
      const Vec up = reference_ffn_inner(l, x[t]);
      Vec down = linear(l.w_down, l.b_down, up);
      for (size_t d = 0; d < e; ++d) down[d] += x[t][d];
      x[t] = layer_norm(down, l.out_norm, l.out_norm_b, c.norm_eps);
    }
  }
  Vec out(e, 0.0);
  for (size_t t = 0; t < (pooling == Pooling::kCls ? 1 : n); ++t)
    for (size_t d = 0; d < e; ++d) out[d] += x[t][d];
  double norm = 0;
  for (const double z : out) norm += z * z;
  for (double& z : out) z /= std::sqrt(norm);
  return out;
}

double cosine(const std::vector<float>& a, const Vec& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += b[i] * b[i];
  }
  return dot / std::sqrt(na * nb);
}

const std::vector<std::vector<int32_t>> kInputs = {
    {101, 150, 160, 170, 102},
    {101, 200, 102},
    {101, 120, 130, 140, 150, 160, 170, 180, 190, 102},
    {101, 102}};

// The encoder's vectors for kInputs against the reference over the same weights.
void expect_near_reference(Encoder& enc, double max_abs, double min_cosine) {
  auto got = enc.embed(kInputs);
  ASSERT_TRUE(got) << got.error().message;
  for (size_t i = 0; i < kInputs.size(); ++i) {
    const Vec want = reference_embedding(enc.model(), kInputs[i], enc.pooling());
    double worst = 0;
    for (size_t d = 0; d < want.size(); ++d)
      worst = std::max(worst, std::abs((*got)[i][d] - want[d]));
    EXPECT_LT(worst, max_abs) << "input " << i;
    EXPECT_GT(cosine((*got)[i], want), min_cosine) << "input " << i;
  }
}

void expect_matches_reference(const std::string& pooling, const std::string& type, double max_abs,
                              double min_cosine) {
  SCOPED_TRACE(pooling + " " + type);
  auto enc = synth_encoder(small_bert(pooling, type), pooling + type + ".gguf");
  ASSERT_TRUE(enc);
  EXPECT_EQ(enc->pooling(), pooling == "cls" ? Pooling::kCls : Pooling::kMean);
  expect_near_reference(*enc, max_abs, min_cosine);
}

TEST(Encoder, MeanPoolingMatchesTheDoubleReference) {
  expect_matches_reference("mean", "F32", 2e-5, 1 - 1e-9);
}

TEST(Encoder, ClsPoolingMatchesTheDoubleReference) {
  expect_matches_reference("cls", "F32", 2e-5, 1 - 1e-9);
}

// F16 matrices take F16-rounded activations (as ggml's F16 products do): a looser bound.
TEST(Encoder, F16WeightsMatchTheReferenceOverTheSameWeights) {
  expect_matches_reference("mean", "F16", 3e-4, 1 - 1e-7);
}

TEST(Encoder, NomicBertMatchesTheDoubleReference) {
  model_tools::SynthOptions o = small_bert("mean");
  o.arch = "nomic-bert";
  auto enc = synth_encoder(o, "nomic.gguf");
  ASSERT_TRUE(enc);
  EXPECT_TRUE(enc->config().rope);
  EXPECT_EQ(enc->model().position_embd.data, nullptr);
  EXPECT_NE(enc->model().layers[0].wqkv.data, nullptr);
  expect_near_reference(*enc, 2e-5, 1 - 1e-9);
}

TEST(Encoder, AnInputIsTheSameAloneAndInAnyBatch) {
  auto enc = synth_encoder(small_bert("mean", "Q8_0"), "batch.gguf");
  ASSERT_TRUE(enc);
  auto all = enc->embed(kInputs);
  ASSERT_TRUE(all) << all.error().message;
  for (size_t i = 0; i < kInputs.size(); ++i) {
    auto alone = enc->embed(std::span(&kInputs[i], 1));
    ASSERT_TRUE(alone);
    EXPECT_EQ((*alone)[0], (*all)[i]) << "input " << i;  // bit for bit
  }
  std::vector<std::vector<int32_t>> reversed(kInputs.rbegin(), kInputs.rend());
  auto rev = enc->embed(reversed);
  ASSERT_TRUE(rev);
  for (size_t i = 0; i < kInputs.size(); ++i) EXPECT_EQ((*rev)[kInputs.size() - 1 - i], (*all)[i]);
}

TEST(Encoder, MeanAndClsDiffer) {
  auto mean = synth_encoder(small_bert("mean"), "m.gguf");
  auto cls = synth_encoder(small_bert("cls"), "c.gguf");
  ASSERT_TRUE(mean && cls);
  auto a = mean->embed(kInputs), b = cls->embed(kInputs);
  ASSERT_TRUE(a && b);
  EXPECT_NE((*a)[0], (*b)[0]);
}

TEST(Encoder, GeluIsGgmlsF16Table) {
  for (float x = -12.0f; x <= 12.0f; x += 0.01f) {
    const double exact = 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    const float g = gelu_ggml(x);
    EXPECT_NEAR(g, exact, 2e-3 * std::max(1.0, std::abs(exact))) << x;
    if (x > -10.0f && x < 10.0f) {
      EXPECT_EQ(kernels::fp16_to_fp32(kernels::fp32_to_fp16(g)), g);
    }
  }
  EXPECT_EQ(gelu_ggml(-10.0f), 0.0f);
  EXPECT_EQ(gelu_ggml(10.5f), 10.5f);
}

// The row form (16 at a time on AVX-512) gives gelu_ggml's value for every element, at the
// table's edges (+-10), between F16 values and in a tail shorter than a vector.
TEST(Encoder, GeluRowEqualsGeluOfEachElement) {
  std::vector<float> x;
  for (float v = -12.0f; v <= 12.0f; v += 0.0137f) x.push_back(v);
  for (const float v : {-10.0f, 10.0f, std::nextafter(-10.0f, 0.0f), std::nextafter(10.0f, 0.0f),
                        0.0f, -0.0f, 1e-8f, 65504.0f, -1e6f}) {
    x.push_back(v);
  }
  for (const size_t n : {x.size(), size_t{15}, size_t{17}}) {
    std::vector<float> row(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
    gelu_ggml_row(static_cast<int64_t>(n), row.data());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(row[i], gelu_ggml(x[i])) << x[i];
  }
}

// layer_norm_rows (several rows' sums at once) is layer_norm_row on each row, bit for bit, with
// and without the weight and bias, for whole groups of rows and the rest.
TEST(Encoder, LayerNormRowsEqualLayerNormRowOnEachRow) {
  for (const int64_t n : {int64_t{37}, int64_t{384}}) {
    std::vector<float> w(static_cast<size_t>(n)), b(w.size());
    for (int64_t i = 0; i < n; ++i) {
      w[static_cast<size_t>(i)] = 0.5f + 0.01f * static_cast<float>(i % 17);
      b[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i % 5) - 0.2f;
    }
    for (const int64_t rows : {int64_t{1}, int64_t{8}, int64_t{19}}) {
      std::vector<float> x(static_cast<size_t>(rows * n));
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 13)) +
               (i % 7 == 0 ? 1e-6f : 0.0f);
      }
      for (const bool affine : {false, true}) {
        const float* wp = affine ? w.data() : nullptr;
        const float* bp = affine ? b.data() : nullptr;
        std::vector<float> expect(x.size()), got = x;
        for (int64_t t = 0; t < rows; ++t) {
          layer_norm_row(n, x.data() + t * n, wp, bp, 1e-12f, expect.data() + t * n);
        }
        layer_norm_rows(rows, n, got.data(), wp, bp, 1e-12f);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_EQ(got[i], expect[i]) << "n " << n << " rows " << rows << " at " << i;
        }
      }
    }
  }
}

TEST(Encoder, RefusesLongInputsAndUnknownTokens) {
  auto enc = synth_encoder(small_bert("mean"), "r.gguf");
  ASSERT_TRUE(enc);
  std::vector<std::vector<int32_t>> long_input = {std::vector<int32_t>(49, 150)};
  auto r = enc->embed(long_input);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kContextOverflow);
  EXPECT_NE(r.error().message.find("context is 48 tokens; the input is 49"), std::string::npos)
      << r.error().message;
  std::vector<std::vector<int32_t>> exactly = {std::vector<int32_t>(48, 150)};
  EXPECT_TRUE(enc->embed(exactly));
  std::vector<std::vector<int32_t>> bad = {{101, 102}, {101, 1 << 20}};
  r = enc->embed(bad);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("input 1 has token 1048576 outside the vocabulary"),
            std::string::npos)
      << r.error().message;
  std::vector<std::vector<int32_t>> empty = {{}};
  EXPECT_FALSE(enc->embed(empty));
}

// A synthetic bert file with one metadata key changed.
std::string with_key(const std::string& name, const std::string& key, gguf::Value value) {
  auto w = model_tools::build_synth_model(small_bert("mean"));
  EXPECT_TRUE(w);
  w->set(key, std::move(value));
  const std::string path = temp_path(name);
  EXPECT_TRUE(w->write_file(path));
  return path;
}

std::string load_error_of(const std::string& path) {
  auto src = GgufSource::open(path);
  if (!src) return src.error().message;
  auto model = EncoderModel::load(*src);
  if (!model) return model.error().message;
  auto enc = Encoder::create(std::move(model).value(), 1);
  return enc ? "" : enc.error().message;
}

TEST(Encoder, RefusesPoolingsItCannotAnswerByName) {
  const std::pair<uint32_t, const char*> cases[] = {
      {0, "bert.pooling_type is 0 (none"},
      {3, "bert.pooling_type is 3 (last)"},
      {4, "bert.pooling_type is 4 (rank"},
      {9, "bert.pooling_type 9 is not one ferry knows"}};
  for (const auto& [type, want] : cases) {
    const std::string msg = load_error_of(
        with_key("p" + std::to_string(type), "bert.pooling_type", gguf::Value::u32(type)));
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  }
}

TEST(Encoder, RefusesOtherEncodersAndCausalFilesByName) {
  std::string msg =
      load_error_of(with_key("jina", "general.architecture", gguf::Value::string("jina-bert-v2")));
  EXPECT_NE(msg.find("encoder architecture 'jina-bert-v2' is not supported yet"), std::string::npos)
      << msg;
  msg = load_error_of(with_key("causal", "bert.attention.causal", gguf::Value::boolean(true)));
  EXPECT_NE(msg.find("not a bidirectional encoder"), std::string::npos) << msg;
  EXPECT_TRUE(is_encoder_arch("bert"));
  EXPECT_FALSE(is_encoder_arch("llama"));
}

TEST(Encoder, SynthBertCarriesAWordPieceVocabulary) {
  const std::string path = temp_path("vocab.gguf");
  ASSERT_TRUE(model_tools::write_synth_model(small_bert("mean"), path));
  auto tok = tokenizer::load_tokenizer(path);
  ASSERT_TRUE(tok) << tok.error().message;
  EXPECT_EQ((*tok)->bos_id(), 101u);
  EXPECT_EQ((*tok)->eos_id(), 102u);
  const auto ids = (*tok)->encode("Hello world, embeddings!");
  EXPECT_EQ((*tok)->decode(ids), "hello world , embeddings !");
  model_tools::SynthOptions preset;
  ASSERT_TRUE(model_tools::apply_synth_preset("bge-small", preset));
  EXPECT_EQ(preset.arch, "bert");
  EXPECT_EQ(preset.n_layer, 12);
  EXPECT_EQ(preset.pooling, "cls");
  ASSERT_TRUE(model_tools::apply_synth_preset("all-minilm-l6", preset));
  EXPECT_EQ(preset.n_layer, 6);
  EXPECT_EQ(preset.pooling, "mean");
  std::filesystem::remove(path);
}

// The runner: the encoder's vectors for each request, inputs packed into passes of at most
// batch_tokens (the same vectors however they are packed), a full queue refused with
// retry_after_s, a queued request cancelled, a passed deadline, and shutdown ending the queue.
TEST(EncoderRunner, ServesRequestsAndRefusesWhatItCannotTake) {
  auto direct = synth_encoder(small_bert("mean"), "runner_direct.gguf");
  ASSERT_TRUE(direct);
  auto want = direct->embed(kInputs);
  ASSERT_TRUE(want);
  EncoderRunner runner(synth_encoder(small_bert("mean"), "runner.gguf"), /*batch_tokens=*/12,
                       /*max_queue=*/1);
  using R = Result<EmbeddingResult>;
  const auto submit = [&](std::vector<std::vector<int32_t>> inputs, std::promise<R>& done,
                          std::chrono::steady_clock::time_point deadline =
                              std::chrono::steady_clock::time_point::max()) {
    EmbeddingRequest req;
    req.inputs = std::move(inputs);
    req.deadline = deadline;
    req.on_done = [&done](R r) { done.set_value(std::move(r)); };
    return runner.submit(std::move(req));
  };
  std::promise<R> first;
  ASSERT_TRUE(submit(kInputs, first));
  R got = first.get_future().get();
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->vectors, *want);  // passes of <= 12 tokens: the same floats as one pass
  EXPECT_EQ(got->tokens, 20);

  std::vector<std::vector<int32_t>> too_long = {std::vector<int32_t>(49, 150)};
  std::promise<R> unused;
  auto refused = submit(too_long, unused);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kContextOverflow);

  // A request whose on_done holds the runner's thread, one queued behind it, one refused.
  std::promise<void> release;
  std::promise<R> held_done;
  EmbeddingRequest held;
  held.inputs = {{101, 102}};
  held.on_done = [&](R r) {
    held_done.set_value(std::move(r));
    release.get_future().wait();
  };
  ASSERT_TRUE(runner.submit(std::move(held)));
  ASSERT_TRUE(held_done.get_future().get());
  std::promise<R> queued, full;
  auto queued_id = submit({{101, 102}}, queued);
  ASSERT_TRUE(queued_id);
  auto over = submit({{101, 102}}, full);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(over.error().retry_after_s, 1);
  runner.cancel(*queued_id);
  EXPECT_EQ(queued.get_future().get().error().code, ErrorCode::kCancelled);
  std::promise<R> late;
  ASSERT_TRUE(submit({{101, 102}}, late, std::chrono::steady_clock::now()));
  release.set_value();
  EXPECT_EQ(late.get_future().get().error().code, ErrorCode::kTimeout);
}

// Requests queued together share one pass and each gets exactly its own vectors; one with a
// token outside the vocabulary fails alone (the others rerun apart), one past its deadline too.
TEST(EncoderRunner, QueuedRequestsShareAPass) {
  auto direct = synth_encoder(small_bert("cls"), "together_direct.gguf");
  ASSERT_TRUE(direct);
  EncoderRunner runner(synth_encoder(small_bert("cls"), "together.gguf"), 512, 8);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  EmbeddingRequest held;
  held.inputs = {{101, 102}};
  held.on_done = [gate](Result<EmbeddingResult>) { gate.wait(); };
  ASSERT_TRUE(runner.submit(std::move(held)));
  const std::vector<std::vector<std::vector<int32_t>>> requests = {
      {kInputs[0], kInputs[1]}, {{101, 1 << 20, 102}}, {kInputs[2]}, {kInputs[3]}, {kInputs[1]}};
  std::vector<std::promise<Result<EmbeddingResult>>> done(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    EmbeddingRequest req;
    req.inputs = requests[i];
    if (i == 3) req.deadline = std::chrono::steady_clock::now();
    req.on_done = [&done, i](Result<EmbeddingResult> r) { done[i].set_value(std::move(r)); };
    ASSERT_TRUE(runner.submit(std::move(req)));
  }
  release.set_value();
  for (size_t i = 0; i < requests.size(); ++i) {
    auto r = done[i].get_future().get();
    if (i == 1 || i == 3) {
      ASSERT_FALSE(r) << i;
      EXPECT_EQ(r.error().code, i == 1 ? ErrorCode::kInvalidRequest : ErrorCode::kTimeout);
      continue;
    }
    ASSERT_TRUE(r) << i << ": " << r.error().message;
    auto want = direct->embed(requests[i]);
    ASSERT_TRUE(want);
    EXPECT_EQ(r->vectors, *want) << "request " << i;
  }
}

TEST(EncoderRunner, ShutdownEndsQueuedRequests) {
  std::promise<void> release;
  std::promise<Result<EmbeddingResult>> queued;
  {
    EncoderRunner runner(synth_encoder(small_bert("mean"), "runner_stop.gguf"), 512, 4);
    EmbeddingRequest held;
    held.inputs = {{101, 102}};
    std::shared_future<void> gate = release.get_future().share();
    std::promise<void> started;
    held.on_done = [gate, &started](Result<EmbeddingResult>) {
      started.set_value();
      gate.wait();
    };
    ASSERT_TRUE(runner.submit(std::move(held)));
    started.get_future().wait();  // the runner's thread is in held's on_done
    EmbeddingRequest next;
    next.inputs = {{101, 102}};
    next.on_done = [&](Result<EmbeddingResult> r) { queued.set_value(std::move(r)); };
    ASSERT_TRUE(runner.submit(std::move(next)));
    std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      release.set_value();
    }).detach();
  }
  // The held request keeps the thread until after the runner starts stopping: the queued one
  // is ended by the shutdown, never left hanging.
  auto r = queued.get_future().get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace ferry::engine
