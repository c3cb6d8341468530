// Paired statistics: McNemar's exact p against hand-computed binomial tails; bootstrap intervals that
// contain the observed difference, collapse when every pair agrees, are reproducible for a seed, and
// cover the true difference at about the nominal rate on simulated data.
#include <gtest/gtest.h>

#include <cmath>

#include "minimakv/eval/stats.h"
#include "test_util.h"

namespace minimakv::eval {
namespace {

TEST(Stats, McNemarExactMatchesBinomialTails) {
  EXPECT_DOUBLE_EQ(mcnemar_exact(0, 0), 1.0);
  EXPECT_NEAR(mcnemar_exact(0, 5), 2.0 / 32.0, 1e-12);
  EXPECT_NEAR(mcnemar_exact(9, 1), 2.0 * (1 + 10) / 1024.0, 1e-12);
  EXPECT_DOUBLE_EQ(mcnemar_exact(3, 3), 1.0);
  EXPECT_NEAR(mcnemar_exact(2, 8), 2.0 * (1 + 10 + 45) / 1024.0, 1e-12);
  EXPECT_THROW(mcnemar_exact(-1, 2), std::invalid_argument);
}

TEST(Stats, BootstrapIntervalsBehave) {
  auto rng = testing::rng_for_test();
  std::bernoulli_distribution pa(0.8), pb(0.6);
  std::vector<double> a(200), b(200);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = pa(rng);
    b[i] = pb(rng);
  }
  const auto r = paired_bootstrap(a, b, 7);
  EXPECT_NEAR(r.diff, r.arm - r.base, 1e-12);
  EXPECT_LE(r.lo, r.diff);
  EXPECT_GE(r.hi, r.diff);
  EXPECT_GT(r.hi - r.lo, 0.02);
  const auto again = paired_bootstrap(a, b, 7);
  EXPECT_EQ(again.lo, r.lo);
  EXPECT_EQ(again.hi, r.hi);
  const auto same = paired_bootstrap(a, a, 3);
  EXPECT_EQ(same.diff, 0.0);
  EXPECT_EQ(same.lo, 0.0);
  EXPECT_EQ(same.hi, 0.0);
  EXPECT_DOUBLE_EQ(same.mcnemar_p, 1.0);
  EXPECT_THROW(paired_bootstrap(std::vector<double>{1.0}, std::vector<double>{}, 1), std::invalid_argument);
}

TEST(Stats, NinetyFivePercentIntervalsCoverTheTrueDifference) {
  auto rng = testing::rng_for_test();
  // The percentile bootstrap covers about 93% here (measured over 60 seeds), a little under nominal
  // at n = 100. With 1,000 trials the count's standard deviation is about 8, so the bounds below sit
  // more than 6 deviations from it: a correct interval never fails by chance, a broken one still does.
  int covered = 0;
  const int trials = 1000;
  for (int t = 0; t < trials; ++t) {
    // Correlated pairs: the arm flips 10% of base outcomes down and 5% up; true diff = -0.1*0.7 + 0.05*0.3.
    std::bernoulli_distribution base(0.7), down(0.1), up(0.05);
    std::vector<double> a(100), b(100);
    for (size_t i = 0; i < a.size(); ++i) {
      b[i] = base(rng);
      a[i] = b[i] == 1.0 ? (down(rng) ? 0.0 : 1.0) : (up(rng) ? 1.0 : 0.0);
    }
    const double truth = -0.1 * 0.7 + 0.05 * 0.3;
    const auto r = paired_bootstrap(a, b, rng(), 1000);
    covered += r.lo <= truth && truth <= r.hi;
  }
  EXPECT_GE(covered, trials * 88 / 100);
  EXPECT_LE(covered, trials * 99 / 100);
}

TEST(Stats, MacroAveragesGroupMeansAndResamplesWithinGroups) {
  const std::vector<std::vector<double>> arm{{1, 1, 1, 1}, {0, 0}}, base{{1, 1, 1, 1}, {1, 1}};
  const auto r = paired_bootstrap_macro(arm, base, 5);
  EXPECT_DOUBLE_EQ(r.arm, 0.5);  // (1 + 0) / 2, not 4/6
  EXPECT_DOUBLE_EQ(r.base, 1.0);
  EXPECT_DOUBLE_EQ(r.diff, -0.5);
  EXPECT_DOUBLE_EQ(r.lo, -0.5);  // every resample keeps each group's size: no variance here
  EXPECT_DOUBLE_EQ(r.hi, -0.5);
  EXPECT_EQ(r.base_only, 2);
  EXPECT_NEAR(r.mcnemar_p, 0.5, 1e-12);
}

}  // namespace
}  // namespace minimakv::eval
