// The CUDA backend's BF16 GEMV for single-row products: y[out] = W[out][in] x[in] with BF16 x and W,
// fp32 products and accumulation, fp32 y (the batch-1 decode step's projections).
//
// Owns: the kernel (plain, or with the SwiGLU of a gate/up pair as its epilogue) and the rule for when
// it runs instead of cuBLAS (gemv_applies). Why it exists: for one row cuBLAS picks split-K kernels plus
// a separate reduction launch (five reductions a decoder layer), and its small projections (k, v) stay
// far from bandwidth; this kernel reads W once in one launch. For 8 rows it measured slower than
// cuBLAS's tensor-core kernels (fp32 FMAs at one block per SM), so batches keep cuBLAS
// (docs/benchmarks.md). Invariant: the sums run in a fixed order
// (deterministic; graph replay equals eager launch).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minimakv::backend::cuda_gemv {

// Whether the kernel takes the product: one row, in a multiple of 8, x and w 16-byte aligned.
bool gemv_applies(int n, int in, const void* x, const void* w);
// Output rows a block computes: 2, measured on an H200 (docs/benchmarks.md: the decode step's GEMV
// chain 4.16 ms with 2 rows a block, 4.19 with 4, 5.19 with 8); cuda_gemm_bench times 2, 4 and 8 side by
// side, and MINIMAKV_CUDA_GEMV_ROWS=4|8 sets the engine's for comparisons.
inline constexpr int kDefaultRowsPerBlock = 2;
// rows_per_block's value for the warp-per-row kernel (a row to each of a block's 8 warps, no block-wide
// reduction); MINIMAKV_CUDA_GEMV_ROWS=warp sets it for the engine.
inline constexpr int kWarpPerRow = 1;
// Queues the product on `s`; the caller checked gemv_applies. rows_per_block: kWarpPerRow, 2, 4 or 8;
// 0 is the engine's choice (the default, or MINIMAKV_CUDA_GEMV_ROWS).
void gemv_bf16(const uint16_t* x, int in, const uint16_t* w, int out, float* y, cudaStream_t s,
               int rows_per_block = 0);
// The gated MLP's input half in one launch: w_gate_up is [gate; up] (2 * inter rows of `in`), and
// y[i] = silu(gate_i . x) * (up_i . x) with its BF16 copy in y_bf16 (the down projection's input). Equal
// bit for bit to gemv_bf16 over w_gate_up followed by cuda_ops::swiglu. The caller checked gemv_applies.
void gemv_swiglu_bf16(const uint16_t* x, int in, const uint16_t* w_gate_up, int inter, float* y, uint16_t* y_bf16,
                      cudaStream_t s, int rows_per_block = 0);

}  // namespace minimakv::backend::cuda_gemv
