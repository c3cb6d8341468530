#include "minimakv/eval/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace minimakv::eval {

std::string tq4_arm(const std::vector<int>& layers) {
  return layers.empty() ? "minima@tq4=none" : fmt::format("minima@tq4={}", fmt::join(layers, "+"));
}

namespace {

// Stable, so equal gains keep layer order and the choice is deterministic.
void sort_by_decreasing_gain(std::vector<LayerGain>& layers) {
  std::stable_sort(layers.begin(), layers.end(),
                   [](const LayerGain& a, const LayerGain& b) { return a.gain > b.gain; });
}

// An ascending layer set with one more layer, still ascending.
std::vector<int> with_layer(std::vector<int> set, int layer) {
  set.insert(std::upper_bound(set.begin(), set.end(), layer), layer);
  return set;
}

}  // namespace

std::vector<int> choose_tq4_layers(std::vector<LayerGain> layers, double kl_tq3, double kl_fp8,
                                   const CalibrationConfig& cfg,
                                   const std::function<double(const std::vector<int>&)>& compression) {
  std::vector<int> chosen;
  const double excess = kl_tq3 - kl_fp8;
  if (!(excess > 0)) return chosen;  // TQ3 already reads as well as FP8: nothing to buy
  sort_by_decreasing_gain(layers);
  for (const LayerGain& g : layers) {
    if (g.gain < cfg.min_gain * excess) break;  // sorted: no later layer gains more
    const std::vector<int> next = with_layer(chosen, g.layer);
    if (compression(next) >= cfg.min_compression) chosen = next;
  }
  return chosen;
}

std::vector<int> top_up_tq4_layers(std::vector<int> chosen, double& kl_chosen, std::vector<LayerGain> layers,
                                   double kl_fp8, const CalibrationConfig& cfg,
                                   const std::function<double(const std::vector<int>&)>& compression,
                                   const std::function<double(const std::vector<int>&)>& measure,
                                   std::vector<TopUp>& top_ups) {
  sort_by_decreasing_gain(layers);
  for (const LayerGain& g : layers) {
    if (!(cfg.target_ratio > 0) || kl_chosen <= cfg.target_ratio * kl_fp8) break;  // met, or never asked
    if (!(g.gain > 0)) break;  // sorted: no later layer helps on its own
    if (std::binary_search(chosen.begin(), chosen.end(), g.layer)) continue;
    const std::vector<int> next = with_layer(chosen, g.layer);
    if (compression(next) < cfg.min_compression) continue;  // a cheaper layer further down may still fit
    const double kl = measure(next);
    top_ups.push_back({next, kl});
    if (kl < kl_chosen) {
      chosen = next;
      kl_chosen = kl;
    }
  }
  return chosen;
}

Calibration calibrate_tq4_layers(const engine::Model& model, const NiahData& data, const CalibrationConfig& cfg,
                                 const std::function<void(const std::string&)>& progress) {
  if (cfg.min_gain < 0 || !(cfg.min_compression > 0) || !(cfg.target_ratio >= 0))
    throw std::invalid_argument("calibrate: min_gain and target_ratio must be >= 0 and min_compression > 0");
  Calibration c;
  c.cfg = cfg;
  const int L = static_cast<int>(model.config().num_hidden_layers);
  std::vector<std::string> arms{"fp8", tq4_arm({})};
  for (int l = 0; l < L; ++l) arms.push_back(tq4_arm({l}));
  auto kl_of = [&](const std::vector<std::string>& names) {
    if (progress)
      progress(fmt::format("KL of {} arms at {} tokens, {} windows", names.size() + 1, cfg.length, cfg.windows));
    return run_kl(model, data, {cfg.length}, cfg.windows, cfg.score_tokens, names, cfg.page_size, cfg.prefill_chunk,
                  cfg.seed);
  };
  const auto recs = kl_of(arms);  // bf16 first, then the arms in order
  if (recs.size() != arms.size() + 1) throw std::logic_error("calibrate: run_kl returned a record per arm plus bf16");
  c.ppl_bf16 = recs[0].ppl_bf16;
  c.kl_fp8 = recs[1].mean;
  c.kl_tq3 = recs[2].mean;
  for (int l = 0; l < L; ++l) c.layers.push_back({l, recs[3 + l].mean, c.kl_tq3 - recs[3 + l].mean});
  auto bytes_per_token = [&](const std::string& arm) {
    return project_memory(model, {arm}, {cfg.compression_tokens}, cfg.page_size, cfg.prefill_chunk)[0]
        .kv.bytes_per_token;
  };
  const double bf16 = bytes_per_token("bf16");
  auto compression = [&](const std::vector<int>& layers) { return bf16 / bytes_per_token(tq4_arm(layers)); };
  c.compression_tq3 = compression({});
  auto measure = [&](const std::vector<int>& layers) { return kl_of({tq4_arm(layers)})[1].mean; };
  c.chosen = choose_tq4_layers(c.layers, c.kl_tq3, c.kl_fp8, cfg, compression);
  c.kl_chosen = c.chosen.empty() ? c.kl_tq3 : measure(c.chosen);
  if (c.kl_tq3 > c.kl_fp8)  // otherwise TQ3 already reads as well as FP8: nothing to buy
    c.chosen = top_up_tq4_layers(c.chosen, c.kl_chosen, c.layers, c.kl_fp8, cfg, compression, measure, c.top_ups);
  c.compression_chosen = compression(c.chosen);
  return c;
}

