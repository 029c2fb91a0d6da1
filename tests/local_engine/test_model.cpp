#include "tests/local_engine/test_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "local_engine/kernels/fp16.h"
#include "local_engine/kernels/kernels.h"

namespace ferry::engine::testing {
namespace {

void put_u16(std::vector<uint8_t>& out, size_t at, uint16_t v) {
  out[at] = static_cast<uint8_t>(v & 0xFF);
  out[at + 1] = static_cast<uint8_t>(v >> 8);
}

// Rounds through fp16 and returns the stored value.
float half_round(float x, uint16_t& bits) {
  bits = kernels::fp32_to_fp16(x);
  return kernels::fp16_to_fp32(bits);
}

int nearest(float x) {
  return static_cast<int>(std::lround(x));
}

void encode_q8_0(const float* x, std::vector<uint8_t>& out, size_t at, float* y) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  uint16_t bits;
  const float d = half_round(amax / 127.0f, bits);
  put_u16(out, at, bits);
  for (int i = 0; i < 32; ++i) {
    const int q = d == 0 ? 0 : std::clamp(nearest(x[i] / d), -127, 127);
    out[at + 2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    y[i] = d * static_cast<float>(q);
  }
}

void encode_q4_0(const float* x, std::vector<uint8_t>& out, size_t at, float* y) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  uint16_t bits;
  const float d = half_round(amax / 7.0f, bits);
  put_u16(out, at, bits);
  int q[32];
  for (int i = 0; i < 32; ++i) {
    q[i] = d == 0 ? 0 : std::clamp(nearest(x[i] / d), -8, 7);
    y[i] = d * static_cast<float>(q[i]);
  }
  for (int i = 0; i < 16; ++i)
    out[at + 2 + i] = static_cast<uint8_t>((q[i] + 8) | ((q[i + 16] + 8) << 4));
}

// Q4_K (bits = 4) and Q5_K (bits = 5): 8 sub-blocks of 32 with 6-bit scales and mins.
void encode_qk_asym(const float* x, int bits, std::vector<uint8_t>& out, size_t at, float* y) {
  const int levels = (1 << bits) - 1;
  float scale[8], minv[8];
  for (int s = 0; s < 8; ++s) {
    float lo = 0, hi = 0;
    for (int i = 0; i < 32; ++i) {
      lo = std::min(lo, x[32 * s + i]);
      hi = std::max(hi, x[32 * s + i]);
    }
    scale[s] = (hi - lo) / static_cast<float>(levels);
    minv[s] = -lo;
  }
  uint16_t d_bits, m_bits;
  const float d = half_round(*std::max_element(scale, scale + 8) / 63.0f, d_bits);
  const float dmin = half_round(*std::max_element(minv, minv + 8) / 63.0f, m_bits);
  put_u16(out, at, d_bits);
  put_u16(out, at + 2, m_bits);
  uint8_t sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = static_cast<uint8_t>(d == 0 ? 0 : std::clamp(nearest(scale[s] / d), 0, 63));
    mn[s] = static_cast<uint8_t>(dmin == 0 ? 0 : std::clamp(nearest(minv[s] / dmin), 0, 63));
  }
  uint8_t* scales = out.data() + at + 4;
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
  uint8_t* qh = bits == 5 ? out.data() + at + 16 : nullptr;
  uint8_t* qs = out.data() + at + (bits == 5 ? 48 : 16);
  for (int s = 0; s < 8; ++s) {
    const float step = d * sc[s], offset = dmin * mn[s];
    for (int i = 0; i < 32; ++i) {
      const int q = step == 0 ? 0 : std::clamp(nearest((x[32 * s + i] + offset) / step), 0, levels);
      y[32 * s + i] = step * static_cast<float>(q) - offset;
      const int chunk = s / 2;
      uint8_t& byte = qs[32 * chunk + i];
      if (s % 2 == 0) {
        byte = static_cast<uint8_t>((byte & 0xF0) | (q & 0xF));
      } else {
        byte = static_cast<uint8_t>((byte & 0x0F) | ((q & 0xF) << 4));
      }
      if (qh != nullptr && (q & 16)) qh[i] = static_cast<uint8_t>(qh[i] | (1 << s));
    }
  }
}

