// TQ3 codes to fp16 levels in registers, shared by the decoding CTA's fragments (decode_fragments.cuh)
// and the copy-engine prefill's TQ3 producers (prefill_tma_tq3.cuh).
//
// Owns: the eight levels as byte tables for a byte permute (prmt), the spread of packed 3-bit codes to
// one nibble each, and the permutes that turn nibble selectors into fp16 pairs. No shared memory: a
// thread holds the four table words in registers, so a pair of codes costs a few dependent integer
// operations and no load. The prefill producer widens whole rows this way; the decoding CTA keeps its
// shared-memory pair table by default, which measured 0-7% faster there (MINIMAKV_DECODE_TQ3_PRMT,
// docs/benchmarks.md).
// Invariants: every selector nibble holds a code 0-7 with its top bit clear (prmt's default mode reads a
// set top bit as "replicate the sign"); the levels are codec::tq3_level rounded to fp16, exactly what a
// shared-memory table of pack_half2 pairs would hold.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "minimakv/codec/tq3.h"

namespace minimakv::cuda::detail {

// The eight TQ3 levels in fp16 as prmt byte tables: lo[0] holds the low bytes of levels 0-3, lo[1] those
// of levels 4-7, hi the high bytes likewise.
struct Tq3LevelBytes {
  uint32_t lo[2] = {0, 0}, hi[2] = {0, 0};
  __device__ Tq3LevelBytes() {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t h = __half_as_ushort(__float2half_rn(codec::tq3_level(i)));
      lo[i / 4] |= (h & 0xffu) << (8 * (i % 4));
      hi[i / 4] |= (h >> 8) << (8 * (i % 4));
    }
  }
};

// prmt.b32 in its default mode: byte n of the result is byte (sel >> 4n) & 7 of {b, a} for the low four
// nibbles of sel, whose top bits must be clear (a set top bit replicates the byte's sign instead).
// (__byte_perm masks the selector with 0x7777 first: one more instruction per call.)
__device__ inline uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// Eight packed codes (code j in bits 3j..3j+2; higher bits ignored) spread to nibble j each, top bits
// clear. Three steps: codes 4-7 to the upper half, then codes 2, 3 (6, 7) up 2 bits to the half's upper
// byte, then odd codes up 1 bit to the byte's upper nibble. A step that moves the fields of mask m up by
// k bits adds (2^k - 1) (x & m) to x, which is exact while the fields land on zero bits: one and, one
// multiply-add.
__device__ inline uint32_t tq3x8_nibbles(uint32_t g) {
  uint32_t x = (g & 0xfffu) | ((g << 4) & 0xfff0000u);
  x += 3u * (x & 0x0fc00fc0u);
  x += x & 0x38383838u;
  return x;
}

// The levels of selector nibbles 0-3 (low 16 bits of sel) as two fp16 pairs: first = {level of nibble
// 0, level of nibble 1}, second = {nibble 2, nibble 3}. Two permutes pick the levels' low and high
// bytes, two more interleave them.
__device__ inline void tq3_levels4(uint32_t sel, const Tq3LevelBytes& tb, uint32_t& first, uint32_t& second) {
  const uint32_t lo = prmt(tb.lo[0], tb.lo[1], sel), hi = prmt(tb.hi[0], tb.hi[1], sel);
  first = prmt(lo, hi, 0x5140);
  second = prmt(lo, hi, 0x7362);
}

// One packed group of eight codes as eight fp16 levels, one 16-byte chunk (codes 2q, 2q + 1 in word q).
__device__ inline uint4 tq3x8_to_half(uint32_t g, const Tq3LevelBytes& tb) {
  const uint32_t x = tq3x8_nibbles(g);
  uint4 h;
  tq3_levels4(x, tb, h.x, h.y);
  tq3_levels4(x >> 16, tb, h.z, h.w);
  return h;
}

}  // namespace minimakv::cuda::detail
