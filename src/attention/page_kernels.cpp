// SIMD inner loops of paged attention, compiled for every attainable x86 target (EMU128 scalar
// fallback, SSSE3, SSE4, AVX2, AVX-512) through Google Highway and chosen at run time.
//
// Per page and KV head: decode each K row once (BF16: shift; FP8: exponent rebias by bit arithmetic,
// exact for subnormals; TQ3: 3-bit codes unpacked by an in-block byte shuffle and a per-lane shift,
// then a register table of Lloyd-Max levels) and dot it with every query head of the GQA group; then
// decode each V row once and accumulate it into every head's output. Rows go in tiles of four: each
// row vector is loaded once per position and feeds the accumulators (QK) or weights (PV) of up to
// four heads held in registers.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/attention/page_kernels.cpp"
// Highway's per-target re-inclusion needs foreach_target.h before the other Highway headers.
// clang-format off
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// clang-format on

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "minimakv/codec/half.h"
#include "minimakv/codec/tq3.h"
#include "page_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace minimakv::attention::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// TQ3: 3-bit codes to their (unscaled) Lloyd-Max levels. A template so that the branch a target
// cannot compile (byte shuffles need 8 or 16 lanes) is never instantiated for it.
template <class DF>
HWY_INLINE void DecodeTq3Row(DF df, const uint8_t* codes, int d, float* HWY_RESTRICT out) {
  const hn::RebindToUnsigned<DF> du32;
  const size_t N = hn::Lanes(df);
  if constexpr (hn::MaxLanes(DF()) >= 8 && hn::MaxLanes(DF()) <= 16) {
    // N codes are 3N/8 whole bytes (N = 8 or 16). Every 128-bit block gets the same 16 source bytes
    // (LoadDup128); a byte shuffle inside each block gives each 32-bit lane the byte(s) holding its
    // code, a per-lane shift and a mask extract it, and a register table maps it to its level. Loads
    // start at most at row_bytes - 16, so they stay inside the row (TQ3 rows are >= 24 bytes).
    constexpr size_t kN = hn::MaxLanes(df);
    struct Unpack {
      alignas(64) uint8_t idx[16][4 * kN];  // per start offset inside the 16 loaded bytes
      alignas(64) int32_t shift[kN];
      alignas(64) float level[kN];
    };
    static const Unpack tab = [] {
      Unpack u{};
      for (size_t delta = 0; delta < 16; ++delta)
        for (size_t k = 0; k < kN; ++k) {
          const size_t bit = 3 * k, b0 = delta + bit / 8;
          const bool two = bit % 8 > 5;  // the code spills into the next byte
          uint8_t* lane = u.idx[delta] + 4 * k;
          lane[0] = b0 < 16 ? static_cast<uint8_t>(b0) : 0x80;
          lane[1] = two && b0 + 1 < 16 ? static_cast<uint8_t>(b0 + 1) : 0x80;
          lane[2] = lane[3] = 0x80;  // zero
        }
      for (size_t k = 0; k < kN; ++k) {
        u.shift[k] = static_cast<int32_t>(3 * k % 8);
        u.level[k] = codec::tq3_level(static_cast<int>(k % 8));
      }
      return u;
    }();
    const hn::Repartition<uint8_t, decltype(df)> du8;
    const hn::RebindToSigned<decltype(df)> di32;
    const auto shifts = hn::BitCast(du32, hn::Load(di32, tab.shift));
    const auto levels = hn::Load(df, tab.level);
    const auto seven = hn::Set(du32, 7u);
    const int row_bytes = 3 * d / 8;
    for (int i = 0; i < d; i += static_cast<int>(N)) {
      const int off = 3 * i / 8, start = std::min(off, row_bytes - 16);
      const auto src = hn::LoadDup128(du8, codes + start);
      const auto w = hn::BitCast(du32, hn::TableLookupBytesOr0(src, hn::Load(du8, tab.idx[off - start])));
      const auto c = hn::And(hn::Shr(w, shifts), seven);
      hn::StoreU(hn::TableLookupLanes(levels, hn::IndicesFromVec(df, hn::BitCast(di32, c))), df, out + i);
    }
  } else {
    // Two 3-bit codes (6 bits) index a table of level pairs: four 8-byte copies per 24-bit group.
    static const auto pairs = [] {
      std::array<std::array<float, 2>, 64> t{};
      for (int c = 0; c < 64; ++c) t[c] = {codec::tq3_level(c & 7), codec::tq3_level(c >> 3)};
      return t;
    }();
    for (int g = 0; g < d / 8; ++g) {
      const uint8_t* p = codes + 3 * g;
      const uint32_t w = p[0] | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16);
      std::memcpy(out + 8 * g, pairs[w & 63u].data(), 8);
      std::memcpy(out + 8 * g + 2, pairs[(w >> 6) & 63u].data(), 8);
      std::memcpy(out + 8 * g + 4, pairs[(w >> 12) & 63u].data(), 8);
      std::memcpy(out + 8 * g + 6, pairs[(w >> 18) & 63u].data(), 8);
    }
  }
}

