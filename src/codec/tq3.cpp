#include "minimakv/codec/tq3.h"

#include <stdexcept>
#include <string>

namespace minimakv::codec {

const char* to_string(NormCorrection c) {
  switch (c) {
    case NormCorrection::kUnbiased: return "unbiased";
    case NormCorrection::kMinMse: return "min-mse";
    case NormCorrection::kPreserveNorm: return "preserve-norm";
    case NormCorrection::kNone: return "none";
  }
  return "?";
}

namespace {
void check_sizes(size_t d, size_t packed, const char* where) {
  require_supported_head_dim(static_cast<int>(d), where);
  if (packed != tq3_packed_bytes(static_cast<int>(d))) {
    throw std::invalid_argument(std::string(where) + ": packed buffer has " + std::to_string(packed) +
                                " bytes, head_dim " + std::to_string(d) + " needs " +
                                std::to_string(tq3_packed_bytes(static_cast<int>(d))));
  }
}
}  // namespace

uint16_t tq3_encode_rotated(std::span<const float> y, std::span<uint8_t> packed, NormCorrection corr,
                            EncodeStats* stats) {
  check_sizes(y.size(), packed.size(), "tq3_encode_rotated");
  bool nonfinite = false;
  const uint16_t alpha = tq3_encode_rotated_ref(y.data(), static_cast<int>(y.size()), packed.data(), corr,
                                                &nonfinite);
  if (stats != nullptr) {
    stats->vectors += 1;
    if (nonfinite) {
      for (float v : y) stats->nonfinite_elements += detail::is_finite_bits(v) ? 0 : 1;
    }
  }
  return alpha;
}

void tq3_decode_rotated(std::span<const uint8_t> packed, uint16_t alpha, std::span<float> y_out) {
  check_sizes(y_out.size(), packed.size(), "tq3_decode_rotated");
  const float a = half_to_float(alpha);
  uint8_t codes[8];
  for (size_t g = 0; g < y_out.size() / 8; ++g) {
    tq3_unpack8(packed.data() + 3 * g, codes);
    for (int j = 0; j < 8; ++j) y_out[8 * g + j] = a * kTq3Levels[codes[j]];
  }
}

uint16_t tq3_encode(std::span<const float> x, const Rotation& rot, std::span<float> scratch,
                    std::span<uint8_t> packed, NormCorrection corr, EncodeStats* stats) {
  if (scratch.size() != x.size()) {
    throw std::invalid_argument("tq3_encode: scratch has " + std::to_string(scratch.size()) +
                                " elements, input has " + std::to_string(x.size()));
  }
  check_sizes(x.size(), packed.size(), "tq3_encode");
  for (size_t i = 0; i < x.size(); ++i) scratch[i] = x[i];
  rot.forward(scratch);
  return tq3_encode_rotated(scratch, packed, corr, stats);
}

void tq3_decode(std::span<const uint8_t> packed, uint16_t alpha, const Rotation& rot, std::span<float> out) {
  tq3_decode_rotated(packed, alpha, out);
  rot.inverse(out);
}

float tq3_dot_rotated(std::span<const float> q_rot, std::span<const uint8_t> packed, uint16_t alpha) {
  check_sizes(q_rot.size(), packed.size(), "tq3_dot_rotated");
  uint8_t codes[8];
  float acc = 0.0f;
  for (size_t g = 0; g < q_rot.size() / 8; ++g) {
    tq3_unpack8(packed.data() + 3 * g, codes);
    for (int j = 0; j < 8; ++j) acc += q_rot[8 * g + j] * kTq3Levels[codes[j]];
  }
  return acc * half_to_float(alpha);
}

}  // namespace minimakv::codec
