#include "minimakv/cuda/fork_join.h"

#include <utility>

#include "minimakv/cuda/device_memory.h"

namespace minimakv::cuda {

ForkJoin::ForkJoin() {
  check(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "ForkJoin: stream");
  check(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming), "ForkJoin: event");
  check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "ForkJoin: event");
}

ForkJoin::~ForkJoin() {
  if (side_) {
    cudaStreamSynchronize(side_);
    cudaStreamDestroy(side_);
  }
  if (forked_) cudaEventDestroy(forked_);
  if (done_) cudaEventDestroy(done_);
}

ForkJoin::ForkJoin(ForkJoin&& o) noexcept
    : side_(std::exchange(o.side_, nullptr)),
      forked_(std::exchange(o.forked_, nullptr)),
      done_(std::exchange(o.done_, nullptr)) {}

ForkJoin& ForkJoin::operator=(ForkJoin&& o) noexcept {
  std::swap(side_, o.side_);
  std::swap(forked_, o.forked_);
  std::swap(done_, o.done_);
  return *this;
}

cudaStream_t ForkJoin::fork(cudaStream_t from) const {
  check(cudaEventRecord(forked_, from), "ForkJoin::fork: record");
  check(cudaStreamWaitEvent(side_, forked_, 0), "ForkJoin::fork: wait");
  return side_;
}

cudaStream_t ForkJoin::fork_after(cudaEvent_t recorded) const {
  check(cudaStreamWaitEvent(side_, recorded, 0), "ForkJoin::fork_after: wait");
  return side_;
}

void ForkJoin::join(cudaStream_t into) const {
  check(cudaEventRecord(done_, side_), "ForkJoin::join: record");
  check(cudaStreamWaitEvent(into, done_, 0), "ForkJoin::join: wait");
}

}  // namespace minimakv::cuda