// Decodes one row of d codes into floats (TQ3: unscaled levels).
HWY_INLINE void DecodeRow(codec::PageFormat f, const uint8_t* codes, int d, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  const size_t N = hn::Lanes(df);
  if (f == codec::PageFormat::kFp8) {
    const hn::Rebind<uint8_t, decltype(df)> du8;
    const auto k7f = hn::Set(du32, 0x7Fu), k80 = hn::Set(du32, 0x80u);
    const auto rebias = hn::Set(df, 1.329227995784916e36f);  // 2^120: E4M3 bias 7 -> fp32 bias 127
    const auto nan = hn::Set(df, __builtin_nanf(""));
    for (int i = 0; i < d; i += static_cast<int>(N)) {
      const auto v = hn::PromoteTo(du32, hn::LoadU(du8, codes + i));
      const auto mag = hn::And(v, k7f);
      const auto bits = hn::Or(hn::ShiftLeft<20>(mag), hn::ShiftLeft<24>(hn::And(v, k80)));
      const auto x = hn::Mul(hn::BitCast(df, bits), rebias);
      hn::StoreU(hn::IfThenElse(hn::RebindMask(df, hn::Eq(mag, k7f)), nan, x), df, out + i);
    }
  } else if (f == codec::PageFormat::kBf16) {
    const hn::Rebind<uint16_t, decltype(df)> du16;
    for (int i = 0; i < d; i += static_cast<int>(N)) {
      uint16_t tmp[hn::MaxLanes(du16)];
      std::memcpy(tmp, codes + 2 * i, N * 2);
      const auto v = hn::PromoteTo(du32, hn::LoadU(du16, tmp));
      hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(v)), df, out + i);
    }
  } else {
    DecodeTq3Row(df, codes, d, out);
  }
}

HWY_INLINE float RowScale(codec::PageFormat f, const uint8_t* meta, uint32_t t) {
  if (f == codec::PageFormat::kFp8) {
    float s;
    std::memcpy(&s, meta + 4 * t, 4);
    return s;
  }
  if (f == codec::PageFormat::kTq3) {
    uint16_t a;
    std::memcpy(&a, meta + 2 * t, 2);
    return codec::half_to_float(a);
  }
  return 1.0f;
}

HWY_INLINE float Dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int d) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  auto s0 = hn::Zero(df), s1 = hn::Zero(df);
  int i = 0;
  for (; i + 2 * static_cast<int>(N) <= d; i += 2 * static_cast<int>(N)) {
    s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(df, a + i + N), hn::LoadU(df, b + i + N), s1);
  }
  for (; i < d; i += static_cast<int>(N)) s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1)));
}

constexpr uint32_t kTile = 4;  // rows decoded per pass

// Query heads per pass over a tile: their accumulators (or weights) and the tile's rows must fit the
// register file (32 vector registers with AVX-512, 16 below it).
template <class DF>
constexpr int HeadsPerPass(DF df) {
  return hn::MaxLanes(df) >= 16 ? 4 : 2;
}

