#include "minimakv/codec/rotated_code.h"

#include <stdexcept>
#include <string>

#include "minimakv/codec/tq3.h"
#include "minimakv/codec/tq4.h"

namespace minimakv::codec {

const char* to_string(NormCorrection c) {
  switch (c) {
    case NormCorrection::kUnbiased:
      return "unbiased";
    case NormCorrection::kMinMse:
      return "min-mse";
    case NormCorrection::kPreserveNorm:
      return "preserve-norm";
    case NormCorrection::kNone:
      return "none";
  }
  return "?";
}

namespace {
template <class Book>
void check_sizes(size_t d, size_t packed, const char* what) {
  const std::string where = std::string(Book::kName) + "_" + what;
  require_supported_head_dim(static_cast<int>(d), where.c_str());
  const size_t need = Book::packed_bytes(static_cast<int>(d));
  if (packed != need) {
    throw std::invalid_argument(where + ": packed buffer has " + std::to_string(packed) + " bytes, head_dim " +
                                std::to_string(d) + " needs " + std::to_string(need));
  }
}
}  // namespace

template <class Book>
uint16_t RotatedCodec<Book>::encode_rotated(std::span<const float> y, std::span<uint8_t> packed, NormCorrection corr,
                                            EncodeStats* stats) {
  check_sizes<Book>(y.size(), packed.size(), "encode_rotated");
  bool nonfinite = false;
  const uint16_t alpha =
      rotated_encode_ref<Book>(y.data(), static_cast<int>(y.size()), packed.data(), corr, &nonfinite);
  if (stats != nullptr) {
    stats->vectors += 1;
    if (nonfinite) {
      for (float v : y) stats->nonfinite_elements += detail::is_finite_bits(v) ? 0 : 1;
    }
  }
  return alpha;
}

template <class Book>
void RotatedCodec<Book>::decode_rotated(std::span<const uint8_t> packed, uint16_t alpha, std::span<float> y_out) {
  check_sizes<Book>(y_out.size(), packed.size(), "decode_rotated");
  const float a = half_to_float(alpha);
  uint8_t codes[kMaxHeadDim];
  Book::unpack(packed.data(), static_cast<int>(y_out.size()), codes);
  for (size_t i = 0; i < y_out.size(); ++i) y_out[i] = a * Book::level(codes[i]);
}

template <class Book>
uint16_t RotatedCodec<Book>::encode(std::span<const float> x, const Rotation& rot, std::span<float> scratch,
                                    std::span<uint8_t> packed, NormCorrection corr, EncodeStats* stats) {
  if (scratch.size() != x.size()) {
    throw std::invalid_argument(std::string(Book::kName) + "_encode: scratch has " + std::to_string(scratch.size()) +
                                " elements, input has " + std::to_string(x.size()));
  }
  check_sizes<Book>(x.size(), packed.size(), "encode");
  for (size_t i = 0; i < x.size(); ++i) scratch[i] = x[i];
  rot.forward(scratch);
  return encode_rotated(scratch, packed, corr, stats);
}

template <class Book>
void RotatedCodec<Book>::decode(std::span<const uint8_t> packed, uint16_t alpha, const Rotation& rot,
                                std::span<float> out) {
  decode_rotated(packed, alpha, out);
  rot.inverse(out);
}

template <class Book>
float RotatedCodec<Book>::dot_rotated(std::span<const float> q_rot, std::span<const uint8_t> packed, uint16_t alpha) {
  check_sizes<Book>(q_rot.size(), packed.size(), "dot_rotated");
  uint8_t codes[kMaxHeadDim];
  Book::unpack(packed.data(), static_cast<int>(q_rot.size()), codes);
  float acc = 0.0f;
  for (size_t i = 0; i < q_rot.size(); ++i) acc += q_rot[i] * Book::level(codes[i]);
  return acc * half_to_float(alpha);
}

template struct RotatedCodec<Tq3Book>;
template struct RotatedCodec<Tq4Book>;

}  // namespace minimakv::codec
