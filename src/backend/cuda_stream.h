// The CUDA backend's stream and its host-side helpers.
//
// Owns: the one stream the backend and its stores queue everything on (shared, destroyed after the
// last of them), a host-time profile of the backend's phases, and grow-only device scratch arrays
// written from host vectors in stream order. Invariant: a scratch array is only replaced through
// cudaFree, which waits for the device, so a queued kernel never reads freed memory.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <span>
#include <string>
#include <utility>

#include "minimakv/cuda/device_memory.h"

namespace minimakv::backend {

// The stream shared by the backend and its stores; destroyed after the last of them.
struct Stream {
  cudaStream_t s = nullptr;
  // A page operation of a store queued while a step was being captured: the graph holds it and must
  // run once only.
  bool store_op_captured = false;
  void note_store_op() {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusActive) store_op_captured = true;
  }
  Stream() { cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// One event without timing, owned (a fork point of a captured graph).
struct Event {
  cudaEvent_t e = nullptr;
  Event() { cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(e); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// Host time per phase of the backend's calls, for finding where a step's time goes; on when the
// environment sets MINIMAKV_CUDA_PROFILE, printed to stderr when the backend is destroyed.
class HostProfile {
 public:
  HostProfile() : on_(std::getenv("MINIMAKV_CUDA_PROFILE") != nullptr) {}
  ~HostProfile() {
    if (!on_) return;
    std::fprintf(stderr, "cuda backend host time by phase:\n");
    for (const auto& [name, v] : phases_)
      std::fprintf(stderr, "  %-14s %10.1f ms over %8zu calls (%.1f us each)\n", name.c_str(), v.first * 1e3, v.second,
                   v.first * 1e6 / static_cast<double>(v.second));
  }
  class Scope {
   public:
    Scope(HostProfile& p, const char* name) : p_(p.on_ ? &p : nullptr), name_(name) {
      if (p_) t0_ = std::chrono::steady_clock::now();
    }
    ~Scope() {
      if (!p_) return;
      auto& v = p_->phases_[name_];
      v.first += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      ++v.second;
    }

   private:
    HostProfile* p_;
    const char* name_;
    std::chrono::steady_clock::time_point t0_;
  };

 private:
  bool on_;
  std::map<std::string, std::pair<double, size_t>> phases_;
};

// A device array that grows (never shrinks) and is written from host vectors in stream order.
template <typename T>
class DeviceScratch {
 public:
  T* write(std::span<const T> host, cudaStream_t s) {
    reserve(host.size());
    if (!host.empty())
      cuda::check(cudaMemcpyAsync(a_.get(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice, s),
                  "scratch upload");
    return a_.get();
  }
  T* reserve(size_t n) {
    // Freeing an array a queued kernel may still read is safe: cudaFree waits for the device.
    if (n > a_.size()) a_ = cuda::DeviceArray<T>(std::max(n, a_.size() * 2));
    return a_.get();
  }

 private:
  cuda::DeviceArray<T> a_;
};

}  // namespace minimakv::backend
