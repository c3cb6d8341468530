// The kernels decode and prefill share: the query rotation of the TQ3 branches, and the one merge of
// every partial of an output row under one softmax.
//
// Owns: rotate_rows_kernel and merge_partials_kernel, over the one partials layout and the merge ranges
// of cuda/decode_plan.h (MergeRange, MergeRow). Both sit in an unnamed namespace: each kernel file that
// includes this gets its own instance. Invariant: a merge visits a row's works format by format, each in
// work order, so its sums have one fixed order and its results are deterministic.
#pragma once

#include <cmath>
#include <cstdint>

#include "attention_device.cuh"
#include "minimakv/codec/page_format.h"
#include "minimakv/cuda/chained_launch.cuh"
#include "minimakv/cuda/decode_plan.h"

namespace minimakv::cuda::detail {

// Where a merge launch finds each row's partials.
struct MergeParams {
  const MergeRange* ranges;  // [group][format]
  const MergeRow* rows;      // [row] (a grouped merge); otherwise row r is group r at offset 0
  const int32_t* live_rows;  // rows to merge, read on the device (a launch at capacity); null: all
  int unit_stride;           // units per work (a grouped merge); otherwise 1
};

namespace {

// q_rot[row][hq] = R_{kv head} q[row][hq]: one block of D threads per (row, query head), rotating the
// queries once for every TQ3 branch. live_rows, when given, is a row count read on the device (a decode
// step launched at its workspace's capacity from a graph): rows past it are skipped.
template <int D>
__global__ void rotate_rows_kernel(AttendParams p, const int32_t* live_rows) {
  chain_begin();
  const int row = blockIdx.x, hq = blockIdx.y;
  if (live_rows && row >= *live_rows) return;
  __shared__ float x[D];
  const size_t o = (static_cast<size_t>(row) * p.q_heads + hq) * D;
  rotate_query<D>(p.q + o, p.signs + hq / p.group * D, x, p.q_rot + o);
}

// One CTA of Threads per (output row, query head): every partial of the row under one softmax, the
// rotated formats' share rotated back once. Pass 1 takes the maximum with every thread striding over the
// partials; pass 2 gives each of the first LoopWarps warps every LoopWarps-th group of kUnroll partials
// of a format, whose (m, l) and output rows it loads together before accumulating (independent loads in
// flight instead of one round trip per partial); the warps' sums are added in warp order. A decode row
// has hundreds of partials and batch 1 only q_heads CTAs, so decode spreads them over 16 warps, 8 (4 at
// head_dim 256) at a time; a prefill row has a few, in a grid of rows x q_heads CTAs, so one warp takes
// them in order, one at a time, in a CTA small enough (MinBlocks) for the SM to hold many. Grouped:
// rows map to groups through mp.rows and mp.unit_stride (prefill); otherwise row r is group r and work w
// is unit w (decode, whose index arithmetic then stays that of a plain split list).
template <int D, int Threads, int LoopWarps, int Unroll, int MinBlocks, bool Grouped>
__global__ void __launch_bounds__(Threads, MinBlocks) merge_partials_kernel(AttendParams p, MergeParams mp) {
  constexpr int kWarps = Threads / 32, kPer = D / 32, kUnroll = Unroll;
  static_assert(Threads >= D && Threads % 32 == 0 && LoopWarps >= 1 && LoopWarps <= kWarps);
  chain_begin();
  const int row = blockIdx.x, hq = blockIdx.y;
  if (mp.live_rows && row >= *mp.live_rows) return;
  __shared__ float x[D];
  __shared__ float warp_max[kWarps], warp_l[LoopWarps];
  __shared__ float warp_sum[2][LoopWarps][D];  // [plain, rotated][warp][dim]
  const int i = threadIdx.x, lane = i & 31, warp = i >> 5, h = hq / p.group;
  const MergeRow mr = Grouped ? mp.rows[row] : MergeRow{row, 0};
  const MergeRange* ranges = mp.ranges + static_cast<size_t>(mr.group) * codec::kNumPageFormats;
  // The (m, l) index of work w's partial of this row; its output row is D times that.
  auto slot = [&](int w) {
    const size_t unit = Grouped ? static_cast<size_t>(w) * mp.unit_stride + mr.offset : static_cast<size_t>(w);
    return unit * p.q_heads + hq;
  };
  float mm = -INFINITY;
  for (int f = 0; f < codec::kNumPageFormats; ++f)
    for (int w = ranges[f].begin + i; w < ranges[f].end; w += Threads) {
      const size_t qh = slot(w);
      if (p.part_l[qh] > 0.0f) mm = fmaxf(mm, p.part_m[qh]);
    }
  for (int o = 16; o > 0; o >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, o));
  if (lane == 0) warp_max[warp] = mm;
  __syncthreads();
  mm = warp_max[0];
  for (int w = 1; w < kWarps; ++w) mm = fmaxf(mm, warp_max[w]);

  if (LoopWarps == kWarps || warp < LoopWarps) {
    float ll = 0.0f, plain[kPer] = {}, rot[kPer] = {};
#pragma unroll
    for (int f = 0; f < codec::kNumPageFormats; ++f) {
      const int s0 = ranges[f].begin, s1 = ranges[f].end;
      float acc[kPer] = {};
      for (int base = s0 + warp * kUnroll; base < s1; base += LoopWarps * kUnroll) {
        float w[kUnroll], v[kUnroll][kPer];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int s = base + u;
          const size_t qh = slot(s < s1 ? s : s0);
          const float ls = s < s1 ? p.part_l[qh] : 0.0f;
          w[u] = ls > 0.0f ? ls * expf(p.part_m[qh] - mm) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const float* o = p.part_o + slot(base + u < s1 ? base + u : s0) * D;
#pragma unroll
          for (int j = 0; j < kPer; ++j)
            v[u][j] = w[u] > 0.0f ? o[lane + 32 * j] : 0.0f;  // an empty partial's O is unset
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          ll += w[u];
#pragma unroll
          for (int j = 0; j < kPer; ++j) acc[j] += w[u] * v[u][j];
        }
      }
#pragma unroll
      for (int j = 0; j < kPer; ++j) ((codec::kRotatedFormats >> f) & 1u ? rot : plain)[j] += acc[j];
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      warp_sum[0][warp][lane + 32 * j] = plain[j];
      warp_sum[1][warp][lane + 32 * j] = rot[j];
    }
    if (lane == 0) warp_l[warp] = ll;
  }
  __syncthreads();
  float sum_plain = 0.0f, sum_rot = 0.0f, sum_l = 0.0f;
  if (i < D)
    for (int w = 0; w < LoopWarps; ++w) {
      sum_plain += warp_sum[0][w][i];
      sum_rot += warp_sum[1][w][i];
      sum_l += warp_l[w];
    }
  const size_t rh = static_cast<size_t>(row) * p.q_heads + hq;
  write_merged<D>(sum_plain, sum_rot, mm, sum_l, p.signs + h * D, x, p.out + rh * D,
                  p.out_bf16 ? p.out_bf16 + rh * D : nullptr, p.m ? p.m + rh : nullptr, p.l ? p.l + rh : nullptr);
}

}  // namespace
}  // namespace minimakv::cuda::detail
