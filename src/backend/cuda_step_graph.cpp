#include "cuda_step_graph.h"

#include <algorithm>

namespace minimakv::backend {

namespace {
constexpr size_t kAlign = 256;  // what cudaMalloc guarantees, so vectorised kernels see the same alignment
}

float* StepArena::take(size_t n) {
  const size_t bytes = (n * sizeof(float) + kAlign - 1) / kAlign * kAlign;
  const size_t at = used_;
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  if (used_ > buf_.size()) return nullptr;
  return reinterpret_cast<float*>(buf_.get() + at);
}

void StepArena::grow_to_peak() {
  if (peak_ > buf_.size()) buf_ = cuda::DeviceArray<uint8_t>(peak_);
}

void StepGraph::begin_capture(cudaStream_t s) {
  reset();
  // Thread-local mode: an unsafe call on this thread (an allocation, a synchronisation) fails the
  // capture instead of silently leaving the graph.
  cuda::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}

void StepGraph::end_capture(cudaStream_t s, bool keep) {
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(s, &g);
  if (!keep || e != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();  // clear the error a failed capture leaves behind
    if (keep) cuda::check(e, "cudaStreamEndCapture");
    return;
  }
  const cudaError_t ie = cudaGraphInstantiate(&exec_, g, 0);
  cudaGraphDestroy(g);
  if (ie != cudaSuccess) {
    exec_ = nullptr;
    cuda::check(ie, "cudaGraphInstantiate");
  }
}

void StepGraph::launch(cudaStream_t s) const {
  cuda::check(cudaGraphLaunch(exec_, s), "cudaGraphLaunch");
}

void StepGraph::reset() {
  if (exec_) cudaGraphExecDestroy(exec_);
  exec_ = nullptr;
}

}  // namespace minimakv::backend