// s[g * nt + j] = <q_g, rows[j]> for the H heads g0 .. g0 + H - 1 and the kTile rows: each row vector is
// loaded once per position and feeds every head of the pass.
template <int H, class DF>
HWY_INLINE void TileLogits(DF df, const float (*rows)[codec::kMaxHeadDim], const float* q, size_t q_stride, int g0,
                           int d, float* s, size_t nt) {
  const size_t N = hn::Lanes(df);
  using V = decltype(hn::Zero(df));
  V acc[H][kTile];
  for (int h = 0; h < H; ++h)
    for (uint32_t j = 0; j < kTile; ++j) acc[h][j] = hn::Zero(df);
  for (int i = 0; i < d; i += static_cast<int>(N)) {
    const V r0 = hn::LoadU(df, rows[0] + i), r1 = hn::LoadU(df, rows[1] + i);
    const V r2 = hn::LoadU(df, rows[2] + i), r3 = hn::LoadU(df, rows[3] + i);
    for (int h = 0; h < H; ++h) {
      const V qv = hn::LoadU(df, q + (g0 + h) * q_stride + i);
      acc[h][0] = hn::MulAdd(qv, r0, acc[h][0]);
      acc[h][1] = hn::MulAdd(qv, r1, acc[h][1]);
      acc[h][2] = hn::MulAdd(qv, r2, acc[h][2]);
      acc[h][3] = hn::MulAdd(qv, r3, acc[h][3]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (uint32_t j = 0; j < kTile; ++j)
      s[static_cast<size_t>(g0 + h) * nt + j] = hn::GetLane(hn::SumOfLanes(df, acc[h][j]));
}

// acc_g += sum_j w[g][j] * rows[j] for the H heads g0 .. g0 + H - 1 (weights already scaled).
template <int H, class DF>
HWY_INLINE void TileAccumulate(DF df, const float (*rows)[codec::kMaxHeadDim], const float (*w)[kTile], int g0, int d,
                               float* acc, size_t acc_stride) {
  const size_t N = hn::Lanes(df);
  using V = decltype(hn::Zero(df));
  V wv[H][kTile];
  for (int h = 0; h < H; ++h)
    for (uint32_t j = 0; j < kTile; ++j) wv[h][j] = hn::Set(df, w[g0 + h][j]);
  for (int i = 0; i < d; i += static_cast<int>(N)) {
    const V r0 = hn::LoadU(df, rows[0] + i), r1 = hn::LoadU(df, rows[1] + i);
    const V r2 = hn::LoadU(df, rows[2] + i), r3 = hn::LoadU(df, rows[3] + i);
    for (int h = 0; h < H; ++h) {
      float* a = acc + (g0 + h) * acc_stride + i;
      V v = hn::LoadU(df, a);
      v = hn::MulAdd(wv[h][0], r0, v);
      v = hn::MulAdd(wv[h][1], r1, v);
      v = hn::MulAdd(wv[h][2], r2, v);
      v = hn::MulAdd(wv[h][3], r3, v);
      hn::StoreU(v, df, a);
    }
  }
}

// Runs Tile(H) over heads [0, G) in passes of at most HeadsPerPass heads.
template <class DF, class Fn>
HWY_INLINE void ForHeadPasses(DF df, int G, const Fn& tile) {
  constexpr int kMax = HeadsPerPass(DF());
  for (int g0 = 0; g0 < G; g0 += kMax) {
    const int h = std::min(kMax, G - g0);
    if (h >= 4 && kMax >= 4)
      tile(std::integral_constant<int, (kMax >= 4 ? 4 : 1)>(), g0);
    else if (h >= 3 && kMax >= 3)
      tile(std::integral_constant<int, (kMax >= 3 ? 3 : 1)>(), g0);
    else if (h >= 2)
      tile(std::integral_constant<int, 2>(), g0);
    else
      tile(std::integral_constant<int, 1>(), g0);
  }
  (void)df;
}

void PageLogits(codec::PageFormat f, const uint8_t* codes, size_t row_bytes, const uint8_t* meta, uint32_t nt,
                const float* q, size_t q_stride, int G, int d, float* s) {
  const hn::ScalableTag<float> df;
  alignas(64) float rows[kTile][codec::kMaxHeadDim];
  for (uint32_t t0 = 0; t0 < nt; t0 += kTile) {
    const uint32_t n = std::min(kTile, nt - t0);
    for (uint32_t j = 0; j < n; ++j) DecodeRow(f, codes + (t0 + j) * row_bytes, d, rows[j]);
    if (n == kTile) {
      ForHeadPasses(df, G, [&](auto heads, int g0) {
        TileLogits<decltype(heads)::value>(df, rows, q, q_stride, g0, d, s + t0, nt);
      });
    } else {
      for (int g = 0; g < G; ++g)
        for (uint32_t j = 0; j < n; ++j) s[static_cast<size_t>(g) * nt + t0 + j] = Dot(q + g * q_stride, rows[j], d);
    }
    for (uint32_t j = 0; j < n; ++j) {
      const float scale = RowScale(f, meta, t0 + j);
      for (int g = 0; g < G; ++g) s[static_cast<size_t>(g) * nt + t0 + j] *= scale;
    }
  }
}

void PageAccumulate(codec::PageFormat f, const uint8_t* codes, size_t row_bytes, const uint8_t* meta, uint32_t nt,
                    const float* w, int G, int d, float* acc, size_t acc_stride) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  alignas(64) float rows[kTile][codec::kMaxHeadDim];
  float wt[8][kTile];  // per head and row: softmax weight times the row's V scale (G <= 8)
  for (uint32_t t0 = 0; t0 < nt; t0 += kTile) {
    const uint32_t n = std::min(kTile, nt - t0);
    float scale[kTile];
    for (uint32_t j = 0; j < n; ++j) {
      DecodeRow(f, codes + (t0 + j) * row_bytes, d, rows[j]);
      scale[j] = RowScale(f, meta, t0 + j);
    }
    if (n == kTile) {
      for (int g = 0; g < G; ++g)
        for (uint32_t j = 0; j < kTile; ++j) wt[g][j] = w[static_cast<size_t>(g) * nt + t0 + j] * scale[j];
      ForHeadPasses(df, G, [&](auto heads, int g0) {
        TileAccumulate<decltype(heads)::value>(df, rows, wt, g0, d, acc, acc_stride);
      });
    } else {
      for (int g = 0; g < G; ++g) {
        float* a = acc + g * acc_stride;
        for (uint32_t j = 0; j < n; ++j) {
          const auto wv = hn::Set(df, w[static_cast<size_t>(g) * nt + t0 + j] * scale[j]);
          for (int i = 0; i < d; i += static_cast<int>(N))
            hn::StoreU(hn::MulAdd(wv, hn::LoadU(df, rows[j] + i), hn::LoadU(df, a + i)), df, a + i);
        }
      }
    }
  }
}

// x[i] <- exp(x[i] - sub) for i < n; returns the sum of the results.
float ExpSubSum(float* x, size_t n, float sub) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, sub);
  auto sum = hn::Zero(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), vs));
    hn::StoreU(e, df, x + i);
    sum = hn::Add(sum, e);
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += (x[i] = std::exp(x[i] - sub));
  return hn::GetLane(hn::SumOfLanes(df, sum)) + tail;
}

}  // namespace minimakv::attention::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace minimakv::attention::detail {

HWY_EXPORT(PageLogits);
HWY_EXPORT(PageAccumulate);
HWY_EXPORT(ExpSubSum);

float exp_sub_sum(float* x, size_t n, float sub) {
  return HWY_DYNAMIC_DISPATCH(ExpSubSum)(x, n, sub);
}

void page_logits(codec::PageFormat f, const uint8_t* codes, size_t row_bytes, const uint8_t* meta, uint32_t nt,
                 const float* q, size_t q_stride, int G, int d, float* s) {
  HWY_DYNAMIC_DISPATCH(PageLogits)(f, codes, row_bytes, meta, nt, q, q_stride, G, d, s);
}

void page_accumulate(codec::PageFormat f, const uint8_t* codes, size_t row_bytes, const uint8_t* meta, uint32_t nt,
                     const float* w, int G, int d, float* acc, size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(PageAccumulate)(f, codes, row_bytes, meta, nt, w, G, d, acc, acc_stride);
}

}  // namespace minimakv::attention::detail
#endif
