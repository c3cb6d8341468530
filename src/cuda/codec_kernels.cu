#include <cuda_runtime.h>

#include "minimakv/codec/fp8_e4m3.h"
#include "minimakv/codec/rotation.h"
#include "minimakv/codec/tq3.h"
#include "minimakv/cuda/codec_kernels.h"

namespace minimakv::cuda {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(e));
}

__global__ void fp8_encode_kernel(const float* x, int n, int d, uint8_t* codes, float* scales) {
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= n) return;
  const float* xv = x + static_cast<size_t>(v) * d;
  float absmax = 0.0f;
  for (int i = 0; i < d; ++i) {
    if (!codec::detail::is_finite_bits(xv[i])) continue;
    absmax = fmaxf(absmax, fabsf(xv[i]));
  }
  const float s = codec::detail::div_rn(absmax, codec::kFp8E4M3Max);
  scales[v] = s;
  for (int i = 0; i < d; ++i) {
    const float e = xv[i];
    uint8_t c;
    if (s > 0.0f) {
      c = codec::fp8_e4m3_from_float(codec::detail::is_finite_bits(e) ? codec::detail::div_rn(e, s) : e);
    } else {
      c = codec::detail::is_nan_bits(e) ? codec::kFp8NaN : 0;
    }
    codes[static_cast<size_t>(v) * d + i] = c;
  }
}

__global__ void tq3_encode_kernel(const float* x, int n, int d, int heads, uint64_t seed,
                                  codec::NormCorrection corr, uint8_t* packed, uint16_t* alpha) {
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= n) return;
  float y[codec::kMaxHeadDim];
  uint64_t state = codec::rotation_seed(0, static_cast<uint32_t>(v % heads), seed);
  for (int i = 0; i < d; i += 64) {
    const uint64_t word = codec::splitmix64(state);
    for (int b = 0; b < 64 && i + b < d; ++b) {
      const float s = ((word >> b) & 1u) ? -1.0f : 1.0f;
      y[i + b] = x[static_cast<size_t>(v) * d + i + b] * s;
    }
  }
  codec::fwht_inplace(y, d);
  const float c = codec::inv_sqrt_dim(d);
  for (int i = 0; i < d; ++i) y[i] = codec::detail::mul_rn(y[i], c);
  alpha[v] = codec::tq3_encode_rotated_ref(y, d, packed + static_cast<size_t>(v) * codec::tq3_packed_bytes(d),
                                           corr, nullptr);
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

void fp8_encode_vectors(const float* x, int n, int d, uint8_t* codes, float* scales) {
  codec::require_supported_head_dim(d, "fp8_encode_vectors");
  if (n <= 0) return;
  fp8_encode_kernel<<<(n + 127) / 128, 128>>>(x, n, d, codes, scales);
  check(cudaGetLastError(), "fp8_encode_vectors launch");
}

void tq3_encode_vectors(const float* x, int n, int d, int heads, uint64_t model_seed, codec::NormCorrection corr,
                        uint8_t* packed, uint16_t* alpha) {
  codec::require_supported_head_dim(d, "tq3_encode_vectors");
  if (n <= 0) return;
  if (heads <= 0) throw std::invalid_argument("tq3_encode_vectors: heads must be positive");
  tq3_encode_kernel<<<(n + 63) / 64, 64>>>(x, n, d, heads, model_seed, corr, packed, alpha);
  check(cudaGetLastError(), "tq3_encode_vectors launch");
}

}  // namespace minimakv::cuda
