// Matmul throughput on SmolLM2-360M-shaped weights (hidden 960, 5 kv heads of 64, ffn 2560):
// decode (one token through all 32 layers' matrices, so the weights come from memory, not
// cache) in GB/s of weights read, and prefill (a batch of tokens through one layer) in
// GFLOP/s. Run: ferry_kernels_bench [--threads N via FERRY_BENCH_THREADS]; FERRY_ISA selects
// scalar/avx2 (default: the best the CPU has).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "local_engine/kernels/attend_invariant.h"
#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/matmul.h"
#include "local_engine/kernels/packed.h"
#include "local_engine/kernels/thread_pool.h"

namespace {

using ferry::kernels::attend_group_invariant;
using ferry::kernels::attend_invariant_supported;
using ferry::kernels::fp32_to_fp16;
using ferry::kernels::MatrixView;
using ferry::kernels::TensorType;

constexpr int64_t kEmbd = 960, kKv = 320, kFfn = 2560, kLayers = 32;

struct Matrix {
  std::vector<uint8_t> bytes;
  MatrixView view;
};

// Random weights: quantizing hundreds of MB is slow, so one quantized row is built per
// matrix and the other rows are byte-level variations of it (the scales stay valid).
Matrix make_matrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.03f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (auto& v : row) v = dist(rng);
  const auto* k = ferry::kernels::kernels_for(type);
  const size_t rb = static_cast<size_t>(ferry::kernels::row_bytes(type, cols).value());
  Matrix m;
  m.bytes.resize(rb * static_cast<size_t>(rows));
  k->from_float(row.data(), m.bytes.data(), cols);
  for (int64_t r = 1; r < rows; ++r) {
    std::memcpy(m.bytes.data() + r * rb, m.bytes.data(), rb);
  }
  m.view = ferry::kernels::make_matrix_view(type, rows, cols, m.bytes.data());
  return m;
}

struct Layer {
  std::vector<Matrix> mats;  // q, k, v, o, gate, up, down
};

Layer make_layer(TensorType type, uint32_t seed) {
  // Rows of 960 are not whole 256-element blocks: those fall back as llama-quantize does.
  TensorType t960 = type;
  if (ferry::kernels::block_elems(type) == 256) {
    t960 = type == TensorType::kQ4_K     ? TensorType::kQ5_0
           : type == TensorType::kQ5_K   ? TensorType::kQ5_1
           : type == TensorType::kQ6_K   ? TensorType::kQ8_0
           : type == TensorType::kIQ4_XS ? TensorType::kIQ4_NL
                                         : TensorType::kQ4_0;
  }
  Layer l;
  l.mats.push_back(make_matrix(t960, kEmbd, kEmbd, seed + 1));
  l.mats.push_back(make_matrix(t960, kKv, kEmbd, seed + 2));
  l.mats.push_back(make_matrix(t960, kKv, kEmbd, seed + 3));
  l.mats.push_back(make_matrix(t960, kEmbd, kEmbd, seed + 4));
  l.mats.push_back(make_matrix(t960, kFfn, kEmbd, seed + 5));
  l.mats.push_back(make_matrix(t960, kFfn, kEmbd, seed + 6));
  l.mats.push_back(make_matrix(type, kEmbd, kFfn, seed + 7));
  return l;
}

int bench_threads() {
  const char* env = std::getenv("FERRY_BENCH_THREADS");
  return env ? std::atoi(env) : 2;
}

struct Model {
  std::vector<Layer> layers;
  uint64_t bytes = 0;
  double flops_per_token = 0;
};

const Model& model_for(TensorType type) {
  static std::unique_ptr<Model> cache[64];
  auto& slot = cache[static_cast<int>(type)];
  if (!slot) {
    slot = std::make_unique<Model>();
    for (int64_t i = 0; i < kLayers; ++i) {
      slot->layers.push_back(make_layer(type, static_cast<uint32_t>(i * 10)));
      for (const auto& m : slot->layers.back().mats) {
        slot->bytes += m.bytes.size();
        slot->flops_per_token += 2.0 * static_cast<double>(m.view.rows * m.view.cols);
      }
    }
  }
  return *slot;
}

