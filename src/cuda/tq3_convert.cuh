// The TQ3 page conversions as fused passes: FP8 -> TQ3 (load, un-scale, rotate, quantize, pack, store)
// and its inverse, the promotion TQ3 -> FP8 (unpack, scale, rotate back, quantize to E4M3, store).
//
// Owns: fp8_to_tq3_kernel<D, Corr> and tq3_to_fp8_kernel<D>. A group of G = D / 32 consecutive lanes
// encodes one (token, head, K|V) vector, each lane holding 32 of its elements in registers, so the
// rotation and every reduction run on registers and shuffles with no shared-memory round trip per
// stage. Lane t of a group owns the elements
//     i = jl + JL * t + 32 * hi,   jl in [0, JL), hi in [0, G), JL = 32 / G,
// which makes each lane own whole partials of codec::canonical_sum (partial j = i mod 32 is jl + JL t)
// and makes its loads runs of JL contiguous bytes.
// Invariant: the bytes equal codec::convert_fp8_to_tq3's (and codec::convert_tq3_to_fp8's). Every FWHT
// stage runs in the canonical order (h = 1, 2, 4, ...; stages on bits of jl and hi inside a lane, on bits
// of t across lanes, with the same operands and one rounding), each canonical sum adds its 32 partials
// in ascending i and then in the same tree, and each decision uses the rounding helpers of portable.h.
// Rows in [tokens, B) and the alignment padding are written as zeros, so no separate zeroing pass is
// needed. Branches that shuffle are warp-uniform.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "minimakv/codec/fp8_e4m3.h"
#include "minimakv/codec/half.h"
#include "minimakv/codec/rotation.h"
#include "minimakv/codec/tq3.h"
#include "minimakv/cuda/page_writes.h"

