// The packed products (packed.h) with 512-bit VNNI dots. Compiled with AVX-512 flags; called
// only when packed_supported(). Per block of 32 columns, 16 rows and one token: 8 vpdpbusd (4
// columns of all 16 rows each, the token's 4 bytes broadcast), one conversion, one scale product
// and one fused multiply-add, each lane one row: the bits of packed_dot_serial_ref. Q5_0's
// chunks are made from their nibbles and fifth-bit masks first (4 loads, 8 masked adds).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "local_engine/kernels/blocks.h"
#include "local_engine/kernels/packed.h"
#include "local_engine/kernels/vnni.h"

namespace ferry::kernels::detail {
namespace {

// GCC 12 reports the _mm512_undefined_* inside its own intrinsics as uninitialized (GCC bug
// 105593); nothing here reads an undefined lane.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Tokens' per-block scales (float) and corrections (-offset * sum of the block's quants: the
// weights are stored + offset), nb per token. Kept per thread for the activations they were
// made from (QuantizedActivations::id): a product calls packed_rows once per range of rows,
// and all of them read the same activations.
struct TokenBlocks {
  uint64_t id = 0;
  int32_t offset = 0;
  std::vector<const BlockQ8_0*> rows;
  std::vector<float> d;
  std::vector<int32_t> sum, corr;

  void fill(const QuantizedActivations& qa, int64_t nb, int32_t w_offset) {
    const int64_t nt = qa.n_tokens;
    const bool same = qa.id != 0 && qa.id == id && static_cast<int64_t>(sum.size()) == nt * nb;
    if (!same) {
      id = qa.id;
      offset = 0;
      rows.resize(static_cast<size_t>(nt));
      d.resize(static_cast<size_t>(nt * nb));
      sum.resize(static_cast<size_t>(nt * nb));
      corr.resize(static_cast<size_t>(nt * nb));
      const auto* act = static_cast<const uint8_t*>(qa.data);
      for (int64_t t = 0; t < nt; ++t) {
        const auto* blocks =
            reinterpret_cast<const BlockQ8_0*>(act + static_cast<size_t>(t) * qa.row_stride);
        rows[static_cast<size_t>(t)] = blocks;
        for (int64_t i = 0; i < nb; ++i) {
          int32_t s = 0;
          for (int l = 0; l < kQK; ++l) s += blocks[i].qs[l];
          d[static_cast<size_t>(t * nb + i)] = _cvtsh_ss(blocks[i].d);
          sum[static_cast<size_t>(t * nb + i)] = s;
        }
      }
    }
    if (!same || offset != w_offset) {
      offset = w_offset;
      for (size_t k = 0; k < sum.size(); ++k) corr[k] = -w_offset * sum[k];
    }
  }
};

// How far ahead of the dots the weights are fetched (bytes; about 15 blocks). The hardware
// prefetcher alone leaves the dots waiting on memory once a block serves several tokens.
constexpr int64_t kPrefetchAhead = 8192;

// A block's eight chunks of 16 rows x 4 columns, unsigned bytes.
struct Q8Chunks {
  static constexpr int64_t kBlockBytes = 512;
  static void load(const uint8_t* block, __m512i c[8]) {
    for (int k = 0; k < 8; ++k) c[k] = _mm512_load_si512(block + 64 * k);
  }
};
struct Q5Chunks {
  static constexpr int64_t kBlockBytes = 320;
  static void load(const uint8_t* block, __m512i c[8]) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i fifth = _mm512_set1_epi8(0x10);
    for (int m = 0; m < 4; ++m) {
      const __m512i v = _mm512_load_si512(block + 64 * m);
      uint64_t bits[2];
      std::memcpy(bits, block + 256 + 16 * m, sizeof bits);
      const __m512i lo = _mm512_and_si512(v, low4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      c[2 * m] = _mm512_mask_add_epi8(lo, _cvtu64_mask64(bits[0]), lo, fifth);
      c[2 * m + 1] = _mm512_mask_add_epi8(hi, _cvtu64_mask64(bits[1]), hi, fifth);
    }
  }
};

// NR tokens times one group of 16 rows: out[r * out_stride + j] for r < NR, j < 16, plus
// bias[j] when there is one.
template <typename Chunks, int NR>
void tile(int64_t nb, const uint8_t* quants, const uint16_t* scales, const BlockQ8_0* const* act,
          const float* ad, const int32_t* corr, float* out, int64_t out_stride, bool prefetch,
          const float* bias) {
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* block = quants + i * Chunks::kBlockBytes;
    if (prefetch) {
      // The weights stream once through the cache: fetch them well ahead of the dots (the
      // next groups follow this one in memory), so memory and arithmetic overlap.
      for (int k = 0; k < Chunks::kBlockBytes / 64; ++k)
        _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchAhead + 64 * k), _MM_HINT_T0);
      if (i % 2 == 0)
        _mm_prefetch(reinterpret_cast<const char*>(scales + i * kPackRows) + kPrefetchAhead,
                     _MM_HINT_T0);
    }
    const int8_t* qs[NR];
    __m512i sum[NR], odd[NR];
    for (int r = 0; r < NR; ++r) {
      qs[r] = act[r][i].qs;
      sum[r] = _mm512_set1_epi32(corr[r * nb + i]);
      odd[r] = _mm512_setzero_si512();
    }
    // Each 4-column chunk of the 16 rows is loaded once for all NR tokens; with few tokens the
    // odd chunks go to a second chain, so the dots' latency overlaps.
    __m512i chunk[8];
    Chunks::load(block, chunk);
    for (int k = 0; k < 8; ++k) {
      const __m512i wq = chunk[k];
      for (int r = 0; r < NR; ++r) {
        if (NR <= 2 && k % 2 == 1) {
          odd[r] = dpbusd_broadcast(odd[r], wq, qs[r] + 4 * k);
        } else {
          sum[r] = dpbusd_broadcast(sum[r], wq, qs[r] + 4 * k);
        }
      }
    }
    const __m512 wd = _mm512_cvtph_ps(
        _mm256_load_si256(reinterpret_cast<const __m256i*>(scales + i * kPackRows)));
    for (int r = 0; r < NR; ++r) {
      if (NR <= 2) sum[r] = _mm512_add_epi32(sum[r], odd[r]);
      const __m512 scale = _mm512_mul_ps(wd, _mm512_set1_ps(ad[r * nb + i]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r]), scale, acc[r]);
    }
  }
  if (bias != nullptr) {
    const __m512 b = _mm512_loadu_ps(bias);
    for (int r = 0; r < NR; ++r) acc[r] = _mm512_add_ps(acc[r], b);
  }
  for (int r = 0; r < NR; ++r) _mm512_storeu_ps(out + r * out_stride, acc[r]);
}

