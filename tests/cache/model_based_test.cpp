// Model-based randomized test of the paged store: random operations against the reference model of
// sim/stress.h, invariants after every step. A fixed seed plus one from the environment or the clock;
// operation counts scale with the build (MINIMAKV_STRESS_OPS overrides).
#include <gtest/gtest.h>

#include <cstdlib>

#include "minimakv/sim/stress.h"
#include "test_util.h"

namespace minimakv::sim {
namespace {

uint64_t ops_for_build() {
  if (const char* env = std::getenv("MINIMAKV_STRESS_OPS")) return std::strtoull(env, nullptr, 10);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  return 1000000;  // release: 10^6 operations in total over the seeds below
#else
  return 4000;  // sanitizer builds also check every invariant inside the store after each call
#endif
}

void run(uint64_t seed, uint64_t ops, cache::KvMode mode) {
  StressOptions o;
  o.seed = seed;
  o.ops = ops;
  o.mode = mode;
  const StressResult r = run_stress(o);
  EXPECT_TRUE(r.failure.empty()) << r.failure;
  EXPECT_EQ(r.leaked_pages, 0u);
  EXPECT_TRUE(r.reconciled);
  EXPECT_EQ(r.ops, ops);
  EXPECT_EQ(r.invariant_checks, ops);
  EXPECT_GT(r.page_byte_checks, ops);
  // the run must have exercised the interesting paths
  if (mode == cache::KvMode::kMinima && ops >= 20000) {
    EXPECT_GT(r.conversions, 0u);
    EXPECT_GT(r.promotions, 0u);
    EXPECT_GT(r.rebinds, 0u);
  }
  if (ops >= 5000) {
    EXPECT_GT(r.prefix_hits, 0u);
    EXPECT_GT(r.expected_errors, 0u);
  }
}

TEST(StoreModel, FixedSeedMinima) { run(12345, ops_for_build() * 6 / 10, cache::KvMode::kMinima); }

TEST(StoreModel, FreshSeedMinima) {
  MINIMAKV_SEED_TRACE();
  run(testing::test_seed(), ops_for_build() * 3 / 10, cache::KvMode::kMinima);
}

TEST(StoreModel, Fp8AndBf16Modes) {
  run(777, ops_for_build() / 20, cache::KvMode::kFp8);
  run(778, ops_for_build() / 20, cache::KvMode::kBf16);
}

}  // namespace
}  // namespace minimakv::sim