namespace minimakv::cuda::detail {

template <int D>
struct Tq3ConvertShape {
  static constexpr int kGroup = D / 32;             // lanes per vector
  static constexpr int kRun = 32 / kGroup;          // contiguous elements (bytes) per lane and hi
  static constexpr int kWords = kRun / 4;           // 32-bit words per run
  static constexpr int kRowsPerWarp = 32 / kGroup;  // vectors a warp encodes at once
  static constexpr int kRowBytes = 3 * D / 8;       // packed TQ3 codes of one vector
  static constexpr int kWarps = 4;
  static constexpr int kPasses = kGroup;                                 // passes per warp
  static constexpr int kRowsPerBlock = kWarps * kRowsPerWarp * kPasses;  // 128 for every D
  static_assert(kRowsPerWarp * kRowBytes == 384, "a warp's packed rows are 24 16-byte chunks");
};

constexpr unsigned kAllLanes = 0xffffffffu;

// The tail of codec::canonical_sum over a group: lane t holds partials jl + JL t (each already summed over
// ascending i); adds partial[j + off] into partial[j] for off = 16 .. 1, across lanes while off >= JL
// (lane t + off / JL holds j + off; the lanes whose result is later read are always those below the
// partner distance), then inside the lane. Every lane of the group gets the sum.
template <int G, int JL>
__device__ inline float group_tree(float (&p)[JL], int lane) {
#pragma unroll
  for (int off = 16; off >= JL; off >>= 1) {
#pragma unroll
    for (int jl = 0; jl < JL; ++jl)
      p[jl] = codec::detail::add_rn(p[jl], __shfl_xor_sync(kAllLanes, p[jl], off / JL));
  }
#pragma unroll
  for (int off = JL / 2; off >= 1; off >>= 1) {
#pragma unroll
    for (int jl = 0; jl < off; ++jl) p[jl] = codec::detail::add_rn(p[jl], p[jl + off]);
  }
  return __shfl_sync(kAllLanes, p[0], lane & ~(G - 1));
}

// codec::canonical_sum of the vector whose element (hi, jl) of lane t is term(hi, jl), spread over a
// group as above; every lane of the group gets it. Terms are computed on the fly (no array).
template <int G, int JL, class Term>
__device__ inline float group_canonical_sum(Term term, int lane) {
  float p[JL];
#pragma unroll
  for (int jl = 0; jl < JL; ++jl) {
    p[jl] = 0.0f;
#pragma unroll
    for (int hi = 0; hi < G; ++hi) p[jl] = codec::detail::add_rn(p[jl], term(hi, jl));
  }
  return group_tree<G, JL>(p, lane);
}

// Any-of over the group's lanes.
template <int G>
__device__ inline bool group_any(bool b) {
  unsigned x = b ? 1u : 0u;
#pragma unroll
  for (int m = 1; m < G; m <<= 1) x |= __shfl_xor_sync(kAllLanes, x, m);
  return x != 0;
}

// codec::fwht_inplace over the group, stage by stage in canonical order.
template <int G, int JL>
__device__ inline void group_fwht(float (&x)[G][JL], int t) {
#pragma unroll
  for (int h = 1; h < 32 * G; h <<= 1) {
    if (h < JL) {
#pragma unroll
      for (int hi = 0; hi < G; ++hi)
#pragma unroll
        for (int jl = 0; jl < JL; ++jl)
          if (!(jl & h)) {
            const float a = x[hi][jl], b = x[hi][jl + h];
            x[hi][jl] = codec::detail::add_rn(a, b);
            x[hi][jl + h] = codec::detail::add_rn(a, -b);
          }
    } else if (h < 32) {
      // The lane holding j adds its partner's x[j + h]; the lane holding j + h computes x[j] + (-x[j + h]).
      // As one fma with the sign +-1: the product is exact, so the single rounding is add_rn's, and the
      // select stays off the ALU pipe (the kernel's busiest).
      const int m = h / JL;
      const float sign = (t & m) ? -1.0f : 1.0f;
#pragma unroll
      for (int hi = 0; hi < G; ++hi)
#pragma unroll
        for (int jl = 0; jl < JL; ++jl) {
          const float partner = __shfl_xor_sync(kAllLanes, x[hi][jl], m);
          x[hi][jl] = __fmaf_rn(x[hi][jl], sign, partner);
        }
    } else {
      const int k = h / 32;
#pragma unroll
      for (int hi = 0; hi < G; ++hi)
        if (!(hi & k))
#pragma unroll
          for (int jl = 0; jl < JL; ++jl) {
            const float a = x[hi][jl], b = x[hi + k][jl];
            x[hi][jl] = codec::detail::add_rn(a, b);
            x[hi + k][jl] = codec::detail::add_rn(a, -b);
          }
    }
  }
}

// codec::tq3_code by binary search over the ascending thresholds (the same count for every finite t).
__device__ inline int tq3_code_search(float t) {
  const int c4 = t >= 0.0f ? 4 : 0;
  const float t2 = c4 ? 1.0500f : -1.0500f;
  const int c2 = t >= t2 ? 2 : 0;
  const float t1 = c4 ? (c2 ? 1.7480f : 0.50055f) : (c2 ? -0.50055f : -1.7480f);
  return c4 + c2 + (t >= t1 ? 1 : 0);
}

// Two canonical sums over the same pass of terms (one level lookup for both), as group_canonical_sum.
template <int G, int JL, class Term>
__device__ inline void group_canonical_sum2(Term term, int lane, float& a_out, float& b_out) {
  float a[JL], b[JL];
#pragma unroll
  for (int jl = 0; jl < JL; ++jl) {
    a[jl] = 0.0f;
    b[jl] = 0.0f;
#pragma unroll
    for (int hi = 0; hi < G; ++hi) {
      float ta, tb;
      term(hi, jl, ta, tb);
      a[jl] = codec::detail::add_rn(a[jl], ta);
      b[jl] = codec::detail::add_rn(b[jl], tb);
    }
  }
  a_out = group_tree<G, JL>(a, lane);
  b_out = group_tree<G, JL>(b, lane);
}

// Which (job, KV head, K|V, chunk of Tq3ConvertShape::kRowsPerBlock tokens) a block converts. blockIdx.x
// = ((job * H + head) * kvs + kv) * chunks + chunk, chunk fastest; a launch of one of K or V (kvs = 1)
// passes that kv.
struct ConvertBlock {
  ConvertJob job;
  int head, kv, chunk;
};
__device__ inline ConvertBlock convert_block(const ConvertJob* jobs, int H, int chunks, int kvs, int kv) {
  int rest = blockIdx.x;
  ConvertBlock b;
  b.chunk = rest % chunks;
  rest /= chunks;
  b.kv = kvs == 1 ? kv : rest % kvs;
  rest /= kvs;
  b.head = rest % H;
  b.job = jobs[rest / H];
  return b;
}

// The head's code and metadata blocks (K or V) of a block's source page in pool `from` and destination
// page in pool `to`.
struct HeadBlocks {
  const uint8_t* src_codes;
  const uint8_t* src_meta;
  uint8_t* dst_codes;
  uint8_t* dst_meta;
};
__device__ inline HeadBlocks head_blocks(const PoolViews& pools, codec::PageFormat from, codec::PageFormat to,
                                         const ConvertBlock& b) {
  const DeviceLayout SL = pools.layout[static_cast<int>(from)];
  const DeviceLayout DL = pools.layout[static_cast<int>(to)];
  const uint8_t* src = pools.base[static_cast<int>(from)] + static_cast<size_t>(b.job.src_page) * SL.page_bytes;
  uint8_t* dst = pools.base[static_cast<int>(to)] + static_cast<size_t>(b.job.dst_page) * DL.page_bytes;
  return {src + (b.kv ? SL.v_codes : 0) + static_cast<size_t>(b.head) * SL.code_stride,
          src + (b.kv ? SL.v_meta : SL.k_meta) + static_cast<size_t>(b.head) * SL.meta_stride,
          dst + (b.kv ? DL.v_codes : 0) + static_cast<size_t>(b.head) * DL.code_stride,
          dst + (b.kv ? DL.v_meta : DL.k_meta) + static_cast<size_t>(b.head) * DL.meta_stride};
}

// Blocks as convert_block with kvs = 1: one launch converts the K vectors (kv = 0) or the V vectors
// (kv = 1) with the norm correction Corr, a template parameter so that no shuffling sum sits under a
// branch the compiler cannot prove warp-uniform.
template <int D, codec::NormCorrection Corr>
__global__ void __launch_bounds__(32 * Tq3ConvertShape<D>::kWarps)
    fp8_to_tq3_kernel(PoolViews pools, int H, int B, int chunks, int kv, const float* signs, const ConvertJob* jobs) {
  using S = Tq3ConvertShape<D>;
  constexpr int G = S::kGroup, JL = S::kRun, W = S::kWords;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int t = lane & (G - 1), gi = lane / G;
  const ConvertBlock blk = convert_block(jobs, H, chunks, 1, kv);
  const int chunk = blk.chunk, h = blk.head;
  const ConvertJob job = blk.job;

  __shared__ float levels[8];
  __shared__ __align__(16) uint8_t staged[S::kWarps][S::kRowsPerWarp * S::kRowBytes];
  if (threadIdx.x < 8) levels[threadIdx.x] = codec::tq3_level(threadIdx.x);

  const HeadBlocks hb = head_blocks(pools, codec::PageFormat::kFp8, codec::PageFormat::kTq3, blk);
  const uint8_t* src_codes = hb.src_codes;
  const float* src_scale = reinterpret_cast<const float*>(hb.src_meta);
  uint8_t* dst_codes = hb.dst_codes;
  uint8_t* dst_meta = hb.dst_meta;
  const DeviceLayout DL = pools.layout[static_cast<int>(codec::PageFormat::kTq3)];

  // The rotation's signs folded into the FP8 sign bits: (-c) * s == -(c * s) exactly.
  uint32_t flip[G * W];
  {
    const float* sg = signs + (static_cast<size_t>(job.layer) * H + h) * D;
#pragma unroll
    for (int hi = 0; hi < G; ++hi)
#pragma unroll
      for (int w = 0; w < W; ++w) {
        uint32_t m = 0;
#pragma unroll
        for (int b = 0; b < 4; ++b)
          if (sg[32 * hi + JL * t + 4 * w + b] < 0.0f) m |= 0x80u << (8 * b);
        flip[hi * W + w] = m;
      }
  }
  const int tokens = static_cast<int>(job.tokens);
  const float c = codec::inv_sqrt_dim(D);
  const float sqrt_d = D == 64 ? 8.0f : (D == 128 ? 11.3137084989847604f : 16.0f);

  const auto load = [&](int row, uint32_t(&raw)[G * W], float& scale) {
    if (row < tokens) {
      const uint8_t* p = src_codes + static_cast<size_t>(row) * D + JL * t;
#pragma unroll
      for (int hi = 0; hi < G; ++hi) {
        if constexpr (W == 1) {
          raw[hi] = *reinterpret_cast<const uint32_t*>(p + 32 * hi);
        } else if constexpr (W == 2) {
          const uint2 u = *reinterpret_cast<const uint2*>(p + 32 * hi);
          raw[2 * hi] = u.x;
          raw[2 * hi + 1] = u.y;
        } else {
          const uint4 u = *reinterpret_cast<const uint4*>(p + 32 * hi);
          raw[4 * hi] = u.x;
          raw[4 * hi + 1] = u.y;
          raw[4 * hi + 2] = u.z;
          raw[4 * hi + 3] = u.w;
        }
      }
      scale = src_scale[row];
    } else {
#pragma unroll
      for (int i = 0; i < G * W; ++i) raw[i] = 0;
      scale = 0.0f;
    }
  };

  const int first = chunk * S::kRowsPerBlock + warp * S::kRowsPerWarp * S::kPasses;
  uint32_t raw[G * W];
  float scale;
  load(first + gi, raw, scale);
  __syncthreads();  // levels[]

#pragma unroll 1
  for (int pass = 0; pass < S::kPasses; ++pass) {
    // No early exit for passes past row B - 1: they encode zeros and store nothing, and the shuffles
    // stay in code the compiler knows is convergent.
    const int base = first + pass * S::kRowsPerWarp;
    const int row = base + gi;
    const bool live = row < tokens;
    float x[G][JL];
#pragma unroll
    for (int hi = 0; hi < G; ++hi)
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const uint32_t r = raw[hi * W + w] ^ flip[hi * W + w];
        const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(r & 0xffffu), __NV_E4M3);
        const __half2_raw up = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(r >> 16), __NV_E4M3);
        x[hi][4 * w + 0] = codec::detail::mul_rn(__half2float(__half(__half_raw{lo.x})), scale);
        x[hi][4 * w + 1] = codec::detail::mul_rn(__half2float(__half(__half_raw{lo.y})), scale);
        x[hi][4 * w + 2] = codec::detail::mul_rn(__half2float(__half(__half_raw{up.x})), scale);
        x[hi][4 * w + 3] = codec::detail::mul_rn(__half2float(__half(__half_raw{up.y})), scale);
      }
    // The next pass's bytes are in flight while this one computes.
    if (pass + 1 < S::kPasses) load(base + S::kRowsPerWarp + gi, raw, scale);

    group_fwht<G, JL>(x, t);
