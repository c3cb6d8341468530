#include "minimakv/codec/fp8_e4m3.h"

#include <stdexcept>
#include <string>

namespace minimakv::codec {

float fp8_vector_scale(std::span<const float> x) {
  float absmax = 0.0f;
  for (float v : x) {
    if (!detail::is_finite_bits(v)) continue;
    const float a = v < 0 ? -v : v;
    absmax = a > absmax ? a : absmax;
  }
  return absmax / kFp8E4M3Max;
}

float fp8_encode_vector(std::span<const float> x, std::span<uint8_t> codes, EncodeStats* stats) {
  if (codes.size() != x.size()) {
    throw std::invalid_argument("fp8_encode_vector: codes has " + std::to_string(codes.size()) +
                                " elements, input has " + std::to_string(x.size()));
  }
  const float scale = fp8_vector_scale(x);
  uint64_t nonfinite = 0;
  uint64_t saturated = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = x[i];
    if (!detail::is_finite_bits(v)) {
      ++nonfinite;
      codes[i] = scale > 0.0f ? fp8_e4m3_from_float(v) : (detail::is_nan_bits(v) ? kFp8NaN : 0);
      continue;
    }
    if (scale > 0.0f) {
      const float y = detail::div_rn(v, scale);
      saturated += (y > kFp8E4M3Max || y < -kFp8E4M3Max) ? 1 : 0;
      codes[i] = fp8_e4m3_from_float(y);
    } else {
      codes[i] = 0;
    }
  }
  if (stats != nullptr) {
    stats->vectors += 1;
    stats->nonfinite_elements += nonfinite;
    stats->saturated_elements += saturated;
  }
  return scale;
}

void fp8_decode_vector(std::span<const uint8_t> codes, float scale, std::span<float> out) {
  if (codes.size() != out.size()) {
    throw std::invalid_argument("fp8_decode_vector: output has " + std::to_string(out.size()) +
                                " elements, codes has " + std::to_string(codes.size()));
  }
  for (size_t i = 0; i < codes.size(); ++i) out[i] = fp8_e4m3_to_float(codes[i]) * scale;
}

}  // namespace minimakv::codec