void encode_q6_k(const float* x, std::vector<uint8_t>& out, size_t at, float* y) {
  float scale[16];
  for (int s = 0; s < 16; ++s) {
    float amax = 0;
    for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[16 * s + i]));
    scale[s] = amax / 31.0f;
  }
  uint16_t bits;
  const float d = half_round(*std::max_element(scale, scale + 16) / 127.0f, bits);
  uint8_t* ql = out.data() + at;
  uint8_t* qh = out.data() + at + 128;
  auto* sc = reinterpret_cast<int8_t*>(out.data() + at + 192);
  put_u16(out, at + 208, bits);
  for (int s = 0; s < 16; ++s)
    sc[s] = static_cast<int8_t>(d == 0 ? 0 : std::clamp(nearest(scale[s] / d), 0, 127));
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, r = e % 128, k = r / 32, l = r % 32;
    const float step = d * sc[half * 8 + r / 16];
    const int q = step == 0 ? 0 : std::clamp(nearest(x[e] / step), -32, 31);
    y[e] = step * static_cast<float>(q);
    const int u = q + 32;
    uint8_t& low = ql[64 * half + l + (k % 2) * 32];
    low = static_cast<uint8_t>(k < 2 ? (low & 0xF0) | (u & 0xF) : (low & 0x0F) | ((u & 0xF) << 4));
    qh[32 * half + l] = static_cast<uint8_t>(qh[32 * half + l] | ((u >> 4) << (2 * k)));
  }
}

std::vector<uint8_t> encode(WeightType type, const float* x, int64_t n, float* y) {
  std::vector<uint8_t> out(static_cast<size_t>(kernels::row_bytes(type, n).value_or(0)));
  if (out.empty()) throw std::runtime_error("row length does not fit the type's blocks");
  switch (type) {
    case WeightType::kF32:
      std::memcpy(out.data(), x, static_cast<size_t>(n) * 4);
      std::copy_n(x, n, y);
      break;
    case WeightType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        y[i] = half_round(x[i], bits);
        put_u16(out, static_cast<size_t>(2 * i), bits);
      }
      break;
    case WeightType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t f;
        std::memcpy(&f, &x[i], 4);
        const auto bits = static_cast<uint16_t>((f + 0x7FFF + ((f >> 16) & 1)) >> 16);
        y[i] = kernels::bf16_to_fp32(bits);
        put_u16(out, static_cast<size_t>(2 * i), bits);
      }
      break;
    case WeightType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b)
        encode_q8_0(x + 32 * b, out, static_cast<size_t>(34 * b), y + 32 * b);
      break;
    case WeightType::kQ4_0:
      for (int64_t b = 0; b < n / 32; ++b)
        encode_q4_0(x + 32 * b, out, static_cast<size_t>(18 * b), y + 32 * b);
      break;
    case WeightType::kQ4_K:
      for (int64_t b = 0; b < n / 256; ++b)
        encode_qk_asym(x + 256 * b, 4, out, static_cast<size_t>(144 * b), y + 256 * b);
      break;
    case WeightType::kQ5_K:
      for (int64_t b = 0; b < n / 256; ++b)
        encode_qk_asym(x + 256 * b, 5, out, static_cast<size_t>(176 * b), y + 256 * b);
      break;
    case WeightType::kQ6_K:
      for (int64_t b = 0; b < n / 256; ++b)
        encode_q6_k(x + 256 * b, out, static_cast<size_t>(210 * b), y + 256 * b);
      break;
    case WeightType::kQ5_0: {  // the library's own quantizer (llama.cpp's rounding)
      const kernels::TypeKernels* k = kernels::kernels_for(type);
      k->from_float(x, out.data(), n);
      k->to_float(out.data(), y, n);
      break;
    }
    default:
      throw std::runtime_error("test encoder: unsupported type");
  }
  return out;
}

}  // namespace

std::vector<uint8_t> encode_row(WeightType type, const float* x, int64_t n) {
  std::vector<float> decoded(static_cast<size_t>(n));
  return encode(type, x, n, decoded.data());
}