using TileFn = void (*)(int64_t, const uint8_t*, const uint16_t*, const BlockQ8_0* const*,
                        const float*, const int32_t*, float*, int64_t, bool, const float*);
constexpr int kMaxTile = 8;
template <typename Chunks>
constexpr TileFn kTiles[kMaxTile + 1] = {nullptr,         tile<Chunks, 1>, tile<Chunks, 2>,
                                         tile<Chunks, 3>, tile<Chunks, 4>, tile<Chunks, 5>,
                                         tile<Chunks, 6>, tile<Chunks, 7>, tile<Chunks, 8>};

#pragma GCC diagnostic pop

}  // namespace

void packed_rows_avx512(const PackedWeights& w, const QuantizedActivations& qa, float* y,
                        int64_t y_stride, int64_t row_begin, int64_t row_end, const float* bias) {
  const int64_t nb = w.cols() / kQK;
  const int64_t nt = qa.n_tokens;
  thread_local TokenBlocks tb;
  tb.fill(qa, nb, w.offset());
  for (int64_t g = row_begin / kPackRows; g < row_end / kPackRows; ++g) {
    const uint8_t* quants = w.group(g);
    const auto* scales = reinterpret_cast<const uint16_t*>(quants + nb * w.block_bytes());
    const TileFn* tiles = w.type() == TensorType::kQ5_0 ? kTiles<Q5Chunks> : kTiles<Q8Chunks>;
    for (int64_t t0 = 0; t0 < nt; t0 += kMaxTile) {
      const int64_t n = std::min<int64_t>(kMaxTile, nt - t0);
      tiles[n](nb, quants, scales, tb.rows.data() + t0, tb.d.data() + t0 * nb,
               tb.corr.data() + t0 * nb, y + t0 * y_stride + g * kPackRows, y_stride, t0 == 0,
               bias == nullptr ? nullptr : bias + g * kPackRows);
    }
  }
}

}  // namespace ferry::kernels::detail
