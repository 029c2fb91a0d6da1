// The packed products (packed.h) with 512-bit VNNI dots. Compiled with AVX-512 flags; called
// only when packed_supported(). Per block of 32 columns, 16 rows and one token: 8 vpdpbusd (4
// columns of all 16 rows each, the token's 4 bytes broadcast), one conversion, one scale product
// and one fused multiply-add, each lane one row: the bits of packed_dot_serial_ref. Q5_0's
// chunks are made from their nibbles and fifth-bit masks (4 loads, 8 masked adds), two at a time.
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
// weights are stored + offset), and their quants, rearranged for the tiles: tokens in tiles of
// up to kMaxTile, and a tile's blocks one after the other, each holding its tokens' 32 quants
// (qs), scales (d) and corrections (corr) side by side, so a tile addresses every token of a
// block from one pointer (with a pointer per token the tile ran out of registers and kept its
// accumulators on the stack). Kept per thread for the activations they were made from
// (QuantizedActivations::id): a product calls packed_rows once per range of rows, and all of
// them read the same activations.
constexpr int kMaxTile = 8;
struct TokenBlocks {
  uint64_t id = 0;
  int32_t offset = 0;
  std::vector<int8_t> qs;
  std::vector<float> d;
  std::vector<int32_t> sum, corr;

  // Where token t's block i is in the tiled arrays, in blocks (32 quants, one scale).
  static int64_t at(int64_t nt, int64_t nb, int64_t t, int64_t i) {
    const int64_t t0 = t / kMaxTile * kMaxTile;
    const int64_t width = std::min<int64_t>(kMaxTile, nt - t0);
    return t0 * nb + i * width + (t - t0);
  }

  void fill(const QuantizedActivations& qa, int64_t nb, int32_t w_offset) {
    const int64_t nt = qa.n_tokens;
    const bool same = qa.id != 0 && qa.id == id && static_cast<int64_t>(sum.size()) == nt * nb;
    if (!same) {
      id = qa.id;
      offset = 0;
      qs.resize(static_cast<size_t>(nt * nb * kQK));
      d.resize(static_cast<size_t>(nt * nb));
      sum.resize(static_cast<size_t>(nt * nb));
      corr.resize(static_cast<size_t>(nt * nb));
      const auto* act = static_cast<const uint8_t*>(qa.data);
      for (int64_t t = 0; t < nt; ++t) {
        const auto* blocks =
            reinterpret_cast<const BlockQ8_0*>(act + static_cast<size_t>(t) * qa.row_stride);
        for (int64_t i = 0; i < nb; ++i) {
          const auto k = static_cast<size_t>(at(nt, nb, t, i));
          int32_t s = 0;
          for (int l = 0; l < kQK; ++l) s += blocks[i].qs[l];
          std::memcpy(qs.data() + k * kQK, blocks[i].qs, kQK);
          d[k] = _cvtsh_ss(blocks[i].d);
          sum[k] = s;
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

// A block's eight chunks of 16 rows x 4 columns, unsigned bytes, two at a time: chunks 2m and
// 2m + 1 (m < 4).
struct Q8Chunks {
  static constexpr int64_t kBlockBytes = 512;
  static void load(const uint8_t* block, int m, __m512i& even, __m512i& odd) {
    even = _mm512_load_si512(block + 128 * m);
    odd = _mm512_load_si512(block + 128 * m + 64);
  }
};
struct Q5Chunks {
  static constexpr int64_t kBlockBytes = 320;
  static void load(const uint8_t* block, int m, __m512i& even, __m512i& odd) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i fifth = _mm512_set1_epi8(0x10);
    const __m512i v = _mm512_load_si512(block + 64 * m);
    uint64_t bits[2];
    std::memcpy(bits, block + 256 + 16 * m, sizeof bits);
    const __m512i lo = _mm512_and_si512(v, low4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    even = _mm512_mask_add_epi8(lo, _cvtu64_mask64(bits[0]), lo, fifth);
    odd = _mm512_mask_add_epi8(hi, _cvtu64_mask64(bits[1]), hi, fifth);
  }
};

// NR tokens times one group of 16 rows: out[r * out_stride + j] for r < NR, j < 16, plus
// bias[j] when there is one. qs, ad and corr: the tile's blocks of TokenBlocks (NR tokens a
// block).
template <typename Chunks, int NR>
void tile(int64_t nb, const uint8_t* quants, const uint16_t* scales, const int8_t* qs,
          const float* ad, const int32_t* corr, float* out, int64_t out_stride, bool prefetch,
          const float* bias) {
  __m512 acc[NR];
#pragma GCC unroll 8
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
    const int8_t* q = qs + i * NR * kQK;
    __m512i sum[NR], odd[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      sum[r] = _mm512_set1_epi32(corr[i * NR + r]);
      odd[r] = _mm512_setzero_si512();
    }
#pragma GCC unroll 4
    // Each 4-column chunk of the 16 rows is made once for all NR tokens, two at a time (so few
    // are live); with few tokens the odd chunks go to a second chain, so the dots' latency
    // overlaps. The integer sums are exact in any order. (The loops over the tokens are
    // unrolled by pragma: left to GCC 12, the accumulators stayed in memory.)
    for (int m = 0; m < 4; ++m) {
      __m512i even_chunk, odd_chunk;
      Chunks::load(block, m, even_chunk, odd_chunk);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r)
        sum[r] = dpbusd_broadcast(sum[r], even_chunk, q + r * kQK + 8 * m);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) {
        if (NR <= 2) {
          odd[r] = dpbusd_broadcast(odd[r], odd_chunk, q + r * kQK + 8 * m + 4);
        } else {
          sum[r] = dpbusd_broadcast(sum[r], odd_chunk, q + r * kQK + 8 * m + 4);
        }
      }
    }
    const __m512 wd = _mm512_cvtph_ps(
        _mm256_load_si256(reinterpret_cast<const __m256i*>(scales + i * kPackRows)));
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      if (NR <= 2) sum[r] = _mm512_add_epi32(sum[r], odd[r]);
      const __m512 scale = _mm512_mul_ps(wd, _mm512_set1_ps(ad[i * NR + r]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r]), scale, acc[r]);
    }
  }
  if (bias != nullptr) {
    const __m512 b = _mm512_loadu_ps(bias);
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) acc[r] = _mm512_add_ps(acc[r], b);
  }
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) _mm512_storeu_ps(out + r * out_stride, acc[r]);
}

using TileFn = void (*)(int64_t, const uint8_t*, const uint16_t*, const int8_t*, const float*,
                        const int32_t*, float*, int64_t, bool, const float*);
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
      tiles[n](nb, quants, scales, tb.qs.data() + t0 * nb * kQK, tb.d.data() + t0 * nb,
               tb.corr.data() + t0 * nb, y + t0 * y_stride + g * kPackRows, y_stride, t0 == 0,
               bias == nullptr ? nullptr : bias + g * kPackRows);
    }
  }
}

}  // namespace ferry::kernels::detail