std::optional<int64_t> MemorySource::get_int(std::string_view key) const {
  const auto it = ints_.find(key);
  if (it == ints_.end()) return std::nullopt;
  return it->second;
}
std::optional<double> MemorySource::get_float(std::string_view key) const {
  const auto it = floats_.find(key);
  if (it != floats_.end()) return it->second;
  const auto i = get_int(key);
  if (i) return static_cast<double>(*i);
  return std::nullopt;
}
std::optional<std::string> MemorySource::get_string(std::string_view key) const {
  const auto it = strings_.find(key);
  if (it == strings_.end()) return std::nullopt;
  return it->second;
}
std::vector<std::string> MemorySource::get_string_array(std::string_view key) const {
  const auto it = arrays_.find(key);
  if (it == arrays_.end()) return {};
  return it->second;
}
const SourceTensor* MemorySource::tensor(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second.info;
}

void MemorySource::add_tensor(const std::string& name, WeightType type, int64_t cols, int64_t rows,
                              const std::vector<float>& values) {
  Stored& s = tensors_[name];
  s.bytes.clear();
  std::vector<float>& decoded = decoded_[name];
  decoded.assign(values.size(), 0.0f);
  for (int64_t r = 0; r < std::max<int64_t>(rows, 1); ++r) {
    auto row = encode(type, values.data() + r * cols, cols, decoded.data() + r * cols);
    s.bytes.insert(s.bytes.end(), row.begin(), row.end());
  }
  s.info.name = name;
  s.info.ggml_type = static_cast<uint32_t>(type);
  s.info.dims = rows == 0 ? std::vector<int64_t>{cols} : std::vector<int64_t>{cols, rows};
  s.info.data = s.bytes.data();
  s.info.n_bytes = s.bytes.size();
}

namespace {

// The tiny model's metadata, its vocabulary, and LongRoPE's factor tensors (phi3).
void set_tiny_metadata(MemorySource& src_ref, const TinyShape& shape) {
  MemorySource* src = &src_ref;
  const std::string& a = shape.arch;
  src->set_string("general.architecture", a);
  src->set_int(a + ".context_length", shape.n_ctx);
  src->set_int(a + ".embedding_length", shape.n_embd);
  src->set_int(a + ".block_count", shape.n_layer);
  src->set_int(a + ".feed_forward_length", shape.n_ff);
  src->set_int(a + ".attention.head_count", shape.n_head);
  src->set_int(a + ".attention.head_count_kv", shape.n_head_kv);
  src->set_int(a + ".attention.key_length", shape.head_dim);
  src->set_int(a + ".attention.value_length", shape.head_dim);
  src->set_float(a + ".rope.freq_base", shape.rope_theta);
  src->set_float(a + ".attention.layer_norm_rms_epsilon", shape.rms_eps);
  if (shape.n_swa > 0) {
    src->set_int(a + ".attention.sliding_window", shape.n_swa);
    src->set_int(a + ".attention.sliding_window_pattern", shape.swa_period);
    src->set_float(a + ".rope.freq_base_swa", shape.rope_theta_swa);
  }
  if (shape.attn_softcap > 0) src->set_float(a + ".attn_logit_softcapping", shape.attn_softcap);
  if (shape.final_softcap > 0) src->set_float(a + ".final_logit_softcapping", shape.final_softcap);
  if (shape.rope_dim > 0) src->set_int(a + ".rope.dimension_count", shape.rope_dim);
  if (shape.rope_linear_factor > 0) {
    src->set_string(a + ".rope.scaling.type", "linear");
    src->set_float(a + ".rope.scaling.factor", shape.rope_linear_factor);
  }
  if (shape.longrope) {
    src->set_int(a + ".rope.scaling.original_context_length", shape.n_ctx_orig);
    src->set_float(a + ".rope.scaling.attn_factor", 1.25);
    const int64_t n_freq = (shape.rope_dim > 0 ? shape.rope_dim : shape.head_dim) / 2;
    std::vector<float> short_f, long_f;
    for (int64_t i = 0; i < n_freq; ++i) {
      short_f.push_back(1.0f + static_cast<float>(i) / 16.0f);
      long_f.push_back(1.0f + static_cast<float>(i) / 2.0f);
    }
    src->add_tensor("rope_factors_short.weight", WeightType::kF32, n_freq, 0, short_f);
    src->add_tensor("rope_factors_long.weight", WeightType::kF32, n_freq, 0, long_f);
  }
  std::vector<std::string> tokens;
  for (int64_t i = 0; i < shape.n_vocab; ++i) tokens.push_back("t" + std::to_string(i));
  tokens[2] = "</s>";
  src->set_strings("tokenizer.ggml.tokens", tokens);
  src->set_int("tokenizer.ggml.eos_token_id", 2);
}

}  // namespace

