// The decode plan's split bound is host code and runs without a GPU: a workspace sized by
// decode_split_bound before a step's plan exists (what a captured decode graph needs) always holds the
// plan make_decode_plan builds for that step, whatever the formats of the pages, the page size and the
// batch; the bound stays within a small factor of the real count, so capacity launches stay cheap.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <stdexcept>

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
    const int head_dim = std::array{64, 128, 256}[rng() % 3];
    const cuda::DecodeShape shape{kv * (1 + static_cast<int>(rng() % 4)), kv, head_dim, B, 0.0f};
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

// The automatic split size follows the format (docs/benchmarks.md, split sizes): FP8 and the dense control
// at head_dim 256 take 2,048-token splits where they hold most of the tokens and those splits cost at most
// 10% more waves of CTAs, TQ3 and TQ4 only from 4M token-heads; a caller's split size applies to all.
TEST(DecodePlan, AutomaticSplitSizeFollowsTheFormatAndTheWaves) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  auto largest_split = [&](codec::PageFormat f, int batch, uint32_t tokens, int head_dim, int split_tokens,
                           int page_tokens = 0, int kv_heads = 8) {
    const int B = page_tokens > 0 ? page_tokens : std::array{16, 64, 256}[rng() % 3];
    const cuda::DecodeShape shape{4 * kv_heads, kv_heads, head_dim, B, 0.0f};
    std::vector<std::vector<cuda::PageRef>> seqs(static_cast<size_t>(batch));
    uint32_t next_id = 1;
    for (auto& pages : seqs)
      for (uint32_t p = 0; p * B < tokens; ++p) pages.push_back({f, next_id++, std::min<uint32_t>(B, tokens - p * B)});
    const auto plan = cuda::make_decode_plan(seqs, shape, split_tokens);
    int largest = 0;
    for (const auto& sp : plan.splits) {
      int covered = 0;  // a split of one page may read part of it, [tok_begin, tok_end)
      for (int e = sp.entry_begin; e < sp.entry_end; ++e)
        covered += std::min(static_cast<int>(plan.entries[e].tokens), sp.tok_end) - sp.tok_begin;
      largest = std::max(largest, covered);
    }
    return largest;
  };
  using F = codec::PageFormat;
  const uint32_t k32 = 32768 - static_cast<uint32_t>(rng() % 1024);  // 32K: no extra split of 1,024
  // FP8 (and BF16 at head_dim 256) take 2,048-token splits where they cost no more than 10% more waves
  // of CTAs (splits x 8 KV heads, 3 CTAs per SM at head_dim 128 and 2 at 256, 132 SMs) than 1,024.
  EXPECT_EQ(largest_split(F::kFp8, 8, k32, 128, 0), 2048);      // 6 waves of 1,024 or 3 of 2,048
  EXPECT_EQ(largest_split(F::kFp8, 1, 4 * k32, 128, 0), 1024);  // 3 waves of 1,024 or 2 of 2,048
  EXPECT_EQ(largest_split(F::kBf16, 8, k32, 128, 0), 1024);
  EXPECT_EQ(largest_split(F::kBf16, 2, k32, 256, 0), 2048);  // 2 waves of 1,024 or 1 of 2,048
  // The paper's canary (2 x 59,008 tokens, 4 KV heads, head_dim 256): 1,792-token pages make 264 CTAs
  // of whole pages (one wave) against 528 half pages (two); 832-token pages 288 CTAs of two pages (two
  // waves) against 568 of one (three), which measured 13% slower.
  EXPECT_EQ(largest_split(F::kFp8, 2, 59008, 256, 0, 1792, 4), 1792);
  EXPECT_EQ(largest_split(F::kFp8, 2, 59008, 256, 0, 832, 4), 832);
  EXPECT_EQ(largest_split(F::kTq3, 8, k32, 128, 0), 1024);   // 2M token-heads: too few waves
  EXPECT_EQ(largest_split(F::kTq3, 32, k32, 128, 0), 2048);  // 8M
  EXPECT_EQ(largest_split(F::kTq4, 32, k32, 128, 0), 2048);
  EXPECT_EQ(largest_split(F::kFp8, 8, k32, 128, 512), 512);

  // Mixed: FP8 Recent pages beside TQ3 history keep 1,024-token splits below 4M token-heads; FP8 holding
  // most tokens gets 2,048.
  auto mixed_largest = [&](int fp8_every, size_t batch) {
    const int B = 256;
    const cuda::DecodeShape shape{32, 8, 128, B, 0.0f};
    std::vector<std::vector<cuda::PageRef>> seqs(batch);
    uint32_t next_id = 1;
    for (auto& pages : seqs)
      for (uint32_t p = 0; p * B < k32; ++p)
        pages.push_back({p % fp8_every == 0 ? F::kFp8 : F::kTq3, next_id++, std::min<uint32_t>(B, k32 - p * B)});
    const auto plan = cuda::make_decode_plan(seqs, shape);
    int largest = 0;
    for (const auto& sp : plan.splits) {
      if (sp.format != static_cast<int>(F::kFp8)) continue;
      int covered = 0;
      for (int e = sp.entry_begin; e < sp.entry_end; ++e) covered += static_cast<int>(plan.entries[e].tokens);
      largest = std::max(largest, covered);
    }
    return largest;
  };
  EXPECT_EQ(mixed_largest(4, 8), 1024);   // a quarter of the pages FP8, 2M token-heads
  EXPECT_EQ(mixed_largest(1, 8), 2048);   // every page FP8
  EXPECT_EQ(mixed_largest(4, 32), 2048);  // a quarter FP8, but 8M token-heads: many waves of FP8 splits too
}

