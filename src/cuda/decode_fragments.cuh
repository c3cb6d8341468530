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
#include "tq3_registers.cuh"

// Where TQ3 fragments get their levels: bit 0 set, QK's from register byte tables (tq3_registers.cuh),
// else from the shared level-pair table; bit 1 likewise for PV. The kernel lab builds the other choices.
#ifndef MINIMAKV_DECODE_TQ3_PRMT
#define MINIMAKV_DECODE_TQ3_PRMT 0
#endif

namespace minimakv::cuda::decode_detail {

using namespace detail;

inline constexpr bool kTq3QkInRegisters = (MINIMAKV_DECODE_TQ3_PRMT & 1) != 0;
inline constexpr bool kTq3PvInRegisters = (MINIMAKV_DECODE_TQ3_PRMT & 2) != 0;

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

// Bits [from, from + width) of x moved to [to, to + width), `mask` selecting them there. from and to are
// constants once the callers' loops unroll, so this is one shift (a funnel shift where the bits straddle
// two words) and one AND.
__device__ __forceinline__ uint32_t move_bits(uint64_t x, int from, int to, uint32_t mask) {
  const uint64_t y = from >= to ? x >> (from - to) : x << (to - from);
  return static_cast<uint32_t>(y) & mask;
}

// The level-pair table word at shared address `at`. The table's shared address is aligned to its size
// (attend_split), so a caller forms `at` as (scaled index | table base): one AND-OR (LOP3) per lookup
// instead of a mask and an address add.
__device__ __forceinline__ uint32_t level_pair_at(uint32_t at) {
  uint32_t v;
  asm("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(at));
  return v;
}

// Fills a level-pair table entry at shared address `at` (before the block's barrier).
__device__ __forceinline__ void store_shared_u32(uint32_t at, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(at), "r"(v) : "memory");
}

// Codes [16 t, 16 t + 16) of 64-code chunk c of a staged TQ3 row, 3 bits each from bit 0.
__device__ inline uint64_t tq3_codes16(const uint8_t* row, int c, int t) {
  const auto* w = reinterpret_cast<const uint32_t*>(row) + 6 * c + ((3 * t) >> 1);
  const uint64_t v = (static_cast<uint64_t>(w[1]) << 32) | w[0];
  return v >> (16 * (t & 1));
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
// block) and r1 (token g + 8). pairs: the shared address of the TQ3 (64) or TQ4 (256) level-pair table;
// tb: TQ3's register tables.
template <codec::PageFormat F, int D>
__device__ inline void qk_chunk(const uint8_t* r0, const uint8_t* r1, int c, int t, uint32_t pairs,
                                const Tq3LevelBytes& tb, uint32_t (&a)[4][4]) {
  if constexpr (F == codec::PageFormat::kTq3 && kTq3QkInRegisters) {
    // Codes 8 h .. 8 h + 7 of a row are k-steps 2 h (codes 8 h .. + 3) and 2 h + 1: their nibbles 0-3
    // are registers 0 (row r0) or 1 (r1) and 2 or 3 of the first step, nibbles 4-7 of the second.
    const uint64_t v0 = tq3_codes16(r0, c, t), v1 = tq3_codes16(r1, c, t);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t x0 = tq3x8_nibbles(static_cast<uint32_t>(v0 >> (24 * h)));
      const uint32_t x1 = tq3x8_nibbles(static_cast<uint32_t>(v1 >> (24 * h)));
      tq3_levels4(x0, tb, a[2 * h][0], a[2 * h][2]);
      tq3_levels4(x1, tb, a[2 * h][1], a[2 * h][3]);
      tq3_levels4(x0 >> 16, tb, a[2 * h + 1][0], a[2 * h + 1][2]);
      tq3_levels4(x1 >> 16, tb, a[2 * h + 1][1], a[2 * h + 1][3]);
    }
  } else if constexpr (F == codec::PageFormat::kTq3) {
    const uint64_t v0 = tq3_codes16(r0, c, t), v1 = tq3_codes16(r1, c, t);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {  // codes 4 kk, 4 kk + 1 (bits 12 kk ..) and 4 kk + 2, 4 kk + 3
      a[kk][0] = level_pair_at(move_bits(v0, 12 * kk, 2, 0xfcu) | pairs);
      a[kk][1] = level_pair_at(move_bits(v1, 12 * kk, 2, 0xfcu) | pairs);
      a[kk][2] = level_pair_at(move_bits(v0, 12 * kk + 6, 2, 0xfcu) | pairs);
      a[kk][3] = level_pair_at(move_bits(v1, 12 * kk + 6, 2, 0xfcu) | pairs);
    }
  } else if constexpr (F == codec::PageFormat::kTq4) {
    // Dims 16 ks + 4 t .. + 3 are the two bytes at 8 ks + 2 t; a byte is two codes, one table word.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int ks = 4 * c + kk;
      const uint32_t w0 = *reinterpret_cast<const uint16_t*>(r0 + 8 * ks + 2 * t);
      const uint32_t w1 = *reinterpret_cast<const uint16_t*>(r1 + 8 * ks + 2 * t);
      a[kk][0] = level_pair_at(move_bits(w0, 0, 2, 0x3fcu) | pairs);
      a[kk][1] = level_pair_at(move_bits(w1, 0, 2, 0x3fcu) | pairs);
      a[kk][2] = level_pair_at(move_bits(w0, 8, 2, 0x3fcu) | pairs);
      a[kk][3] = level_pair_at(move_bits(w1, 8, 2, 0x3fcu) | pairs);
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

// ---- PV: V^T fragments ----
//
// Lane (g, t) owns D / 8 output dims as D / 32 blocks k of four (row blocks 2 k: dims +0, +1 and
// 2 k + 1: +2, +3 of the block), and reads the V codes of tokens t + 4 j (j = 0..3) of each 16-token
// k-step. Its dims come in PvGroup::kLoads runs of kDims contiguous dims, run q at kDims (8 q + g): a
// lane loads one run of a token row at once (two words of TQ3, one 4- or 8-byte load of TQ4, one 16-byte
// load of FP8 or BF16) and builds the run's blocks from registers. Runs of neighbouring lanes are
// adjacent, so the 16-byte loads of a quarter warp (t = 0..3, two g) land on 8 distinct bank groups with
// the V strides of TileGeom.
template <codec::PageFormat F, int D>
struct PvGroup {
  static constexpr int kBits = codec::format_spec(F).code_bits;
  // Dims of one run: 16 bytes of BF16 or FP8 (8 at head_dim 64); TQ3 16 codes; TQ4 16, or 8 at head_dim
  // 256, where the wider loads cost the kernel spills.
  static constexpr int kDims = F == codec::PageFormat::kBf16                 ? 8
                               : F == codec::PageFormat::kTq4 && D >= 256 ? 8
                               : D / 8 < 16                               ? D / 8
                                                                          : 16;
  static constexpr int kBlocks = kDims / 4;     // blocks k of one run
  static constexpr int kLoads = D / 8 / kDims;  // runs per lane
  // Registers of one run; TQ3 keeps a 64-bit window, its codes from bit 0 (with PV's levels in
  // registers: the run's codes 0-7 and 8-15 spread to nibbles, tq3x8_nibbles).
  static constexpr int kWords = F == codec::PageFormat::kTq3 ? 2 : kDims * kBits / 32;
};

// The first dim of block k of lane g's output rows.
template <codec::PageFormat F, int D>
__device__ inline int pv_dim(int k, int g) {
  using PG = PvGroup<F, D>;
  return PG::kDims * (8 * (k / PG::kBlocks) + g) + 4 * (k % PG::kBlocks);
}

// The codes of run q (dims kDims (8 q + g) ..) of the staged token row `row`; BF16 and FP8 rows of
// padding tokens (valid false) as zero, since their codes may be NaN. TQ3 and TQ4 codes are finite levels
// whatever the bytes, so theirs are read regardless.
template <codec::PageFormat F, int D>
__device__ inline void pv_load(const uint8_t* row, int g, int q, bool valid, uint32_t (&w)[PvGroup<F, D>::kWords]) {
  using PG = PvGroup<F, D>;
  const int dim0 = PG::kDims * (8 * q + g);
  if constexpr (F == codec::PageFormat::kTq3) {
    constexpr int kRowWords = 3 * D / 32;
    const auto* rw = reinterpret_cast<const uint32_t*>(row);
    const int bit = 3 * dim0, wi = bit >> 5;  // bit % 32 is 0, 8, 16 or 24: 48 (or 24) bits fit in two words
    const uint32_t hi = wi + 1 < kRowWords ? rw[wi + 1] : 0u;
    const uint64_t v = ((static_cast<uint64_t>(hi) << 32) | rw[wi]) >> (bit & 31);
    if constexpr (kTq3PvInRegisters) {
      w[0] = tq3x8_nibbles(static_cast<uint32_t>(v));
      w[1] = tq3x8_nibbles(static_cast<uint32_t>(v >> 24));
    } else {
      w[0] = static_cast<uint32_t>(v);
      w[1] = static_cast<uint32_t>(v >> 32);
    }
  } else {
    const uint8_t* src = row + dim0 * PG::kBits / 8;
    const bool read = valid || kRotatedFormat<F>;
    if constexpr (PG::kWords >= 4) {
#pragma unroll
      for (int i = 0; i < PG::kWords; i += 4) {
        const uint4 x = read ? *reinterpret_cast<const uint4*>(src + 4 * i) : make_uint4(0, 0, 0, 0);
        w[i] = x.x;
        w[i + 1] = x.y;
        w[i + 2] = x.z;
        w[i + 3] = x.w;
      }
    } else if constexpr (PG::kWords == 2) {
      const uint2 x = read ? *reinterpret_cast<const uint2*>(src) : make_uint2(0, 0);
      w[0] = x.x;
      w[1] = x.y;
    } else {
      w[0] = read ? *reinterpret_cast<const uint32_t*>(src) : 0u;
    }
  }
}

// The PV fragments (A operand, V^T) of block kk of a run (rows a0: dims 4 kk, 4 kk + 1 and a1: 4 kk + 2,
// 4 kk + 3 of it) over one 16-token k-step, from the loaded codes w[j] of tokens t + 4 j. A register
// holds one dim of tokens t + 4 ja (low half) and t + 4 jb (high half): (ja, jb) = (0, 1) for k columns
// 2 t, 2 t + 1 and (2, 3) for 2 t + 8, 2 t + 9, the order P's fragments use (decode_split.cuh).
template <codec::PageFormat F, int D>
__device__ inline void pv_block(const uint32_t (&w)[4][PvGroup<F, D>::kWords], int kk, uint32_t pairs,
                                const Tq3LevelBytes& tb, uint32_t (&a0)[4], uint32_t (&a1)[4]) {
  if constexpr (F == codec::PageFormat::kTq3 && kTq3PvInRegisters) {
    // w[j][kk / 2]: the nibbles of token row j, block kk's codes e = 0..3 at nibbles 4 (kk % 2) + e. A
    // selector interleaves two rows' nibbles (ja in even nibbles, jb in odd): the even-code one gives
    // dims 0 and 2 of the block, the odd-code one dims 1 and 3, each pair {token ja, token jb}.
    const int s = 16 * (kk & 1);
    auto selectors = [&](int ja, int jb, uint32_t& even, uint32_t& odd) {
      const uint32_t na = w[ja][kk >> 1], nb = w[jb][kk >> 1];
      even = ((na & 0x0f0f0f0fu) | ((nb << 4) & 0xf0f0f0f0u)) >> s;
      odd = (((na >> 4) & 0x0f0f0f0fu) | (nb & 0xf0f0f0f0u)) >> s;
    };
    uint32_t e01, o01, e23, o23;
    selectors(0, 1, e01, o01);
    selectors(2, 3, e23, o23);
    tq3_levels4(e01, tb, a0[0], a1[0]);
    tq3_levels4(o01, tb, a0[1], a1[1]);
    tq3_levels4(e23, tb, a0[2], a1[2]);
    tq3_levels4(o23, tb, a0[3], a1[3]);
  } else if constexpr (kRotatedFormat<F>) {
    // c[j]: the codes of dims 4 kk .. 4 kk + 3 of token row j, from bit 0.
    constexpr int B = PvGroup<F, D>::kBits;
    uint32_t c[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint64_t v = w[j][0];
      if constexpr (PvGroup<F, D>::kWords == 2) v |= static_cast<uint64_t>(w[j][1]) << 32;
      c[j] = static_cast<uint32_t>(v >> (4 * B * kk));
    }
    // Entry (code of ja) | (code of jb) << B, scaled by 4 and or-ed into the table's aligned address.
    auto pair = [&](int ja, int jb, int e) {
      constexpr uint32_t lo = ((1u << B) - 1) << 2, hi = lo << B;
      return level_pair_at(move_bits(c[ja], B * e, 2, lo) | move_bits(c[jb], B * e, 2 + B, hi) | pairs);
    };
    a0[0] = pair(0, 1, 0);
    a0[1] = pair(0, 1, 1);
    a0[2] = pair(2, 3, 0);
    a0[3] = pair(2, 3, 1);
    a1[0] = pair(0, 1, 2);
    a1[1] = pair(0, 1, 3);
    a1[2] = pair(2, 3, 2);
    a1[3] = pair(2, 3, 3);
  } else if constexpr (F == codec::PageFormat::kFp8) {
    // Word kk of each row: E4M3 bytes of dims 4 kk .. 4 kk + 3.
    const uint32_t x01 = __byte_perm(w[0][kk], w[1][kk], 0x5140), y01 = __byte_perm(w[0][kk], w[1][kk], 0x7362);
    const uint32_t x23 = __byte_perm(w[2][kk], w[3][kk], 0x5140), y23 = __byte_perm(w[2][kk], w[3][kk], 0x7362);
    a0[0] = fp8x2_to_half2(x01);
    a0[1] = fp8x2_to_half2(x01 >> 16);
    a0[2] = fp8x2_to_half2(x23);
    a0[3] = fp8x2_to_half2(x23 >> 16);
    a1[0] = fp8x2_to_half2(y01);
    a1[1] = fp8x2_to_half2(y01 >> 16);
    a1[2] = fp8x2_to_half2(y23);
    a1[3] = fp8x2_to_half2(y23 >> 16);
  } else {
    // Words 2 kk (dims 4 kk, 4 kk + 1) and 2 kk + 1 (4 kk + 2, 4 kk + 3) of each row, bf16 pairs.
    const int x = 2 * kk, y = 2 * kk + 1;
    a0[0] = __byte_perm(w[0][x], w[1][x], 0x5410);
    a0[1] = __byte_perm(w[0][x], w[1][x], 0x7632);
    a0[2] = __byte_perm(w[2][x], w[3][x], 0x5410);
    a0[3] = __byte_perm(w[2][x], w[3][x], 0x7632);
    a1[0] = __byte_perm(w[0][y], w[1][y], 0x5410);
    a1[1] = __byte_perm(w[0][y], w[1][y], 0x7632);
    a1[2] = __byte_perm(w[2][y], w[3][y], 0x5410);
    a1[3] = __byte_perm(w[2][y], w[3][y], 0x7632);
  }
}

}  // namespace minimakv::cuda::decode_detail