#pragma unroll
    for (int hi = 0; hi < G; ++hi)
#pragma unroll
      for (int jl = 0; jl < JL; ++jl) x[hi][jl] = codec::detail::mul_rn(x[hi][jl], c);
    const auto square = [&](int hi, int jl) { return codec::detail::mul_rn(x[hi][jl], x[hi][jl]); };
    float ss = group_canonical_sum<G, JL>(square, lane);
    // A finite sum of squares means every element is finite, so the per-element test runs only when some
    // group's sum is not: then either an element is NaN/inf (the vector is stored as NaN) or a finite
    // vector's squares overflow, and it is quantized as y * 2^-64 (codec::tq3_encode_rotated_ref).
    bool bad = false;
    float post = 1.0f;
    const bool ss_nonfinite = !codec::detail::is_finite_bits(ss);
    if (__any_sync(kAllLanes, ss_nonfinite)) {
      bool bad_lane = false;
#pragma unroll
      for (int hi = 0; hi < G; ++hi)
#pragma unroll
        for (int jl = 0; jl < JL; ++jl) bad_lane |= !codec::detail::is_finite_bits(x[hi][jl]);
      bad = group_any<G>(bad_lane);
      const bool rescale = ss_nonfinite && !bad;
#pragma unroll
      for (int hi = 0; hi < G; ++hi)
#pragma unroll
        for (int jl = 0; jl < JL; ++jl)
          if (rescale) x[hi][jl] = codec::detail::mul_rn(x[hi][jl], 5.42101086242752217e-20f);
      const float ss2 = group_canonical_sum<G, JL>(square, lane);
      if (rescale) {
        ss = ss2;
        post = 1.8446744073709552e19f;
      }
    }
    const float norm = codec::detail::sqrt_rn(ss);
    const float to_unit = codec::detail::div_rn(sqrt_d, norm);
    int code[G][JL];
