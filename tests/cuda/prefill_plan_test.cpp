// The prefill plan is host code and runs without a GPU: every page a row's position reaches is read by
// exactly one work of that row's query tile (and no work reads only pages past its tile), a work's key
// tiles reach exactly the tile of the last key its tile sees, the launch order is a permutation with the
// longest works first, splits hold whole pages of one format, the offsets of the per-page partials and
// page scores tile their buffers, the byte accounting matches a brute-force count, and bad inputs are
// refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "minimakv/cuda/prefill_plan.h"
#include "test_util.h"

namespace minimakv {
namespace {

using codec::PageFormat;

struct Case {
  cuda::DecodeShape shape;
  std::vector<cuda::PrefillSeq> seqs;
};

Case random_case(std::mt19937_64& rng) {
  const int B = std::array{16, 48, 64, 100, 256}[rng() % 5];
  const int kv = 1 + static_cast<int>(rng() % 2), G = 1 + static_cast<int>(rng() % 8);
  const int d = std::array{64, 128, 256}[rng() % 3];
  Case c{{G * kv, kv, d, B, 0.0f}, {}};
  const int n_seqs = 1 + static_cast<int>(rng() % 3);
  int rows = 0;
  uint32_t next_id = 1;
  for (int s = 0; s < n_seqs; ++s) {
    const int n = 1 + static_cast<int>(rng() % 300);
    const uint32_t first = static_cast<uint32_t>(rng() % 3000);
    const uint32_t last = first + n - 1;
    cuda::PrefillSeq seq{rows, n, first, {}};
    for (uint32_t p = 0; p <= last / B; ++p) {
      const auto f = static_cast<PageFormat>(rng() % 3);
      seq.pages.push_back({f, next_id++, p == last / B ? last % B + 1 : static_cast<uint32_t>(B)});
    }
    rows += n;
    c.seqs.push_back(std::move(seq));
  }
  return c;
}

TEST(PrefillPlan, EveryVisiblePageIsReadOnceByItsRowsTile) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int trial = 0; trial < 200; ++trial) {
    const Case c = random_case(rng);
    const int split_tokens = std::array{0, 128, 1024}[trial % 3];
    const bool tma = trial % 2 == 1;  // both kernels' tilings
    const auto plan = cuda::make_prefill_plan(c.seqs, c.shape, cuda::prefill_tiling(c.shape.head_dim, tma), split_tokens);
    const int B = c.shape.tokens_per_page, G = c.shape.q_heads / c.shape.kv_heads;
    // 128 query rows a tile, but for the decoding kernels' 64 at head_dim 256.
    ASSERT_EQ(plan.tile_tokens, (c.shape.head_dim > 128 && !tma ? 64 : 128) / G);
    // Keys per tile of each format: the decoding kernels' for TQ4 (and TQ3 at head_dim 64), twice as many
    // for BF16, FP8 and TQ3 read by the copy engine.
    std::array<int, codec::kNumPageFormats> kt{}, slots{};
    for (int f = 0; f < codec::kNumPageFormats; ++f) {
      const bool wide = tma && (f == codec::format_index(PageFormat::kBf16) || f == codec::format_index(PageFormat::kFp8) ||
                                (f == codec::format_index(PageFormat::kTq3) && c.shape.head_dim >= 128));
      kt[f] = (c.shape.head_dim > 128 ? 32 : 64) * (wide ? 2 : 1);
      ASSERT_EQ(plan.tiling.keys[f], kt[f]);
      slots[f] = B >= kt[f] ? (B + kt[f] - 1) / kt[f] * kt[f] : B;
      ASSERT_EQ(cuda::prefill_page_slot(B, kt[f]), slots[f]);
    }
    ASSERT_EQ(plan.seqs.size(), c.seqs.size());
    int64_t stats = 0;
    int32_t score_pages = 0, tiles = 0, rows = 0;
    std::array<uint64_t, codec::kNumPageFormats> reads{};
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      const auto& in = c.seqs[s];
      const auto& rec = plan.seqs[s];
      EXPECT_EQ(rec.row_begin, rows);
      EXPECT_EQ(rec.pages, static_cast<int>(in.pages.size()));
      EXPECT_EQ(rec.stats_offset, stats);
      EXPECT_EQ(rec.score_offset, score_pages);
      EXPECT_EQ(rec.tile_begin, tiles);
      const int seq_tiles = (in.n + plan.tile_tokens - 1) / plan.tile_tokens;
      for (int k = 0; k < seq_tiles; ++k) {
        const uint32_t last = in.first + std::min(in.n, (k + 1) * plan.tile_tokens) - 1;
        std::map<uint32_t, int> seen;  // logical page -> works of this tile that read it
        for (int w = plan.tile_work_begin[tiles + k]; w < plan.tile_work_begin[tiles + k + 1]; ++w) {
          const auto& work = plan.works[w];
          EXPECT_EQ(work.tile_token, k * plan.tile_tokens);
          const auto& sp = plan.splits[work.split];
          EXPECT_EQ(sp.seq, static_cast<int>(s));
          EXPECT_EQ(sp.tok_begin, 0);
          EXPECT_EQ(sp.tok_end, B);
          EXPECT_LE(static_cast<int64_t>(plan.entries[sp.entry_begin].logical) * B, last) << "work past its tile";
          int64_t last_key = -1;  // key index (slot space) of the last key the tile's last row sees
          const int slot = slots[sp.format];
          for (int e = sp.entry_begin; e < sp.entry_end; ++e) {
            const auto& en = plan.entries[e];
            EXPECT_EQ(en.seq, s);
            EXPECT_EQ(static_cast<int>(in.pages[en.logical].format), sp.format);
            EXPECT_EQ(en.page_id, in.pages[en.logical].page_id);
            ++seen[en.logical];
            for (uint32_t t = 0; t < en.tokens; ++t)
              if (en.logical * B + t <= last) last_key = static_cast<int64_t>(e - sp.entry_begin) * slot + t;
          }
          ASSERT_GE(last_key, 0);
          EXPECT_EQ(work.key_tiles, last_key / kt[sp.format] + 1) << "key tiles of a work";
        }
        for (uint32_t p = 0; p <= last / B; ++p) {
          EXPECT_EQ(seen[p], 1) << "page " << p << " of tile " << k;
          const uint64_t keys = std::min<uint64_t>(in.pages[p].tokens, last - p * B + 1);
          reads[static_cast<int>(in.pages[p].format)] += keys * c.shape.kv_heads;
        }
      }
      rows += in.n;
      tiles += seq_tiles;
      stats += static_cast<int64_t>(in.n) * in.pages.size() * c.shape.q_heads;
      score_pages += static_cast<int32_t>(in.pages.size());
    }
    EXPECT_EQ(plan.rows, rows);
    ASSERT_EQ(plan.launch_order.size(), plan.works.size());
    std::vector<int> hits(plan.works.size());
    for (size_t i = 0; i < plan.launch_order.size(); ++i) {
      ++hits.at(plan.launch_order[i]);
      if (i > 0) {
        EXPECT_GE(plan.works[plan.launch_order[i - 1]].key_tiles, plan.works[plan.launch_order[i]].key_tiles);
      }
    }
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; })) << "launch order";
    EXPECT_EQ(plan.stats_size, stats);
    EXPECT_EQ(plan.tile_work_begin.size(), static_cast<size_t>(tiles) + 1);
    EXPECT_EQ(plan.tile_work_begin.back(), static_cast<int>(plan.works.size()));
    // Pages a split reads past a tile's last position are read too (masked in the kernel); the count
    // only includes keys a row of the tile can see, so it is at most the brute-force count per split.
    for (int f = 0; f < codec::kNumPageFormats; ++f) EXPECT_EQ(plan.key_reads[f], reads[f]) << "format " << f;
    if (HasFailure()) return;
  }
}

