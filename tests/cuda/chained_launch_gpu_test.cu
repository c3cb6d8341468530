// Chained launches (minimakv/cuda/chained_launch.cuh): a kernel launched while its predecessor still
// runs sees everything the predecessor wrote, and everything the kernels before it wrote, once its
// chain_begin() returns; and eager chains equal the same chain captured in a graph.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "minimakv/cuda/chained_launch.cuh"
#include "test_util.h"

namespace minimakv {
namespace {

// Spins for about `cycles` clock ticks first, so that a successor launched early would read too soon,
// then writes value + i into buf[i].
__global__ void slow_write_kernel(int* buf, int n, int value, long long cycles) {
  cuda::chain_begin();
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) buf[i] = value + i;
}

// Touches nothing: a link between the writer and the reader.
__global__ void idle_kernel() {
  cuda::chain_begin();
}

__global__ void copy_kernel(const int* src, int* dst, int n) {
  cuda::chain_begin();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
}

// Rounds of writer -> idle -> reader on one stream: each reader copies what the writer two launches
// before it wrote. Values start at a random first value, so a stale or poisoned copy cannot match.
class ChainRounds {
 public:
  ChainRounds(int n, int rounds) : n_(n), rounds_(rounds), buf_(n), out_(static_cast<size_t>(n) * rounds) {
    auto rng = testing::rng_for_test();
    first_ = std::uniform_int_distribution<int>(1, 1 << 20)(rng);
    cuda::check(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking), "stream");
  }
  ~ChainRounds() { cudaStreamDestroy(st_); }
  cudaStream_t stream() const { return st_; }
  // Clears the written buffer and poisons the copies, in stream order.
  void reset() {
    cuda::check(cudaMemsetAsync(buf_.get(), 0, buf_.bytes(), st_), "clear");
    cuda::check(cudaMemsetAsync(out_.get(), 0xff, out_.bytes(), st_), "poison");
  }
  void queue() {
    for (int r = 0; r < rounds_; ++r) {
      cuda::launch_chained(slow_write_kernel, 64, 256, 0, st_, "slow write", buf_.get(), n_, first_ + r * n_,
                           200000LL);
      cuda::launch_chained(idle_kernel, 1, 32, 0, st_, "idle");
      cuda::launch_chained(copy_kernel, 64, 256, 0, st_, "copy", static_cast<const int*>(buf_.get()),
                           out_.get() + r * n_, n_);
    }
  }
  // Waits for the stream and checks every copied value.
  void expect_copied() {
    cuda::check(cudaStreamSynchronize(st_), "sync");
    std::vector<int> got(static_cast<size_t>(n_) * rounds_);
    cuda::check(cudaMemcpy(got.data(), out_.get(), out_.bytes(), cudaMemcpyDeviceToHost), "download");
    int wrong = 0;
    for (int r = 0; r < rounds_; ++r)
      for (int i = 0; i < n_; ++i) wrong += got[static_cast<size_t>(r) * n_ + i] != first_ + r * n_ + i;
    EXPECT_EQ(wrong, 0) << "of " << rounds_ * n_ << " values copied (chained launches "
                        << (cuda::chained_launches() ? "on" : "off") << ")";
  }

 private:
  int n_, rounds_, first_ = 0;
  cuda::DeviceArray<int> buf_, out_;
  cudaStream_t st_ = nullptr;
};

TEST(ChainedLaunch, EachKernelSeesWhatEveryKernelBeforeItWrote) {
  MINIMAKV_SEED_TRACE();
  ChainRounds chain(1 << 14, 8);
  chain.reset();
  chain.queue();
  chain.expect_copied();
}

TEST(ChainedLaunch, ACapturedChainReplaysWithTheSameResults) {
  MINIMAKV_SEED_TRACE();
  ChainRounds chain(1 << 12, 4);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cuda::check(cudaStreamBeginCapture(chain.stream(), cudaStreamCaptureModeThreadLocal), "capture");
  chain.queue();
  cuda::check(cudaStreamEndCapture(chain.stream(), &graph), "end capture");
  cuda::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int replay = 0; replay < 3; ++replay) {
    chain.reset();
    cuda::check(cudaGraphLaunch(exec, chain.stream()), "replay");
    chain.expect_copied();
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace minimakv
