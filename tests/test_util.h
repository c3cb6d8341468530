// Shared helpers for tests: a per-run random seed (fixed base plus MINIMAKV_TEST_SEED or the clock),
// printed so a failure can be replayed, and poisoning of output buffers.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

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

// A fresh directory under the system's temporary directory, removed with everything in it at scope end.
class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("minimakv-test-" + std::to_string(test_seed()) + "-" + std::to_string(counter_++))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path_.string(); }
  void write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    std::ofstream(path_ / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path_ / name) << text; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

}  // namespace minimakv::testing

#define MINIMAKV_SEED_TRACE() SCOPED_TRACE("MINIMAKV_TEST_SEED=" + std::to_string(::minimakv::testing::test_seed()))
