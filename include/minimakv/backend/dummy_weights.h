// Dummy weights: random values that stand in for a checkpoint, so that anyone can measure the engine at
// a real model's geometry from its config.json alone (as vLLM's dummy load format does).
//
// Owns: the value of element i of a dummy tensor, a pure function of (seed, i): the SplitMix64 finaliser
// of seed + i, mapped to a uniform value in [-scale, scale). The same function runs on the host (CPU
// backend) and on the device (CUDA backend fills its weights in place), so both backends build the same
// model from the same seed and nothing of an 8B model ever exists on the host.
#pragma once

#include <cstdint>

#include "minimakv/codec/portable.h"

namespace minimakv::backend {

MINIMAKV_HD inline float dummy_weight(uint64_t seed, uint64_t i, float scale) {
  uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  // 24 random bits -> [-1, 1): exact in fp32.
  const float u = static_cast<float>(static_cast<int32_t>(z >> 40) - (1 << 23)) * (1.0f / static_cast<float>(1 << 23));
  return u * scale;
}

// Uniform [-a, a) has standard deviation a / sqrt(3): the scale that gives the initialiser range of
// Hugging Face checkpoints (normal, std 0.02) the same spread.
inline constexpr float kDummyWeightScale = 0.02f * 1.7320508f;

}  // namespace minimakv::backend
