// Page layouts (exact byte counts computed by hand here), token write/read round trips, conversions
// between FP8 and TQ3 pages, and size errors that must leave buffers untouched.
#include <cmath>
#include <vector>

#include "minimakv/codec/page_codec.h"
#include "test_util.h"

namespace minimakv::codec {
namespace {

TEST(PageLayout, ExactBytesByHand) {
  // d=128, B=16, H=8
  const PageGeometry g{16, 8, 128};
  const PageLayout bf(PageFormat::kBf16, g), f8(PageFormat::kFp8, g), t3(PageFormat::kTq3, g);
  EXPECT_EQ(bf.bytes(), 2u * 8 * 16 * 256);
  EXPECT_EQ(f8.bytes(), 2u * 8 * 16 * 128 + 2u * 8 * 16 * 4);
  EXPECT_EQ(t3.bytes(), 2u * 8 * 16 * 48 + 2u * 8 * 32);
  EXPECT_DOUBLE_EQ(f8.bits_per_scalar(), 8.25);
  EXPECT_DOUBLE_EQ(t3.bits_per_scalar(), 3.125);
  EXPECT_DOUBLE_EQ(bf.bits_per_scalar(), 16.0);
  // d=64, B=3, H=2: TQ3 rows of 24 bytes -> head blocks of 72 padded to 80; alpha 6 -> 16
  const PageLayout odd(PageFormat::kTq3, {3, 2, 64});
  EXPECT_EQ(odd.code_head_stride(), 80u);
  EXPECT_EQ(odd.meta_head_stride(), 16u);
  EXPECT_EQ(odd.bytes(), 2u * 2 * 80 + 2u * 2 * 16);
  const auto b = odd.breakdown();
  EXPECT_EQ(b.codes, 2u * 2 * 3 * 24);
  EXPECT_EQ(b.metadata, 2u * 2 * 3 * 2);
  EXPECT_EQ(b.total(), odd.bytes());
  EXPECT_EQ(odd.v_codes(1, 2), 2 * 80 + 80 + 2 * 24u);
  EXPECT_EQ(odd.v_meta(1, 2), 4 * 80 + 2 * 16 + 16 + 4u);
}

// The format table against what each format's codec reads and writes: the round trips below decode
// rows of exactly these sizes, so a table row that disagreed with its codec would fail them too.
TEST(PageFormatTable, RowsDescribeTheCodecs) {
  for (const PageFormatSpec& s : all_page_formats()) {
    EXPECT_EQ(parse_page_format(s.name), s.format);
    EXPECT_STREQ(to_string(s.format), s.name);
    for (int d : {64, 128, 256}) {
      const PageLayout L(s.format, {5, 3, d});
      EXPECT_EQ(L.row_bytes(), static_cast<size_t>(s.code_bits) * d / 8) << s.name << " d=" << d;
      EXPECT_EQ(L.meta_bytes(), static_cast<size_t>(s.meta_bytes)) << s.name;
      EXPECT_EQ(page_layouts({5, 3, d})[static_cast<size_t>(s.format)].bytes(), L.bytes());
    }
    EXPECT_EQ(((kRotatedFormats >> static_cast<int>(s.format)) & 1u) != 0, s.rotated);
  }
  // The properties the rest of the system relies on, stated once by hand.
  EXPECT_TRUE(format_spec(PageFormat::kBf16).exact);
  EXPECT_FALSE(format_spec(PageFormat::kFp8).exact || format_spec(PageFormat::kTq3).exact);
  EXPECT_TRUE(format_spec(PageFormat::kTq3).rotated && !format_spec(PageFormat::kTq3).appendable);
  EXPECT_TRUE(format_spec(PageFormat::kTq4).rotated && !format_spec(PageFormat::kTq4).appendable);
  EXPECT_EQ(PageLayout(PageFormat::kTq4, {64, 4, 128}).row_bytes(), 64u);
  EXPECT_TRUE(format_spec(PageFormat::kFp8).appendable && !format_spec(PageFormat::kFp8).rotated);
  EXPECT_THROW(parse_page_format("fp4"), std::invalid_argument);
  EXPECT_THROW(parse_page_format(""), std::invalid_argument);
}

TEST(PageLayout, EverySectionStartsAligned) {
  for (const PageFormatSpec& spec : all_page_formats()) {
    const PageFormat f = spec.format;
    for (int d : {64, 128, 256}) {
      for (int B : {1, 7, 16, 832, 1792}) {
        const PageLayout L(f, {B, 4, d});
        for (int h = 0; h < 4; ++h) {
          EXPECT_EQ(L.k_codes(h, 0) % 16, 0u);
          EXPECT_EQ(L.v_codes(h, 0) % 16, 0u);
          if (L.meta_bytes()) {
            EXPECT_EQ(L.k_meta(h, 0) % 16, 0u);
            EXPECT_EQ(L.v_meta(h, 0) % 16, 0u);
          }
        }
        EXPECT_EQ(L.breakdown().total(), L.bytes());
      }
    }
  }
}

TEST(PageLayout, RejectsBadGeometry) {
  EXPECT_THROW(PageLayout(PageFormat::kFp8, {16, 8, 96}), std::invalid_argument);
  EXPECT_THROW(PageLayout(PageFormat::kFp8, {0, 8, 128}), std::invalid_argument);
  EXPECT_THROW(PageLayout(PageFormat::kFp8, {4097, 8, 128}), std::invalid_argument);
  EXPECT_THROW(PageLayout(PageFormat::kFp8, {16, 0, 128}), std::invalid_argument);
}

class PageRoundTrip : public ::testing::TestWithParam<int> {};

TEST_P(PageRoundTrip, WriteReadConvertPromote) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  const int d = GetParam(), H = 4, B = 24;
  const PageLayout f8(PageFormat::kFp8, {B, H, d}), t3(PageFormat::kTq3, {B, H, d}), t4(PageFormat::kTq4, {B, H, d}),
      bf(PageFormat::kBf16, {B, H, d});
  std::vector<Rotation> rots;
  for (int h = 0; h < H; ++h) rots.push_back(Rotation::for_head(d, 2, static_cast<uint32_t>(h)));
  std::vector<uint8_t> p8(f8.bytes()), p3(t3.bytes()), p4(t4.bytes()), pb(bf.bytes()), back(f8.bytes()),
      back4(f8.bytes());
  testing::poison(std::span<uint8_t>(p8));
  std::vector<float> K(static_cast<size_t>(B) * H * d), V(K.size());
  for (auto& v : K) v = g(rng);
  for (auto& v : V) v = g(rng);
  for (int t = 0; t < B; ++t) {
    std::span<const float> k(K.data() + static_cast<size_t>(t) * H * d, static_cast<size_t>(H) * d);
    std::span<const float> v(V.data() + static_cast<size_t>(t) * H * d, static_cast<size_t>(H) * d);
    write_token(p8, f8, t, k, v);
    write_token(pb, bf, t, k, v);
  }
  testing::poison(std::span<uint8_t>(p3));
  convert_fp8_to_tq3(p8, f8, p3, t3, rots, B);
  convert_tq3_to_fp8(p3, t3, back, f8, rots, B);
  testing::poison(std::span<uint8_t>(p4));
  convert_fp8_to_tq4(p8, f8, p4, t4, rots, B);
  convert_tq4_to_fp8(p4, t4, back4, f8, rots, B);
  std::vector<float> k(d), v(d);
  double e8 = 0, e3 = 0, e4 = 0, eb = 0, ep = 0, ep4 = 0, energy = 0;
  for (int t = 0; t < B; ++t) {
    for (int h = 0; h < H; ++h) {
      const float* kr = K.data() + (static_cast<size_t>(t) * H + h) * d;
      const float* vr = V.data() + (static_cast<size_t>(t) * H + h) * d;
      auto acc = [&](const std::vector<uint8_t>& page, const PageLayout& L, double& e) {
        testing::poison(std::span<float>(k));
        testing::poison(std::span<float>(v));
        read_token_head(page, L, t, h, rots, k, v);
        for (int i = 0; i < d; ++i) e += std::pow(k[i] - kr[i], 2) + std::pow(v[i] - vr[i], 2);
      };
      acc(p8, f8, e8);
      acc(p3, t3, e3);
      acc(pb, bf, eb);
      acc(back, f8, ep);
      acc(p4, t4, e4);
      acc(back4, f8, ep4);
      for (int i = 0; i < d; ++i) energy += kr[i] * kr[i] + vr[i] * vr[i];
    }
  }
  EXPECT_LT(eb / energy, 2e-5);   // bf16: 8-bit mantissa
  EXPECT_LT(e8 / energy, 2e-3);   // fp8 e4m3 with per-vector scale
  EXPECT_LT(e3 / energy, 0.045);  // TQ3 of the FP8 page (both errors)
  EXPECT_LT(ep / energy, 0.05);   // promoted back to FP8
  EXPECT_GT(e3, e8);
  EXPECT_LT(e4 / energy, 0.013);  // TQ4 of the FP8 page: Lloyd-Max 0.95% plus FP8's error
  EXPECT_GT(e4 / energy, 0.006);  // a 4-bit code cannot do much better than theory
  EXPECT_LT(ep4 / energy, 0.016);
  // The generic entry points pick the same conversion by the layouts' formats.
  std::vector<uint8_t> p4b(t4.bytes()), back4b(f8.bytes());
  convert_fp8_to_rotated(p8, f8, p4b, t4, rots, B);
  convert_rotated_to_fp8(p4b, t4, back4b, f8, rots, B);
  EXPECT_EQ(p4b, p4);
  EXPECT_EQ(back4b, back4);
  EXPECT_THROW(convert_fp8_to_rotated(p8, f8, back4b, f8, rots, B), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(HeadDims, PageRoundTrip, ::testing::Values(64, 128, 256));

TEST(PageCodec, ErrorsLeaveDestinationUntouched) {
  const PageLayout f8(PageFormat::kFp8, {8, 2, 64}), t3(PageFormat::kTq3, {8, 2, 64}),
      t3b(PageFormat::kTq3, {16, 2, 64});
  std::vector<uint8_t> p8(f8.bytes(), 0), p3(t3.bytes(), 0xa5), p3b(t3b.bytes(), 0xa5);
  std::vector<Rotation> rots{Rotation(64, 1), Rotation(64, 2)};
  std::vector<Rotation> wrong{Rotation(64, 1)};
  EXPECT_THROW(convert_fp8_to_tq3(p8, f8, p3, t3, wrong, 8), std::invalid_argument);
  EXPECT_THROW(convert_fp8_to_tq3(p8, f8, p3b, t3b, rots, 8), std::invalid_argument);
  EXPECT_THROW(convert_fp8_to_tq3(p8, f8, p3, t3, rots, 9), std::invalid_argument);
  EXPECT_THROW(convert_fp8_to_tq3(p8, t3, p3, t3, rots, 8), std::invalid_argument);
  const PageLayout t4(PageFormat::kTq4, {8, 2, 64});
  std::vector<uint8_t> p4(t4.bytes(), 0xa5);
  EXPECT_THROW(convert_fp8_to_tq4(p8, f8, p3, t3, rots, 8), std::invalid_argument);  // a TQ3 destination
  EXPECT_THROW(convert_fp8_to_tq4(p8, f8, p4, t4, rots, 9), std::invalid_argument);
  EXPECT_THROW(write_token(p4, t4, 0, std::vector<float>(128), std::vector<float>(128)), std::invalid_argument);
  for (auto b : p3) ASSERT_EQ(b, 0xa5);
  for (auto b : p3b) ASSERT_EQ(b, 0xa5);
  for (auto b : p4) ASSERT_EQ(b, 0xa5);
  std::vector<float> k(128, 1.0f), v(127, 1.0f);
  EXPECT_THROW(write_token(p8, f8, 0, k, v), std::invalid_argument);
  EXPECT_THROW(write_token(p8, f8, 8, k, k), std::invalid_argument);
  EXPECT_THROW(write_token(p3, t3, 0, k, k), std::invalid_argument);
  for (auto b : p8) ASSERT_EQ(b, 0);
}

}  // namespace
}  // namespace minimakv::codec