std::shared_ptr<MemorySource> make_tiny_model(const TinyShape& shape, WeightType type,
                                              uint32_t seed) {
  auto src = std::make_shared<MemorySource>();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng) * scale;
    return v;
  };
  auto norm_weights = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = 1.0f + 0.1f * normal(rng);
    return v;
  };
  set_tiny_metadata(*src, shape);
  const std::string& a = shape.arch;
  const int64_t d = shape.n_embd, q_dim = shape.n_head * shape.head_dim,
                kv_dim = shape.n_head_kv * shape.head_dim;
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(d));
  src->add_tensor("token_embd.weight", type, d, shape.n_vocab, random(d * shape.n_vocab, 1.0f));
  src->add_tensor("output_norm.weight", WeightType::kF32, d, 0, norm_weights(d));
  if (!shape.tied_output) {
    src->add_tensor("output.weight", type, d, shape.n_vocab, random(d * shape.n_vocab, in_scale));
  }
  if (shape.llama3_rope_factors) {
    std::vector<float> factors(static_cast<size_t>(shape.head_dim / 2));
    for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + static_cast<float>(i % 4);
    src->add_tensor("rope_freqs.weight", WeightType::kF32, shape.head_dim / 2, 0, factors);
  }
  for (int64_t l = 0; l < shape.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    src->add_tensor(b + "attn_norm.weight", WeightType::kF32, d, 0, norm_weights(d));
    if (a == "phi3") {
      const int64_t qkv = q_dim + 2 * kv_dim;
      src->add_tensor(b + "attn_qkv.weight", type, d, qkv, random(d * qkv, in_scale));
    } else {
      src->add_tensor(b + "attn_q.weight", type, d, q_dim, random(d * q_dim, in_scale));
      src->add_tensor(b + "attn_k.weight", type, d, kv_dim, random(d * kv_dim, in_scale));
      src->add_tensor(b + "attn_v.weight", type, d, kv_dim, random(d * kv_dim, in_scale));
    }
    src->add_tensor(b + "attn_output.weight", type, q_dim, d,
                    random(d * q_dim, 1.0f / std::sqrt(static_cast<float>(q_dim))));
    if (a == "qwen2") {
      src->add_tensor(b + "attn_q.bias", WeightType::kF32, q_dim, 0, random(q_dim, 0.5f));
      src->add_tensor(b + "attn_k.bias", WeightType::kF32, kv_dim, 0, random(kv_dim, 0.5f));
      src->add_tensor(b + "attn_v.bias", WeightType::kF32, kv_dim, 0, random(kv_dim, 0.5f));
    }
    if (a == "qwen3" || a == "gemma3") {
      src->add_tensor(b + "attn_q_norm.weight", WeightType::kF32, shape.head_dim, 0,
                      norm_weights(shape.head_dim));
      src->add_tensor(b + "attn_k_norm.weight", WeightType::kF32, shape.head_dim, 0,
                      norm_weights(shape.head_dim));
    }
    if (a == "gemma2" || a == "gemma3") {
      src->add_tensor(b + "post_attention_norm.weight", WeightType::kF32, d, 0, norm_weights(d));
      src->add_tensor(b + "post_ffw_norm.weight", WeightType::kF32, d, 0, norm_weights(d));
    }
    src->add_tensor(b + "ffn_norm.weight", WeightType::kF32, d, 0, norm_weights(d));
    if (a == "phi3") {
      src->add_tensor(b + "ffn_up.weight", type, d, 2 * shape.n_ff,
                      random(2 * d * shape.n_ff, in_scale));
    } else {
      src->add_tensor(b + "ffn_gate.weight", type, d, shape.n_ff, random(d * shape.n_ff, in_scale));
      src->add_tensor(b + "ffn_up.weight", type, d, shape.n_ff, random(d * shape.n_ff, in_scale));
    }
    src->add_tensor(b + "ffn_down.weight", type, shape.n_ff, d,
                    random(d * shape.n_ff, 1.0f / std::sqrt(static_cast<float>(shape.n_ff))));
  }
  return src;
}

