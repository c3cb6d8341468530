// How the paged decode kernels' MMA fragments come from staged page rows (decode_split.cuh): for each
// page format, which dims or tokens a lane's fragment registers hold, how BF16 rows, E4M3 codes and TQ3
// or TQ4 codes become bf16 or fp16 operands, and how fp32 values split into terms of the MMA type.
//
// Invariants: every operand is exact in its MMA type (BF16 rows as bf16, E4M3 values and TQ3 levels as
// fp16); QK and PV read the same permutation of dims or tokens for both operands, so the products are
// the plain ones; padding rows of a tile are read as zero where their codes may be NaN (BF16, FP8).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "attention_device.cuh"
#include "minimakv/codec/page_format.h"

namespace minimakv::cuda::decode_detail {

using namespace detail;

// Terms of the query in QK: the logits keep about fp32 accuracy (BF16 needs a third term for that).
template <codec::PageFormat F>
inline constexpr int kQueryTerms = F == codec::PageFormat::kBf16 ? 3 : 2;

// The first of the four consecutive dims that lane t's fragments hold in QK k-step ks. FP8, TQ4 and BF16:
// 16 ks + 4 t. TQ3: 64-code chunks, lane t taking codes [16 t, 16 t + 16) of each (48 contiguous bits),
// four per step.
template <codec::PageFormat F>
__device__ inline int qk_dim(int ks, int t) {
  if constexpr (F == codec::PageFormat::kTq3)
    return 64 * (ks / 4) + 16 * t + 4 * (ks % 4);
  else
    return 16 * ks + 4 * t;
}

// Codes [16 t, 16 t + 16) of 64-code chunk c of a staged TQ3 row, 3 bits each from bit 0.
__device__ inline uint64_t tq3_codes16(const uint8_t* row, int c, int t) {
  const auto* w = reinterpret_cast<const uint32_t*>(row) + 6 * c + ((3 * t) >> 1);
  const uint64_t v = (static_cast<uint64_t>(w[1]) << 32) | w[0];
  return v >> (16 * (t & 1));
}

// The 12 bits of codes [d, d + 4) of a staged TQ3 row of D codes (d a multiple of 4).
template <int D>
__device__ inline uint32_t tq3_codes4(const uint8_t* row, int d) {
  constexpr int kWords = 3 * D / 32;
  const auto* w = reinterpret_cast<const uint32_t*>(row);
  const int bit = 3 * d, wi = bit >> 5;
  const uint32_t hi = wi + 1 < kWords ? w[wi + 1] : 0u;
  return __funnelshift_r(w[wi], hi, bit & 31) & 0xfffu;
}

// The MMA of format F's fragments: bf16 for BF16 pages, fp16 for FP8, TQ3 and TQ4.
template <codec::PageFormat F>
__device__ inline void mma_tile(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (F == codec::PageFormat::kBf16)
    mma16816_bf16(c, a, b0, b1);
  else
    mma16816(c, a, b0, b1);
}

// (x0, x1) as N terms of format F's MMA type, two values a register: each term rounds what the terms
// before it left (hi = round(x), lo = round(x - hi), ...). Two fp16 terms keep 22 bits of x, two bf16
// terms 16 and three 24.
template <codec::PageFormat F, int N>
__device__ inline void split_terms(float x0, float x1, uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if constexpr (F == codec::PageFormat::kBf16) {
      r[i] = pack_bf162(x0, x1);
      x0 -= bf16_lo(r[i]);
      x1 -= bf16_hi(r[i]);
    } else {
      const __half2 h = __floats2half2_rn(x0, x1);
      r[i] = *reinterpret_cast<const uint32_t*>(&h);
      x0 -= __low2float(h);
      x1 -= __high2float(h);
    }
  }
}

// The QK fragments (A operand) of k-steps [4 c, 4 c + 4) for lane (g, t): rows r0 (token g of the
// block) and r1 (token g + 8). pairs: the TQ3 (64) or TQ4 (256) level-pair table.
template <codec::PageFormat F, int D>
__device__ inline void qk_chunk(const uint8_t* r0, const uint8_t* r1, int c, int t, const uint32_t* pairs,
                                uint32_t (&a)[4][4]) {
  if constexpr (F == codec::PageFormat::kTq3) {
    const uint64_t v0 = tq3_codes16(r0, c, t), v1 = tq3_codes16(r1, c, t);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      a[kk][0] = pairs[(v0 >> (12 * kk)) & 63u];
      a[kk][1] = pairs[(v1 >> (12 * kk)) & 63u];
      a[kk][2] = pairs[(v0 >> (12 * kk + 6)) & 63u];
      a[kk][3] = pairs[(v1 >> (12 * kk + 6)) & 63u];
    }
  } else if constexpr (F == codec::PageFormat::kTq4) {
    // Dims 16 ks + 4 t .. + 3 are the two bytes at 8 ks + 2 t; a byte is two codes, one table word.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int ks = 4 * c + kk;
      const uint32_t w0 = *reinterpret_cast<const uint16_t*>(r0 + 8 * ks + 2 * t);
      const uint32_t w1 = *reinterpret_cast<const uint16_t*>(r1 + 8 * ks + 2 * t);
      a[kk][0] = pairs[w0 & 255u];
      a[kk][1] = pairs[w1 & 255u];
      a[kk][2] = pairs[w0 >> 8];
      a[kk][3] = pairs[w1 >> 8];
    }
  } else if constexpr (F == codec::PageFormat::kFp8) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int ks = 4 * c + kk;
      const uint32_t w0 = *reinterpret_cast<const uint32_t*>(r0 + 16 * ks + 4 * t);
      const uint32_t w1 = *reinterpret_cast<const uint32_t*>(r1 + 16 * ks + 4 * t);
      a[kk][0] = fp8x2_to_half2(w0);
      a[kk][1] = fp8x2_to_half2(w1);
      a[kk][2] = fp8x2_to_half2(w0 >> 16);
      a[kk][3] = fp8x2_to_half2(w1 >> 16);
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int ks = 4 * c + kk;
      const uint2 w0 = *reinterpret_cast<const uint2*>(r0 + 32 * ks + 8 * t);
      const uint2 w1 = *reinterpret_cast<const uint2*>(r1 + 32 * ks + 8 * t);
      a[kk][0] = w0.x;
      a[kk][1] = w1.x;
      a[kk][2] = w0.y;
      a[kk][3] = w1.y;
    }
  }
}

