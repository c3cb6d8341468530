// TQ4: nibble packing, the 16-level Lloyd-Max error on Gaussian data, the levels against an fp64
// Lloyd-Max solve, rotated-domain inner products, alpha's corrections, the documented zero / non-finite
// behaviour, and the code rule against an fp64 reference.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "minimakv/codec/tq4.h"
#include "test_util.h"

namespace minimakv::codec {
namespace {

TEST(Tq4, PackUnpackRoundTripAndNibbleOrder) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int d : {64, 128, 256}) {
    std::vector<uint8_t> codes(d), out(d, 0xff), packed(tq4_packed_bytes(d));
    for (auto& c : codes) c = static_cast<uint8_t>(rng() & 15);
    Tq4Book::pack(codes.data(), d, packed.data());
    Tq4Book::unpack(packed.data(), d, out.data());
    ASSERT_EQ(codes, out);
  }
  const uint8_t ramp[4] = {1, 2, 15, 0};
  uint8_t p[2];
  Tq4Book::pack(ramp, 4, p);
  EXPECT_EQ(p[0], 0x21);  // the even index in the low nibble
  EXPECT_EQ(p[1], 0x0f);
}

// The shipped levels are the Lloyd-Max quantizer of N(0,1), solved here in fp64 from scratch (Lloyd's
// iteration on the exact Gaussian centroids), to fp16 rounding; thresholds are the midpoints.
TEST(Tq4, LevelsAreLloydMaxForTheGaussian) {
  const auto pdf = [](double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); };
  const auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  std::vector<double> lv(16);
  for (int i = 0; i < 16; ++i) lv[i] = -2.7 + 5.4 * i / 15;
  for (int it = 0; it < 5000; ++it) {
    std::vector<double> b{-1e9};
    for (int i = 0; i < 15; ++i) b.push_back(0.5 * (lv[i] + lv[i + 1]));
    b.push_back(1e9);
    for (int i = 0; i < 16; ++i) lv[i] = (pdf(b[i]) - pdf(b[i + 1])) / (cdf(b[i + 1]) - cdf(b[i]));
  }
  for (int i = 0; i < 16; ++i) {
    EXPECT_NEAR(kTq4Levels[i], lv[i], 1e-3 * std::fabs(lv[i])) << i;
    EXPECT_EQ(tq4_level(i), kTq4Levels[i]);
    EXPECT_EQ(half_to_float(float_to_half(kTq4Levels[i])), kTq4Levels[i]) << "fp16-exact";
  }
  for (int i = 0; i < 15; ++i) EXPECT_NEAR(kTq4Thresholds[i], 0.5 * (lv[i] + lv[i + 1]), 1e-4) << i;
}

TEST(Tq4, KeysOnGaussianMeetLloydMaxBound) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  for (int d : {128, 256}) {
    const Rotation rot = Rotation::for_head(d, 1, 0);
    std::vector<float> x(d), scratch(d), y(d);
    std::vector<uint8_t> packed(tq4_packed_bytes(d));
    double err = 0, energy = 0;
    for (int rep = 0; rep < 4000; ++rep) {
      for (auto& v : x) v = g(rng);
      testing::poison(std::span<float>(y));
      const uint16_t a = Tq4Codec::encode(x, rot, scratch, packed, NormCorrection::kMinMse);
      Tq4Codec::decode(packed, a, rot, y);
      for (int i = 0; i < d; ++i) {
        err += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
        energy += x[i] * static_cast<double>(x[i]);
      }
    }
    EXPECT_LE(err / energy, 0.0105) << "d=" << d;  // Lloyd-Max for N(0,1): 0.0095
    EXPECT_GE(err / energy, 0.0085) << "d=" << d;
  }
}

