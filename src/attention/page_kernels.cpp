// SIMD inner loops of paged attention, compiled for every attainable x86 target (EMU128 scalar
// fallback, SSSE3, SSE4, AVX2, AVX-512, AVX3_DL) through Google Highway and chosen at run time.
//
// Decoding is fused into the arithmetic: a row's codes are turned into one vector of floats at a time
// (BF16: widen and shift; FP8: sign-extend, shift, mask and an exponent rebias; TQ3: 3-bit codes
// unpacked by an in-block byte shuffle and a per-lane shift, or one VBMI multishift on AVX3_DL, then a
// register table of Lloyd-Max levels; TQ4: nibbles by the same shuffle and shift, a 16-level table) and used at once by
// every query head of the GQA group, so no decoded row is ever stored and read back.
//  - Logits: tiles of four rows; up to six heads (two below AVX-512) keep four accumulators each in
//    registers, and a tile's dot products are reduced together (two interleave levels and a block
//    fold) rather than one horizontal sum each.
//  - Values: blocks of 16 rows; for each vector-wide slice of the head dimension every head's output
//    slice stays in registers while the block's rows stream through it.
// FP8's NaN code (S.1111.111) is the one case the bit arithmetic does not map; a tile or block that
// holds one takes the exact decoder, so a NaN in the cache still reaches the output as NaN.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/attention/page_kernels.cpp"
// Highway's per-target re-inclusion needs foreach_target.h before the other Highway headers.
// clang-format off
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "minimakv/codec/half.h"
#include "minimakv/codec/tq3.h"
#include "minimakv/codec/tq4.h"
#include "page_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace minimakv::attention::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using codec::PageFormat;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// ---- Decoders: element i .. i + N - 1 of a row, as floats (TQ3: unscaled levels) ----

struct DecodeBf16 {
  HWY_INLINE VF operator()(const uint8_t* row, int i) const {
    const DF df;
    const hn::RebindToUnsigned<DF> du32;
    const hn::Rebind<uint16_t, DF> du16;
    uint16_t tmp[hn::MaxLanes(du16)];
    std::memcpy(tmp, row + 2 * i, sizeof(uint16_t) * hn::Lanes(du16));  // rows need not be 2-byte aligned
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, tmp))));
  }
};

// E4M3 by bit arithmetic: the byte, sign-extended to 32 bits and shifted left by 20, has its sign at
// bit 31 (and smeared over bits 30..27, masked off) and its exponent and mantissa where fp32 keeps
// them; the exponent keeps bias 7, so a multiply by 2^120 makes it fp32's 127. Exact for subnormals.
// The NaN code becomes 480: rows that hold it go through DecodeFp8Exact.
struct DecodeFp8 {
  HWY_INLINE VF operator()(const uint8_t* row, int i) const {
    const DF df;
    const hn::RebindToSigned<DF> di32;
    const hn::Rebind<int8_t, DF> di8;
    const auto v = hn::PromoteTo(di32, hn::LoadU(di8, reinterpret_cast<const int8_t*>(row) + i));
    const auto bits = hn::And(hn::ShiftLeft<20>(v), hn::Set(di32, 0x87FFFFFF));
    return hn::Mul(hn::BitCast(df, bits), hn::Set(df, 1.329227995784916e36f));  // 2^120
  }
};

struct DecodeFp8Exact {
  HWY_INLINE VF operator()(const uint8_t* row, int i) const {
    const DF df;
    const hn::RebindToUnsigned<DF> du32;
    const auto v = hn::PromoteTo(du32, hn::LoadU(hn::Rebind<uint8_t, DF>(), row + i));
    const auto mag = hn::And(v, hn::Set(du32, 0x7Fu));
    const auto x = DecodeFp8()(row, i);
    return hn::IfThenElse(hn::RebindMask(df, hn::Eq(mag, hn::Set(du32, 0x7Fu))), hn::Set(df, __builtin_nanf("")), x);
  }
};

