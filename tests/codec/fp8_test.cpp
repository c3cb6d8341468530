// FP8 E4M3FN: every code against an independent reference written here (fp64 arithmetic from the bit
// fields, nearest-value search with ties to the even code), plus the documented edge cases.
#include <cmath>
#include <limits>
#include <vector>

#include "minimakv/codec/fp8_e4m3.h"
#include "test_util.h"

namespace minimakv::codec {
namespace {

double ref_value(int code) {
  const int sign = (code >> 7) & 1;
  const int exp = (code >> 3) & 15;
  const int mant = code & 7;
  double v;
  if (exp == 15 && mant == 7) return std::numeric_limits<double>::quiet_NaN();
  if (exp == 0) v = std::ldexp(mant / 8.0, -6);
  else v = std::ldexp(1.0 + mant / 8.0, exp - 7);
  return sign ? -v : v;
}

// Nearest finite code to x by exhaustive search; ties go to the code with an even mantissa.
int ref_encode(double x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  if (a >= 448.0) return sign | 0x7e;
  int best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {
    const double err = std::fabs(ref_value(c) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return sign | best;
}

TEST(Fp8, DecodesEveryCodeLikeTheReference) {
  for (int c = 0; c < 256; ++c) {
    const double r = ref_value(c);
    const float got = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(r)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), r) << "code " << c;
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code " << c;
    }
  }
}

TEST(Fp8, EncodesEveryCodeValueBackToItsCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(fp8_e4m3_from_float(static_cast<float>(ref_value(c))), c) << "code " << c;
  }
}

TEST(Fp8, MidpointsRoundToEvenAndMatchReference) {
  for (int c = 0; c < 0x7e; ++c) {
    const double lo = ref_value(c), hi = ref_value(c + 1);
    for (double f : {0.5, 0.25, 0.75, 0.4999, 0.5001}) {
      const float x = static_cast<float>(lo + (hi - lo) * f);
      EXPECT_EQ(fp8_e4m3_from_float(x), ref_encode(x)) << "between codes " << c << " and " << c + 1;
      EXPECT_EQ(fp8_e4m3_from_float(-x), ref_encode(-x));
    }
  }
  // The exact tie between 1.0 (0x38) and 1.125 (0x39) goes to the even code.
  EXPECT_EQ(fp8_e4m3_from_float(1.0625f), 0x38);
  EXPECT_EQ(fp8_e4m3_from_float(1.1875f), 0x3a);
}

TEST(Fp8, RandomFloatsMatchReference) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::uniform_real_distribution<double> exp_dist(-14.0, 10.0);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  for (int i = 0; i < 200000; ++i) {
    const float x = static_cast<float>((i & 1 ? -1 : 1) * mant(rng) * std::exp2(exp_dist(rng)));
    ASSERT_EQ(fp8_e4m3_from_float(x), ref_encode(x)) << "x=" << x;
  }
}

TEST(Fp8, DocumentedEdgeCases) {
  EXPECT_EQ(fp8_e4m3_from_float(0.0f), 0x00);
  EXPECT_EQ(fp8_e4m3_from_float(-0.0f), 0x80);
  EXPECT_EQ(fp8_e4m3_from_float(448.0f), 0x7e);
  EXPECT_EQ(fp8_e4m3_from_float(1e30f), 0x7e);
  EXPECT_EQ(fp8_e4m3_from_float(-1e30f), 0xfe);
  EXPECT_EQ(fp8_e4m3_from_float(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(fp8_e4m3_from_float(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(fp8_e4m3_from_float(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  EXPECT_EQ(fp8_e4m3_from_float(std::ldexp(1.0f, -9)), 0x01);         // smallest subnormal
  EXPECT_EQ(fp8_e4m3_from_float(std::ldexp(1.0f, -10)), 0x00);        // tie to even: 0
  EXPECT_EQ(fp8_e4m3_from_float(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(fp8_e4m3_from_float(std::ldexp(1.0f, -6)), 0x08);         // smallest normal
  EXPECT_EQ(fp8_e4m3_from_float(1e-30f), 0x00);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_float(0x80)));
}

TEST(Fp8, VectorRoundTripErrorWithinHalfUlp) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (int d : {64, 128, 256}) {
    std::vector<float> x(d), y(d);
    std::vector<uint8_t> codes(d);
    for (int rep = 0; rep < 200; ++rep) {
      for (auto& v : x) v = g(rng);
      testing::poison(std::span<uint8_t>(codes));
      testing::poison(std::span<float>(y));
      const float s = fp8_encode_vector(x, codes, nullptr);
      fp8_decode_vector(codes, s, y);
      for (int i = 0; i < d; ++i) {
        // relative half-ulp of a 3-bit mantissa (1/16), or half a subnormal step near zero
        const double tol = std::max(std::fabs(x[i]) / 16.0, s * std::ldexp(1.0, -10)) * 1.0001;
        ASSERT_LE(std::fabs(y[i] - x[i]), tol) << "d=" << d << " i=" << i;
      }
    }
  }
}

TEST(Fp8, VectorZeroNaNAndInf) {
  std::vector<float> x(64, 0.0f);
  std::vector<uint8_t> codes(64);
  std::vector<float> y(64);
  EncodeStats st;
  EXPECT_EQ(fp8_encode_vector(x, codes, &st), 0.0f);
  fp8_decode_vector(codes, 0.0f, y);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[5] = std::numeric_limits<float>::infinity();
  x[7] = 2.0f;
  const float s = fp8_encode_vector(x, codes, &st);
  EXPECT_FLOAT_EQ(s, 2.0f / 448.0f);
  fp8_decode_vector(codes, s, y);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_FLOAT_EQ(y[5], 2.0f);  // inf saturates to the vector's range
  EXPECT_FLOAT_EQ(y[7], 2.0f);
  EXPECT_EQ(st.vectors, 2u);
  EXPECT_EQ(st.nonfinite_elements, 2u);
}

TEST(Fp8, MisSizedBuffersThrowAndWriteNothing) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> codes(63, 0xa5);
  EXPECT_THROW(fp8_encode_vector(x, codes), std::invalid_argument);
  for (auto c : codes) EXPECT_EQ(c, 0xa5);
  std::vector<float> out(10);
  std::vector<uint8_t> c2(64);
  EXPECT_THROW(fp8_decode_vector(c2, 1.0f, out), std::invalid_argument);
}

}  // namespace
}  // namespace minimakv::codec