// The merge ranges name, for every batch item and format, exactly the splits of that (format, item):
// every split is merged once, into its own item's row, and only with its format's rotation.
TEST(DecodePlan, MergeRangesCoverEachItemsSplitsOfEachFormat) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int trial = 0; trial < 100; ++trial) {
    const int B = std::array{16, 64, 256}[rng() % 3];
    const cuda::DecodeShape shape{8, 2, 128, B, 0.0f};
    std::vector<std::vector<cuda::PageRef>> seqs(1 + rng() % 8);
    uint32_t next_id = 1;
    for (auto& pages : seqs) {
      const uint32_t tokens = 1 + static_cast<uint32_t>(rng() % 5000);
      for (uint32_t p = 0; p * B < tokens; ++p)
        pages.push_back({static_cast<codec::PageFormat>(rng() % 3), next_id++, std::min<uint32_t>(B, tokens - p * B)});
    }
    const auto plan = cuda::make_decode_plan(seqs, shape, trial % 2 ? 0 : 128, trial % 3 == 0);
    const auto ranges = cuda::decode_merge_ranges(plan);
    ASSERT_EQ(ranges.size(), seqs.size() * codec::kNumPageFormats);
    std::vector<int> merged(plan.splits.size(), 0);
    for (size_t b = 0; b < seqs.size(); ++b)
      for (int f = 0; f < codec::kNumPageFormats; ++f) {
        const auto r = ranges[b * codec::kNumPageFormats + f];
        ASSERT_LE(r.begin, r.end);
        for (int32_t s = r.begin; s < r.end; ++s) {
          EXPECT_EQ(plan.splits[s].seq, static_cast<int32_t>(b));
          EXPECT_EQ(plan.splits[s].format, f);
          ++merged[s];
        }
      }
    for (size_t s = 0; s < merged.size(); ++s) ASSERT_EQ(merged[s], 1) << "split " << s;
  }
  cuda::DecodePlan bad;
  bad.batch = 2;
  bad.seq_split_begin = {0, 0, 0};
  EXPECT_THROW(cuda::decode_merge_ranges(bad), std::invalid_argument);
}

}  // namespace
}  // namespace minimakv