// One decode step's matmuls over all layers.
void BM_Decode(benchmark::State& state, TensorType type) {
  const Model& model = model_for(type);
  ferry::kernels::ThreadPool pool(bench_threads());
  std::vector<float> x(kFfn, 0.5f), y(kFfn);
  for (auto _ : state) {
    for (const auto& layer : model.layers) {
      for (const auto& m : layer.mats) {
        ferry::kernels::matmul(m.view, x.data(), 1, y.data(), pool);
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(model.bytes),
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["tok/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MB"] = static_cast<double>(model.bytes) / 1e6;
  state.SetLabel(std::string(ferry::kernels::isa_name(ferry::kernels::active_isa())) + ", " +
                 std::to_string(pool.n_threads()) + " threads");
}

// Prefill: n tokens through one layer's matrices (compute-bound).
void BM_Prefill(benchmark::State& state, TensorType type) {
  const Model& model = model_for(type);
  const int64_t n = state.range(0);
  ferry::kernels::ThreadPool pool(bench_threads());
  std::vector<float> x(static_cast<size_t>(n * kFfn), 0.25f), y(static_cast<size_t>(n * kFfn));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  const Layer& layer = model.layers[0];
  double flops = 0;
  for (const auto& m : layer.mats)
    flops += 2.0 * static_cast<double>(m.view.rows * m.view.cols * n);
  for (auto _ : state) {
    for (const auto& m : layer.mats) ferry::kernels::matmul(m.view, x.data(), n, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  // Tokens per second of the whole 32-layer stack (matmuls only).
  state.counters["model_tok/s"] = benchmark::Counter(static_cast<double>(n) / kLayers,
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(ferry::kernels::isa_name(ferry::kernels::active_isa())) + ", " +
                 std::to_string(pool.n_threads()) + " threads");
}

// Compute-bound kernel forms on cache-resident data (one thread): 256 weight rows x 64
// tokens of 1024, through vec_dot_batch (one weight row at a time) or the gemm tile form, or
// for the repacked-order types (Q4_K) vec_dot_batch_serial4 row by row or gemm_serial4.
enum class Form { kBatch, kGemm, kSerial4Batch, kSerial4Gemm };

void BM_KernelForm(benchmark::State& state, TensorType type, Form form) {
  const int64_t rows = 256, cols = 1024, tokens = 64;
  const Matrix m = make_matrix(type, rows, cols, 7);
  const auto* k = ferry::kernels::kernels_for(type);
  if ((form == Form::kGemm && !k->gemm) || (form == Form::kSerial4Gemm && !k->gemm_serial4) ||
      (form == Form::kSerial4Batch && !k->vec_dot_batch_serial4)) {
    state.SkipWithError("no such form for this type");
    return;
  }
  std::vector<float> x(static_cast<size_t>(tokens * cols), 0.3f);
  const auto qa = ferry::kernels::quantize_activations(type, x.data(), tokens, cols);
  std::vector<float> y(static_cast<size_t>(tokens * rows));
  const auto* act = static_cast<const uint8_t*>(qa.data);
  const auto stride = static_cast<int64_t>(qa.row_stride);
  const auto row_bytes = static_cast<int64_t>(m.view.row_bytes);
  for (auto _ : state) {
    switch (form) {
      case Form::kGemm:
        k->gemm(cols, m.view.data, row_bytes, rows, act, stride, tokens, y.data(), rows);
        break;
      case Form::kSerial4Gemm:
        k->gemm_serial4(cols, m.view.data, row_bytes, rows, act, stride, tokens, y.data(), rows);
        break;
      case Form::kBatch:
      case Form::kSerial4Batch: {
        const auto batch = form == Form::kBatch ? k->vec_dot_batch : k->vec_dot_batch_serial4;
        for (int64_t r = 0; r < rows; ++r) {
          batch(cols, m.view.row(r), act, stride, tokens, y.data() + r, rows);
        }
        break;
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * tokens / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(BM_KernelForm, Q8_0_batch, TensorType::kQ8_0, Form::kBatch);
BENCHMARK_CAPTURE(BM_KernelForm, Q8_0_gemm, TensorType::kQ8_0, Form::kGemm);
BENCHMARK_CAPTURE(BM_KernelForm, Q4_0_batch, TensorType::kQ4_0, Form::kBatch);
BENCHMARK_CAPTURE(BM_KernelForm, Q4_0_gemm, TensorType::kQ4_0, Form::kGemm);
BENCHMARK_CAPTURE(BM_KernelForm, Q4_K_batch, TensorType::kQ4_K, Form::kBatch);
BENCHMARK_CAPTURE(BM_KernelForm, Q4_K_serial4_batch, TensorType::kQ4_K, Form::kSerial4Batch);
BENCHMARK_CAPTURE(BM_KernelForm, Q4_K_serial4_gemm, TensorType::kQ4_K, Form::kSerial4Gemm);
BENCHMARK_CAPTURE(BM_KernelForm, Q6_K_batch, TensorType::kQ6_K, Form::kBatch);
BENCHMARK_CAPTURE(BM_KernelForm, Q6_K_gemm, TensorType::kQ6_K, Form::kGemm);
BENCHMARK_CAPTURE(BM_KernelForm, Q4_1_batch, TensorType::kQ4_1, Form::kBatch);
BENCHMARK_CAPTURE(BM_KernelForm, Q5_0_batch, TensorType::kQ5_0, Form::kBatch);
BENCHMARK_CAPTURE(BM_KernelForm, Q5_0_gemm, TensorType::kQ5_0, Form::kGemm);
BENCHMARK_CAPTURE(BM_KernelForm, Q5_1_batch, TensorType::kQ5_1, Form::kBatch);
BENCHMARK_CAPTURE(BM_KernelForm, Q2_K_batch, TensorType::kQ2_K, Form::kBatch);
BENCHMARK_CAPTURE(BM_KernelForm, Q3_K_batch, TensorType::kQ3_K, Form::kBatch);
BENCHMARK_CAPTURE(BM_KernelForm, IQ4_NL_batch, TensorType::kIQ4_NL, Form::kBatch);
BENCHMARK_CAPTURE(BM_KernelForm, IQ4_NL_serial4_batch, TensorType::kIQ4_NL, Form::kSerial4Batch);
BENCHMARK_CAPTURE(BM_KernelForm, IQ4_XS_batch, TensorType::kIQ4_XS, Form::kBatch);

// The serving path's products (BatchForms::kInvariant) as the engine runs them: 32 matrices of
// the FFN down shape (960 x 2560, so the weights come from memory) times state.range(0)
// tokens, each type in the form the engine gives it on this CPU (Q8_0 / Q5_0 packed, types with
// panels in their panels, the rest through matmul_rows). GB/s of weights read per pass: with 8
// tokens it shows what a type's kernel costs per byte next to the others.
struct ServingMatrix {
  Matrix m;
  std::unique_ptr<ferry::kernels::PackedWeights> packed;
  ferry::kernels::StreamedBytes panels;
  int64_t group_bytes = 0;
};

void BM_Serving(benchmark::State& state, TensorType type) {
  const int64_t n = state.range(0);
  const auto* k = ferry::kernels::kernels_for(type);
  ferry::kernels::ThreadPool pool(bench_threads());
  std::vector<ServingMatrix> mats(kLayers);
  uint64_t bytes = 0;
  for (int64_t i = 0; i < kLayers; ++i) {
    ServingMatrix& s = mats[static_cast<size_t>(i)];
    s.m = make_matrix(type, kEmbd, kFfn, static_cast<uint32_t>(i + 1));
    bytes += s.m.bytes.size();
    if (ferry::kernels::packed_supported() && ferry::kernels::packable(s.m.view)) {
      s.packed = std::make_unique<ferry::kernels::PackedWeights>(s.m.view, &pool);
    } else if (k->gemm_panels != nullptr) {
      s.group_bytes = kFfn / ferry::kernels::block_elems(type) * k->panel_bytes;
      s.panels = ferry::kernels::allocate_streamed(static_cast<size_t>(kEmbd / 16 * s.group_bytes));
      k->pack_panels(kFfn, s.m.view.data, static_cast<int64_t>(s.m.view.row_bytes), kEmbd,
                     s.panels.get());
    }
  }
  std::vector<float> x(static_cast<size_t>(n * kFfn)), y(static_cast<size_t>(n * kEmbd));
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  for (auto _ : state) {
    for (const ServingMatrix& s : mats) {
      const auto qa = ferry::kernels::quantize_activations(type, x.data(), n, kFfn);
      pool.parallel_for(kEmbd, 16, [&](int64_t b, int64_t e) {
        if (s.packed) {
          ferry::kernels::packed_rows(*s.packed, qa, y.data(), kEmbd, b, e);
        } else if (s.panels) {
          k->gemm_panels(kFfn, s.panels.get() + b / 16 * s.group_bytes, e - b, qa.data,
                         static_cast<int64_t>(qa.row_stride), n, y.data() + b, kEmbd, qa.id);
        } else {
          ferry::kernels::matmul_rows(s.m.view, qa, y.data(), b, e,
                                      ferry::kernels::BatchForms::kInvariant);
        }
      });
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
}
BENCHMARK_CAPTURE(BM_Serving, Q8_0, TensorType::kQ8_0)
    ->Arg(1)
    ->Arg(8)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Serving, Q5_0, TensorType::kQ5_0)
    ->Arg(1)
    ->Arg(8)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Serving, Q4_K, TensorType::kQ4_K)
    ->Arg(1)
    ->Arg(8)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Serving, Q6_K, TensorType::kQ6_K)
    ->Arg(1)
    ->Arg(8)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The serving path's attention for one KV head: 3 query heads of 64 (SmolLM2-360M's group)
// against state.range(0) keys of the F16 cache, on the calling thread.
void BM_AttendInvariant(benchmark::State& state) {
  const int64_t head_dim = 64, n_q = 3, n_keys = state.range(0), stride = 5 * head_dim;
  if (!attend_invariant_supported(head_dim)) {
    state.SkipWithError("needs AVX2 or AVX-512");
    return;
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n_q * head_dim)), out(q.size());
  for (float& x : q) x = dist(rng);
  std::vector<uint16_t> keys(static_cast<size_t>(n_keys * stride)), values(keys.size());
  for (uint16_t& x : keys) x = fp32_to_fp16(0.5f * dist(rng));
  for (uint16_t& x : values) x = fp32_to_fp16(dist(rng));
  for (auto _ : state) {
    attend_group_invariant(head_dim, n_q, q.data(), head_dim, keys.data(), stride, values.data(),
                           stride, n_keys, 0.125f, out.data(), head_dim);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_AttendInvariant)->Arg(32)->Arg(160)->Arg(1024);

BENCHMARK_CAPTURE(BM_Decode, Q8_0, TensorType::kQ8_0)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Decode, Q4_K, TensorType::kQ4_K)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Decode, Q4_0, TensorType::kQ4_0)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Decode, F16, TensorType::kF16)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Decode, Q5_0, TensorType::kQ5_0)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Decode, Q5_1, TensorType::kQ5_1)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Prefill, Q8_0, TensorType::kQ8_0)
    ->Arg(64)
    ->Arg(512)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Prefill, Q4_K, TensorType::kQ4_K)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Prefill, Q6_K, TensorType::kQ6_K)->Arg(512)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