#pragma unroll
    for (int hi = 0; hi < G; ++hi)
#pragma unroll
      for (int jl = 0; jl < JL; ++jl) code[hi][jl] = tq3_code_search(codec::detail::mul_rn(x[hi][jl], to_unit));
    const auto y_times_level = [&](int hi, int jl) { return codec::detail::mul_rn(x[hi][jl], levels[code[hi][jl]]); };
    const auto level_squared = [&](int hi, int jl) {
      const float level = levels[code[hi][jl]];
      return codec::detail::mul_rn(level, level);
    };
    float alpha;
    if constexpr (Corr == codec::NormCorrection::kUnbiased) {
      alpha = codec::detail::div_rn(ss, group_canonical_sum<G, JL>(y_times_level, lane));
    } else if constexpr (Corr == codec::NormCorrection::kMinMse) {
      float num, den;
      group_canonical_sum2<G, JL>(
          [&](int hi, int jl, float& yl, float& ll) {
            const float level = levels[code[hi][jl]];
            yl = codec::detail::mul_rn(x[hi][jl], level);
            ll = codec::detail::mul_rn(level, level);
          },
          lane, num, den);
      alpha = codec::detail::div_rn(num, den);
    } else if constexpr (Corr == codec::NormCorrection::kPreserveNorm) {
      alpha = codec::detail::div_rn(norm, codec::detail::sqrt_rn(group_canonical_sum<G, JL>(level_squared, lane)));
    } else {
      alpha = codec::detail::div_rn(norm, sqrt_d);
    }
    alpha = codec::detail::mul_rn(alpha, post);
    uint16_t alpha_bits = codec::float_to_half(alpha < codec::kHalfMax ? alpha : codec::kHalfMax);
    int fill = -1;  // -1: the computed codes; else every code is `fill`
    if (!live) {
      alpha_bits = 0;
      fill = 0;
    } else if (bad) {
      alpha_bits = codec::kHalfNaN;
      fill = 0;
    } else if (ss == 0.0f) {
      alpha_bits = 0;
      fill = 4;
    }

    // Pack each run's codes (code k of an 8-code group at bits 3k) into the warp's staging rows.
    uint8_t* out = staged[warp] + gi * S::kRowBytes;
