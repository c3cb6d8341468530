// TQ3: rotated 3-bit scalar quantization of (token, head) vectors for Stale pages.
//
// Owns: the 8-level Lloyd-Max codebook for N(0,1) and the 3-bit packing (8 codes in 3 bytes); the
// encoding rule (canonical reductions, the fp16 norm correction alpha) is rotated_code.h's.
// A vector x is stored as y = R x (see rotation.h) quantized per coordinate:
//     t_i = y_i * sqrt(d) / ||y||,   code_i = #{ k : t_i >= tau_k },   y^_i = alpha * c[code_i]
// so an attention kernel computes <q, k^> = alpha * sum_i (R q)_i c[code_i] without un-rotating keys.
// Invariants: those of rotated_code.h (bit-exact CPU and GPU encoders, NaN alpha for non-finite input,
// alpha 0 for the zero vector, saturation at 65504).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "minimakv/codec/rotated_code.h"

namespace minimakv::codec {

// Lloyd-Max reconstruction levels for N(0,1) (+-0.2451, 0.7560, 1.3440, 2.1520), each rounded to the
// nearest fp16 value (a change of at most 0.02%), so that tensor cores read the codes exactly;
// ascending; code k in [0, 8) maps to kTq3Levels[k].
inline constexpr std::array<float, 8> kTq3Levels = {-2.15234375f,  -1.34375f,    -0.755859375f, -0.2451171875f,
                                                    0.2451171875f, 0.755859375f, 1.34375f,      2.15234375f};
// Decision thresholds (midpoints of adjacent Lloyd-Max levels, from before the fp16 rounding).
inline constexpr std::array<float, 7> kTq3Thresholds = {-1.7480f, -1.0500f, -0.50055f, 0.0f,
                                                        0.50055f, 1.0500f,  1.7480f};

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

// The codebook type of rotated_encode_ref (code 4, level +0.2451, stands for the zero vector).
struct Tq3Book {
  static constexpr const char* kName = "tq3";
  static constexpr uint8_t kZeroCode = 4;
  MINIMAKV_HD static constexpr size_t packed_bytes(int d) { return tq3_packed_bytes(d); }
  MINIMAKV_HD static int code(float t) { return tq3_code(t); }
  MINIMAKV_HD static float level(int c) { return tq3_level(c); }
  MINIMAKV_HD static void pack(const uint8_t* codes, int d, uint8_t* packed) {
    for (int g = 0; g < d / 8; ++g) tq3_pack8(codes + 8 * g, packed + 3 * g);
  }
  MINIMAKV_HD static void unpack(const uint8_t* packed, int d, uint8_t* codes) {
    for (int g = 0; g < d / 8; ++g) tq3_unpack8(packed + 3 * g, codes + 8 * g);
  }
};

// Reference encoder of one rotated vector (d <= 256). Writes 3d/8 packed bytes, returns alpha (fp16
// bits). Sets *nonfinite when the input had NaN/inf. Used by CPU code and as the GPU's specification.
MINIMAKV_HD inline uint16_t tq3_encode_rotated_ref(const float* y, int d, uint8_t* packed,
                                                   NormCorrection corr, bool* nonfinite) {
  return rotated_encode_ref<Tq3Book>(y, d, packed, corr, nonfinite);
}

// ---- host API over spans (rotated_code.h's RotatedCodec; size mismatches throw std::invalid_argument)

// Encodes an already rotated vector.
inline uint16_t tq3_encode_rotated(std::span<const float> y, std::span<uint8_t> packed, NormCorrection corr,
                                   EncodeStats* stats = nullptr) {
  return RotatedCodec<Tq3Book>::encode_rotated(y, packed, corr, stats);
}
// y^ in the rotated domain.
inline void tq3_decode_rotated(std::span<const uint8_t> packed, uint16_t alpha, std::span<float> y_out) {
  RotatedCodec<Tq3Book>::decode_rotated(packed, alpha, y_out);
}
// Rotates x (into scratch, d floats) and encodes it.
inline uint16_t tq3_encode(std::span<const float> x, const Rotation& rot, std::span<float> scratch,
                           std::span<uint8_t> packed, NormCorrection corr, EncodeStats* stats = nullptr) {
  return RotatedCodec<Tq3Book>::encode(x, rot, scratch, packed, corr, stats);
}
// Decodes and rotates back to the original domain.
inline void tq3_decode(std::span<const uint8_t> packed, uint16_t alpha, const Rotation& rot, std::span<float> out) {
  RotatedCodec<Tq3Book>::decode(packed, alpha, rot, out);
}
// <q_rot, y^> computed directly on the codes: alpha * sum_i q_rot[i] * c[code_i].
inline float tq3_dot_rotated(std::span<const float> q_rot, std::span<const uint8_t> packed, uint16_t alpha) {
  return RotatedCodec<Tq3Book>::dot_rotated(q_rot, packed, alpha);
}

}  // namespace minimakv::codec
