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

// Rounds of writer -> idle -> reader: the reader copies what the writer two launches before it wrote.
void chain_rounds(cudaStream_t st, int* buf, int* out, int n, int first_value, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    cuda::launch_chained(slow_write_kernel, 64, 256, 0, st, "slow write", buf, n, first_value + r * n, 200000LL);
    cuda::launch_chained(idle_kernel, 1, 32, 0, st, "idle");
    cuda::launch_chained(copy_kernel, 64, 256, 0, st, "copy", static_cast<const int*>(buf), out + r * n, n);
  }
}

void expect_rounds(const std::vector<int>& got, int n, int first_value, int rounds) {
  int wrong = 0;
  for (int r = 0; r < rounds; ++r)
    for (int i = 0; i < n; ++i) wrong += got[static_cast<size_t>(r) * n + i] != first_value + r * n + i;
  EXPECT_EQ(wrong, 0) << "of " << rounds * n << " values copied (chained launches "
                      << (cuda::chained_launches() ? "on" : "off") << ")";
}

TEST(ChainedLaunch, EachKernelSeesWhatEveryKernelBeforeItWrote) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const int n = 1 << 14, rounds = 8;
  const int first = static_cast<int>(std::uniform_int_distribution<int>(1, 1 << 20)(rng));
  cuda::DeviceArray<int> buf(n), out(static_cast<size_t>(n) * rounds);
  cuda::check(cudaMemset(buf.get(), 0, buf.bytes()), "clear");
  cuda::check(cudaMemset(out.get(), 0xff, out.bytes()), "poison");
  cudaStream_t st;
  cuda::check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  chain_rounds(st, buf.get(), out.get(), n, first, rounds);
  cuda::check(cudaStreamSynchronize(st), "sync");
  std::vector<int> got(static_cast<size_t>(n) * rounds);
  cuda::check(cudaMemcpy(got.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost), "download");
  expect_rounds(got, n, first, rounds);
  cudaStreamDestroy(st);
}

TEST(ChainedLaunch, ACapturedChainReplaysWithTheSameResults) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const int n = 1 << 12, rounds = 4;
  const int first = static_cast<int>(std::uniform_int_distribution<int>(1, 1 << 20)(rng));
  cuda::DeviceArray<int> buf(n), out(static_cast<size_t>(n) * rounds);
  cudaStream_t st;
  cuda::check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cuda::check(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capture");
  chain_rounds(st, buf.get(), out.get(), n, first, rounds);
  cuda::check(cudaStreamEndCapture(st, &graph), "end capture");
  cuda::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int replay = 0; replay < 3; ++replay) {
    cuda::check(cudaMemsetAsync(buf.get(), 0, buf.bytes(), st), "clear");
    cuda::check(cudaMemsetAsync(out.get(), 0xff, out.bytes(), st), "poison");
    cuda::check(cudaGraphLaunch(exec, st), "replay");
    cuda::check(cudaStreamSynchronize(st), "sync");
    std::vector<int> got(static_cast<size_t>(n) * rounds);
    cuda::check(cudaMemcpy(got.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost), "download");
    expect_rounds(got, n, first, rounds);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

}  // namespace
}  // namespace minimakv
