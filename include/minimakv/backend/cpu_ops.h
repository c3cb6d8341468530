// CPU operators of the transformer forward pass (fp32): GEMM through OpenBLAS (loaded at first use, see
// src/backend/blas.h), RMSNorm, rotate-half RoPE (with Llama-3 frequency scaling), SwiGLU, argmax. Shapes are
// row-major; weights are [out][in] as stored in Hugging Face checkpoints, so y = x W^T.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "minimakv/model/config.h"

namespace minimakv::backend {

// y[n][out] = x[n][in] * W[out][in]^T
void matmul(std::span<const float> x, int n, int in, std::span<const float> w, int out, std::span<float> y);
// The same with W in BF16 bits, widened block by block (products equal matmul's on the widened W).
void matmul_bf16(std::span<const float> x, int n, int in, std::span<const uint16_t> w, int out, std::span<float> y);
// x[n][dim] <- x / sqrt(mean(x^2) + eps) * weight, per row of length dim.
void rmsnorm(std::span<float> x, int dim, std::span<const float> weight, float eps);
// out[i] = silu(gate[i]) * up[i]
void swiglu(std::span<const float> gate, std::span<const float> up, std::span<float> out);
int32_t argmax(std::span<const float> x);
// The GEMM library and kernel set in use, e.g. "OpenBLAS SkylakeX" (loads the library).
std::string gemm_kernels();

// Rotary embedding tables: inverse frequencies computed in fp32 as transformers does, Llama-3 scaling.
class Rope {
 public:
  Rope(const model::ModelConfig& cfg);
  // Rotates heads x[n][heads][head_dim] of tokens at positions first, first + 1, ... (rotate-half).
  void apply(std::span<float> x, int n, int heads, uint32_t first_position) const;
  const std::vector<float>& inv_freq() const { return inv_freq_; }  // [head_dim / 2]

 private:
  int head_dim_;
  std::vector<float> inv_freq_;
};

}  // namespace minimakv::backend
