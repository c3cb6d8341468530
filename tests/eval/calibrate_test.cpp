// Calibration of the per-layer Stale format: the choice rule on synthetic gains (threshold, compression
// floor, greedy by gain, ascending output, nothing when TQ3 already matches fp8), the top-up toward the
// KL target on synthetic measurements, and a run on the
// shipped model whose every number is re-measured independently by run_kl and project_memory.
#include "minimakv/eval/calibrate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "minimakv/model/kv_profile.h"
#include "test_util.h"

namespace minimakv::eval {
namespace {

TEST(Calibrate, ChoosesByGainAboveTheThresholdWhileTheFloorHolds) {
  CalibrationConfig cfg;
  cfg.min_gain = 0.05;
  cfg.min_compression = 4.5;
  const std::vector<LayerGain> g{{0, 0, 0.001}, {1, 0, 0.01}, {2, 0, 0.0001}, {3, 0, 0.008}};
  auto compression = [](const std::vector<int>& l) { return 5.0 - 0.2 * static_cast<double>(l.size()); };
  // excess 0.012: threshold 0.0006 leaves out layer 2; the floor allows two layers: the two largest gains.
  EXPECT_EQ(choose_tq4_layers(g, 0.022, 0.010, cfg, compression), (std::vector<int>{1, 3}));
  cfg.min_compression = 4.0;
  EXPECT_EQ(choose_tq4_layers(g, 0.022, 0.010, cfg, compression), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(choose_tq4_layers(g, 0.010, 0.010, cfg, compression), std::vector<int>{}) << "no excess over fp8";
  EXPECT_EQ(choose_tq4_layers(g, 0.009, 0.010, cfg, compression), std::vector<int>{});
}

TEST(Calibrate, ChoicesSatisfyTheRuleOnRandomGains) {
  auto rng = testing::rng_for_test();
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 500; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 40);
    std::vector<LayerGain> g;
    for (int l = 0; l < L; ++l) g.push_back({l, 0, (u(rng) - 0.2) * 0.01});
    // Each layer costs its own bytes: compression falls as layers join (monotone, not uniform).
    std::vector<double> cost(static_cast<size_t>(L));
    for (auto& c : cost) c = 0.05 + 0.3 * u(rng);
    auto compression = [&](const std::vector<int>& ls) {
      double x = 5.5;
      for (int l : ls) x -= cost[static_cast<size_t>(l)];
      return x;
    };
    CalibrationConfig cfg;
    cfg.min_gain = u(rng) * 0.2;
    cfg.min_compression = 4.0 + u(rng);
    const double kl_fp8 = 0.01, kl_tq3 = 0.01 + 0.01 * u(rng);
    const auto chosen = choose_tq4_layers(g, kl_tq3, kl_fp8, cfg, compression);
    ASSERT_TRUE(std::is_sorted(chosen.begin(), chosen.end()));
    const double thr = cfg.min_gain * (kl_tq3 - kl_fp8);
    if (!chosen.empty()) {
      EXPECT_GE(compression(chosen), cfg.min_compression);
    }
    for (int l : chosen) EXPECT_GE(g[static_cast<size_t>(l)].gain, thr);
    // Greedy by gain: a layer left out above the threshold either breaks the floor when added, or a
    // larger-gain layer was refused before it (the walk stops at the threshold, not at the floor).
    for (int l = 0; l < L; ++l) {
      if (std::count(chosen.begin(), chosen.end(), l) || g[static_cast<size_t>(l)].gain < thr) continue;
      auto with = chosen;
      with.push_back(l);
      std::sort(with.begin(), with.end());
      double before = 5.5;  // the chosen layers with a larger gain than l: what the walk held when it met l
      for (int c : chosen)
        if (g[static_cast<size_t>(c)].gain >= g[static_cast<size_t>(l)].gain) before -= cost[static_cast<size_t>(c)];
      EXPECT_LT(before - cost[static_cast<size_t>(l)], cfg.min_compression) << "layer " << l << " fitted when met";
    }
  }
}

TEST(Calibrate, TopsUpByGainUntilTheMeasuredKlMeetsTheTarget) {
  CalibrationConfig cfg;
  cfg.target_ratio = 1.15;
  cfg.min_compression = 4.5;
  const std::vector<LayerGain> g{{0, 0, 0.004}, {1, 0, -0.001}, {2, 0, 0.002}, {3, 0, 0.0005}, {4, 0, 0.003}};
  const double kl_fp8 = 0.010;  // target: KL <= 0.0115
  const std::vector<double> cost{0.2, 0.2, 0.3, 0.05, 0.2};
  auto compression = [&](const std::vector<int>& ls) {
    double x = 5.0;
    for (int l : ls) x -= cost[static_cast<size_t>(l)];
    return x;
  };
  auto additive = [&](const std::vector<int>& ls) {  // TQ3 everywhere 0.020, each layer removes its gain
    double kl = 0.020;
    for (int l : ls) kl -= g[static_cast<size_t>(l)].gain;
    return kl;
  };
  {  // the floor never binds: layers 4 then 2 (by gain), stopping once 0.011 <= 0.0115
    cfg.min_compression = 1.0;
    double kl = additive({0});
    std::vector<TopUp> ups;
    EXPECT_EQ(top_up_tq4_layers({0}, kl, g, kl_fp8, cfg, compression, additive, ups), (std::vector<int>{0, 2, 4}));
    EXPECT_DOUBLE_EQ(kl, additive({0, 2, 4}));
    ASSERT_EQ(ups.size(), 2u);
    EXPECT_EQ(ups[0].layers, (std::vector<int>{0, 4}));
    EXPECT_DOUBLE_EQ(ups[0].kl, additive({0, 4}));
  }
  {  // floor 4.5: {0, 2, 4} (4.3x) is skipped, the cheaper layer 3 still fits; layer 1 (no gain) never joins
    cfg.min_compression = 4.5;
    double kl = additive({0});
    std::vector<TopUp> ups;
    EXPECT_EQ(top_up_tq4_layers({0}, kl, g, kl_fp8, cfg, compression, additive, ups), (std::vector<int>{0, 3, 4}));
    ASSERT_EQ(ups.size(), 2u);
    EXPECT_EQ(ups[1].layers, (std::vector<int>{0, 3, 4}));
  }
  {  // a set whose measured KL is not lower is measured, recorded and not kept
    cfg.min_compression = 1.0;
    auto clash = [&](const std::vector<int>& ls) {  // layer 4 with layer 0 measures worse than layer 0 alone
      const bool both = std::count(ls.begin(), ls.end(), 0) && std::count(ls.begin(), ls.end(), 4);
      return additive(ls) + (both ? 0.005 : 0.0);
    };
    double kl = clash({0});
    std::vector<TopUp> ups;
    EXPECT_EQ(top_up_tq4_layers({0}, kl, g, kl_fp8, cfg, compression, clash, ups), (std::vector<int>{0, 2, 3}));
    ASSERT_EQ(ups.size(), 3u);
    EXPECT_EQ(ups[0].layers, (std::vector<int>{0, 4}));
    EXPECT_GT(ups[0].kl, clash({0}));
    EXPECT_DOUBLE_EQ(kl, clash({0, 2, 3}));
  }
  {  // already at the target, or target 0: nothing is measured
    std::vector<TopUp> ups;
    double kl = 0.0114;
    EXPECT_EQ(top_up_tq4_layers({0}, kl, g, kl_fp8, cfg, compression, additive, ups), std::vector<int>{0});
    cfg.target_ratio = 0;
    kl = 0.020;
    EXPECT_EQ(top_up_tq4_layers({}, kl, g, kl_fp8, cfg, compression, additive, ups), std::vector<int>{});
    EXPECT_TRUE(ups.empty());
    EXPECT_DOUBLE_EQ(kl, 0.020);
  }
}

NiahData essay() {
  NiahData d;
  for (int i = 0; i < 300; ++i)
    d.essay_sentences.push_back("Line " + std::to_string(i) + " of the essay walks past " + std::to_string(i * 7 % 13) +
                                " harbours, a mill and the winter road.");
  d.adjectives = {"calm"};
  d.nouns = {"owl"};
  return d;
}

TEST(Calibrate, ShippedModelRunReMeasuresTheSame) {
  const auto model = engine::Model::load(std::string(MINIMAKV_SOURCE_DIR) + "/models/minima-qwen3-23m");
  const auto data = essay();
  CalibrationConfig cfg;
  cfg.length = 320;
  cfg.windows = 1;
  cfg.score_tokens = 48;
  cfg.page_size = 16;
  cfg.prefill_chunk = 64;
  cfg.min_gain = 0.0;
  cfg.min_compression = 1.0;  // the floor never binds: every layer that helps is chosen
  cfg.compression_tokens = 4096;
  cfg.seed = testing::test_seed();
  const Calibration c = calibrate_tq4_layers(*model, data, cfg);
  const int L = static_cast<int>(model->config().num_hidden_layers);
  ASSERT_EQ(c.layers.size(), static_cast<size_t>(L));
  std::vector<std::string> arms{"fp8", "minima@tq4=none"};
  for (int l = 0; l < L; ++l) arms.push_back("minima@tq4=" + std::to_string(l));
  const auto ref =
      run_kl(*model, data, {cfg.length}, 1, cfg.score_tokens, arms, cfg.page_size, cfg.prefill_chunk, cfg.seed);
  auto near = [](double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(1.0, std::abs(b)) + 1e-12; };
  EXPECT_TRUE(near(c.kl_fp8, ref[1].mean)) << c.kl_fp8 << " " << ref[1].mean;
  EXPECT_TRUE(near(c.kl_tq3, ref[2].mean)) << c.kl_tq3 << " " << ref[2].mean;
  EXPECT_GT(c.kl_tq3, 0.0) << "3-bit Stale pages change the distribution";
  for (int l = 0; l < L; ++l) {
    EXPECT_EQ(c.layers[static_cast<size_t>(l)].layer, l);
    EXPECT_TRUE(near(c.layers[static_cast<size_t>(l)].kl, ref[static_cast<size_t>(3 + l)].mean)) << "layer " << l;
    EXPECT_TRUE(near(c.layers[static_cast<size_t>(l)].gain, c.kl_tq3 - ref[static_cast<size_t>(3 + l)].mean));
  }
  // min_gain 0 and no binding floor: exactly the layers whose TQ4 lowers the KL (when TQ3 exceeds fp8).
  std::vector<int> helps;
  if (c.kl_tq3 > c.kl_fp8)
    for (const auto& g : c.layers)
      if (g.gain >= 0) helps.push_back(g.layer);
  EXPECT_EQ(c.chosen, helps);
  EXPECT_TRUE(c.top_ups.empty()) << "every layer that helps is already chosen: nothing to top up with";
  if (!c.chosen.empty()) {
    const auto chosen = run_kl(*model, data, {cfg.length}, 1, cfg.score_tokens, {tq4_arm(c.chosen)}, cfg.page_size,
                               cfg.prefill_chunk, cfg.seed);
    EXPECT_TRUE(near(c.kl_chosen, chosen[1].mean)) << "the chosen set is measured as one arm";
  }
  const auto mem = project_memory(*model, {"bf16", "minima@tq4=none", tq4_arm(c.chosen)}, {cfg.compression_tokens},
                                  cfg.page_size, cfg.prefill_chunk);
  EXPECT_DOUBLE_EQ(c.compression_tq3, mem[0].kv.bytes_per_token / mem[1].kv.bytes_per_token);
  EXPECT_DOUBLE_EQ(c.compression_chosen, mem[0].kv.bytes_per_token / mem[2].kv.bytes_per_token);
  // The profile it writes reads back with the same layers and its measurements.
  const model::KvProfile p{c.chosen, calibration_json(c)};
  const auto back = model::parse_kv_profile(model::kv_profile_json(p), "kv_profile.json", L);
  EXPECT_EQ(back.tq4_layers, c.chosen);
  const auto j = nlohmann::json::parse(back.calibration_json);
  EXPECT_EQ(j["kl_tq4_one_layer"].size(), static_cast<size_t>(L));
  EXPECT_DOUBLE_EQ(j["kl_tq3"].get<double>(), c.kl_tq3);
  EXPECT_NE(calibration_markdown(c).find(tq4_arm(c.chosen)), std::string::npos);
}

}  // namespace
}  // namespace minimakv::eval
