// fp16 / bf16 conversions against the compiler's _Float16 (an independent implementation) and exact
// bit-field arithmetic for bf16.
#include <cmath>
#include <cstring>
#include <limits>

#include "minimakv/codec/half.h"
#include "test_util.h"

namespace minimakv::codec {
namespace {

uint16_t ref_half(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

TEST(Half, EveryHalfRoundTrips) {
  for (uint32_t u = 0; u < 65536; ++u) {
    _Float16 h;
    const uint16_t b = static_cast<uint16_t>(u);
    std::memcpy(&h, &b, 2);
    const float ref = static_cast<float>(h);
    const float got = half_to_float(b);
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(got));
      continue;
    }
    ASSERT_EQ(std::memcmp(&ref, &got, 4), 0) << "half bits " << u;
    ASSERT_EQ(float_to_half(got), b) << "half bits " << u;
  }
}

TEST(Half, RandomFloatsMatchCompiler) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    // concentrate on the representable range and the subnormal boundary
    bits = (bits & 0x807fffffu) | ((100u + (bits >> 23) % 60u) << 23);
    float f;
    std::memcpy(&f, &bits, 4);
    ASSERT_EQ(float_to_half(f), ref_half(f)) << "float " << f;
  }
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // the tie above the max rounds to inf
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);
}

TEST(Bf16, RoundsToNearestEven) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng()) & 0xbfffffffu;  // finite
    float f;
    std::memcpy(&f, &bits, 4);
    const uint16_t b = float_to_bf16(f);
    // independent: the nearest of the two candidates, ties to the even one
    const uint32_t lo = bits & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    std::memcpy(&flo, &lo, 4);
    std::memcpy(&fhi, &hi, 4);
    const double dlo = std::fabs(static_cast<double>(f) - flo), dhi = std::fabs(static_cast<double>(fhi) - f);
    uint32_t expect = dlo < dhi ? lo : (dhi < dlo ? hi : (((lo >> 16) & 1) ? hi : lo));
    ASSERT_EQ(b, expect >> 16) << f;
    ASSERT_EQ(bf16_to_float(b), (expect == lo ? flo : fhi));
  }
}

}  // namespace
}  // namespace minimakv::codec
