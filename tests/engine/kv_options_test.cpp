// Which layers' Stale pages are TQ4: the options' own list wins, else the model's calibrated profile less
// the protected layers; the store and the KV budget follow the same resolved list, so bytes with the
// profile equal bytes with the same list given explicitly. And the --tq4-layers syntax.
#include <gtest/gtest.h>

#include <random>

#include "minimakv/cache/kv_store.h"
#include "minimakv/engine/capacity.h"
#include "minimakv/engine/model.h"
#include "minimakv/engine/options.h"
#include "minimakv/model/config.h"
#include "test_util.h"

namespace minimakv::engine {
namespace {

model::ModelConfig shipped() {
  return model::load_config(std::string(MINIMAKV_SOURCE_DIR) + "/models/minima-qwen3-23m");
}

TEST(KvOptions, TheOptionsListWinsElseTheProfileLessProtectedLayers) {
  auto cfg = shipped();
  cfg.profile_tq4_layers = {0, 3, 6};
  KvOptions kv;
  EXPECT_EQ(tq4_layers_for(cfg, kv), (std::vector<int>{0, 3, 6}));
  kv.protected_layers = {3};
  EXPECT_EQ(tq4_layers_for(cfg, kv), (std::vector<int>{0, 6})) << "protection keeps layer 3 in FP8";
  kv.tq4_layers = std::vector<int>{};
  EXPECT_EQ(tq4_layers_for(cfg, kv), std::vector<int>{}) << "an explicit empty list: TQ3 everywhere";
  kv.tq4_layers = std::vector<int>{1};
  EXPECT_EQ(tq4_layers_for(cfg, kv), std::vector<int>{1});
  cfg.profile_tq4_layers.clear();
  kv.tq4_layers.reset();
  EXPECT_EQ(tq4_layers_for(cfg, kv), std::vector<int>{}) << "no profile: TQ3 everywhere";
}

TEST(KvOptions, StoreAndBudgetFollowTheProfileAsIfGivenExplicitly) {
  auto rng = testing::rng_for_test();
  const auto base = shipped();
  const int L = static_cast<int>(base.num_hidden_layers);
  for (int trial = 0; trial < 20; ++trial) {
    auto cfg = base;
    cfg.profile_tq4_layers.clear();
    for (int l = 0; l < L; ++l)
      if (rng() % 3 == 0) cfg.profile_tq4_layers.push_back(l);
    GenerateOptions by_profile, explicit_list;
    by_profile.tokens_per_page = explicit_list.tokens_per_page = 16 << (rng() % 3);
    explicit_list.tq4_layers = cfg.profile_tq4_layers;
    const size_t T = 1 + rng() % 5000;
    const cache::StoreConfig sc = store_config_for(cfg, by_profile, T);
    for (int l = 0; l < L; ++l) {
      const bool tq4 = std::count(cfg.profile_tq4_layers.begin(), cfg.profile_tq4_layers.end(), l) > 0;
      EXPECT_EQ(sc.stale_formats()[static_cast<size_t>(l)], tq4 ? codec::PageFormat::kTq4 : codec::PageFormat::kTq3);
    }
    const auto a = hold_one_request(cfg, by_profile, T), b = hold_one_request(cfg, explicit_list, T);
    EXPECT_EQ(a.tier_bytes, b.tier_bytes);
    auto none = by_profile;
    none.tq4_layers = std::vector<int>{};
    const auto c = hold_one_request(cfg, none, T);
    if (cfg.profile_tq4_layers.empty() || T <= 5u * static_cast<size_t>(by_profile.tokens_per_page)) continue;
    EXPECT_GT(a.tier_bytes[static_cast<int>(cache::Tier::kStale)], c.tier_bytes[static_cast<int>(cache::Tier::kStale)])
        << "TQ4 Stale pages are larger than TQ3 ones";
  }
}

TEST(KvOptions, Tq4LayerListsParse) {
  EXPECT_EQ(parse_tq4_layers({"none"}), std::vector<int>{});
  EXPECT_EQ(parse_tq4_layers({"0", "6"}), (std::vector<int>{0, 6}));
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"-1"}, {"x"}, {""}, {"1.5"}, {"none", "1"}, {"2", "none"}, {"3x"}})
    EXPECT_THROW(parse_tq4_layers(bad), std::invalid_argument) << bad[0];
}

}  // namespace
}  // namespace minimakv::engine