#pragma unroll
    for (int hi = 0; hi < G; ++hi) {
      uint64_t bits = 0;
#pragma unroll
      for (int jl = 0; jl < JL; ++jl) bits |= static_cast<uint64_t>(fill < 0 ? code[hi][jl] : fill) << (3 * jl);
      const int byte0 = 3 * (32 * hi + JL * t) / 8;
      if constexpr (JL == 4) {
        // Half an 8-code group per lane: the even lane joins its neighbour's 12 bits.
        const uint32_t other = __shfl_xor_sync(kAllLanes, static_cast<uint32_t>(bits), 1);
        if (!(t & 1)) {
          const uint32_t w = static_cast<uint32_t>(bits) | (other << 12);
          out[byte0] = static_cast<uint8_t>(w);
          out[byte0 + 1] = static_cast<uint8_t>(w >> 8);
          out[byte0 + 2] = static_cast<uint8_t>(w >> 16);
        }
      } else {
#pragma unroll
        for (int b = 0; b < 3 * JL / 8; ++b) out[byte0 + b] = static_cast<uint8_t>(bits >> (8 * b));
      }
    }
    if (t == 0 && row < B) reinterpret_cast<uint16_t*>(dst_meta)[row] = alpha_bits;
    __syncwarp();
    // The warp's rows are contiguous in the page and start on a 16-byte boundary; a chunk that reaches
    // past row B - 1 covers only the head block's zero padding (rows >= B were encoded as zeros).
    const int valid = (B - base) * S::kRowBytes;
    if (lane < 24 && 16 * lane < valid)
      *reinterpret_cast<uint4*>(dst_codes + static_cast<size_t>(base) * S::kRowBytes + 16 * lane) =
          *reinterpret_cast<const uint4*>(staged[warp] + 16 * lane);
    __syncwarp();
  }
  // The metadata block's alignment padding, by the block holding row B - 1.
  if (chunk == chunks - 1) {
    const int pad = static_cast<int>(DL.meta_stride) - 2 * B;
    if (static_cast<int>(threadIdx.x) < pad) dst_meta[2 * B + threadIdx.x] = 0;
  }
}