// Whether any of n rows holds an FP8 NaN code (magnitude bits all set): the largest magnitude byte
// is 0x7F exactly then.
HWY_INLINE bool Fp8RowsHoldNan(const uint8_t* row, size_t row_bytes, uint32_t n, int d) {
  const hn::ScalableTag<uint8_t> du8;
  const int N = static_cast<int>(hn::Lanes(du8));
  const auto k7f = hn::Set(du8, 0x7F);
  auto top = hn::Zero(du8);
  uint8_t tail = 0;
  for (uint32_t j = 0; j < n; ++j) {
    const uint8_t* r = row + j * row_bytes;
    int i = 0;
    for (; i + N <= d; i += N) top = hn::Max(top, hn::And(hn::LoadU(du8, r + i), k7f));
    for (; i < d; ++i) tail = std::max<uint8_t>(tail, r[i] & 0x7F);
  }
  return tail == 0x7F || !hn::AllFalse(du8, hn::Eq(top, k7f));
}

// A template on the vector type, so that the branch a target cannot compile (byte shuffles need 8 or
// 16 lanes) is never instantiated for it. The tables are loaded into registers once per page.
template <class D = DF>
class DecodeTq3 {
 public:
  explicit DecodeTq3(int d) : row_bytes_(3 * d / 8), idx_(tab().idx[0]) {
    if constexpr (kShuffle) {
      const hn::RebindToSigned<D> di32;
      shifts_ = hn::BitCast(hn::RebindToUnsigned<D>(), hn::Load(di32, tab().shift));
      levels_ = hn::Load(D(), tab().level);
    }
#if HWY_TARGET == HWY_AVX3_DL
    // Bit offsets of code k (byte 4k of the control; the other bytes are unused): 3k, or 3k + 16 when
    // the load had to start two bytes early.
    alignas(64) uint8_t ctrl[2][64] = {};
    for (int k = 0; k < 16; ++k) {
      ctrl[0][4 * k] = static_cast<uint8_t>(3 * k);
      ctrl[1][4 * k] = static_cast<uint8_t>(3 * k + 16);
    }
    ctrl_[0] = _mm512_load_si512(ctrl[0]);
    ctrl_[1] = _mm512_load_si512(ctrl[1]);
#endif
  }

  HWY_INLINE hn::Vec<D> operator()(const uint8_t* row, int i) const {
    const D df;
#if HWY_TARGET == HWY_AVX3_DL
    // VBMI: the 16 codes are 48 bits of one 8-byte word. Broadcast to every 64-bit lane, one
    // multishift moves code k's bits to the low byte of 32-bit lane k (the load starts at most at
    // row_bytes - 8, then the codes sit 16 bits further in), and the permute maps it to its level
    // (bits above 2 are neighbouring codes, which the 8-periodic table ignores).
    const int off = 3 * i / 8, start = std::min(off, row_bytes_ - 8);
    uint64_t word;
    std::memcpy(&word, row + start, sizeof(word));
    const __m512i codes = _mm512_multishift_epi64_epi8(off == start ? ctrl_[0] : ctrl_[1],
                                                       _mm512_set1_epi64(static_cast<long long>(word)));
    return hn::Vec<D>{_mm512_permutexvar_ps(codes, levels_.raw)};
#endif
    if constexpr (kShuffle) {
      // N codes are 3N/8 whole bytes. Every 128-bit block gets the same 16 source bytes (LoadDup128);
      // a byte shuffle inside each block gives each 32-bit lane the byte(s) holding its code, a per-lane
      // shift and a mask extract it, and the register table maps it to its level. Loads start at most at
      // row_bytes - 16, so they stay inside the row (TQ3 rows are >= 24 bytes).
      const hn::RebindToUnsigned<D> du32;
      const hn::RebindToSigned<D> di32;
      const hn::Repartition<uint8_t, D> du8;
      const int off = 3 * i / 8, start = std::min(off, row_bytes_ - 16);
      const auto src = hn::LoadDup128(du8, row + start);
      const auto w = hn::BitCast(du32, hn::TableLookupBytesOr0(src, hn::Load(du8, idx_ + 4 * kN * (off - start))));
#if HWY_TARGET <= HWY_AVX3 || HWY_TARGET == HWY_AVX2
      // The lane permutes read only the low 4 (AVX-512) or 3 (AVX2) index bits, and the level table
      // repeats every 8 lanes, so the neighbouring codes above bit 2 need no mask.
      const auto c = hn::BitCast(di32, hn::Shr(w, shifts_));
#if HWY_TARGET <= HWY_AVX3
      return hn::Vec<D>{_mm512_permutexvar_ps(c.raw, levels_.raw)};
#else
      return hn::Vec<D>{_mm256_permutevar8x32_ps(levels_.raw, c.raw)};
#endif
#else
      const auto c = hn::And(hn::Shr(w, shifts_), hn::Set(du32, 7u));
      return hn::TableLookupLanes(levels_, hn::IndicesFromVec(df, hn::BitCast(di32, c)));
#endif
    } else {
      float out[kN];
      for (size_t k = 0; k < kN; ++k) {
        const size_t bit = 3 * (static_cast<size_t>(i) + k), b = bit / 8;
        const unsigned w = row[b] | (b + 1 < static_cast<size_t>(row_bytes_) ? row[b + 1] << 8 : 0);
        out[k] = codec::tq3_level(static_cast<int>((w >> (bit % 8)) & 7u));
      }
      return hn::LoadU(df, out);
    }
  }

