// TQ4: rotated 4-bit scalar quantization of (token, head) vectors, the higher-fidelity Stale format.
//
// Owns: the 16-level Lloyd-Max codebook for N(0,1) and the 4-bit packing (two codes per byte, the even
// index in the low nibble). The encoding rule is rotated_code.h's, exactly as TQ3's with another codebook:
//     t_i = y_i * sqrt(d) / ||y||,   code_i = #{ k : t_i >= tau_k },   y^_i = alpha * c[code_i]
// with y = R x (rotation.h), so attention reads keys and values in the rotated domain as with TQ3. At
// head_dim 128 a vector costs 64 + 2 bytes (TQ3: 48 + 2, FP8: 128 + 4); the Lloyd-Max error on Gaussian
// data is 0.95% of the energy (TQ3: 3.45%).
// Invariants: those of rotated_code.h. Code 8 (+0.1284) stands for the zero vector.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "minimakv/codec/rotated_code.h"

namespace minimakv::codec {

// Lloyd-Max reconstruction levels for N(0,1) (+-0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6180, 2.0690,
// 2.7326), each rounded to the nearest fp16 value (a change of at most 0.04%); ascending.
inline constexpr std::array<float, 16> kTq4Levels = {-2.732421875f,  -2.068359375f,   -1.6181640625f,   -1.255859375f,
                                                     -0.9423828125f, -0.65673828125f, -0.387939453125f, -0.12841796875f,
                                                     0.12841796875f, 0.387939453125f, 0.65673828125f,   0.9423828125f,
                                                     1.255859375f,   1.6181640625f,   2.068359375f,     2.732421875f};
// Decision thresholds (midpoints of adjacent Lloyd-Max levels, from before the fp16 rounding).
inline constexpr std::array<float, 15> kTq4Thresholds = {-2.4008f, -1.84353f, -1.43714f, -1.09929f, -0.79955f,
                                                         -0.5224f, -0.25822f, 0.0f,      0.25822f,  0.5224f,
                                                         0.79955f, 1.09929f,  1.43714f,  1.84353f,  2.4008f};

MINIMAKV_HD constexpr size_t tq4_packed_bytes(int d) {
  return static_cast<size_t>(d / 2);
}

// Same numbers as kTq4Levels / kTq4Thresholds, in a form device code can use.
MINIMAKV_HD inline float tq4_level(int code) {
  constexpr float kLevels[16] = {-2.732421875f,  -2.068359375f,   -1.6181640625f,   -1.255859375f,
                                 -0.9423828125f, -0.65673828125f, -0.387939453125f, -0.12841796875f,
                                 0.12841796875f, 0.387939453125f, 0.65673828125f,   0.9423828125f,
                                 1.255859375f,   1.6181640625f,   2.068359375f,     2.732421875f};
  return kLevels[code & 15];
}

MINIMAKV_HD inline int tq4_code(float t) {
  constexpr float kThresholds[15] = {-2.4008f, -1.84353f, -1.43714f, -1.09929f, -0.79955f, -0.5224f, -0.25822f, 0.0f,
                                     0.25822f, 0.5224f,   0.79955f,  1.09929f,  1.43714f,  1.84353f, 2.4008f};
  int c = 0;
  for (int k = 0; k < 15; ++k) c += t >= kThresholds[k] ? 1 : 0;
  return c;
}

// The codebook type of rotated_encode_ref.
struct Tq4Book {
  static constexpr const char* kName = "tq4";
  static constexpr uint8_t kZeroCode = 8;
  MINIMAKV_HD static constexpr size_t packed_bytes(int d) { return tq4_packed_bytes(d); }
  MINIMAKV_HD static int code(float t) { return tq4_code(t); }
  MINIMAKV_HD static float level(int c) { return tq4_level(c); }
  MINIMAKV_HD static void pack(const uint8_t* codes, int d, uint8_t* packed) {
    for (int j = 0; j < d / 2; ++j)
      packed[j] = static_cast<uint8_t>((codes[2 * j] & 15u) | ((codes[2 * j + 1] & 15u) << 4));
  }
  MINIMAKV_HD static void unpack(const uint8_t* packed, int d, uint8_t* codes) {
    for (int j = 0; j < d / 2; ++j) {
      codes[2 * j] = packed[j] & 15u;
      codes[2 * j + 1] = static_cast<uint8_t>(packed[j] >> 4);
    }
  }
};

// The span API (encode_rotated, decode_rotated, encode, decode, dot_rotated; size mismatches throw
// std::invalid_argument) and the bit-exact reference encoder are rotated_code.h's for this codebook.
using Tq4Codec = RotatedCodec<Tq4Book>;

}  // namespace minimakv::codec