namespace {

using Vec = std::vector<double>;

// y = W x with W (rows, cols) row-major.
Vec mat_vec(const std::vector<float>& w, int64_t rows, int64_t cols, const Vec& x) {
  Vec y(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c)
      s += static_cast<double>(w[static_cast<size_t>(r * cols + c)]) * x[static_cast<size_t>(c)];
    y[static_cast<size_t>(r)] = s;
  }
  return y;
}

Vec rms_norm(const Vec& x, const std::vector<float>& w, double eps, size_t offset = 0,
             size_t n = 0) {
  if (n == 0) n = x.size();
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[offset + i] * x[offset + i];
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  Vec y(n);
  for (size_t i = 0; i < n; ++i) y[i] = x[offset + i] * scale * w[i];
  return y;
}

}  // namespace

namespace {

bool is_gemma(const TinyShape& shape) {
  return shape.arch == "gemma2" || shape.arch == "gemma3";
}

bool is_swa(const TinyShape& shape, int64_t layer) {
  return shape.n_swa > 0 &&
         (shape.swa_period == 0 || layer % shape.swa_period < shape.swa_period - 1);
}

// LongRoPE's factors in effect (the source's short or long ones by shape.engine_ctx) and its
// attention factor; none and 1 without them.
struct LongRope {
  std::vector<float> factors;
  double mscale = 1.0;
};
LongRope long_rope(const MemorySource& src, const TinyShape& shape) {
  LongRope r;
  if (!src.has("rope_factors_long.weight")) return r;
  const std::string a = shape.arch + ".rope.scaling.";
  const int64_t orig = src.get_int(a + "original_context_length").value_or(shape.n_ctx);
  r.factors = src.floats(shape.engine_ctx > orig ? "rope_factors_long.weight"
                                                 : "rope_factors_short.weight");
  r.mscale = src.get_float(a + "attn_factor").value_or(1.0);
  return r;
}

// RoPE in double on the first rope_dim dimensions of n_heads heads of hd, at position pos
// (LongRoPE's factors and attention factor on phi3).
void rotate(const TinyShape& shape, const LongRope& lr, double theta, double freq_scale, Vec& v,
            size_t n_heads, size_t pos) {
  const auto hd = static_cast<size_t>(shape.head_dim);
  const size_t rd = shape.rope_dim > 0 ? static_cast<size_t>(shape.rope_dim) : hd;
  const bool neox = shape.arch != "llama" && shape.arch != "smollm3";
  const double mscale = lr.mscale;
  for (size_t h = 0; h < n_heads; ++h) {
    for (size_t i = 0; i < rd / 2; ++i) {
      double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rd));
      if (shape.llama3_rope_factors) freq /= 1.0 + static_cast<double>(i % 4);
      if (!lr.factors.empty()) freq /= lr.factors[i];
      const double angle = static_cast<double>(pos) * freq * freq_scale;
      const size_t a = h * hd + (neox ? i : 2 * i);
      const size_t b = h * hd + (neox ? i + rd / 2 : 2 * i + 1);
      const double x0 = v[a], x1 = v[b];
      v[a] = mscale * (x0 * std::cos(angle) - x1 * std::sin(angle));
      v[b] = mscale * (x0 * std::sin(angle) + x1 * std::cos(angle));
    }
  }
}

// Rows [first, first + count) of a row-major (rows, cols) matrix.
std::vector<float> row_slice(const std::vector<float>& w, int64_t cols, int64_t first,
                             int64_t count) {
  return {w.begin() + first * cols, w.begin() + (first + count) * cols};
}

// Per-head RMSNorm in place.
void head_norm(Vec& x, const std::vector<float>& w, double eps, size_t n_heads, size_t hd) {
  for (size_t h = 0; h < n_heads; ++h) {
    const Vec y = rms_norm(x, w, eps, h * hd, hd);
    std::copy(y.begin(), y.end(), x.begin() + static_cast<ptrdiff_t>(h * hd));
  }
}

struct Qkv {
  std::vector<Vec> q, k, v;
};

