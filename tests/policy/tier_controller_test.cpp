// Tier controller: budgets, sinks, pinned spans, scores, pressure shrinking, and scoring off.
#include <gtest/gtest.h>

#include "cache/store_fixture.h"
#include "minimakv/policy/tier_controller.h"
#include "test_util.h"

namespace minimakv::policy {
namespace {

using cache::Tier;

std::vector<Tier> tiers(const cache::KvStore& st, cache::SeqId s) {
  std::vector<Tier> out;
  for (const auto& r : st.block_table(s)) out.push_back(r.tier);
  return out;
}

TEST(TierController, WindowSinksAndScoringOff) {
  auto rng = testing::rng_for_test();
  cache::KvStore st(testing::small_config(64, 64));
  const auto s = st.create_sequence();
  auto r = testing::random_rows(rng, st.config(), 30);  // 8 pages, the last partial
  st.append(s, r.ids, r.k, r.v);
  ControllerConfig c;
  c.recent_window = 3;
  c.anchor_budget = 2;
  c.sink_pages = 1;
  TierController ctl(c);
  const std::vector<cache::SeqId> seqs{s};
  ctl.checkpoint(st, seqs);
  using enum Tier;
  EXPECT_EQ(tiers(st, s), (std::vector<Tier>{kAnchor, kStale, kStale, kStale, kStale, kRecent, kRecent, kRecent}));
  st.check_invariants();
}

TEST(TierController, ScoredPageBecomesAnchorAndPinnedSpansStay) {
  auto rng = testing::rng_for_test();
  cache::KvStore st(testing::small_config(64, 64));
  const auto s = st.create_sequence();
  auto r = testing::random_rows(rng, st.config(), 32);
  st.append(s, r.ids, r.k, r.v);
  ControllerConfig c;
  c.recent_window = 2;
  c.anchor_budget = 1;
  c.sink_pages = 0;
  c.scoring = true;
  TierController ctl(c);
  ctl.pin_span(s, 9, 11);  // inside page 2
  std::vector<float> scores(8, 0.0f);
  scores[4] = 0.9f;
  ctl.observe(s, scores);
  const std::vector<cache::SeqId> seqs{s};
  ctl.checkpoint(st, seqs);
  using enum Tier;
  EXPECT_EQ(tiers(st, s), (std::vector<Tier>{kStale, kStale, kAnchor, kStale, kAnchor, kStale, kRecent, kRecent}));
  // attention moves: page 1 gets the mass, EWMA overtakes page 4, which is demoted
  scores.assign(8, 0.0f);
  scores[1] = 1.0f;
  for (int i = 0; i < 20; ++i) ctl.observe(s, scores);
  const auto res = ctl.checkpoint(st, seqs);
  EXPECT_EQ(tiers(st, s)[1], kAnchor);
  EXPECT_EQ(tiers(st, s)[4], kStale);
  EXPECT_GE(res.promoted + res.rebound, 1u);
  st.check_invariants();
}

TEST(TierController, PressureShrinksBudgetsBeforeFailing) {
  auto rng = testing::rng_for_test();
  cache::KvStore st(testing::small_config(18, 64));  // 9 logical pages of FP8 at most
  const auto s = st.create_sequence();
  auto r = testing::random_rows(rng, st.config(), 32);  // 8 pages = 16 FP8 layer-pages
  st.append(s, r.ids, r.k, r.v);
  ControllerConfig tight;
  tight.recent_window = 1;
  tight.anchor_budget = 0;
  tight.sink_pages = 0;
  TierController demoter(tight);
  const std::vector<cache::SeqId> seqs{s};
  demoter.checkpoint(st, seqs);  // everything but the last page is Stale now
  ControllerConfig wide;
  wide.recent_window = 8;  // would promote 7 pages = 14 FP8 layer-pages; only 16 are free
  wide.anchor_budget = 0;
  wide.sink_pages = 0;
  TierController promoter(wide);
  PlanStats ps;
  const auto plan = promoter.plan(st, seqs, &ps);
  EXPECT_LE(ps.promote * 2, st.pool(cache::PageFormat::kFp8).free_pages());
  EXPECT_LT(ps.recent_window, 8u);
  st.apply(plan);
  st.check_invariants();
}

}  // namespace
}  // namespace minimakv::policy
