// End to end: attention over a store's pages yields page scores; the controller's EWMA turns the page
// that receives the attention mass into an Anchor at the next checkpoint, where it would otherwise have
// gone Stale.
#include <gtest/gtest.h>

#include "cache/store_fixture.h"
#include "minimakv/attention/paged_attention.h"
#include "minimakv/policy/tier_controller.h"
#include "test_util.h"

namespace minimakv {
namespace {

TEST(ScoringEndToEnd, AttendedPageBecomesAnchorInsteadOfStale) {
  auto rng = testing::rng_for_test();
  auto cfg = testing::small_config(128, 128);
  cfg.layers = 1;
  cfg.kv_heads = 1;
  cfg.head_dim = 64;
  cache::KvStore st(cfg);
  const auto s = st.create_sequence();
  auto rows = testing::random_rows(rng, cfg, 40);  // 10 pages of 4
  // the needle: the keys of page 3 point along the query direction
  std::vector<float> q(64, 0.0f);
  for (int i = 0; i < 64; ++i) q[i] = (i % 3 == 0) ? 1.0f : -0.5f;
  for (int t = 12; t < 16; ++t)
    for (int i = 0; i < 64; ++i) rows.k[static_cast<size_t>(t) * 64 + i] = 4.0f * q[i];
  st.append(s, rows.ids, rows.k, rows.v);

  policy::ControllerConfig cc;
  cc.recent_window = 2;
  cc.anchor_budget = 1;
  cc.sink_pages = 1;
  cc.scoring = true;
  cc.ewma_beta = 0.5f;
  policy::TierController with_scores(cc), without(cc);
  {
    const auto view = st.view(s, 0);
    const auto in = attention::layer_input(*st.host_storage(), view, 1);
    std::vector<float> out(64);
    attention::PagePartials parts;
    attention::attend(in, {q, 1, 39}, out, &parts);
    const auto r = attention::page_scores(parts);
    EXPECT_GT(r[3], 0.5f);
    with_scores.observe(s, r);
  }
  const std::vector<cache::SeqId> seqs{s};
  const auto plan_off = without.plan(st, seqs);
  bool page3_stale_without = false;
  for (const auto& t : plan_off) page3_stale_without |= t.page == 3 && t.target == cache::Tier::kStale;
  EXPECT_TRUE(page3_stale_without);
  with_scores.checkpoint(st, seqs);
  const auto table = st.block_table(s);
  EXPECT_EQ(table[3].tier, cache::Tier::kAnchor);
  EXPECT_EQ(table[4].tier, cache::Tier::kStale);
  EXPECT_EQ(table[0].tier, cache::Tier::kAnchor);  // sink
  EXPECT_EQ(table[9].tier, cache::Tier::kRecent);
  st.check_invariants();
}

}  // namespace
}  // namespace minimakv
