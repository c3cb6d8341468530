// SIMD inner loops of paged attention, compiled for every attainable x86 target (EMU128 scalar
// fallback, SSSE3, SSE4, AVX2, AVX-512) through Google Highway and chosen at run time.
//
// Per page and KV head: decode each K row once (BF16: shift; FP8: exponent rebias by bit arithmetic,
// exact for subnormals; TQ3: 3-bit codes to Lloyd-Max levels) and dot it with every query head of the
// GQA group; then decode each V row once and accumulate it into every head's output.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/attention/page_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "minimakv/codec/half.h"
#include "minimakv/codec/tq3.h"
#include "page_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace minimakv::attention::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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
  } else if constexpr (hn::MaxLanes(df) >= 8 && hn::MaxLanes(df) <= 16) {
    // 8 codes = one 24-bit group. Each lane takes its group's word, shifts out its 3 bits and looks the
    // level up in a register table (8 or 16 lanes: one or two groups per vector).
    const size_t groups_per_vec = N / 8;
    alignas(64) int32_t shift_arr[hn::MaxLanes(du32)];
    alignas(64) float level_arr[hn::MaxLanes(df)];
    for (size_t i = 0; i < N; ++i) {
      shift_arr[i] = static_cast<int32_t>(3 * (i % 8));
      level_arr[i] = codec::tq3_level(static_cast<int>(i % 8));
    }
    const auto shifts = hn::BitCast(du32, hn::Load(hn::RebindToSigned<decltype(df)>(), shift_arr));
    const auto levels = hn::Load(df, level_arr);
    const auto seven = hn::Set(du32, 7u);
    const hn::RebindToSigned<decltype(df)> di32;
    const auto low_group = hn::FirstN(du32, 8);
    auto word = [&](int group) {
      const uint8_t* p = codes + 3 * group;
      return p[0] | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16);
    };
    for (int i = 0; i < d; i += static_cast<int>(N)) {
      auto w = hn::Set(du32, word(i / 8));
      if (groups_per_vec == 2) w = hn::IfThenElse(low_group, w, hn::Set(du32, word(i / 8 + 1)));
      const auto c = hn::And(hn::Shr(w, shifts), seven);
      const auto idx = hn::IndicesFromVec(df, hn::BitCast(di32, c));
      hn::StoreU(hn::TableLookupLanes(levels, idx), df, out + i);
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

void PageLogits(codec::PageFormat f, const uint8_t* codes, size_t row_bytes, const uint8_t* meta, uint32_t nt,
                const float* q, size_t q_stride, int G, int d, float* s) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  constexpr uint32_t kTile = 4;
  alignas(64) float rows[kTile][codec::kMaxHeadDim];
  for (uint32_t t0 = 0; t0 < nt; t0 += kTile) {
    const uint32_t n = std::min(kTile, nt - t0);
    for (uint32_t j = 0; j < n; ++j) DecodeRow(f, codes + (t0 + j) * row_bytes, d, rows[j]);
    for (int g = 0; g < G; ++g) {
      const float* qg = q + g * q_stride;
      float* sg = s + static_cast<size_t>(g) * nt + t0;
      if (n == kTile) {  // one query load feeds four rows
        auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
        for (int i = 0; i < d; i += static_cast<int>(N)) {
          const auto qv = hn::LoadU(df, qg + i);
          a0 = hn::MulAdd(qv, hn::LoadU(df, rows[0] + i), a0);
          a1 = hn::MulAdd(qv, hn::LoadU(df, rows[1] + i), a1);
          a2 = hn::MulAdd(qv, hn::LoadU(df, rows[2] + i), a2);
          a3 = hn::MulAdd(qv, hn::LoadU(df, rows[3] + i), a3);
        }
        sg[0] = hn::GetLane(hn::SumOfLanes(df, a0));
        sg[1] = hn::GetLane(hn::SumOfLanes(df, a1));
        sg[2] = hn::GetLane(hn::SumOfLanes(df, a2));
        sg[3] = hn::GetLane(hn::SumOfLanes(df, a3));
      } else {
        for (uint32_t j = 0; j < n; ++j) sg[j] = Dot(qg, rows[j], d);
      }
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
  constexpr uint32_t kTile = 4;  // rows decoded per pass: each accumulator is loaded and stored once per tile
  alignas(64) float rows[kTile][codec::kMaxHeadDim];
  for (uint32_t t0 = 0; t0 < nt; t0 += kTile) {
    const uint32_t n = std::min(kTile, nt - t0);
    float scale[kTile];
    for (uint32_t j = 0; j < n; ++j) {
      DecodeRow(f, codes + (t0 + j) * row_bytes, d, rows[j]);
      scale[j] = RowScale(f, meta, t0 + j);
    }
    for (int g = 0; g < G; ++g) {
      float* a = acc + g * acc_stride;
      const float* wg = w + static_cast<size_t>(g) * nt + t0;
      if (n == kTile) {
        const auto w0 = hn::Set(df, wg[0] * scale[0]), w1 = hn::Set(df, wg[1] * scale[1]);
        const auto w2 = hn::Set(df, wg[2] * scale[2]), w3 = hn::Set(df, wg[3] * scale[3]);
        for (int i = 0; i < d; i += static_cast<int>(N)) {
          auto v = hn::LoadU(df, a + i);
          v = hn::MulAdd(w0, hn::LoadU(df, rows[0] + i), v);
          v = hn::MulAdd(w1, hn::LoadU(df, rows[1] + i), v);
          v = hn::MulAdd(w2, hn::LoadU(df, rows[2] + i), v);
          v = hn::MulAdd(w3, hn::LoadU(df, rows[3] + i), v);
          hn::StoreU(v, df, a + i);
        }
      } else {
        for (uint32_t j = 0; j < n; ++j) {
          const auto wv = hn::Set(df, wg[j] * scale[j]);
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

float exp_sub_sum(float* x, size_t n, float sub) { return HWY_DYNAMIC_DISPATCH(ExpSubSum)(x, n, sub); }

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