std::string calibration_json(const Calibration& c) {
  nlohmann::ordered_json j;
  j["method"] = "minimakv calibrate: KL(arm || bf16) on held-out essay windows, one TQ4 layer at a time";
  j["length"] = c.cfg.length;
  j["windows"] = c.cfg.windows;
  j["score_tokens"] = c.cfg.score_tokens;
  j["seed"] = c.cfg.seed;
  j["page_size"] = c.cfg.page_size;
  j["prefill_chunk"] = c.cfg.prefill_chunk;
  j["min_gain"] = c.cfg.min_gain;
  j["target_ratio"] = c.cfg.target_ratio;
  j["min_compression"] = c.cfg.min_compression;
  j["compression_tokens"] = c.cfg.compression_tokens;
  j["kl_fp8"] = c.kl_fp8;
  j["kl_tq3"] = c.kl_tq3;
  j["kl_chosen"] = c.kl_chosen;
  j["kl_tq4_one_layer"] = nlohmann::ordered_json::array();
  for (const auto& g : c.layers) j["kl_tq4_one_layer"].push_back(g.kl);
  j["top_ups"] = nlohmann::ordered_json::array();
  for (const auto& t : c.top_ups) j["top_ups"].push_back({{"tq4_layers", t.layers}, {"kl", t.kl}});
  j["compression_tq3"] = c.compression_tq3;
  j["compression_chosen"] = c.compression_chosen;
  return j.dump();
}

std::string calibration_markdown(const Calibration& c) {
  std::string md = fmt::format(
      "KL(arm || bf16) over the last {} positions of {} held-out essay windows of {} tokens (seed {}); "
      "bf16 perplexity {:.1f}.\n\n| arm | KL | / fp8's | gain (share of TQ3's excess) |\n|---|---|---|---|\n",
      c.cfg.score_tokens, c.cfg.windows, c.cfg.length, c.cfg.seed, c.ppl_bf16);
  const double excess = c.kl_tq3 - c.kl_fp8;
  auto ratio = [&](double kl) { return c.kl_fp8 > 0 ? fmt::format("{:.3f}×", kl / c.kl_fp8) : std::string("-"); };
  md += fmt::format("| fp8 | {:.5f} | 1.000× | |\n", c.kl_fp8);
  md += fmt::format("| TQ3 everywhere | {:.5f} | {} | |\n", c.kl_tq3, ratio(c.kl_tq3));
  for (const auto& g : c.layers)
    md += fmt::format("| TQ4 in layer {} | {:.5f} | {} | {:+.5f} ({:+.0f}%) |\n", g.layer, g.kl, ratio(g.kl), g.gain,
                      excess > 0 ? 100.0 * g.gain / excess : 0.0);
  for (const auto& t : c.top_ups)
    md += fmt::format("| top-up: `{}` | {:.5f} | {} | |\n", tq4_arm(t.layers), t.kl, ratio(t.kl));
  md += fmt::format("| **chosen: `{}`** | **{:.5f}** | **{}** | |\n\n", tq4_arm(c.chosen), c.kl_chosen,
                    ratio(c.kl_chosen));
  md += fmt::format(
      "Compression against bf16 at {} live tokens: {:.2f}× with TQ3 everywhere, {:.2f}× chosen (floor {:.2f}×); a "
      "layer must remove at least {:.0f}% of TQ3's KL above fp8's, and layers of any positive gain top the set up "
      "while its KL is above {:.2f}× fp8's.\n",
      c.cfg.compression_tokens, c.compression_tq3, c.compression_chosen, c.cfg.min_compression, 100.0 * c.cfg.min_gain,
      c.cfg.target_ratio);
  return md;
}

}  // namespace minimakv::eval
