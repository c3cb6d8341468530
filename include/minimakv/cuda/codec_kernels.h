// GPU reference encoders for the KV page codecs (one thread per vector).
//
// Owns: device launches of the shared host/device codec specification (fp8_e4m3.h, rotation.h, tq3.h),
// used to prove that bytes written on the GPU equal bytes written on the CPU. The fast, warp-cooperative
// page-conversion kernels are checked against these and against the CPU.
// Invariants: no allocation inside a launch; every CUDA error surfaces as minimakv::cuda::CudaError.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "minimakv/codec/tq3.h"

namespace minimakv::cuda {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Number of CUDA devices usable by this process (0 when there is no driver or no GPU).
int device_count();

// x: n * d floats (device). codes: n * d bytes, scales: n floats.
void fp8_encode_vectors(const float* x, int n, int d, uint8_t* codes, float* scales);
// x: n * d floats in the original domain; rotated with the (layer 0, head = vector % heads) rotation of
// `seed`, then encoded. packed: n * 3d/8 bytes, alpha: n fp16 bits.
void tq3_encode_vectors(const float* x, int n, int d, int heads, uint64_t model_seed,
                        codec::NormCorrection corr, uint8_t* packed, uint16_t* alpha);

}  // namespace minimakv::cuda
