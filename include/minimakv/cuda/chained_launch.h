// Whether the work of a forward pass may overlap on the GPU: the host side of chained launches
// (chained_launch.cuh), readable from host-only code (the CUDA backend's step graphs).
//
// Owns: the one reading of MINIMAKV_CUDA_OVERLAP. Invariant: decided once per process, so every launch and
// every captured graph of a run agrees.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <string_view>

namespace minimakv::cuda {

// False when MINIMAKV_CUDA_OVERLAP=0 (for comparisons): kernels in plain stream order, plan copies in line.
inline bool overlap_allowed() {
  static const bool on = [] {
    const char* env = std::getenv("MINIMAKV_CUDA_OVERLAP");
    return !(env && std::string_view(env) == "0");
  }();
  return on;
}

// Whether launches are chained (programmatic dependent launch): overlap allowed, on a GPU of compute
// capability 9.0 or later.
inline bool chained_launches() {
  static const bool on = [] {
    if (!overlap_allowed()) return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    return major >= 9;
  }();
  return on;
}

}  // namespace minimakv::cuda
