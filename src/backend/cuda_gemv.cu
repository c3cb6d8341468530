#include "cuda_gemv.h"

#include <cuda_bf16.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "cuda_activation.cuh"
#include "minimakv/cuda/chained_launch.cuh"
#include "minimakv/cuda/device_memory.h"

namespace minimakv::backend::cuda_gemv {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// The two BF16 halves of a 32-bit word as floats (exact).
__device__ inline float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ inline float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// One block per R output rows (each x chunk load serves all of them). Thread t takes the 16-byte chunks
// (8 BF16 values) t, t + 256, ... of every row: a warp reads 512 contiguous bytes of each W row per
// iteration, and all R rows' loads of an iteration are in flight together. Per row: fp32 FMAs over the
// thread's chunks in order, a butterfly over the warp's lanes, then the warps' sums added in warp order by
// one thread. None of that depends on which rows share a block, so a row's sum is the same bits in every
// instantiation.
// kSwiglu: W is [gate; up] (2 * inter rows) and the block's rows are R / 2 pairs (gate row i, up row
// inter + i); one thread per pair writes silu(gate) * up (swiglu_value) and its BF16 copy instead of the
// two sums, so the projection pair and the activation are one launch.
template <int R, bool kSwiglu>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const uint4* __restrict__ x, int in8,
                                                         const uint4* __restrict__ w, int out,
                                                         float* __restrict__ y, __nv_bfloat16* __restrict__ y_bf16,
                                                         int inter) {
  static_assert(!kSwiglu || R % 2 == 0, "pairs of rows");
  const int o0 = static_cast<int>(blockIdx.x) * R;
  // W row of the block's row r, or -1 past the end.
  const auto w_row = [&](int r) {
    if constexpr (kSwiglu) {
      const int i = o0 / 2 + r / 2;
      return i < inter ? i + (r % 2) * inter : -1;
    } else {
      return o0 + r < out ? o0 + r : -1;
    }
  };
  // W is a weight, which nothing in the pass writes: while the kernel before this one still runs, pull
  // this block's rows into L2 (one 128-byte line per thread and step), then wait for x.
  for (int r = 0; r < R && w_row(r) >= 0; ++r)
    for (int c = 8 * static_cast<int>(threadIdx.x); c < in8; c += 8 * kThreads)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(w + static_cast<size_t>(w_row(r)) * in8 + c));
  cuda::chain_begin();
  float acc[R] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll 2
  for (int c = static_cast<int>(threadIdx.x); c < in8; c += kThreads) {
    uint4 wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = w_row(r) >= 0 ? __ldg(w + static_cast<size_t>(w_row(r)) * in8 + c) : zero;
    const uint4 xv = __ldg(x + c);
    const uint32_t xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t ws[4] = {wv[r].x, wv[r].y, wv[r].z, wv[r].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc[r] = fmaf(lo_bf16(ws[i]), lo_bf16(xs[i]), acc[r]);
        acc[r] = fmaf(hi_bf16(ws[i]), hi_bf16(xs[i]), acc[r]);
      }
    }
  }
  __shared__ float part[kWarps][R];
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = acc[r];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) part[warp][r] = v;
  }
  __syncthreads();
  const auto row_sum = [&](int r) {
    float sum = part[0][r];
#pragma unroll
    for (int k = 1; k < kWarps; ++k) sum += part[k][r];
    return sum;
  };
  const int t = static_cast<int>(threadIdx.x);
  if constexpr (kSwiglu) {
    const int i = o0 / 2 + t;
    if (t < R / 2 && i < inter) {
      const float v = swiglu_value(row_sum(2 * t), row_sum(2 * t + 1));
      y[i] = v;
      y_bf16[i] = __float2bfloat16_rn(v);
    }
  } else if (t < R && o0 + t < out) {
    y[o0 + t] = row_sum(t);
  }
}

// One warp per output row (per (gate, up) pair with kSwiglu), 8 rows a block: lane l takes the 16-byte
// chunks l, l + 32, ... of its row, 8 loads in flight per lane (kWarpLoads: 8 chunks of one row, or 4
// of each of a pair), in chunk order; a butterfly over the lanes; lane 0 writes. No shared memory and no
// block-wide step, so a block retires as soon as its warps have, and a 4096-row projection is 512
// blocks that every SM holds at once (the block kernel's 2,048 blocks of 2 rows run in two waves).
// The sums are fixed-order (deterministic) but grouped differently from gemv_kernel's.
constexpr int kWarpLoads = 8;

