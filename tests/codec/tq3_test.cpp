// TQ3: packing, the Lloyd-Max error bound on Gaussian data, rotated-domain inner products, the
// documented zero / non-finite behaviour, and the encoder against an fp64 reference of the same rule.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "minimakv/codec/tq3.h"
#include "test_util.h"

namespace minimakv::codec {
namespace {

TEST(Tq3, PackUnpackRoundTrip) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int rep = 0; rep < 1000; ++rep) {
    uint8_t codes[8], out[8], packed[3];
    for (auto& c : codes) c = static_cast<uint8_t>(rng() & 7);
    tq3_pack8(codes, packed);
    tq3_unpack8(packed, out);
    ASSERT_TRUE(std::equal(codes, codes + 8, out));
  }
  const uint8_t ramp[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  uint8_t p[3];
  tq3_pack8(ramp, p);
  // bits: 000 001 010 011 100 101 110 111 from the least significant end
  EXPECT_EQ(p[0], 0x88);
  EXPECT_EQ(p[1], 0xc6);
  EXPECT_EQ(p[2], 0xfa);
}

TEST(Tq3, KeysOnGaussianMeetLloydMaxBound) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  for (int d : {128, 256}) {
    const Rotation rot = Rotation::for_head(d, 1, 0);
    std::vector<float> x(d), scratch(d), y(d);
    std::vector<uint8_t> packed(tq3_packed_bytes(d));
    double err = 0, energy = 0;
    for (int rep = 0; rep < 4000; ++rep) {
      for (auto& v : x) v = g(rng);
      testing::poison(std::span<float>(y));
      const uint16_t a = tq3_encode(x, rot, scratch, packed, NormCorrection::kUnbiased);
      tq3_decode(packed, a, rot, y);
      for (int i = 0; i < d; ++i) {
        err += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
        energy += x[i] * static_cast<double>(x[i]);
      }
    }
    EXPECT_LE(err / energy, 0.036) << "d=" << d;
    EXPECT_GE(err / energy, 0.025) << "d=" << d;  // a 3-bit code cannot do much better than theory
  }
}

TEST(Tq3, DotOnCodesEqualsDotOnDecodedVector) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  for (int d : {64, 128, 256}) {
    std::vector<float> y(d), q(d), yhat(d);
    std::vector<uint8_t> packed(tq3_packed_bytes(d));
    for (int rep = 0; rep < 200; ++rep) {
      for (auto& v : y) v = g(rng);
      for (auto& v : q) v = g(rng);
      const uint16_t a = tq3_encode_rotated(y, packed, NormCorrection::kUnbiased);
      tq3_decode_rotated(packed, a, yhat);
      double ref = 0;
      for (int i = 0; i < d; ++i) ref += static_cast<double>(q[i]) * yhat[i];
      EXPECT_NEAR(tq3_dot_rotated(q, packed, a), ref, 1e-4 * (1 + std::fabs(ref)));
    }
  }
}

TEST(Tq3, UnbiasedCorrectionPreservesProjection) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  const int d = 128;
  std::vector<float> y(d), yhat(d);
  std::vector<uint8_t> packed(tq3_packed_bytes(d));
  for (int rep = 0; rep < 100; ++rep) {
    for (auto& v : y) v = g(rng);
    tq3_decode_rotated(packed, tq3_encode_rotated(y, packed, NormCorrection::kUnbiased), yhat);
    double yy = 0, yyh = 0;
    for (int i = 0; i < d; ++i) { yy += y[i] * static_cast<double>(y[i]); yyh += y[i] * static_cast<double>(yhat[i]); }
    EXPECT_NEAR(yyh / yy, 1.0, 1e-3);  // fp16 alpha: relative 2^-11
  }
}

// fp64 reference of the code rule: code = number of thresholds <= y_i * sqrt(d) / ||y||.
TEST(Tq3, CodesMatchFp64ReferenceAwayFromThresholds) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  for (int d : {64, 128, 256}) {
    std::vector<float> y(d);
    std::vector<uint8_t> packed(tq3_packed_bytes(d));
    for (int rep = 0; rep < 500; ++rep) {
      for (auto& v : y) v = g(rng);
      tq3_encode_rotated(y, packed, NormCorrection::kMinMse);
      double nn = 0;
      for (float v : y) nn += static_cast<double>(v) * v;
      const double scale = std::sqrt(static_cast<double>(d)) / std::sqrt(nn);
      for (int grp = 0; grp < d / 8; ++grp) {
        uint8_t codes[8];
        tq3_unpack8(packed.data() + 3 * grp, codes);
        for (int j = 0; j < 8; ++j) {
          const double t = y[8 * grp + j] * scale;
          double gap = 1e9;
          int expect = 0;
          for (float th : kTq3Thresholds) {
            gap = std::min(gap, std::fabs(t - th));
            expect += t >= th ? 1 : 0;
          }
          if (gap > 1e-5) {
            ASSERT_EQ(codes[j], expect) << "t=" << t;
          }
        }
      }
    }
  }
}

TEST(Tq3, ZeroAndNonFiniteVectors) {
  const int d = 128;
  std::vector<float> y(d, 0.0f), out(d);
  std::vector<uint8_t> packed(tq3_packed_bytes(d));
  EncodeStats st;
  uint16_t a = tq3_encode_rotated(y, packed, NormCorrection::kUnbiased, &st);
  EXPECT_EQ(a, 0);
  tq3_decode_rotated(packed, a, out);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  y[10] = std::numeric_limits<float>::quiet_NaN();
  y[11] = 1.0f;
  a = tq3_encode_rotated(y, packed, NormCorrection::kUnbiased, &st);
  EXPECT_EQ(a, kHalfNaN);
  tq3_decode_rotated(packed, a, out);
  for (float v : out) EXPECT_TRUE(std::isnan(v));
  y[10] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(tq3_encode_rotated(y, packed, NormCorrection::kUnbiased, &st), kHalfNaN);
  EXPECT_EQ(st.vectors, 3u);
  EXPECT_EQ(st.nonfinite_elements, 2u);
  // huge but finite: alpha saturates instead of overflowing to inf
  std::fill(y.begin(), y.end(), 1e30f);
  EXPECT_EQ(half_to_float(tq3_encode_rotated(y, packed, NormCorrection::kNone)), kHalfMax);
}

TEST(Tq3, RejectsBadSizes) {
  std::vector<float> y(96, 1.0f), s(96);
  std::vector<uint8_t> packed(36);
  EXPECT_THROW(tq3_encode_rotated(y, packed, NormCorrection::kUnbiased), std::invalid_argument);
  std::vector<float> y2(128, 1.0f);
  std::vector<uint8_t> small(47, 0xa5);
  EXPECT_THROW(tq3_encode_rotated(y2, small, NormCorrection::kUnbiased), std::invalid_argument);
  for (auto b : small) EXPECT_EQ(b, 0xa5);
  const Rotation r(128, 7);
  std::vector<uint8_t> p48(48);
  std::vector<float> scratch(64);
  EXPECT_THROW(tq3_encode(y2, r, scratch, p48, NormCorrection::kUnbiased), std::invalid_argument);
}

}  // namespace
}  // namespace minimakv::codec
