// Elementwise and row-wise operators of the CUDA backend (fp32 activations; BF16 weights where named), queued on the caller's stream.
// Private to the backend; shapes are checked by the caller.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace minimakv::backend::cuda_ops {

void embed(const float* table, int dim, const int32_t* ids, int rows, float* out, cudaStream_t s);
void embed_bf16(const uint16_t* table, int dim, const int32_t* ids, int rows, float* out, cudaStream_t s);
// y = x rounded to BF16 (nearest even); x and y 8-byte / 4-byte aligned.
void to_bf16(const float* x, uint16_t* y, size_t n, cudaStream_t s);
// w[i] = backend::dummy_weight(seed, i, scale), as BF16 or fp32.
void fill_dummy(void* w, size_t n, bool bf16, uint64_t seed, float scale, cudaStream_t s);
void rmsnorm(float* x, size_t rows, int dim, const float* w, float eps, cudaStream_t s);
// positions: [rows]; inv_freq: [head_dim / 2].
void rope(float* x, int rows, int heads, int head_dim, const uint32_t* positions, const float* inv_freq,
          cudaStream_t s);
// out = silu(gate) * up, and its BF16 copy when out_bf16 is given.
void swiglu(const float* gate, const float* up, float* out, uint16_t* out_bf16, size_t n, cudaStream_t s);
// x += y (y may be null), h = rmsnorm(x) * w, and h's BF16 copy when h_bf16 is given: bit-identical to
// add, copy and rmsnorm in sequence.
void add_rmsnorm(float* x, const float* y, float* h, uint16_t* h_bf16, size_t rows, int dim, const float* w, float eps,
                 cudaStream_t s);
// Per-head RMSNorm (w: [head_dim]) then RoPE, in place on x[rows][heads][head_dim]: bit-identical to
// rmsnorm then rope.
void norm_rope(float* x, int rows, int heads, int head_dim, const float* w, float eps, const uint32_t* positions,
               const float* inv_freq, cudaStream_t s);
// norm_rope of q (q_heads, weight wq) and of k (k_heads, weight wk), rows at the same positions, in one
// launch: bit-identical to two norm_rope calls.
void norm_rope_qk(float* q, int q_heads, const float* wq, float* k, int k_heads, const float* wk, int rows,
                  int head_dim, float eps, const uint32_t* positions, const float* inv_freq, cudaStream_t s);
void add(float* x, const float* y, size_t n, cudaStream_t s);
void gather_rows(const float* x, int dim, const int32_t* rows, int n, float* out, cudaStream_t s);

}  // namespace minimakv::backend::cuda_ops
