// The rule shared by the rotated scalar codes (TQ3, TQ4): how one rotated (token, head) vector becomes
// b-bit codebook indices and an fp16 norm correction alpha.
//
// Owns: NormCorrection, the canonical reduction order, and rotated_encode_ref, the reference encoder
// every CPU and GPU encoder of a rotated format reproduces bit for bit. A codebook type supplies the
// levels of N(0,1) (fp16-exact, ascending), the decision rule and the packing:
//     t_i = y_i * sqrt(d) / ||y||,   code_i = Book::code(t_i),   y^_i = alpha * Book::level(code_i)
// Invariants: every decision that changes a stored byte uses canonical_sum (32 strided partials, then a
// pairwise tree) and the rounding helpers of portable.h. Non-finite input: every code is 0 and alpha is
// fp16 NaN (decodes to NaN, never silently to a plausible value). Zero vector: alpha = 0 and every code
// is Book::kZeroCode (decodes to exact zeros). alpha saturates at 65504.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "minimakv/codec/fp8_e4m3.h"
#include "minimakv/codec/half.h"
#include "minimakv/codec/rotation.h"

namespace minimakv::codec {

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

// Reference encoder of one rotated vector (d <= kMaxHeadDim) under codebook Book (static members
// kZeroCode, code(float), level(int), pack(codes, d, packed)). Writes Book's packed bytes, returns alpha
// (fp16 bits), sets *nonfinite when the input had NaN/inf.
template <class Book>
MINIMAKV_HD inline uint16_t rotated_encode_ref(const float* y, int d, uint8_t* packed, NormCorrection corr,
                                               bool* nonfinite) {
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
    Book::pack(codes, d, packed);
    if (nonfinite) *nonfinite = true;
    return kHalfNaN;
  }
  if (nonfinite) *nonfinite = false;
  if (ss == 0.0f) {
    for (int i = 0; i < d; ++i) codes[i] = Book::kZeroCode;
    Book::pack(codes, d, packed);
    return 0;
  }
  const float norm = detail::sqrt_rn(ss);
  const float sqrt_d = d == 64 ? 8.0f : (d == 128 ? 11.3137084989847604f : 16.0f);
  const float to_unit = detail::div_rn(sqrt_d, norm);
  float yc[kMaxHeadDim];
  float cc[kMaxHeadDim];
  for (int i = 0; i < d; ++i) {
    const int c = Book::code(detail::mul_rn(y[i], to_unit));
    codes[i] = static_cast<uint8_t>(c);
    yc[i] = detail::mul_rn(y[i], Book::level(c));
    cc[i] = detail::mul_rn(Book::level(c), Book::level(c));
  }
  Book::pack(codes, d, packed);
  float alpha;
  switch (corr) {
    case NormCorrection::kUnbiased:
      alpha = detail::div_rn(ss, canonical_sum(yc, d));
      break;
    case NormCorrection::kMinMse:
      alpha = detail::div_rn(canonical_sum(yc, d), canonical_sum(cc, d));
      break;
    case NormCorrection::kPreserveNorm:
      alpha = detail::div_rn(norm, detail::sqrt_rn(canonical_sum(cc, d)));
      break;
    default:
      alpha = detail::div_rn(norm, sqrt_d);
      break;
  }
  alpha = detail::mul_rn(alpha, post);
  return float_to_half(alpha < kHalfMax ? alpha : kHalfMax);
}

// The host API of a rotated code over spans, defined in rotated_code.cpp for Tq3Book and Tq4Book. Book
// also supplies kName, packed_bytes(d) and unpack(packed, d, codes). No allocation; a size mismatch
// throws std::invalid_argument before anything is written.
template <class Book>
struct RotatedCodec {
  // Encodes an already rotated vector.
  static uint16_t encode_rotated(std::span<const float> y, std::span<uint8_t> packed, NormCorrection corr,
                                 EncodeStats* stats = nullptr);
  // y^ in the rotated domain.
  static void decode_rotated(std::span<const uint8_t> packed, uint16_t alpha, std::span<float> y_out);
  // Rotates x (into scratch, d floats) and encodes it.
  static uint16_t encode(std::span<const float> x, const Rotation& rot, std::span<float> scratch,
                         std::span<uint8_t> packed, NormCorrection corr, EncodeStats* stats = nullptr);
  // Decodes and rotates back to the original domain.
  static void decode(std::span<const uint8_t> packed, uint16_t alpha, const Rotation& rot, std::span<float> out);
  // <q_rot, y^> computed directly on the codes: alpha * sum_i q_rot[i] * level(code_i).
  static float dot_rotated(std::span<const float> q_rot, std::span<const uint8_t> packed, uint16_t alpha);
};

}  // namespace minimakv::codec