TEST(Tq4, DotOnCodesEqualsDotOnDecodedVectorAndUnbiasedAlongY) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  for (int d : {64, 128, 256}) {
    std::vector<float> y(d), q(d), yhat(d);
    std::vector<uint8_t> packed(tq4_packed_bytes(d));
    for (int rep = 0; rep < 200; ++rep) {
      for (auto& v : y) v = g(rng);
      for (auto& v : q) v = g(rng);
      const uint16_t a = Tq4Codec::encode_rotated(y, packed, NormCorrection::kUnbiased);
      testing::poison(std::span<float>(yhat));
      Tq4Codec::decode_rotated(packed, a, yhat);
      double ref = 0, yy = 0, yyh = 0;
      for (int i = 0; i < d; ++i) {
        ref += static_cast<double>(q[i]) * yhat[i];
        yy += static_cast<double>(y[i]) * y[i];
        yyh += static_cast<double>(y[i]) * yhat[i];
      }
      EXPECT_NEAR(Tq4Codec::dot_rotated(q, packed, a), ref, 1e-4 * (1 + std::fabs(ref)));
      EXPECT_NEAR(yyh / yy, 1.0, 1e-3);  // fp16 alpha: relative 2^-11
    }
  }
}

// fp64 reference of the code rule: code = number of thresholds <= y_i * sqrt(d) / ||y||.
TEST(Tq4, CodesMatchFp64ReferenceAwayFromThresholds) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  for (int d : {64, 128, 256}) {
    std::vector<float> y(d);
    std::vector<uint8_t> packed(tq4_packed_bytes(d)), codes(d);
    for (int rep = 0; rep < 500; ++rep) {
      for (auto& v : y) v = g(rng) * 3.0f;
      Tq4Codec::encode_rotated(y, packed, NormCorrection::kMinMse);
      Tq4Book::unpack(packed.data(), d, codes.data());
      double nn = 0;
      for (float v : y) nn += static_cast<double>(v) * v;
      const double scale = std::sqrt(static_cast<double>(d)) / std::sqrt(nn);
      for (int i = 0; i < d; ++i) {
        const double t = y[i] * scale;
        double gap = 1e9;
        int expect = 0;
        for (float th : kTq4Thresholds) {
          gap = std::min(gap, std::fabs(t - th));
          expect += t >= th ? 1 : 0;
        }
        if (gap > 1e-5) {
          ASSERT_EQ(codes[i], expect) << "t=" << t;
        }
      }
    }
  }
}

TEST(Tq4, ZeroAndNonFiniteVectors) {
  const int d = 128;
  std::vector<float> y(d, 0.0f), out(d);
  std::vector<uint8_t> packed(tq4_packed_bytes(d));
  EncodeStats st;
  uint16_t a = Tq4Codec::encode_rotated(y, packed, NormCorrection::kUnbiased, &st);
  EXPECT_EQ(a, 0);
  Tq4Codec::decode_rotated(packed, a, out);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  y[3] = -std::numeric_limits<float>::infinity();
  a = Tq4Codec::encode_rotated(y, packed, NormCorrection::kMinMse, &st);
  EXPECT_EQ(a, kHalfNaN);
  Tq4Codec::decode_rotated(packed, a, out);
  for (float v : out) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(st.vectors, 2u);
  EXPECT_EQ(st.nonfinite_elements, 1u);
  std::fill(y.begin(), y.end(), 1e30f);  // huge but finite: alpha saturates instead of overflowing
  EXPECT_EQ(half_to_float(Tq4Codec::encode_rotated(y, packed, NormCorrection::kNone)), kHalfMax);
}

TEST(Tq4, RejectsBadSizes) {
  std::vector<float> y(128, 1.0f), out(128);
  std::vector<uint8_t> small(63, 0xa5), p48(48);
  EXPECT_THROW(Tq4Codec::encode_rotated(y, small, NormCorrection::kUnbiased), std::invalid_argument);
  for (auto b : small) EXPECT_EQ(b, 0xa5);
  EXPECT_THROW(Tq4Codec::decode_rotated(p48, 0, out), std::invalid_argument);  // TQ3's size for d = 128
  std::vector<float> y96(96, 1.0f);
  std::vector<uint8_t> p(48);
  EXPECT_THROW(Tq4Codec::encode_rotated(y96, p, NormCorrection::kUnbiased), std::invalid_argument);
}

}  // namespace
}  // namespace minimakv::codec