// The PV fragments of a rotated format from its level-pair lookup pair(ja, jb, e): the levels of dim
// d + e of tokens t + 4 ja (low half) and t + 4 jb (high half) as one fp16x2 register.
template <class Pair>
__device__ inline void pv_from_pairs(const Pair& pair, uint32_t (&a0)[4], uint32_t (&a1)[4]) {
  a0[0] = pair(0, 1, 0);
  a0[1] = pair(0, 1, 1);
  a0[2] = pair(2, 3, 0);
  a0[3] = pair(2, 3, 1);
  a1[0] = pair(0, 1, 2);
  a1[1] = pair(0, 1, 3);
  a1[2] = pair(2, 3, 2);
  a1[3] = pair(2, 3, 3);
}

// The PV fragments (A operand, V^T) of output dims d .. d + 3 (row blocks a0: d, d + 1 and a1: d + 2,
// d + 3) for lane (g, t) over the 16 tokens of k-step kt: tokens t + 4 j at vrow + (16 kt + 4 j) stride.
// Tokens at or past n are read as zero: a padding row may hold NaN codes (its P is 0).
template <codec::PageFormat F, int D>
__device__ inline void pv_fragments(const uint8_t* vrow, int stride, int kt, int d, int t, int n, const uint32_t* pairs,
                                    uint32_t (&a0)[4], uint32_t (&a1)[4]) {
  if constexpr (F == codec::PageFormat::kTq3) {
    uint32_t c[4];  // TQ3 codes are always finite levels: padding rows need no mask
#pragma unroll
    for (int j = 0; j < 4; ++j) c[j] = tq3_codes4<D>(vrow + (16 * kt + 4 * j) * stride, d);
    auto pair = [&](int ja, int jb, int e) {
      return pairs[((c[ja] >> (3 * e)) & 7u) | (((c[jb] >> (3 * e)) & 7u) << 3)];
    };
    pv_from_pairs(pair, a0, a1);
  } else if constexpr (F == codec::PageFormat::kTq4) {
    uint32_t c[4];  // dims d .. d + 3 of tokens t + 4 j: 16 bits each; finite levels, no padding mask
#pragma unroll
    for (int j = 0; j < 4; ++j) c[j] = *reinterpret_cast<const uint16_t*>(vrow + (16 * kt + 4 * j) * stride + d / 2);
    auto pair = [&](int ja, int jb, int e) {
      return pairs[((c[ja] >> (4 * e)) & 15u) | (((c[jb] >> (4 * e)) & 15u) << 4)];
    };
    pv_from_pairs(pair, a0, a1);
  } else if constexpr (F == codec::PageFormat::kFp8) {
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      w[j] = 16 * kt + t + 4 * j < n ? *reinterpret_cast<const uint32_t*>(vrow + (16 * kt + 4 * j) * stride + d) : 0u;
    const uint32_t x01 = __byte_perm(w[0], w[1], 0x5140), y01 = __byte_perm(w[0], w[1], 0x7362);
    const uint32_t x23 = __byte_perm(w[2], w[3], 0x5140), y23 = __byte_perm(w[2], w[3], 0x7362);
    a0[0] = fp8x2_to_half2(x01);
    a0[1] = fp8x2_to_half2(x01 >> 16);
    a0[2] = fp8x2_to_half2(x23);
    a0[3] = fp8x2_to_half2(x23 >> 16);
    a1[0] = fp8x2_to_half2(y01);
    a1[1] = fp8x2_to_half2(y01 >> 16);
    a1[2] = fp8x2_to_half2(y23);
    a1[3] = fp8x2_to_half2(y23 >> 16);
  } else {
    uint2 w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      w[j] = 16 * kt + t + 4 * j < n ? *reinterpret_cast<const uint2*>(vrow + (16 * kt + 4 * j) * stride + 2 * d)
                                     : make_uint2(0u, 0u);
    // bf16 of dim d (low half) and d + 1 (high half) of tokens (t, t + 4) and (t + 8, t + 12).
    a0[0] = __byte_perm(w[0].x, w[1].x, 0x5410);
    a0[1] = __byte_perm(w[0].x, w[1].x, 0x7632);
    a0[2] = __byte_perm(w[2].x, w[3].x, 0x5410);
    a0[3] = __byte_perm(w[2].x, w[3].x, 0x7632);
    a1[0] = __byte_perm(w[0].y, w[1].y, 0x5410);
    a1[1] = __byte_perm(w[0].y, w[1].y, 0x7632);
    a1[2] = __byte_perm(w[2].y, w[3].y, 0x5410);
    a1[3] = __byte_perm(w[2].y, w[3].y, 0x7632);
  }
}

}  // namespace minimakv::cuda::decode_detail
