// Randomized Hadamard rotation against an explicit fp64 matrix (Sylvester construction), orthogonality
// and exact inverse up to fp32 rounding.
#include <cmath>
#include <set>
#include <vector>

#include "minimakv/codec/rotation.h"
#include "test_util.h"

namespace minimakv::codec {
namespace {

// Sylvester Hadamard entry H[i][j] = (-1)^popcount(i & j).
double hadamard(int i, int j) { return (__builtin_popcount(static_cast<unsigned>(i & j)) & 1) ? -1.0 : 1.0; }

TEST(Rotation, MatchesExplicitFp64Matrix) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::normal_distribution<double> g;
  for (int d : {64, 128, 256}) {
    const Rotation r = Rotation::for_head(d, 3, 1);
    std::vector<double> x(d);
    std::vector<float> xf(d);
    for (int i = 0; i < d; ++i) xf[i] = static_cast<float>(x[i] = g(rng));
    r.forward(xf);
    double err = 0, ref_norm = 0;
    for (int i = 0; i < d; ++i) {
      double y = 0;
      for (int j = 0; j < d; ++j) y += hadamard(i, j) * r.signs()[j] * x[j];
      y /= std::sqrt(static_cast<double>(d));
      err += (y - xf[i]) * (y - xf[i]);
      ref_norm += y * y;
    }
    EXPECT_LT(std::sqrt(err / ref_norm), 1e-6) << "d=" << d;
  }
}

TEST(Rotation, OrthogonalAndInvertible) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  std::normal_distribution<float> g;
  for (int d : {64, 128, 256}) {
    const Rotation r = Rotation::for_head(d, 0, 5);
    // columns R e_j are orthonormal
    std::vector<std::vector<float>> cols(d, std::vector<float>(d, 0.0f));
    for (int j = 0; j < d; ++j) {
      cols[j][j] = 1.0f;
      r.forward(cols[j]);
    }
    for (int a = 0; a < d; a += 7) {
      for (int b = 0; b < d; b += 5) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += static_cast<double>(cols[a][i]) * cols[b][i];
        EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-6);
      }
    }
    std::vector<float> x(d), y(d);
    for (auto& v : x) v = g(rng);
    y = x;
    r.forward(y);
    double nx = 0, ny = 0;
    for (int i = 0; i < d; ++i) { nx += x[i] * x[i]; ny += y[i] * y[i]; }
    EXPECT_NEAR(ny / nx, 1.0, 1e-6);
    r.inverse(y);
    for (int i = 0; i < d; ++i) EXPECT_NEAR(y[i], x[i], 1e-5f * (1 + std::fabs(x[i])));
  }
}

TEST(Rotation, SignsAreDeterministicAndDifferPerHead) {
  std::set<std::vector<float>> seen;
  for (uint32_t layer = 0; layer < 4; ++layer) {
    for (uint32_t head = 0; head < 8; ++head) {
      const Rotation a = Rotation::for_head(128, layer, head);
      const Rotation b = Rotation::for_head(128, layer, head);
      ASSERT_TRUE(std::equal(a.signs().begin(), a.signs().end(), b.signs().begin()));
      seen.insert(std::vector<float>(a.signs().begin(), a.signs().end()));
    }
  }
  EXPECT_EQ(seen.size(), 32u);
  // The documented stream: first output of SplitMix64 seeded with rotation_seed(0, 0, default).
  uint64_t st = rotation_seed(0, 0, kDefaultRotationSeed);
  const uint64_t w = splitmix64(st);
  const Rotation r = Rotation::for_head(64, 0, 0);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(r.signs()[i], ((w >> i) & 1) ? -1.0f : 1.0f);
}

TEST(Rotation, RejectsUnsupportedDimsAndSizes) {
  EXPECT_THROW(Rotation(96, 1), std::invalid_argument);
  EXPECT_THROW(Rotation(512, 1), std::invalid_argument);
  EXPECT_THROW(Rotation(0, 1), std::invalid_argument);
  const Rotation r(128, 1);
  std::vector<float> x(64, 1.0f);
  EXPECT_THROW(r.forward(x), std::invalid_argument);
  for (float v : x) EXPECT_EQ(v, 1.0f);
}

}  // namespace
}  // namespace minimakv::codec
