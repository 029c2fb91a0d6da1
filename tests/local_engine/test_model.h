// Test support: an in-memory ModelSource holding a small random model of any supported
// architecture and weight type, and a plain float reference forward pass written
// independently of the engine. Not thread-safe; one per test.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "local_engine/model_source.h"
#include "local_engine/weights.h"

namespace ferry::engine::testing {

struct TinyShape {
  std::string arch = "llama";
  int64_t n_vocab = 96;
  int64_t n_embd = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t head_dim = 16;
  int64_t n_ff = 96;
  int64_t n_ctx = 128;
  double rope_theta = 10000.0;
  double rms_eps = 1e-5;
  bool tied_output = false;
  bool llama3_rope_factors = false;
  // smollm3 / gemma (ModelConfig's meaning): the reference reads them, dequantized_copy and
  // make_tiny_model fill them from / into the metadata.
  int64_t no_rope_interval = 0;
  int64_t n_swa = 0;
  int64_t swa_period = 0;
  double rope_theta_swa = 10000.0;
  double attn_softcap = 0.0;
  double final_softcap = 0.0;
  // phi3 (fused attn_qkv and gate+up): rotated dimensions (0: head_dim) and LongRoPE
  // (make_tiny_model writes factors short_i = 1 + i / 16, long_i = 1 + i / 2 over the
  // rope_dim / 2 frequencies, attention factor 1.25, original context n_ctx_orig); the
  // reference reads the source's and takes the long ones when engine_ctx > the original
  // context, as the engine does.
  int64_t rope_dim = 0;
  // rope.scaling.type linear with this factor (0: none); on gemma, global layers only.
  double rope_linear_factor = 0.0;
  bool longrope = false;
  int64_t n_ctx_orig = 32;
  int64_t engine_ctx = 64;
};

class MemorySource : public ModelSource {
 public:
  std::optional<int64_t> get_int(std::string_view key) const override;
  std::optional<double> get_float(std::string_view key) const override;
  std::optional<std::string> get_string(std::string_view key) const override;
  std::vector<std::string> get_string_array(std::string_view key) const override;
  const SourceTensor* tensor(std::string_view name) const override;

  void set_int(const std::string& key, int64_t v) { ints_[key] = v; }
  void set_float(const std::string& key, double v) { floats_[key] = v; }
  void set_string(const std::string& key, std::string v) { strings_[key] = std::move(v); }
  void set_strings(const std::string& key, std::vector<std::string> v) {
    arrays_[key] = std::move(v);
  }
  // Stores `values` (rows x cols, row-major) encoded as `type`; the float copy kept for the
  // reference is the decoded one, so the reference sees exactly the engine's weights.
  void add_tensor(const std::string& name, WeightType type, int64_t cols, int64_t rows,
                  const std::vector<float>& values);
  void remove_tensor(const std::string& name) { tensors_.erase(name); }
  void remove_key(const std::string& key) {
    ints_.erase(key);
    floats_.erase(key);
    strings_.erase(key);
    arrays_.erase(key);
  }
  // Decoded float weights by name.
  const std::vector<float>& floats(const std::string& name) const { return decoded_.at(name); }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }

 private:
  struct Stored {
    SourceTensor info;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, int64_t, std::less<>> ints_;
  std::map<std::string, double, std::less<>> floats_;
  std::map<std::string, std::string, std::less<>> strings_;
  std::map<std::string, std::vector<std::string>, std::less<>> arrays_;
  std::map<std::string, Stored, std::less<>> tensors_;
  std::map<std::string, std::vector<float>> decoded_;
};

// Encodes a row of floats as `type` (simple round-to-nearest quantizers, test-only).
std::vector<uint8_t> encode_row(WeightType type, const float* x, int64_t n);

// A random model: matrices in `type`, norms and biases in F32.
std::shared_ptr<MemorySource> make_tiny_model(const TinyShape& shape, WeightType type,
                                              uint32_t seed);

// Reference forward over tokens[0..n) from an empty cache; returns the logits of every
// position, (n, n_vocab).
std::vector<float> reference_logits(const MemorySource& source, const TinyShape& shape,
                                    const std::vector<int32_t>& tokens);

}  // namespace ferry::engine::testing