 private:
  static constexpr size_t kN = hn::MaxLanes(D());
  static constexpr bool kShuffle = kN >= 8 && kN <= 16;
  struct Unpack {
    alignas(64) uint8_t idx[16][4 * kN];  // per start offset inside the 16 loaded bytes
    alignas(64) int32_t shift[kN];
    alignas(64) float level[kN];
  };
  static const Unpack& tab() {
    static const Unpack t = [] {
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
    return t;
  }
  int row_bytes_;
  const uint8_t* idx_;
  hn::Vec<hn::RebindToUnsigned<D>> shifts_;
  hn::Vec<D> levels_;
#if HWY_TARGET == HWY_AVX3_DL
  __m512i ctrl_[2];
#endif
};

// TQ4: two codes per byte. kN / 2 bytes (at most 8) are broadcast to every 64-bit lane; a byte shuffle
// inside each 128-bit block gives 32-bit lane k the byte k / 2, a per-lane shift (0 or 4) and a mask
// extract its code, and a register table of the 16 levels maps it (one permute with 16 lanes; with 8,
// two permutes of 8 levels and a select on the code's top bit). Below 8 lanes: one code at a time.
template <class D = DF>
class DecodeTq4 {
 public:
  DecodeTq4() {
    for (size_t k = 0; k < kN; ++k) {
      idx_[4 * k] = static_cast<uint8_t>(k / 2 % 8);
      idx_[4 * k + 1] = idx_[4 * k + 2] = idx_[4 * k + 3] = 0x80;  // zero
      shift_[k] = static_cast<int32_t>(4 * (k % 2));
      lo_[k] = codec::tq4_level(static_cast<int>(k % 16));
      hi_[k] = codec::tq4_level(static_cast<int>(8 + k % 8));
    }
  }

  HWY_INLINE hn::Vec<D> operator()(const uint8_t* row, int i) const {
    const D df;
    if constexpr (kShuffle) {
      const hn::RebindToUnsigned<D> du32;
      const hn::RebindToSigned<D> di32;
      const hn::Repartition<uint8_t, D> du8;
      const hn::Repartition<uint64_t, D> du64;
      uint64_t word = 0;
      std::memcpy(&word, row + i / 2, kN / 2);
      const auto src = hn::BitCast(du8, hn::Set(du64, word));
      const auto w = hn::BitCast(du32, hn::TableLookupBytesOr0(src, hn::Load(du8, idx_)));
      const auto c = hn::And(hn::Shr(w, hn::BitCast(du32, hn::Load(di32, shift_))), hn::Set(du32, 15u));
      if constexpr (kN == 16) {
        return hn::TableLookupLanes(hn::Load(df, lo_), hn::IndicesFromVec(df, hn::BitCast(di32, c)));
      } else {
        const auto c7 = hn::IndicesFromVec(df, hn::BitCast(di32, hn::And(c, hn::Set(du32, 7u))));
        const auto top = hn::RebindMask(df, hn::Ne(hn::And(c, hn::Set(du32, 8u)), hn::Zero(du32)));
        return hn::IfThenElse(top, hn::TableLookupLanes(hn::Load(df, hi_), c7),
                              hn::TableLookupLanes(hn::Load(df, lo_), c7));
      }
    } else {
      float out[kN];
      for (size_t k = 0; k < kN; ++k) {
        const size_t j = static_cast<size_t>(i) + k;
        out[k] = codec::tq4_level((row[j / 2] >> (4 * (j % 2))) & 15);
      }
      return hn::LoadU(df, out);
    }
  }