// The bits [bit, bit + n) (n <= 48) of a 4-byte-aligned little-endian byte row, from bit 0.
__device__ inline uint64_t row_bits(const uint8_t* row, int bit, int n) {
  const auto* w = reinterpret_cast<const uint32_t*>(row) + (bit >> 5);
  const int sh = bit & 31;
  const uint64_t lo = (static_cast<uint64_t>(w[1]) << 32) | w[0];
  uint64_t v = lo >> sh;
  if (sh + n > 64) v |= static_cast<uint64_t>(w[2]) << (64 - sh);
  return v;
}

// Promotion, blocks as convert_block with kvs = 2 (K and V in one launch). Each warp stages its rows' packed codes
// (384 contiguous bytes) with 16-byte loads, each lane takes its runs' codes from there, and the vector
// is decoded (alpha times the level), rotated back (FWHT, 1/sqrt(D), signs) and encoded as E4M3 with
// codec::fp8_encode_vector's scale and rounding. The staged rows carry 8 spare bytes, so a run's bits
// are read with whole-word loads.
template <int D>
__global__ void __launch_bounds__(32 * Tq3ConvertShape<D>::kWarps)
    tq3_to_fp8_kernel(PoolViews pools, int H, int B, int chunks, const float* signs, const ConvertJob* jobs) {
  using S = Tq3ConvertShape<D>;
  constexpr int G = S::kGroup, JL = S::kRun, W = S::kWords;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int t = lane & (G - 1), gi = lane / G;
  const ConvertBlock blk = convert_block(jobs, H, chunks, 2, 0);
  const int chunk = blk.chunk, h = blk.head;
  const ConvertJob job = blk.job;

  __shared__ float levels[8];
  __shared__ __align__(16) uint8_t staged[S::kWarps][S::kRowsPerWarp * S::kRowBytes + 16];
  if (threadIdx.x < 8) levels[threadIdx.x] = codec::tq3_level(threadIdx.x);

  const HeadBlocks hb = head_blocks(pools, codec::PageFormat::kTq3, codec::PageFormat::kFp8, blk);
  const uint8_t* src_codes = hb.src_codes;
  const uint16_t* src_alpha = reinterpret_cast<const uint16_t*>(hb.src_meta);
  uint8_t* dst_codes = hb.dst_codes;
  float* dst_scale = reinterpret_cast<float*>(hb.dst_meta);
  const DeviceLayout DL = pools.layout[static_cast<int>(codec::PageFormat::kFp8)];

  // Bit (32 hi + jl) of `negate`: the sign of element (hi, jl); (-y) * 1 == y * (-1) exactly.
  uint32_t negate = 0;
  {
    const float* sg = signs + (static_cast<size_t>(job.layer) * H + h) * D;
#pragma unroll
    for (int hi = 0; hi < G; ++hi)
#pragma unroll
      for (int jl = 0; jl < JL; ++jl)
        if (sg[32 * hi + JL * t + jl] < 0.0f) negate |= 1u << (hi * JL + jl);
  }
  const int tokens = static_cast<int>(job.tokens);
  const float c = codec::inv_sqrt_dim(D);
  __syncthreads();  // levels[]

  const int first = chunk * S::kRowsPerBlock + warp * S::kRowsPerWarp * S::kPasses;
#pragma unroll 1
  for (int pass = 0; pass < S::kPasses; ++pass) {
    const int base = first + pass * S::kRowsPerWarp;
    const int row = base + gi;
    const bool live = row < tokens;
    // Stage the warp's packed rows (rows at or past `tokens` are never read as codes).
    const int valid = (min(tokens, B) - base) * S::kRowBytes;
    if (lane < 24 && 16 * lane < valid)
      *reinterpret_cast<uint4*>(staged[warp] + 16 * lane) =
          *reinterpret_cast<const uint4*>(src_codes + static_cast<size_t>(base) * S::kRowBytes + 16 * lane);
    const float alpha = live ? codec::half_to_float(src_alpha[row]) : 0.0f;
    __syncwarp();
    float x[G][JL];
#pragma unroll
    for (int hi = 0; hi < G; ++hi) {
      const uint64_t bits = row_bits(staged[warp] + gi * S::kRowBytes, 3 * (32 * hi + JL * t), 3 * JL);
#pragma unroll
      for (int jl = 0; jl < JL; ++jl)
        x[hi][jl] = live ? codec::detail::mul_rn(alpha, levels[(bits >> (3 * jl)) & 7u]) : 0.0f;
    }
    __syncwarp();  // the staging row is rewritten by the next pass
    group_fwht<G, JL>(x, t);
    float amax = 0.0f;
#pragma unroll
    for (int hi = 0; hi < G; ++hi)
#pragma unroll
      for (int jl = 0; jl < JL; ++jl) {
        float v = codec::detail::mul_rn(x[hi][jl], c);
        if ((negate >> (hi * JL + jl)) & 1u) v = -v;
        x[hi][jl] = v;
        if (codec::detail::is_finite_bits(v)) amax = fmaxf(amax, fabsf(v));
      }
#pragma unroll
    for (int m = 1; m < G; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(kAllLanes, amax, m));
    const float scale = codec::detail::div_rn(amax, codec::kFp8E4M3Max);
    if (row < B) {
      uint32_t out[G * W];
#pragma unroll
      for (int hi = 0; hi < G; ++hi)
#pragma unroll
        for (int w = 0; w < W; ++w) {
          uint32_t word = 0;
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            const float v = x[hi][4 * w + b];
            uint8_t code;
            if (!codec::detail::is_finite_bits(v))
              code =
                  scale > 0.0f ? codec::fp8_e4m3_from_float(v) : (codec::detail::is_nan_bits(v) ? codec::kFp8NaN : 0);
            else
              code = scale > 0.0f ? codec::fp8_e4m3_from_float(codec::detail::div_rn(v, scale)) : 0;
            word |= static_cast<uint32_t>(code) << (8 * b);
          }
          out[hi * W + w] = live ? word : 0u;
        }
      uint8_t* p = dst_codes + static_cast<size_t>(row) * D + JL * t;
#pragma unroll
      for (int hi = 0; hi < G; ++hi) {
        if constexpr (W == 1) {
          *reinterpret_cast<uint32_t*>(p + 32 * hi) = out[hi];
        } else if constexpr (W == 2) {
          *reinterpret_cast<uint2*>(p + 32 * hi) = make_uint2(out[2 * hi], out[2 * hi + 1]);
        } else {
          *reinterpret_cast<uint4*>(p + 32 * hi) =
              make_uint4(out[4 * hi], out[4 * hi + 1], out[4 * hi + 2], out[4 * hi + 3]);
        }
      }
      if (t == 0) dst_scale[row] = live ? scale : 0.0f;
    }
  }
  // The scale block's alignment padding, by the block holding row B - 1 (FP8 rows need none: D bytes).
  if (chunk == chunks - 1) {
    const int pad = static_cast<int>(DL.meta_stride) - 4 * B;
    if (static_cast<int>(threadIdx.x) < pad) reinterpret_cast<uint8_t*>(dst_scale)[4 * B + threadIdx.x] = 0;
  }
}

}  // namespace minimakv::cuda::detail
