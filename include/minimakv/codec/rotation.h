// Randomized Hadamard rotation of (token, head) vectors: y = (1/sqrt(d)) * H_d * diag(s) * x.
//
// Owns: the fast Walsh-Hadamard transform in its canonical butterfly order, the sign vector s of each
// (layer, KV head), and the exact inverse x = diag(s) * H_d * y / sqrt(d).
// Invariants: the transform is orthogonal up to fp32 rounding; the butterfly order (stages h = 1, 2, 4,
// ..., d/2; pairs (j, j + h) inside blocks of 2h) is normative, so the CPU and the GPU produce the same
// bits; signs come from the documented SplitMix64 stream (docs/formats.md), never from a global RNG.
// Supported head_dim: 64, 128, 256 (any other value throws std::invalid_argument).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "minimakv/codec/portable.h"

namespace minimakv::codec {

inline constexpr int kMaxHeadDim = 256;
inline constexpr uint64_t kDefaultRotationSeed = 0x4d494e494d414b56ull;  // "MINIMAKV"

// True for the head dimensions the codecs and kernels support.
constexpr bool is_supported_head_dim(int d) { return d == 64 || d == 128 || d == 256; }
// Throws std::invalid_argument naming the value when d is unsupported.
void require_supported_head_dim(int d, const char* where);

// SplitMix64 step; the sign stream of a rotation is the sequence of its outputs.
MINIMAKV_HD inline uint64_t splitmix64(uint64_t& state) {
  state += 0x9e3779b97f4a7c15ull;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Seed of the rotation of one (layer, KV head) under a model-wide seed.
MINIMAKV_HD inline uint64_t rotation_seed(uint32_t layer, uint32_t kv_head, uint64_t model_seed) {
  uint64_t s = model_seed ^ ((static_cast<uint64_t>(layer) << 32) | kv_head);
  return splitmix64(s);
}

// 1/sqrt(d) as the fp32 constant every implementation uses.
MINIMAKV_HD inline float inv_sqrt_dim(int d) {
  return d == 64 ? 0.125f : (d == 128 ? 0.0883883476483184405f : 0.0625f);
}

// Unnormalised in-place FWHT in canonical order (x.size() a power of two).
MINIMAKV_HD inline void fwht_inplace(float* x, int d) {
  for (int h = 1; h < d; h <<= 1) {
    for (int i = 0; i < d; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = detail::add_rn(a, b);
        x[j + h] = detail::add_rn(a, -b);
      }
    }
  }
}

class Rotation {
 public:
  Rotation(int head_dim, uint64_t seed);
  static Rotation for_head(int head_dim, uint32_t layer, uint32_t kv_head,
                           uint64_t model_seed = kDefaultRotationSeed) {
    return Rotation(head_dim, rotation_seed(layer, kv_head, model_seed));
  }

  int dim() const { return dim_; }
  uint64_t seed() const { return seed_; }
  // +1.0f or -1.0f for each coordinate.
  std::span<const float> signs() const { return {signs_.data(), static_cast<size_t>(dim_)}; }

  // In place: x <- R x. Throws std::invalid_argument if x.size() != dim().
  void forward(std::span<float> x) const;
  // In place: y <- R^T y (the exact inverse up to rounding).
  void inverse(std::span<float> y) const;

 private:
  void check(size_t n, const char* where) const;
  int dim_;
  uint64_t seed_;
  std::array<float, kMaxHeadDim> signs_{};
};

}  // namespace minimakv::codec