 private:
  static constexpr size_t kN = hn::MaxLanes(D());
  static constexpr bool kShuffle = kN == 8 || kN == 16;
  alignas(64) uint8_t idx_[4 * kN];
  alignas(64) int32_t shift_[kN];
  alignas(64) float lo_[kN], hi_[kN];  // 16 lanes: all 16 levels in lo_; 8 lanes: levels 0-7 and 8-15
};

HWY_INLINE float RowScale(PageFormat f, const uint8_t* meta, uint32_t t) {
  if (f == PageFormat::kFp8) {
    float s;
    std::memcpy(&s, meta + 4 * t, 4);
    return s;
  }
  if (codec::format_spec(f).rotated) {
    uint16_t a;
    std::memcpy(&a, meta + 2 * t, 2);
    return codec::half_to_float(a);
  }
  return 1.0f;
}

// dst[g * dst_stride + j] = src[g * src_stride + j] * (row scale of row t0 + j) for j < n and the G
// heads g: N scales at a time (FP8: fp32 loads; TQ3, TQ4: fp16 widened in registers), each vector of scales
// read once for all heads; the tail one by one.
HWY_INLINE void MulRowScales(PageFormat f, const uint8_t* meta, uint32_t t0, uint32_t n, int G, const float* src,
                             size_t src_stride, float* dst, size_t dst_stride) {
  const DF df;
  const uint32_t N = static_cast<uint32_t>(hn::Lanes(df));
  const auto apply = [&](VF scales, uint32_t j) {
    for (int g = 0; g < G; ++g)
      hn::StoreU(hn::Mul(hn::LoadU(df, src + g * src_stride + j), scales), df, dst + g * dst_stride + j);
  };
  uint32_t j = 0;
  if (f == PageFormat::kFp8) {
    for (; j + N <= n; j += N) {
      float scales[hn::MaxLanes(DF())];
      std::memcpy(scales, meta + 4 * (t0 + j), sizeof(float) * N);
      apply(hn::LoadU(df, scales), j);
    }
  } else if (codec::format_spec(f).rotated) {  // fp16 alpha
    const hn::Rebind<hwy::float16_t, DF> df16;
    for (; j + N <= n; j += N) {
      hwy::float16_t alpha[hn::MaxLanes(DF())];
      std::memcpy(alpha, meta + 2 * (t0 + j), sizeof(uint16_t) * N);
      apply(hn::PromoteTo(df, hn::LoadU(df16, alpha)), j);
    }
  }
  for (; j < n; ++j) {
    const float scale = RowScale(f, meta, t0 + j);
    for (int g = 0; g < G; ++g) dst[g * dst_stride + j] = src[g * src_stride + j] * scale;
  }
}

// Calls fn(std::integral_constant<int, H>()) for the run-time head count h, H = min(h, kMax) >= 1:
// the kernels keep per-head registers, so their head count must be a compile-time constant.
template <int kMax, class Fn>
HWY_INLINE void WithHeadCount(int h, const Fn& fn) {
  if constexpr (kMax > 1) {
    if (h < kMax) return WithHeadCount<kMax - 1>(h, fn);
  }
  fn(std::integral_constant<int, kMax>());
}

// ---- Logits ----

constexpr uint32_t kTile = 4;  // rows per logits tile

// Heads per pass over a logits tile: 4 x H accumulators, the tile's rows, a query vector and the
// decoder's tables must fit the register file (32 vector registers with AVX-512, 16 below it).
constexpr int kLogitHeads = hn::MaxLanes(DF()) >= 16 ? 6 : 2;

// The four lane sums of a, b, c, e stored at out[0..3].
template <class D>
HWY_INLINE void StoreSums4(D df, hn::Vec<D> a, hn::Vec<D> b, hn::Vec<D> c, hn::Vec<D> e, float* out) {
#if HWY_TARGET == HWY_SCALAR
  out[0] = hn::GetLane(a);
  out[1] = hn::GetLane(b);
  out[2] = hn::GetLane(c);
  out[3] = hn::GetLane(e);
  (void)df;
#else
  // Per 128-bit block: [a0+a2, b0+b2, a1+a3, b1+b3], then pairs of 64-bit lanes give [a, b, c, e].
  const auto ab = hn::Add(hn::InterleaveLower(df, a, b), hn::InterleaveUpper(df, a, b));
  const auto ce = hn::Add(hn::InterleaveLower(df, c, e), hn::InterleaveUpper(df, c, e));
  const hn::Repartition<uint64_t, D> du64;
  const auto lo = hn::InterleaveLower(du64, hn::BitCast(du64, ab), hn::BitCast(du64, ce));
  const auto hi = hn::InterleaveUpper(du64, hn::BitCast(du64, ab), hn::BitCast(du64, ce));
  const auto v = hn::Add(hn::BitCast(df, lo), hn::BitCast(df, hi));
  if constexpr (hn::MaxLanes(D()) == 16) {
    const hn::Half<D> d8;
    const hn::Half<decltype(d8)> d4;
    const auto v8 = hn::Add(hn::LowerHalf(d8, v), hn::UpperHalf(d8, v));
    hn::StoreU(hn::Add(hn::LowerHalf(d4, v8), hn::UpperHalf(d4, v8)), d4, out);
  } else if constexpr (hn::MaxLanes(D()) == 8) {
    const hn::Half<D> d4;
    hn::StoreU(hn::Add(hn::LowerHalf(d4, v), hn::UpperHalf(d4, v)), d4, out);
  } else {
    static_assert(hn::MaxLanes(D()) == 4, "x86 float vectors hold 4, 8 or 16 lanes");
    hn::StoreU(v, df, out);
  }
#endif
}

// s[g * nt + j] = <q_g, row_j> for the four rows at `row` and the H heads g0 .. g0 + H - 1. The decoder
// is taken by value, so its tables live in registers (stores through s cannot alias a local copy).
template <int H, class Dec>
HWY_INLINE void LogitsTile(const Dec dec, const uint8_t* row, size_t row_bytes, const float* q, size_t q_stride, int g0,
                           int d, float* s, size_t nt) {
  const DF df;
  const int N = static_cast<int>(hn::Lanes(df));
  VF acc[H][kTile];
  for (int h = 0; h < H; ++h)
    for (uint32_t j = 0; j < kTile; ++j) acc[h][j] = hn::Zero(df);
  for (int i = 0; i < d; i += N) {
    const VF r0 = dec(row, i), r1 = dec(row + row_bytes, i);
    const VF r2 = dec(row + 2 * row_bytes, i), r3 = dec(row + 3 * row_bytes, i);
    for (int h = 0; h < H; ++h) {
      const VF qv = hn::LoadU(df, q + (g0 + h) * q_stride + i);
      acc[h][0] = hn::MulAdd(qv, r0, acc[h][0]);
      acc[h][1] = hn::MulAdd(qv, r1, acc[h][1]);
      acc[h][2] = hn::MulAdd(qv, r2, acc[h][2]);
      acc[h][3] = hn::MulAdd(qv, r3, acc[h][3]);
    }
  }
  for (int h = 0; h < H; ++h) StoreSums4(df, acc[h][0], acc[h][1], acc[h][2], acc[h][3], s + (g0 + h) * nt);
}

// s[g * nt] = <q_g, row> for every head (the rows after a page's last whole tile).
template <class Dec>
HWY_INLINE void LogitsRow(const Dec& dec, const uint8_t* row, const float* q, size_t q_stride, int G, int d, float* s,
                          size_t nt) {
  const DF df;
  const int N = static_cast<int>(hn::Lanes(df));
  for (int g = 0; g < G; ++g) {
    VF acc = hn::Zero(df);
    for (int i = 0; i < d; i += N) acc = hn::MulAdd(hn::LoadU(df, q + g * q_stride + i), dec(row, i), acc);
    s[g * nt] = hn::GetLane(hn::SumOfLanes(df, acc));
  }
}

template <class Dec>
HWY_INLINE void LogitsWith(const Dec& dec, const uint8_t* codes, size_t row_bytes, uint32_t t0, uint32_t n,
                           const float* q, size_t q_stride, int G, int d, float* s, size_t nt) {
  const uint8_t* row = codes + t0 * row_bytes;
  if (n < kTile) {
    for (uint32_t j = 0; j < n; ++j) LogitsRow(dec, row + j * row_bytes, q, q_stride, G, d, s + t0 + j, nt);
    return;
  }
  // As few passes as the register budget allows, with the heads dealt evenly (AVX-512: 8 = 4 + 4).
  const int passes = (G + kLogitHeads - 1) / kLogitHeads;
  float* st = s + t0;
  for (int p = 0, g0 = 0; p < passes; ++p) {
    const int h = (G - g0 + passes - p - 1) / (passes - p);
    WithHeadCount<kLogitHeads>(
        h, [&](auto heads) { LogitsTile<decltype(heads)::value>(dec, row, row_bytes, q, q_stride, g0, d, st, nt); });
    g0 += h;
  }
}

void PageLogits(PageFormat f, const uint8_t* codes, size_t row_bytes, const uint8_t* meta, uint32_t nt, const float* q,
                size_t q_stride, int G, int d, float* s) {
  const DecodeTq3<> tq3(d);
  const DecodeTq4<> tq4;
  for (uint32_t t0 = 0; t0 < nt; t0 += kTile) {
    const uint32_t n = std::min(kTile, nt - t0);
    if (f == PageFormat::kBf16) {
      LogitsWith(DecodeBf16(), codes, row_bytes, t0, n, q, q_stride, G, d, s, nt);
    } else if (f == PageFormat::kFp8) {
      if (Fp8RowsHoldNan(codes + t0 * row_bytes, row_bytes, n, d))
        LogitsWith(DecodeFp8Exact(), codes, row_bytes, t0, n, q, q_stride, G, d, s, nt);
      else
        LogitsWith(DecodeFp8(), codes, row_bytes, t0, n, q, q_stride, G, d, s, nt);
    } else if (f == PageFormat::kTq4) {
      LogitsWith(tq4, codes, row_bytes, t0, n, q, q_stride, G, d, s, nt);
    } else {
      LogitsWith(tq3, codes, row_bytes, t0, n, q, q_stride, G, d, s, nt);
    }
  }
  if (f != PageFormat::kBf16) MulRowScales(f, meta, 0, nt, G, s, nt, s, nt);
}

// ---- Values ----

constexpr uint32_t kBlock = 16;  // rows per value block
constexpr int kMaxGroup = 8;

// acc_g[i .. i + N) += sum_j wt[g][j] * row_j[i .. i + N) for the H heads g0 .. g0 + H - 1 (decoder by
// value, as in LogitsTile): each head's output slice stays in registers while the block's n rows stream
// through it. With fewer than 8 heads, each head sums into C chains (8, 4, 2 for 1, 2-3, 4-7 heads;
// rows dealt round-robin), so at least eight FMAs are in flight and their latency does not serialise
// the block.
template <int H, class Dec>
HWY_INLINE void AccumulateBlock(const Dec dec, const uint8_t* row, size_t row_bytes, uint32_t n,
                                const float (*wt)[kBlock], int g0, int d, float* acc, size_t acc_stride) {
  constexpr int C = H >= 8 ? 1 : H >= 4 ? 2 : H >= 2 ? 4 : 8;
  const DF df;
  const int N = static_cast<int>(hn::Lanes(df));
  for (int i = 0; i < d; i += N) {
    VF a[C][H];
    for (int h = 0; h < H; ++h) {
      a[0][h] = hn::LoadU(df, acc + (g0 + h) * acc_stride + i);
      for (int c = 1; c < C; ++c) a[c][h] = hn::Zero(df);
    }
    uint32_t j = 0;
    for (; j + C <= n; j += C) {
      for (int c = 0; c < C; ++c) {
        const VF r = dec(row + (j + c) * row_bytes, i);
        for (int h = 0; h < H; ++h) a[c][h] = hn::MulAdd(hn::Set(df, wt[g0 + h][j + c]), r, a[c][h]);
      }
    }
    for (; j < n; ++j) {
      const VF r = dec(row + j * row_bytes, i);
      for (int h = 0; h < H; ++h) a[0][h] = hn::MulAdd(hn::Set(df, wt[g0 + h][j]), r, a[0][h]);
    }
    for (int h = 0; h < H; ++h) {
      for (int c = 1; c < C; ++c) a[0][h] = hn::Add(a[0][h], a[c][h]);
      hn::StoreU(a[0][h], df, acc + (g0 + h) * acc_stride + i);
    }
  }
}

template <class Dec>
HWY_INLINE void AccumulateWith(const Dec& dec, const uint8_t* row, size_t row_bytes, uint32_t n,
                               const float (*wt)[kBlock], int G, int d, float* acc, size_t acc_stride) {
  // One pass over all G <= 8 heads: at most 14 accumulators (H x C), a row and a weight fit the 16
  // registers of AVX2.
  WithHeadCount<kMaxGroup>(G, [&](auto heads) {
    AccumulateBlock<decltype(heads)::value>(dec, row, row_bytes, n, wt, 0, d, acc, acc_stride);
  });
}

void PageAccumulate(PageFormat f, const uint8_t* codes, size_t row_bytes, const uint8_t* meta, uint32_t nt,
                    const float* w, int G, int d, float* acc, size_t acc_stride) {
  const DecodeTq3<> tq3(d);
  const DecodeTq4<> tq4;
  float wt[kMaxGroup][kBlock];  // per head and row: softmax weight times the row's V scale
  for (uint32_t t0 = 0; t0 < nt; t0 += kBlock) {
    const uint32_t n = std::min(kBlock, nt - t0);
    if (f == PageFormat::kBf16) {
      for (int g = 0; g < G; ++g) std::memcpy(wt[g], w + static_cast<size_t>(g) * nt + t0, sizeof(float) * n);
    } else {
      MulRowScales(f, meta, t0, n, G, w + t0, nt, wt[0], kBlock);
    }
    const uint8_t* row = codes + t0 * row_bytes;
    if (f == PageFormat::kBf16) {
      AccumulateWith(DecodeBf16(), row, row_bytes, n, wt, G, d, acc, acc_stride);
    } else if (f == PageFormat::kFp8) {
      if (Fp8RowsHoldNan(row, row_bytes, n, d))
        AccumulateWith(DecodeFp8Exact(), row, row_bytes, n, wt, G, d, acc, acc_stride);
      else
        AccumulateWith(DecodeFp8(), row, row_bytes, n, wt, G, d, acc, acc_stride);
    } else if (f == PageFormat::kTq4) {
      AccumulateWith(tq4, row, row_bytes, n, wt, G, d, acc, acc_stride);
    } else {
      AccumulateWith(tq3, row, row_bytes, n, wt, G, d, acc, acc_stride);
    }
  }
}

// x[i] <- exp(x[i] - sub) * mul for i < n; returns the sum of exp(x[i] - sub).
float ExpSubSum(float* x, size_t n, float sub, float mul) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, sub), vm = hn::Set(df, mul);
  auto sum = hn::Zero(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), vs));
    hn::StoreU(hn::Mul(e, vm), df, x + i);
    sum = hn::Add(sum, e);
  }
  float tail = 0.0f;
  for (; i < n; ++i) {
    const float e = std::exp(x[i] - sub);
    tail += e;
    x[i] = e * mul;
  }
  return hn::GetLane(hn::SumOfLanes(df, sum)) + tail;
}