// The layer's queries, keys and values for every position (biases, head norms, RoPE with the
// layer's base; none on smollm3's NoPE layers).
Qkv reference_qkv(const MemorySource& src, const TinyShape& shape, int64_t l,
                  const std::vector<Vec>& x) {
  const std::string b = "blk." + std::to_string(l) + ".";
  const auto hd = static_cast<size_t>(shape.head_dim);
  const auto n_head = static_cast<size_t>(shape.n_head),
             n_kv = static_cast<size_t>(shape.n_head_kv);
  const size_t n = x.size();
  Qkv r{std::vector<Vec>(n), std::vector<Vec>(n), std::vector<Vec>(n)};
  const bool rope = shape.no_rope_interval == 0 || (l + 1) % shape.no_rope_interval != 0;
  const double theta = is_swa(shape, l) ? shape.rope_theta_swa : shape.rope_theta;
  const LongRope lr = long_rope(src, shape);
  // Linear scaling: every layer's but gemma3's sliding ones (gemma2's share the global scale).
  const bool scaled = !is_swa(shape, l) || shape.arch == "gemma2";
  const double freq_scale =
      shape.rope_linear_factor > 0 && scaled ? 1.0 / shape.rope_linear_factor : 1.0;
  for (size_t t = 0; t < n; ++t) {
    const Vec h = rms_norm(x[t], src.floats(b + "attn_norm.weight"), shape.rms_eps);
    const auto q_dim = static_cast<int64_t>(n_head * hd), kv_dim = static_cast<int64_t>(n_kv * hd);
    const bool fused = src.has(b + "attn_qkv.weight");  // phi3: [q; k; v]
    auto weight = [&](const char* name, int64_t first, int64_t rows) {
      return fused ? row_slice(src.floats(b + "attn_qkv.weight"), shape.n_embd, first, rows)
                   : src.floats(b + name);
    };
    r.q[t] = mat_vec(weight("attn_q.weight", 0, q_dim), q_dim, shape.n_embd, h);
    r.k[t] = mat_vec(weight("attn_k.weight", q_dim, kv_dim), kv_dim, shape.n_embd, h);
    r.v[t] = mat_vec(weight("attn_v.weight", q_dim + kv_dim, kv_dim), kv_dim, shape.n_embd, h);
    if (src.has(b + "attn_q.bias")) {
      for (size_t i = 0; i < r.q[t].size(); ++i) r.q[t][i] += src.floats(b + "attn_q.bias")[i];
      for (size_t i = 0; i < r.k[t].size(); ++i) r.k[t][i] += src.floats(b + "attn_k.bias")[i];
      for (size_t i = 0; i < r.v[t].size(); ++i) r.v[t][i] += src.floats(b + "attn_v.bias")[i];
    }
    if (src.has(b + "attn_q_norm.weight")) {
      head_norm(r.q[t], src.floats(b + "attn_q_norm.weight"), shape.rms_eps, n_head, hd);
      head_norm(r.k[t], src.floats(b + "attn_k_norm.weight"), shape.rms_eps, n_kv, hd);
    }
    if (rope) {
      rotate(shape, lr, theta, freq_scale, r.q[t], n_head, t);
      rotate(shape, lr, theta, freq_scale, r.k[t], n_kv, t);
    }
  }
  return r;
}

// Softmax attention of position t over its visible keys (causal, the window on sliding
// layers), soft-capped scores on gemma2; scaled by 1 / sqrt(head_dim) (gemma's query scale
// below the 27B shapes).
Vec reference_attend(const TinyShape& shape, int64_t l, const Qkv& r, size_t t) {
  const auto hd = static_cast<size_t>(shape.head_dim);
  const auto n_head = static_cast<size_t>(shape.n_head),
             n_kv = static_cast<size_t>(shape.n_head_kv);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto window = static_cast<size_t>(shape.n_swa);
  const size_t first = is_swa(shape, l) && t + 1 > window ? t + 1 - window : 0;
  Vec att(n_head * hd, 0.0);
  for (size_t h2 = 0; h2 < n_head; ++h2) {
    const size_t kvh = h2 / (n_head / n_kv);
    std::vector<double> s(t + 1, 0.0);
    double mx = -1e300;
    for (size_t p = first; p <= t; ++p) {
      double dot = 0;
      for (size_t i = 0; i < hd; ++i) dot += r.q[t][h2 * hd + i] * r.k[p][kvh * hd + i];
      s[p] = dot * scale;
      if (shape.attn_softcap > 0) s[p] = shape.attn_softcap * std::tanh(s[p] / shape.attn_softcap);
      mx = std::max(mx, s[p]);
    }
    double sum = 0;
    for (size_t p = first; p <= t; ++p) sum += (s[p] = std::exp(s[p] - mx));
    for (size_t p = first; p <= t; ++p) {
      for (size_t i = 0; i < hd; ++i) att[h2 * hd + i] += s[p] / sum * r.v[p][kvh * hd + i];
    }
  }
  return att;
}

