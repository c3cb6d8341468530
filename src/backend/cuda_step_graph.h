// The pieces that let the CUDA backend replay a decode step from a CUDA graph.
//
// A graph bakes in every address and launch size of the step it captured. Owns:
//   - StepArena: the tensors a forward pass allocates, bump-allocated from one device buffer, so the
//     same sequence of allocations gets the same addresses in every step;
//   - StepInput: host values a step uploads (token ids, positions, append slots), written into pinned
//     memory that the graph's copy nodes read when they run, then copied to a fixed device address;
//   - StepGraph: one captured and instantiated graph (a step is several: one per layer, launched as
//     soon as the layer's host work is done, so the host prepares layer l + 1 while layer l runs).
// Invariants: a buffer only grows between steps, never inside a capture, and each growth is reported
// to the caller (which bumps its epoch and drops the graph); pinned inputs are rewritten only once the
// previous launch that reads them has finished.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <utility>

#include "minimakv/cuda/device_memory.h"

namespace minimakv::backend {

class StepArena {
 public:
  void reset() { used_ = 0; }
  // nullptr when the arena is too small; the peak is recorded either way.
  float* take(size_t n);
  size_t capacity_bytes() const { return buf_.size(); }
  size_t peak_bytes() const { return peak_; }
  // Grows to the peak seen (call with no kernel reading the arena).
  void grow_to_peak();

 private:
  cuda::DeviceArray<uint8_t> buf_;
  size_t used_ = 0, peak_ = 0;
};

template <typename T>
class StepInput {
 public:
  // True when it had to reallocate (the addresses changed).
  bool ensure(size_t n) {
    if (n <= host_.size()) return false;
    host_ = cuda::PinnedArray<T>(n);
    dev_ = cuda::DeviceArray<T>(n);
    return true;
  }
  // Writes values at `at` into the pinned buffer; returns their device address.
  T* write(size_t at, std::span<const T> values) {
    if (at + values.size() > host_.size()) throw std::logic_error("StepInput: write beyond the capacity");
    std::copy(values.begin(), values.end(), host_.get() + at);
    return dev_.get() + at;
  }
  // Queues the copy of [at, at + n) from the pinned buffer to the device.
  void upload(size_t at, size_t n, cudaStream_t s) const {
    if (n)
      cuda::check(cudaMemcpyAsync(dev_.get() + at, host_.get() + at, n * sizeof(T), cudaMemcpyHostToDevice, s),
                  "step input upload");
  }

 private:
  cuda::PinnedArray<T> host_;
  cuda::DeviceArray<T> dev_;
};

class StepGraph {
 public:
  StepGraph() = default;
  StepGraph(StepGraph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  StepGraph& operator=(StepGraph&& o) noexcept {
    std::swap(exec_, o.exec_);
    return *this;
  }
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;
  ~StepGraph() { reset(); }

  void begin_capture(cudaStream_t s);
  // Ends the capture started on `s`; with keep, instantiates the graph (throws on failure), else drops it.
  void end_capture(cudaStream_t s, bool keep);
  void launch(cudaStream_t s) const;
  void reset();

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace minimakv::backend
