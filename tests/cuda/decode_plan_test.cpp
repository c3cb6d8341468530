// The decode plan's split bound is host code and runs without a GPU: a workspace sized by
// decode_split_bound before a step's plan exists (what a captured decode graph needs) always holds the
// plan make_decode_plan builds for that step, whatever the formats of the pages, the page size and the
// batch; the bound stays within a small factor of the real count, so capacity launches stay cheap.
#include <gtest/gtest.h>

#include <random>

#include "minimakv/cuda/decode_plan.h"
#include "test_util.h"

namespace minimakv {
namespace {

TEST(DecodePlan, SplitBoundHoldsEveryPlanOfThoseLengths) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  size_t planned = 0, bounded = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int B = std::array{16, 32, 64, 128, 256, 832, 2048}[rng() % 7];
    const int kv = 1 + static_cast<int>(rng() % 8);
    const cuda::DecodeShape shape{kv * (1 + static_cast<int>(rng() % 4)), kv, 128, B, 0.0f};
    const size_t n_seqs = 1 + rng() % 32;
    std::vector<uint32_t> tokens;
    std::vector<std::vector<cuda::PageRef>> seqs;
    uint32_t next_id = 1;
    for (size_t s = 0; s < n_seqs; ++s) {
      tokens.push_back(1 + static_cast<uint32_t>(rng() % (trial % 2 ? 200000 : 3000)));
      std::vector<cuda::PageRef> pages;
      const int mix = static_cast<int>(rng() % 4);  // one format, or all three mixed
      for (uint32_t p = 0; p * B < tokens.back(); ++p) {
        const auto f = static_cast<codec::PageFormat>(mix < 3 ? mix : static_cast<int>(rng() % 3));
        pages.push_back({f, next_id++, std::min<uint32_t>(B, tokens.back() - p * B)});
      }
      seqs.push_back(std::move(pages));
    }
    const auto plan = cuda::make_decode_plan(seqs, shape);
    const int bound = cuda::decode_split_bound(tokens, shape);
    ASSERT_LE(static_cast<int>(plan.splits.size()), bound) << "B " << B << " batch " << n_seqs;
    planned += plan.splits.size();
    bounded += static_cast<size_t>(bound);
  }
  EXPECT_LE(bounded, 3 * planned) << "the bound should not be loose";
}

}  // namespace
}  // namespace minimakv