// The gated feed-forward (SwiGLU, or GeGLU with GELU's tanh form on gemma) of one normed row.
Vec reference_ffn(const MemorySource& src, const TinyShape& shape, const std::string& b,
                  const Vec& h) {
  const bool fused = !src.has(b + "ffn_gate.weight");  // phi3: [gate; up]
  const std::vector<float>& up = src.floats(b + "ffn_up.weight");
  Vec g = mat_vec(
      fused ? row_slice(up, shape.n_embd, 0, shape.n_ff) : src.floats(b + "ffn_gate.weight"),
      shape.n_ff, shape.n_embd, h);
  const Vec u = mat_vec(fused ? row_slice(up, shape.n_embd, shape.n_ff, shape.n_ff) : up,
                        shape.n_ff, shape.n_embd, h);
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    const double act =
        is_gemma(shape)
            ? 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)))
            : x / (1.0 + std::exp(-x));
    g[i] = act * u[i];
  }
  return mat_vec(src.floats(b + "ffn_down.weight"), shape.n_embd, shape.n_ff, g);
}

}  // namespace

std::vector<float> reference_logits(const MemorySource& src, const TinyShape& shape,
                                    const std::vector<int32_t>& tokens) {
  const auto d = static_cast<size_t>(shape.n_embd);
  const size_t n = tokens.size();
  const bool gemma = is_gemma(shape);
  std::vector<Vec> x(n);
  const auto& embd = src.floats("token_embd.weight");
  for (size_t t = 0; t < n; ++t) {
    x[t].assign(embd.begin() + static_cast<ptrdiff_t>(tokens[t] * d),
                embd.begin() + static_cast<ptrdiff_t>((tokens[t] + 1) * d));
    if (gemma) {
      for (double& e : x[t]) e *= std::sqrt(static_cast<double>(d));
    }
  }
  for (int64_t l = 0; l < shape.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const Qkv r = reference_qkv(src, shape, l, x);
    for (size_t t = 0; t < n; ++t) {
      const Vec att = reference_attend(shape, l, r, t);
      Vec o = mat_vec(src.floats(b + "attn_output.weight"), shape.n_embd,
                      static_cast<int64_t>(att.size()), att);
      if (gemma) o = rms_norm(o, src.floats(b + "post_attention_norm.weight"), shape.rms_eps);
      for (size_t i = 0; i < d; ++i) x[t][i] += o[i];
      const Vec h = rms_norm(x[t], src.floats(b + "ffn_norm.weight"), shape.rms_eps);
      Vec down = reference_ffn(src, shape, b, h);
      if (gemma) down = rms_norm(down, src.floats(b + "post_ffw_norm.weight"), shape.rms_eps);
      for (size_t i = 0; i < d; ++i) x[t][i] += down[i];
    }
  }
  const std::string out_name = src.has("output.weight") ? "output.weight" : "token_embd.weight";
  std::vector<float> logits;
  for (size_t t = 0; t < n; ++t) {
    const Vec h = rms_norm(x[t], src.floats("output_norm.weight"), shape.rms_eps);
    const Vec y = mat_vec(src.floats(out_name), shape.n_vocab, shape.n_embd, h);
    for (double value : y) {
      const double capped = shape.final_softcap > 0
                                ? shape.final_softcap * std::tanh(value / shape.final_softcap)
                                : value;
      logits.push_back(static_cast<float>(capped));
    }
  }
  return logits;
}

}  // namespace ferry::engine::testing