// The merge: every row names its query tile and its token there; each tile's ranges of each format
// hold exactly its works of that format, so every work's partial of a row is merged once, with its
// format's rotation.
TEST(PrefillPlan, MergeRangesAndRowsNameEachRowsTileAndItsWorks) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  for (int trial = 0; trial < 200; ++trial) {
    const Case c = random_case(rng);
    const auto plan = cuda::make_prefill_plan(c.seqs, c.shape, cuda::prefill_tiling(c.shape.head_dim, trial % 2 == 1),
                                              std::array{0, 128, 1024}[trial % 3]);
    const size_t tiles = plan.tile_work_begin.size() - 1;
    ASSERT_EQ(plan.merge_ranges.size(), tiles * codec::kNumPageFormats);
    ASSERT_EQ(plan.merge_rows.size(), static_cast<size_t>(plan.rows));
    for (size_t t = 0; t < tiles; ++t) {
      int32_t w = plan.tile_work_begin[t];
      for (int f = 0; f < codec::kNumPageFormats; ++f) {
        const auto r = plan.merge_ranges[t * codec::kNumPageFormats + f];
        ASSERT_EQ(r.begin, w) << "tile " << t << " format " << f;  // contiguous, in format order
        for (; w < r.end; ++w) ASSERT_EQ(plan.splits[plan.works[w].split].format, f);
      }
      ASSERT_EQ(w, plan.tile_work_begin[t + 1]);
    }
    for (const auto& sq : plan.seqs)
      for (int t = 0; t < sq.n; ++t) {
        const auto mr = plan.merge_rows[sq.row_begin + t];
        ASSERT_EQ(mr.group, sq.tile_begin + t / plan.tile_tokens);
        ASSERT_EQ(mr.offset, t % plan.tile_tokens);
        // every work of the row's tile starts at the tile's first token
        for (int32_t w = plan.tile_work_begin[mr.group]; w < plan.tile_work_begin[mr.group + 1]; ++w)
          ASSERT_EQ(plan.works[w].tile_token, t - mr.offset);
      }
  }
}

