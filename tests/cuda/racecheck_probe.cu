// A calibration input for compute-sanitizer's racecheck, not a test of ours: a correct producer/consumer
// ring synchronised the way the prefill kernel's producer and mma.sync consumer warps are (named
// barriers, bar.arrive on one side and bar.sync on the other). Producer warps fill a two-slot ring in
// shared memory and arrive on FULL[slot]; consumer warps sync on FULL[slot], read values other threads
// wrote, and arrive on EMPTY[slot]; producers sync on EMPTY[slot] before refilling it.
// scripts/gpu-check.sh runs racecheck on it five times: a hazard reported in any run (racecheck flags
// it in some runs, depending on the interleaving it observes) means the tool does not reliably model
// bar.arrive as a release, so the same reports on the prefill kernel say nothing about its protocol.
// Exits 0 when the consumers read exactly what the protocol promises, 1 otherwise, 77 without a GPU.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace {

constexpr int kThreads = 256, kSide = 128;

__device__ void bar_sync(int id) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(kThreads) : "memory");
}
__device__ void bar_arrive(int id) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(kThreads) : "memory");
}

// The tile count is a kernel argument, as in the prefill kernel, so the loops stay loops and the barrier
// ids live in registers: with a compile-time count the compiler unrolls them into constant-id barriers,
// which racecheck follows (a run reported no hazard that way).
__global__ void ring_kernel(int tiles, float* out) {
  __shared__ float ring[2][kSide];
  const int tid = threadIdx.x;
  if (tid >= kSide) {  // producers
    const int p = tid - kSide;
    for (int t = 0; t < tiles; ++t) {
      const int slot = t & 1;
      if (t >= 2) bar_sync(3 + slot);  // EMPTY[slot]
      ring[slot][p] = t * 1000.0f + p;
      bar_arrive(1 + slot);  // FULL[slot]
    }
  } else {  // consumers
    float acc = 0.0f;
    for (int t = 0; t < tiles; ++t) {
      const int slot = t & 1;
      bar_sync(1 + slot);
      acc += ring[slot][(tid + 7) % kSide];
      if (t + 2 < tiles) bar_arrive(3 + slot);  // no barrier left half-arrived at exit
    }
    out[tid] = acc;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int tiles = argc > 1 ? std::atoi(argv[1]) : 16;
  if (tiles < 1) return 2;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "racecheck_probe: no CUDA device\n");
    return 77;
  }
  float* d = nullptr;
  float h[kSide];
  if (cudaMalloc(&d, sizeof h) != cudaSuccess) return 1;
  ring_kernel<<<1, kThreads>>>(tiles, d);
  const bool ok = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(d);
  int wrong = ok ? 0 : kSide;
  for (int i = 0; ok && i < kSide; ++i) {
    double want = 0;
    for (int t = 0; t < tiles; ++t) want += t * 1000.0 + (i + 7) % kSide;
    wrong += h[i] != static_cast<float>(want);
  }
  std::printf("racecheck_probe: %s\n",
              wrong ? "consumers read wrong values" : "consumers read what the protocol promises");
  return wrong ? 1 : 0;
}
