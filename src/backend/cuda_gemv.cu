#include "cuda_gemv.h"

#include <cstdint>
#include <cstdlib>

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
// one thread.
template <int R>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const uint4* __restrict__ x, int in8,
                                                         const uint4* __restrict__ w, int out,
                                                         float* __restrict__ y) {
  const int o0 = static_cast<int>(blockIdx.x) * R;
  // W is a weight, which nothing in the pass writes: while the kernel before this one still runs, pull
  // this block's rows into L2 (one 128-byte line per thread and step), then wait for x.
  for (int r = 0; r < R && o0 + r < out; ++r)
    for (int c = 8 * static_cast<int>(threadIdx.x); c < in8; c += 8 * kThreads)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(w + static_cast<size_t>(o0 + r) * in8 + c));
  cuda::chain_begin();
  float acc[R] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll 2
  for (int c = static_cast<int>(threadIdx.x); c < in8; c += kThreads) {
    uint4 wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r)
      wv[r] = o0 + r < out ? __ldg(w + static_cast<size_t>(o0 + r) * in8 + c) : zero;
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
  const int r = static_cast<int>(threadIdx.x);
  if (r < R && o0 + r < out) {
    float sum = part[0][r];
#pragma unroll
    for (int k = 1; k < kWarps; ++k) sum += part[k][r];
    y[o0 + r] = sum;
  }
}

}  // namespace

bool gemv_applies(int n, int in, const void* x, const void* w) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return n == 1 && in > 0 && in % 8 == 0 && aligned(x) && aligned(w);
}

void gemv_bf16(const uint16_t* x, int in, const uint16_t* w, int out, float* y, cudaStream_t s, int rows_per_block) {
  if (out <= 0) return;
  static const int engine_rows = [] {
    const char* env = std::getenv("MINIMAKV_CUDA_GEMV_ROWS");
    return env ? std::atoi(env) : kDefaultRowsPerBlock;
  }();
  if (rows_per_block == 0) rows_per_block = engine_rows;
  const auto launch = [&](auto kernel, int rows) {
    const unsigned blocks = static_cast<unsigned>((out + rows - 1) / rows);
    cuda::launch_chained(kernel, blocks, kThreads, 0, s, "gemv_bf16", reinterpret_cast<const uint4*>(x), in / 8,
                         reinterpret_cast<const uint4*>(w), out, y);
  };
  switch (rows_per_block) {
    case 4:
      launch(gemv_kernel<4>, 4);
      break;
    case 8:
      launch(gemv_kernel<8>, 8);
      break;
    default:
      launch(gemv_kernel<kDefaultRowsPerBlock>, kDefaultRowsPerBlock);
      break;
  }
}

}  // namespace minimakv::backend::cuda_gemv