TEST(PrefillPlan, SplitsFillTheGpuAndStayWithinBounds) {
  // One 512-token chunk at 16K context, GQA 2, 64-token pages: 8 query tiles; splits shrink from 16K
  // keys towards six CTAs per SM of a 132-SM part and stop at their 512-key floor; whole pages only.
  cuda::PrefillSeq s{0, 512, 16384 - 512, {}};
  for (uint32_t p = 0; p < 256; ++p) s.pages.push_back({p < 248 ? PageFormat::kTq3 : PageFormat::kFp8, p + 1, 64});
  const auto plan =
      cuda::make_prefill_plan(std::vector<cuda::PrefillSeq>{s}, {4, 2, 128, 64, 0.0f}, cuda::prefill_tiling(128, false));
  EXPECT_EQ(plan.tile_tokens, 64);
  EXPECT_EQ(plan.splits.size(), 32u);  // 248 TQ3 pages in 31 splits, 8 FP8 pages in one
  EXPECT_GE(plan.works.size() * 2, 500u);
  for (const auto& sp : plan.splits) EXPECT_EQ((sp.entry_end - sp.entry_begin) * 64, 512);
  // A 4K chunk at 32K: enough tiles that splits stay at their longest.
  cuda::PrefillSeq big{0, 4096, 32768 - 4096, {}};
  for (uint32_t p = 0; p < 128; ++p) big.pages.push_back({PageFormat::kBf16, p + 1, 256});
  const auto wide = cuda::make_prefill_plan(std::vector<cuda::PrefillSeq>{big}, {32, 8, 128, 256, 0.0f},
                                            cuda::prefill_tiling(128, true));
  EXPECT_EQ(wide.splits.size(), 2u);
  EXPECT_EQ(wide.splits[0].entry_end - wide.splits[0].entry_begin, 64);
  // 128-key BF16 tiles, 32-token query tiles: the last query tile reads all 128 tiles of its second
  // split's 16,384 keys; the first (last row at position 28,703) the split's keys up to that position.
  const auto last_work = wide.works[wide.tile_work_begin[wide.tile_work_begin.size() - 2] + 1];
  EXPECT_EQ(wide.tile_tokens, 32);
  EXPECT_EQ(last_work.key_tiles, 128);
  EXPECT_EQ(wide.works[0].key_tiles, 128);
  EXPECT_EQ(wide.works[1].key_tiles, (28703 - 16384) / 128 + 1);
}

