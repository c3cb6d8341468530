// IEEE binary16 (fp16) and bfloat16 conversions, host and device.
//
// Owns: the scalar conversions used for TQ3 metadata (fp16) and for the dense BF16 baseline pages.
// Invariants: float -> fp16 and float -> bf16 round to nearest, ties to even; NaN stays NaN (quiet);
// fp16 overflow gives +-inf (callers that need saturation clamp first). Decoding is exact.
#pragma once

#include <cstdint>

#include "minimakv/codec/portable.h"

namespace minimakv::codec {

MINIMAKV_HD inline uint16_t float_to_half(float f) {
  const uint32_t x = detail::float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN -> quiet NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520 -> inf
  if (abs < 0x38800000u) {                                                // below 2^-14: fp16 subnormal
    // value / 2^-24 rounded to an integer count of the smallest subnormal; exact scaling by 2^24.
    const float scaled = detail::mul_rn(detail::bits_float(abs), 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(detail::round_even(scaled)));
  }
  // Normal: rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits, ties to even.
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

MINIMAKV_HD inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = detail::mul_rn(static_cast<float>(mant), 5.9604644775390625e-8f);  // mant * 2^-24
    return detail::bits_float(detail::float_bits(v) | sign);
  }
  if (exp == 31) return detail::bits_float(sign | 0x7f800000u | (mant << 13));
  return detail::bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

MINIMAKV_HD inline uint16_t float_to_bf16(float f) {
  const uint32_t x = detail::float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

MINIMAKV_HD inline float bf16_to_float(uint16_t b) { return detail::bits_float(static_cast<uint32_t>(b) << 16); }

}  // namespace minimakv::codec