// The largest of x[0 .. n), n >= 1 (NaN when one is NaN).
float MaxOf(const float* x, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  float m = x[0];
  size_t i = 0;
  if (n >= N) {
    auto v = hn::LoadU(df, x);
    auto nan = hn::IsNaN(v);
    for (i = N; i + N <= n; i += N) {
      const auto xi = hn::LoadU(df, x + i);
      v = hn::Max(v, xi);
      nan = hn::Or(nan, hn::IsNaN(xi));
    }
    if (!hn::AllFalse(df, nan)) return __builtin_nanf("");
    m = hn::GetLane(hn::MaxOfLanes(df, v));
  }
  for (; i < n; ++i) m = std::isnan(x[i]) ? x[i] : std::max(m, x[i]);
  return m;
}

}  // namespace minimakv::attention::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
#if HWY_ONCE
namespace minimakv::attention::detail {

HWY_EXPORT(PageLogits);
HWY_EXPORT(PageAccumulate);
HWY_EXPORT(ExpSubSum);
HWY_EXPORT(MaxOf);

float exp_sub_sum(float* x, size_t n, float sub, float mul) {
  return HWY_DYNAMIC_DISPATCH(ExpSubSum)(x, n, sub, mul);
}

float max_of(const float* x, size_t n) {
  return HWY_DYNAMIC_DISPATCH(MaxOf)(x, n);
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
