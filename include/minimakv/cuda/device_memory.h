// Owning handles for device and pinned host memory, and the error check every CUDA call goes through.
//
// Owns: one allocation each (move-only). Invariant: every CUDA error surfaces as cuda::CudaError naming
// the call that failed; no handle frees memory it does not own.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "minimakv/cuda/codec_kernels.h"

namespace minimakv::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(e));
}

namespace detail {

struct DeviceAllocation {
  static void* allocate(size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  static void release(void* p) { cudaFree(p); }
};

struct PinnedAllocation {
  static void* allocate(size_t bytes) {
    void* p = nullptr;
    check(cudaMallocHost(&p, bytes), "cudaMallocHost");
    return p;
  }
  static void release(void* p) { cudaFreeHost(p); }
};

// n elements of T in memory from Allocation; move-only.
template <typename T, typename Allocation>
class Array {
 public:
  Array() = default;
  explicit Array(size_t n) : n_(n) {
    if (n) p_ = static_cast<T*>(Allocation::allocate(n * sizeof(T)));
  }
  Array(Array&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Array& operator=(Array&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;
  ~Array() {
    if (p_) Allocation::release(p_);
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  // Host access, for pinned memory only.
  T& operator[](size_t i) const requires std::is_same_v<Allocation, PinnedAllocation> { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace detail

template <typename T>
using DeviceArray = detail::Array<T, detail::DeviceAllocation>;
template <typename T>
using PinnedArray = detail::Array<T, detail::PinnedAllocation>;

}  // namespace minimakv::cuda
