// Device helpers shared by the paged attention kernels (decode and prefill): page metadata loads, FP8
// decoding, fp16 and bf16 tensor-core tiles, the base-2 softmax-state merge and the block FWHT of the TQ3
// rotation.
//
// Invariant: every kernel that includes this reads pages in exactly the layouts of docs/formats.md and
// keeps softmax states in base 2 internally (exp2f), converting to natural-log partials (m * ln 2) at
// its outputs, like the CPU kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "minimakv/codec/page_layout.h"
#include "minimakv/codec/rotation.h"
#include "minimakv/cuda/device_pool.h"
#include "minimakv/cuda/paged_decode.h"

namespace minimakv::cuda::detail {

// What the decode and the prefill launches share (kernel parameters, passed by value): the pools, the
// caller's query, output and page-score buffers, the workspace's rotated queries and partials, and the
// head geometry. Each launch's own parameters derive from it.
struct AttendParams {
  PoolViews pools;
  const float* q;
  float* q_rot;
  const float* signs;
  float* part_o;
  float* part_m;
  float* part_l;
  float* out;
  uint16_t* out_bf16;
  float* m;
  float* l;
  float* page_m;
  float* page_l;
  float* score_acc;
  float score_weight;
  int q_heads, kv_heads, group;
  float scale;
};

// Fills the shared part from a launch's buffers and the workspace's own arrays.
inline void set_attend_params(AttendParams& p, const PoolViews& pools, const DecodeShape& shape,
                              const AttentionBuffers& io, float* q_rot,
                       float* part_o, float* part_m, float* part_l) {
  p.pools = pools;
  p.q = io.q;
  p.q_rot = q_rot;
  p.signs = io.signs;
  p.part_o = part_o;
  p.part_m = part_m;
  p.part_l = part_l;
  p.out = io.out;
  p.out_bf16 = io.out_bf16;
  p.m = io.m;
  p.l = io.l;
  p.page_m = io.page_m;
  p.page_l = io.page_l;
  p.score_acc = io.score_acc;
  p.score_weight = io.score_weight;
  p.q_heads = shape.q_heads;
  p.kv_heads = shape.kv_heads;
  p.group = shape.q_heads / shape.kv_heads;
  p.scale = shape.softmax_scale > 0.0f ? shape.softmax_scale : 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The format table's properties as compile-time constants device code may use (format_spec itself is
// host code).
template <codec::PageFormat F>
inline constexpr bool kRotatedFormat = codec::format_spec(F).rotated;

// Per-vector metadata of one (token, head) row: FP8 rows carry an fp32 scale, TQ3 rows an fp16 norm,
// BF16 rows nothing (scale 1).
template <codec::PageFormat F>
__device__ inline float load_meta(const uint8_t* p) {
  if constexpr (F == codec::PageFormat::kBf16) {
    return 1.0f;
  } else if constexpr (F == codec::PageFormat::kFp8) {
    return *reinterpret_cast<const float*>(p);
  } else {
    return __half2float(__half(__half_raw{*reinterpret_cast<const uint16_t*>(p)}));
  }
}

// D += A B for one m16n8k16 tile: fp16 A (16 x 16, row-major fragments) and B (16 x 8), fp32 C/D.
__device__ inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D += A B for one m16n8k16 tile of bf16 A and B, fp32 C/D (fragments as mma16816).
__device__ inline void mma16816_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one bf16x2 register, lo in the low half (round to nearest), and its halves back.
__device__ inline uint32_t pack_bf162(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ inline float bf16_lo(uint32_t x) { return __uint_as_float(x << 16); }
__device__ inline float bf16_hi(uint32_t x) { return __uint_as_float(x & 0xffff0000u); }

// Two floats as one fp16x2 register, lo in the low half (round to nearest).
__device__ inline uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Two E4M3 bytes (low byte first) as one fp16x2 register; exact (every E4M3 value is an fp16 value).
__device__ inline uint32_t fp8x2_to_half2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Merges the base-2 softmax state (m2, l2) into (m, l); returns the factors applied to each side.
__device__ inline void merge_ml(float& m, float& l, float m2, float l2, float& c1, float& c2) {
  if (l2 == 0.0f) {
    c1 = 1.0f;
    c2 = 0.0f;
    return;
  }
  if (l == 0.0f) {
    m = m2;
    l = l2;
    c1 = 0.0f;
    c2 = 1.0f;
    return;
  }
  const float mn = fmaxf(m, m2);
  c1 = exp2f(m - mn);
  c2 = exp2f(m2 - mn);
  l = l * c1 + l2 * c2;
  m = mn;
}

// Share of one page in one query head's attention, q = exp(m_p - m) l_p / l (natural-log partials), in
// double like attention::page_scores on the CPU.
__device__ inline double page_share(float m_page, float l_page, float m, float l) {
  return (l > 0.0f && l_page > 0.0f) ? exp(static_cast<double>(m_page) - m) * l_page / l : 0.0;
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024), in a fixed order; every thread
// gets the result. `scratch` holds 32 doubles.
__device__ inline double block_sum(double v, double* scratch) {
  for (int off = 16; off >= 1; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double t = 0.0;
  for (int w = 0; w < warps; ++w) t += scratch[w];
  return t;
}

// Canonical in-place FWHT of x[0..D) by the first D / 2 threads of the block (all threads call it).
template <int D>
__device__ void block_fwht(float* x) {
  for (int hh = 1; hh < D; hh <<= 1) {
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < D / 2) {
      const int pidx = threadIdx.x;
      const int j = (pidx / hh) * 2 * hh + (pidx % hh);
      const float a = x[j], b = x[j + hh];
      x[j] = __fadd_rn(a, b);
      x[j + hh] = __fadd_rn(a, -b);
    }
  }
  __syncthreads();
}

// q_rot = R q for one query row of D floats (thread i owns element i): signs, FWHT, 1/sqrt(D). x is D
// floats of shared memory. The rotation every TQ3 branch reads its queries in.
template <int D>
__device__ inline void rotate_query(const float* q, const float* signs, float* x, float* q_rot) {
  const int i = threadIdx.x;
  x[i] = __fmul_rn(q[i], signs[i]);
  block_fwht<D>(x);
  q_rot[i] = __fmul_rn(x[i], codec::inv_sqrt_dim(D));
}

// The end of a merge for one (row, query head), thread i < D of a block of at least D threads (all call
// it): out[i] = (plain + R^T rot)[i] / l, where rot is the TQ3 share in the rotated domain and signs are
// the head's rotation signs; x is D floats of shared memory. Thread 0 writes the merged (m, l) where asked.
template <int D>
__device__ inline void write_merged(float plain, float rot, float mm, float ll, const float* signs, float* x,
                                    float* out, uint16_t* out_bf16, float* m_out, float* l_out) {
  const int i = threadIdx.x;
  if (i < D) x[i] = rot;
  block_fwht<D>(x);
  if (i >= D) return;
  const float back = (x[i] * codec::inv_sqrt_dim(D)) * signs[i];
  const float o = ll > 0.0f ? (plain + back) / ll : 0.0f;
  out[i] = o;
  if (out_bf16) out_bf16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(o));
  if (i == 0) {
    if (m_out) *m_out = mm;
    if (l_out) *l_out = ll;
  }
}

}  // namespace minimakv::cuda::detail