TEST(PrefillPlan, BadInputsAreRefused) {
  const cuda::DecodeShape shape{4, 2, 128, 64, 0.0f};
  std::vector<cuda::PageRef> pages;
  for (uint32_t p = 0; p < 4; ++p) pages.push_back({PageFormat::kFp8, p + 1, p < 3 ? 64u : 8u});
  auto bad = [&](std::vector<cuda::PrefillSeq> seqs, cuda::DecodeShape sh) {
    EXPECT_THROW(cuda::make_prefill_plan(seqs, sh, cuda::prefill_tiling(128, false)), std::invalid_argument);
  };
  bad({}, shape);
  bad({{0, 0, 199, pages}}, shape);                       // no rows
  bad({{1, 10, 190, pages}}, shape);                      // rows not from 0
  bad({{0, 10, 190, pages}, {5, 1, 199, pages}}, shape);  // overlapping rows
  bad({{0, 10, 100, pages}}, shape);                      // more pages than the last row sees
  bad({{0, 10, 190, pages}}, {6, 4, 128, 64, 0.0f});      // q_heads not a multiple of kv_heads
  bad({{0, 10, 190, pages}}, {18, 2, 128, 64, 0.0f});     // GQA 9
  bad({{0, 10, 190, pages}}, {4, 2, 96, 64, 0.0f});       // head_dim 96
  auto null_page = pages;
  null_page[2].page_id = 0;
  bad({{0, 10, 190, null_page}}, shape);
  auto unknown = pages;  // a format no kernel reads: refused, not left out of the softmax
  unknown[1].format = static_cast<PageFormat>(codec::kNumPageFormats);
  bad({{0, 10, 190, unknown}}, shape);
  const std::vector<std::vector<cuda::PageRef>> decode_seqs{unknown};
  EXPECT_THROW(cuda::make_decode_plan(decode_seqs, shape, 0, false), std::invalid_argument);
  auto too_many = pages;
  too_many[0].tokens = 65;
  bad({{0, 10, 190, too_many}}, shape);
  const std::vector<cuda::PrefillSeq> ok{{0, 10, 190, pages}};
  EXPECT_NO_THROW(cuda::make_prefill_plan(ok, shape, cuda::prefill_tiling(128, false)));
  // A tiling no kernel has (keys per tile, or rows, of another head_dim) is refused.
  EXPECT_THROW(cuda::make_prefill_plan(ok, shape, cuda::prefill_tiling(256, false)), std::invalid_argument);
  auto odd = cuda::prefill_tiling(128, false);
  odd.keys[codec::format_index(PageFormat::kFp8)] = 128;
  EXPECT_THROW(cuda::make_prefill_plan(ok, shape, odd), std::invalid_argument);
}

TEST(PrefillPlan, TheCopyEngineTilesTheFormatsItReads) {
  // kTma reads BF16 and FP8 at every head_dim and TQ3 where its rows are whole 16-byte chunks (128, 256);
  // TQ3 at 64 and TQ4 keep the decoding CTA's key tiles.
  const auto i = [](PageFormat f) { return codec::format_index(f); };
  for (const int d : {64, 128, 256}) {
    const auto plain = cuda::prefill_tiling(d, false), tma = cuda::prefill_tiling(d, true);
    SCOPED_TRACE("d=" + std::to_string(d));
    // The copy-engine CTA's two consumer warpgroups take 128 rows at head_dim 256 too (the decoding
    // CTA 64 there, which then takes a copy-engine plan's tile in two parts).
    EXPECT_EQ(tma.rows, 128);
    EXPECT_EQ(plain.rows, d > 128 ? 64 : 128);
    for (const auto f : {PageFormat::kBf16, PageFormat::kFp8}) {
      EXPECT_TRUE(cuda::prefill_tma_reads(d, f));
      EXPECT_EQ(tma.keys[i(f)], cuda::prefill_tma_key_tile(d));
    }
    EXPECT_EQ(cuda::prefill_tma_reads(d, PageFormat::kTq3), d >= 128);
    EXPECT_EQ(tma.keys[i(PageFormat::kTq3)], d >= 128 ? cuda::prefill_tma_key_tile(d) : plain.keys[i(PageFormat::kTq3)]);
    EXPECT_FALSE(cuda::prefill_tma_reads(d, PageFormat::kTq4));
    EXPECT_EQ(tma.keys[i(PageFormat::kTq4)], plain.keys[i(PageFormat::kTq4)]);
  }
  // A TQ3 chunk planned for kTma at head_dim 128 counts 128-key tiles.
  cuda::PrefillSeq s{0, 128, 1024 - 128, {}};
  for (uint32_t p = 0; p < 16; ++p) s.pages.push_back({PageFormat::kTq3, p + 1, 64});
  const auto plan = cuda::make_prefill_plan(std::vector<cuda::PrefillSeq>{s}, {4, 2, 128, 64, 0.0f},
                                            cuda::prefill_tiling(128, true), 1024);
  ASSERT_EQ(plan.works.size(), 2u);  // two query tiles of 64 tokens (G = 2), one split
  EXPECT_EQ(plan.works[1].key_tiles, 8);
}

}  // namespace
}  // namespace minimakv
