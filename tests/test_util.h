// Shared helpers for tests: a per-run random seed (fixed base plus MINIMAKV_TEST_SEED or the clock),
// printed so a failure can be replayed, and poisoning of output buffers.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>

namespace minimakv::testing {

inline uint64_t test_seed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* env = std::getenv("MINIMAKV_TEST_SEED")) return std::strtoull(env, nullptr, 0);
    return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  return seed;
}

// A generator for one test, seeded from the run's seed and the test's name; the seed is recorded.
inline std::mt19937_64 rng_for_test() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  uint64_t h = test_seed();
  for (const char* p = info->name(); *p; ++p) h = h * 1099511628211ull ^ static_cast<unsigned char>(*p);
  ::testing::Test::RecordProperty("seed", std::to_string(test_seed()));
  return std::mt19937_64(h);
}

inline void poison(std::span<float> x) {
  const uint32_t nan_bits = 0x7fbadbadu;
  for (auto& v : x) std::memcpy(&v, &nan_bits, sizeof v);
}

inline void poison(std::span<uint8_t> x) {
  for (auto& v : x) v = 0xa5;
}

}  // namespace minimakv::testing

#define MINIMAKV_SEED_TRACE() SCOPED_TRACE("MINIMAKV_TEST_SEED=" + std::to_string(::minimakv::testing::test_seed()))
