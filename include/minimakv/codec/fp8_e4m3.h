// FP8 E4M3 ("FN" variant) codec: scalar conversion and the per-vector scaled encoding of FP8 pages.
//
// Owns: the E4M3FN number format (bias 7, max finite 448, no infinities, NaN = S.1111.111) and the rule
// that turns one (token, head) vector into 8-bit codes plus one fp32 scale.
// Invariants:
//   * encode rounds to nearest, ties to even, and saturates: |x| >= 448 (including +-inf) -> +-448;
//     NaN -> 0x7F | sign; -0.0 -> 0x80; subnormals (|x| < 2^-6) are encoded exactly as E4M3 subnormals.
//   * vector encode: scale = absmax(finite elements) / 448 (IEEE division), code_i = encode(x_i / scale).
//     When the scale is 0 (every finite element is zero or the division underflows) every finite element
//     encodes to +0 and non-finite ones keep their encoding (NaN -> NaN, +-inf -> +-448 * 0 = 0).
//   * decode: value = e4m3(code) * scale, one fp32 multiply; identical on CPU and GPU.
// No function here allocates; size mismatches throw std::invalid_argument before anything is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "minimakv/codec/portable.h"

namespace minimakv::codec {

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr uint8_t kFp8NaN = 0x7f;

MINIMAKV_HD inline uint8_t fp8_e4m3_from_float(float x) {
  const uint32_t bits = detail::float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  if (abs >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448, inf: saturate
  if (abs < 0x3c800000u) {                                            // < 2^-6: subnormal range
    // |x| * 2^9 is exact; rounding it to an integer gives the subnormal mantissa (8 = smallest normal).
    const int m = detail::round_even(detail::mul_rn(detail::bits_float(abs), 512.0f));
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(m));
  }
  // Normal: round the 23-bit mantissa to 3 bits (ties to even), then rebias the exponent 127 -> 7.
  const uint32_t rounded = (abs + 0x7ffffu + ((abs >> 20) & 1u)) >> 20;
  return static_cast<uint8_t>(sign | static_cast<uint8_t>(rounded - (120u << 3)));
}

MINIMAKV_HD inline float fp8_e4m3_to_float(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exp = (code >> 3) & 0xfu;
  const uint32_t mant = code & 0x7u;
  if (exp == 0) {
    const float v = detail::mul_rn(static_cast<float>(mant), 0.001953125f);  // mant * 2^-9
    return detail::bits_float(detail::float_bits(v) | sign);
  }
  if ((code & 0x7fu) == 0x7fu) return detail::bits_float(sign | 0x7fc00000u);
  return detail::bits_float(sign | ((exp + 120u) << 23) | (mant << 20));
}

struct EncodeStats {
  uint64_t vectors = 0;
  uint64_t nonfinite_elements = 0;  // NaN or inf inputs seen (encoded per the documented rules)
  uint64_t saturated_elements = 0;  // finite inputs clipped at the format's range (FP8 only)
};

// Scale of one vector: absmax over finite elements / 448.
float fp8_vector_scale(std::span<const float> x);

// Encodes x into codes (same length). Returns the scale. stats may be null.
float fp8_encode_vector(std::span<const float> x, std::span<uint8_t> codes, EncodeStats* stats = nullptr);

// out[i] = e4m3(codes[i]) * scale.
void fp8_decode_vector(std::span<const uint8_t> codes, float scale, std::span<float> out);

}  // namespace minimakv::codec
