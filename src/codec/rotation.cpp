#include "minimakv/codec/rotation.h"

#include <stdexcept>
#include <string>

namespace minimakv::codec {

void require_supported_head_dim(int d, const char* where) {
  if (!is_supported_head_dim(d)) {
    throw std::invalid_argument(std::string(where) + ": unsupported head_dim " + std::to_string(d) +
                                " (supported: 64, 128, 256)");
  }
}

Rotation::Rotation(int head_dim, uint64_t seed) : dim_(head_dim), seed_(seed) {
  require_supported_head_dim(head_dim, "Rotation");
  uint64_t state = seed;
  for (int i = 0; i < dim_; i += 64) {
    const uint64_t word = splitmix64(state);
    for (int b = 0; b < 64 && i + b < dim_; ++b) signs_[i + b] = ((word >> b) & 1u) ? -1.0f : 1.0f;
  }
}

void Rotation::check(size_t n, const char* where) const {
  if (n != static_cast<size_t>(dim_)) {
    throw std::invalid_argument(std::string("Rotation::") + where + ": vector has " + std::to_string(n) +
                                " elements, rotation has dimension " + std::to_string(dim_));
  }
}

void Rotation::forward(std::span<float> x) const {
  check(x.size(), "forward");
  for (int i = 0; i < dim_; ++i) x[i] *= signs_[i];
  fwht_inplace(x.data(), dim_);
  const float c = inv_sqrt_dim(dim_);
  for (int i = 0; i < dim_; ++i) x[i] *= c;
}

void Rotation::inverse(std::span<float> y) const {
  check(y.size(), "inverse");
  fwht_inplace(y.data(), dim_);
  const float c = inv_sqrt_dim(dim_);
  for (int i = 0; i < dim_; ++i) y[i] = (y[i] * c) * signs_[i];
}

}  // namespace minimakv::codec
