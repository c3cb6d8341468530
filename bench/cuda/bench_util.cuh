// Helpers shared by the GPU kernel benchmarks: random device data with a per-channel offset like real
// keys, timing with CUDA events (warm-up, then timed repetitions; median and min-max) and list options.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "minimakv/codec/rotation.h"
#include "minimakv/cuda/device_memory.h"

namespace minimakv::bench {

// x[i]: a sum of two uniforms (roughly normal, spread 2) plus offset_scale times a per-channel offset
// (channel = i % 128), a pure function of (seed, i).
__global__ inline void fill_random(float* x, size_t n, uint64_t seed, float offset_scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint64_t s = seed + i;
    const uint64_t a = codec::splitmix64(s), b = codec::splitmix64(s);
    const float u = static_cast<float>(a >> 40) * 0x1.0p-24f + static_cast<float>(b >> 40) * 0x1.0p-24f - 1.0f;
    x[i] = 2.0f * u + offset_scale * static_cast<float>((i % 128) % 7) * 0.1f;
  }
}

// counter += the number of positions where a and b differ.
__global__ inline void count_mismatches(const uint8_t* a, const uint8_t* b, size_t n, unsigned long long* counter) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    local += a[i] != b[i];
  if (local) atomicAdd(counter, local);
}

struct Stat {
  double median, lo, hi;
};

inline Stat summarize(std::vector<float> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back()};
}

// Milliseconds of body() on the legacy stream: `warmup` untimed runs, then `reps` timed ones.
template <typename F>
Stat time_events(int warmup, int reps, F&& body) {
  cudaEvent_t a, b;
  cuda::check(cudaEventCreate(&a), "event");
  cuda::check(cudaEventCreate(&b), "event");
  for (int i = 0; i < warmup; ++i) body();
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    cuda::check(cudaEventRecord(a), "record");
    body();
    cuda::check(cudaEventRecord(b), "record");
    cuda::check(cudaEventSynchronize(b), "sync");
    float t = 0;
    cuda::check(cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return summarize(ms);
}

// The non-empty items of a comma-separated list.
inline std::vector<std::string> comma_list(const std::string& list) {
  std::vector<std::string> items;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) items.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return items;
}

// Whether `name` starts with one of the prefixes (an empty list keeps everything): the benches'
// --configs style filters.
inline bool matches_prefix(const std::vector<std::string>& prefixes, const std::string& name) {
  return prefixes.empty() ||
         std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return name.rfind(p, 0) == 0; });
}

}  // namespace minimakv::bench
