// Fork and join of a side stream, so that independent kernels of one step run side by side.
//
// Owns: one non-blocking stream and the two events that fork work onto it from a caller's stream and
// join it back (move-only). Invariant: every fork() is followed by a join() into the same stream before
// that stream's work is waited for or its capture ends. Both are stream operations, so a graph captured
// from the caller's stream holds the side work as a parallel branch.
#pragma once

#include <cuda_runtime.h>

namespace minimakv::cuda {

class ForkJoin {
 public:
  ForkJoin();
  ~ForkJoin();
  ForkJoin(ForkJoin&& o) noexcept;
  ForkJoin& operator=(ForkJoin&& o) noexcept;
  ForkJoin(const ForkJoin&) = delete;
  ForkJoin& operator=(const ForkJoin&) = delete;

  // The side stream, ordered after everything queued on `from` so far.
  cudaStream_t fork(cudaStream_t from) const;
  // The side stream, ordered after what `recorded` marks (an event recorded earlier on the caller's
  // stream): work that needs only that much may run beside everything queued since.
  cudaStream_t fork_after(cudaEvent_t recorded) const;
  // Orders everything queued on `into` from now on after the side stream's work.
  void join(cudaStream_t into) const;

 private:
  cudaStream_t side_ = nullptr;
  cudaEvent_t forked_ = nullptr, done_ = nullptr;
};

}  // namespace minimakv::cuda
