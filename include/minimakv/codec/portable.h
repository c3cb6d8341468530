// Portability layer shared by host C++ and CUDA device code of the codecs.
//
// Owns: the MINIMAKV_HD qualifier and the few arithmetic primitives whose rounding must be identical on
// the CPU and the GPU. Invariant: every float operation that decides a stored byte (a code, a scale, a
// norm) goes through these helpers, so nvcc cannot contract it into an FMA and the CPU and the GPU
// produce the same bytes for the same input (docs/formats.md, "Bit-exactness").
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MINIMAKV_HD __host__ __device__
#else
#define MINIMAKV_HD
#endif

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace minimakv::codec::detail {

MINIMAKV_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

MINIMAKV_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

MINIMAKV_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

MINIMAKV_HD inline float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// Round to nearest integer, ties to even.
MINIMAKV_HD inline int round_even(float a) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(a);
#else
  return static_cast<int>(std::nearbyint(a));
#endif
}

MINIMAKV_HD inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

MINIMAKV_HD inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

MINIMAKV_HD inline bool is_finite_bits(float f) { return (float_bits(f) & 0x7f800000u) != 0x7f800000u; }
MINIMAKV_HD inline bool is_nan_bits(float f) { return (float_bits(f) & 0x7fffffffu) > 0x7f800000u; }

}  // namespace minimakv::codec::detail
