// TQ3: rotated 3-bit scalar quantization of (token, head) vectors for Stale pages.
//
// Owns: the 8-level Lloyd-Max codebook for N(0,1), the 3-bit packing (8 codes in 3 bytes), the
// canonical reductions, and the fp16 norm correction alpha that scales the codebook back to the vector.
// A vector x is stored as y = R x (see rotation.h) quantized per coordinate:
//     t_i = y_i * sqrt(d) / ||y||,   code_i = #{ k : t_i >= tau_k },   y^_i = alpha * c[code_i]
// so an attention kernel computes <q, k^> = alpha * sum_i (R q)_i c[code_i] without un-rotating keys.
// Invariants: every decision that changes a stored byte uses the canonical sum (32 strided partials,
// then a pairwise tree) and the rounding helpers of portable.h, so CPU and GPU encoders agree bit for bit.
// Non-finite input: the whole vector is stored with alpha = fp16 NaN (decodes to NaN, never silently
// to a plausible value). Zero vector: alpha = 0 (decodes to exact zeros). alpha saturates at 65504.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "minimakv/codec/fp8_e4m3.h"
#include "minimakv/codec/half.h"
#include "minimakv/codec/rotation.h"

namespace minimakv::codec {

// Lloyd-Max reconstruction levels for N(0,1) (+-0.2451, 0.7560, 1.3440, 2.1520), each rounded to the
// nearest fp16 value (a change of at most 0.02%), so that tensor cores read the codes exactly;
// ascending; code k in [0, 8) maps to kTq3Levels[k].
inline constexpr std::array<float, 8> kTq3Levels = {-2.15234375f,  -1.34375f,    -0.755859375f, -0.2451171875f,
                                                    0.2451171875f, 0.755859375f, 1.34375f,      2.15234375f};
// Decision thresholds (midpoints of adjacent Lloyd-Max levels, from before the fp16 rounding).
inline constexpr std::array<float, 7> kTq3Thresholds = {-1.7480f, -1.0500f, -0.50055f, 0.0f,
                                                        0.50055f, 1.0500f,  1.7480f};
inline constexpr uint16_t kHalfNaN = 0x7e00;
inline constexpr float kHalfMax = 65504.0f;

// How alpha is chosen from the rotated vector y and its codebook image c:
enum class NormCorrection : uint8_t {
  kUnbiased = 0,      // alpha = ||y||^2 / <y, c>: <y^, y> = ||y||^2, inner products unbiased along y
  kMinMse = 1,        // alpha = <y, c> / ||c||^2: least-squares, smallest reconstruction error
  kPreserveNorm = 2,  // alpha = ||y|| / ||c||: ||y^|| = ||x||
  kNone = 3,          // alpha = ||y|| / sqrt(d): the plain codebook scale (what the theory assumes)
};
const char* to_string(NormCorrection c);

// Packed bytes of one vector's codes.
MINIMAKV_HD constexpr size_t tq3_packed_bytes(int d) { return static_cast<size_t>(3 * d / 8); }

// Same numbers as kTq3Levels / kTq3Thresholds, in a form device code can use.
MINIMAKV_HD inline float tq3_level(int code) {
  constexpr float kLevels[8] = {-2.15234375f,  -1.34375f,    -0.755859375f, -0.2451171875f,
                                0.2451171875f, 0.755859375f, 1.34375f,      2.15234375f};
  return kLevels[code & 7];
}

MINIMAKV_HD inline int tq3_code(float t) {
  constexpr float kThresholds[7] = {-1.7480f, -1.0500f, -0.50055f, 0.0f, 0.50055f, 1.0500f, 1.7480f};
  int c = 0;
  for (int k = 0; k < 7; ++k) c += t >= kThresholds[k] ? 1 : 0;
  return c;
}

// Canonical fp32 sum of v[0..n): partial[j] = sum over i = j (mod 32) in ascending i, then
// partial[j] += partial[j + off] for off = 16, 8, 4, 2, 1. A warp computes the same with xor shuffles.
MINIMAKV_HD inline float canonical_sum(const float* v, int n) {
  float p[32];
  for (int j = 0; j < 32; ++j) p[j] = 0.0f;
  for (int i = 0; i < n; ++i) p[i & 31] = detail::add_rn(p[i & 31], v[i]);
  for (int off = 16; off >= 1; off >>= 1)
    for (int j = 0; j < off; ++j) p[j] = detail::add_rn(p[j], p[j + off]);
  return p[0];
}

// 8 codes -> 3 bytes, little-endian 24-bit groups: code j of a group occupies bits [3j, 3j + 3).
MINIMAKV_HD inline void tq3_pack8(const uint8_t* codes, uint8_t* out) {
  uint32_t w = 0;
  for (int j = 0; j < 8; ++j) w |= static_cast<uint32_t>(codes[j] & 7u) << (3 * j);
  out[0] = static_cast<uint8_t>(w);
  out[1] = static_cast<uint8_t>(w >> 8);
  out[2] = static_cast<uint8_t>(w >> 16);
}

MINIMAKV_HD inline void tq3_unpack8(const uint8_t* in, uint8_t* codes) {
  const uint32_t w = static_cast<uint32_t>(in[0]) | (static_cast<uint32_t>(in[1]) << 8) |
                     (static_cast<uint32_t>(in[2]) << 16);
  for (int j = 0; j < 8; ++j) codes[j] = static_cast<uint8_t>((w >> (3 * j)) & 7u);
}

// Reference encoder of one rotated vector (d <= 256). Writes 3d/8 packed bytes, returns alpha (fp16
// bits). Sets *nonfinite when the input had NaN/inf. Used by CPU code and as the GPU's specification.
MINIMAKV_HD inline uint16_t tq3_encode_rotated_ref(const float* y, int d, uint8_t* packed,
                                                   NormCorrection corr, bool* nonfinite) {
  float sq[kMaxHeadDim];
  bool bad = false;
  for (int i = 0; i < d; ++i) {
    bad |= !detail::is_finite_bits(y[i]);
    sq[i] = detail::mul_rn(y[i], y[i]);
  }
  uint8_t codes[kMaxHeadDim];
  float ss = canonical_sum(sq, d);
  float scaled[kMaxHeadDim];
  float post = 1.0f;
  if (!bad && !detail::is_finite_bits(ss)) {
    // Finite input whose sum of squares overflows: quantize y * 2^-64 (exact) and scale alpha back,
    // which then saturates at the fp16 maximum.
    for (int i = 0; i < d; ++i) {
      scaled[i] = detail::mul_rn(y[i], 5.42101086242752217e-20f);
      sq[i] = detail::mul_rn(scaled[i], scaled[i]);
    }
    y = scaled;
    post = 1.8446744073709552e19f;
    ss = canonical_sum(sq, d);
  }
  if (bad) {
    for (int i = 0; i < d; ++i) codes[i] = 0;
    for (int g = 0; g < d / 8; ++g) tq3_pack8(codes + 8 * g, packed + 3 * g);
    if (nonfinite) *nonfinite = true;
    return kHalfNaN;
  }
  if (nonfinite) *nonfinite = false;
  if (ss == 0.0f) {
    for (int i = 0; i < d; ++i) codes[i] = 4;
    for (int g = 0; g < d / 8; ++g) tq3_pack8(codes + 8 * g, packed + 3 * g);
    return 0;
  }
  const float norm = detail::sqrt_rn(ss);
  const float sqrt_d = d == 64 ? 8.0f : (d == 128 ? 11.3137084989847604f : 16.0f);
  const float to_unit = detail::div_rn(sqrt_d, norm);
  float yc[kMaxHeadDim];
  float cc[kMaxHeadDim];
  for (int i = 0; i < d; ++i) {
    const int c = tq3_code(detail::mul_rn(y[i], to_unit));
    codes[i] = static_cast<uint8_t>(c);
    yc[i] = detail::mul_rn(y[i], tq3_level(c));
    cc[i] = detail::mul_rn(tq3_level(c), tq3_level(c));
  }
  for (int g = 0; g < d / 8; ++g) tq3_pack8(codes + 8 * g, packed + 3 * g);
  float alpha;
  switch (corr) {
    case NormCorrection::kUnbiased: alpha = detail::div_rn(ss, canonical_sum(yc, d)); break;
    case NormCorrection::kMinMse: alpha = detail::div_rn(canonical_sum(yc, d), canonical_sum(cc, d)); break;
    case NormCorrection::kPreserveNorm: alpha = detail::div_rn(norm, detail::sqrt_rn(canonical_sum(cc, d))); break;
    default: alpha = detail::div_rn(norm, sqrt_d); break;
  }
  alpha = detail::mul_rn(alpha, post);
  return float_to_half(alpha < kHalfMax ? alpha : kHalfMax);
}

// ---- host API over spans (no allocation; size mismatches throw std::invalid_argument)

// Encodes an already rotated vector.
uint16_t tq3_encode_rotated(std::span<const float> y, std::span<uint8_t> packed, NormCorrection corr,
                            EncodeStats* stats = nullptr);
// y^ in the rotated domain.
void tq3_decode_rotated(std::span<const uint8_t> packed, uint16_t alpha, std::span<float> y_out);
// Rotates x (into scratch, d floats) and encodes it.
uint16_t tq3_encode(std::span<const float> x, const Rotation& rot, std::span<float> scratch,
                    std::span<uint8_t> packed, NormCorrection corr, EncodeStats* stats = nullptr);
// Decodes and rotates back to the original domain.
void tq3_decode(std::span<const uint8_t> packed, uint16_t alpha, const Rotation& rot, std::span<float> out);
// <q_rot, y^> computed directly on the codes: alpha * sum_i q_rot[i] * c[code_i].
float tq3_dot_rotated(std::span<const float> q_rot, std::span<const uint8_t> packed, uint16_t alpha);

}  // namespace minimakv::codec