template <bool kSwiglu>
__global__ void __launch_bounds__(kThreads) gemv_warp_kernel(const uint4* __restrict__ x, int in8,
                                                              const uint4* __restrict__ w, int out,
                                                              float* __restrict__ y,
                                                              __nv_bfloat16* __restrict__ y_bf16, int inter) {
  constexpr int R = kSwiglu ? 2 : 1, kBatch = kWarpLoads / R;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int unit = static_cast<int>(blockIdx.x) * kWarps + (static_cast<int>(threadIdx.x) >> 5);
  const bool live = unit < (kSwiglu ? inter : out);
  const uint4* row[R];
#pragma unroll
  for (int r = 0; r < R; ++r) row[r] = w + static_cast<size_t>(kSwiglu ? unit + r * inter : unit) * in8;
  // As gemv_kernel: the weight rows into L2 while the kernel before still runs, then wait for x.
  if (live)
#pragma unroll
    for (int r = 0; r < R; ++r)
      for (int c = 8 * lane; c < in8; c += 8 * 32) asm volatile("prefetch.global.L2 [%0];" ::"l"(row[r] + c));
  cuda::chain_begin();
  if (!live) return;
  float acc[R] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int base = lane; base < in8; base += 32 * kBatch) {
    uint4 wv[R][kBatch], xv[kBatch];
    // Every load unconditional (a chunk past the row reloads the last one, then counts as zero), so
    // that all of them are issued before the first FMA waits.
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int c = min(base + 32 * k, in8 - 1);
      xv[k] = __ldg(x + c);
#pragma unroll
      for (int r = 0; r < R; ++r) wv[r][k] = __ldg(row[r] + c);
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      if (base + 32 * k >= in8) xv[k] = zero;
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const uint32_t xs[4] = {xv[k].x, xv[k].y, xv[k].z, xv[k].w};
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint32_t ws[4] = {wv[r][k].x, wv[r][k].y, wv[r][k].z, wv[r][k].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          acc[r] = fmaf(lo_bf16(ws[i]), lo_bf16(xs[i]), acc[r]);
          acc[r] = fmaf(hi_bf16(ws[i]), hi_bf16(xs[i]), acc[r]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  if (lane != 0) return;
  if constexpr (kSwiglu) {
    const float v = swiglu_value(acc[0], acc[1]);
    y[unit] = v;
    y_bf16[unit] = __float2bfloat16_rn(v);
  } else {
    y[unit] = acc[0];
  }
}

}  // namespace

bool gemv_applies(int n, int in, const void* x, const void* w) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return n == 1 && in > 0 && in % 8 == 0 && aligned(x) && aligned(w);
}

namespace {

int engine_rows(int rows_per_block) {
  static const int from_env = [] {
    const char* env = std::getenv("MINIMAKV_CUDA_GEMV_ROWS");
    if (env && std::string_view(env) == "warp") return kWarpPerRow;
    return env ? std::atoi(env) : kDefaultRowsPerBlock;
  }();
  return rows_per_block == 0 ? from_env : rows_per_block;
}

// Queues gemv_kernel<R, kSwiglu> for the rows per block asked (2, 4 or 8), or gemv_warp_kernel
// (kWarpPerRow); anything else is the default.
template <bool kSwiglu>
void launch(const uint16_t* x, int in, const uint16_t* w, int out, float* y, uint16_t* y_bf16, int inter,
            cudaStream_t s, int rows_per_block, const char* what) {
  const auto go = [&](auto kernel, int rows) {
    const unsigned blocks = static_cast<unsigned>((out + rows - 1) / rows);  // rows: of W, a block
    cuda::launch_chained(kernel, blocks, kThreads, 0, s, what, reinterpret_cast<const uint4*>(x), in / 8,
                         reinterpret_cast<const uint4*>(w), out, y, reinterpret_cast<__nv_bfloat16*>(y_bf16), inter);
  };
  switch (engine_rows(rows_per_block)) {
    case kWarpPerRow:  // 8 warps a block, a row (a gate/up pair: two rows) each
      go(gemv_warp_kernel<kSwiglu>, kSwiglu ? 2 * kWarps : kWarps);
      break;
    case 4:
      go(gemv_kernel<4, kSwiglu>, 4);
      break;
    case 8:
      go(gemv_kernel<8, kSwiglu>, 8);
      break;
    default:
      go(gemv_kernel<kDefaultRowsPerBlock, kSwiglu>, kDefaultRowsPerBlock);
      break;
  }
}

}  // namespace

void gemv_bf16(const uint16_t* x, int in, const uint16_t* w, int out, float* y, cudaStream_t s, int rows_per_block) {
  if (out <= 0) return;
  launch<false>(x, in, w, out, y, nullptr, 0, s, rows_per_block, "gemv_bf16");
}

void gemv_swiglu_bf16(const uint16_t* x, int in, const uint16_t* w_gate_up, int inter, float* y, uint16_t* y_bf16,
                      cudaStream_t s, int rows_per_block) {
  if (inter <= 0) return;
  launch<true>(x, in, w_gate_up, 2 * inter, y, y_bf16, inter, s, rows_per_block, "gemv_swiglu_bf16");
}

}  // namespace minimakv::backend::cuda_gemv
