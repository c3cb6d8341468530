// Calibration of minima's per-layer Stale format for one model: which layers keep their Stale pages in
// TQ4 instead of TQ3, chosen from measured sensitivity (the result is the model's kv_profile.json).
//
// Owns: the measurement and the rule. Every number comes from run_kl and project_memory on identical
// windows: KL(arm || bf16) of fp8, of TQ3 in every layer, and of TQ3 everywhere but one TQ4 layer, for
// each layer; a layer's gain is how much KL its TQ4 removes. The rule (choose_tq4_layers): take layers
// by decreasing gain while (a) the gain is at least min_gain of TQ3's KL above fp8's, so noise does not
// buy bytes, and (b) the KV stays at least min_compression times smaller than bf16's at
// compression_tokens live tokens. The chosen set is then measured as one arm, so the profile records
// the KL it delivers, not a sum of single-layer estimates. Where that KL is still above target_ratio
// times fp8's (the bar minima is held to), the rule tops up (top_up_tq4_layers): the next layers by
// decreasing gain, any positive gain, each kept only if the floor holds and the measured KL of the
// larger set is lower, until the target is met or no layer is left. Bytes the floor allows are spent
// only when the measured KL asks for them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "minimakv/eval/niah.h"
#include "minimakv/eval/runner.h"

namespace minimakv::eval {

struct CalibrationConfig {
  int length = 4096, windows = 8, score_tokens = 512;
  double min_compression = 4.5;       // KV at least this many times smaller than bf16's ...
  size_t compression_tokens = 65536;  // ... at this many live tokens, every tier and block table counted
  double min_gain = 0.10;             // fraction of (KL of TQ3 everywhere - KL of fp8) a layer must remove
  double target_ratio = 1.15;         // top up while KL(chosen) > target_ratio * KL(fp8); 0: never top up
  int page_size = 64, prefill_chunk = 512;
  uint64_t seed = 1;
};

struct LayerGain {
  int layer = 0;
  double kl = 0;    // KL with this layer's Stale pages in TQ4, the others in TQ3
  double gain = 0;  // KL of TQ3 everywhere minus kl
};

// One measured top-up step: the larger set and its KL.
struct TopUp {
  std::vector<int> layers;  // ascending
  double kl = 0;
};

struct Calibration {
  CalibrationConfig cfg;
  double kl_fp8 = 0, kl_tq3 = 0, kl_chosen = 0;  // kl_chosen == kl_tq3 when nothing is chosen
  double ppl_bf16 = 0;
  std::vector<LayerGain> layers;                       // by layer
  std::vector<int> chosen;                             // ascending
  std::vector<TopUp> top_ups;                          // measured after the threshold rule, in order
  double compression_tq3 = 0, compression_chosen = 0;  // bf16 bytes per live token over the arm's
};

// The rule above, on measured gains. compression(layers) gives the compression of a TQ4 layer set.
std::vector<int> choose_tq4_layers(std::vector<LayerGain> layers, double kl_tq3, double kl_fp8,
                                   const CalibrationConfig& cfg,
                                   const std::function<double(const std::vector<int>&)>& compression);

// The top-up above: from `chosen` (measured at kl_chosen), adds layers of positive gain by decreasing
// gain while kl > target_ratio * kl_fp8; measure(layers) gives a set's KL. Every measured set is
// appended to top_ups; returns the chosen set and updates kl_chosen.
std::vector<int> top_up_tq4_layers(std::vector<int> chosen, double& kl_chosen, std::vector<LayerGain> layers,
                                   double kl_fp8, const CalibrationConfig& cfg,
                                   const std::function<double(const std::vector<int>&)>& compression,
                                   const std::function<double(const std::vector<int>&)>& measure,
                                   std::vector<TopUp>& top_ups);

// Measures and chooses. progress(what) is called before each KL run.
Calibration calibrate_tq4_layers(const engine::Model& model, const NiahData& data, const CalibrationConfig& cfg,
                                 const std::function<void(const std::string&)>& progress = {});

// The measurements as the profile's "calibration" object (JSON text) and as a Markdown report.
std::string calibration_json(const Calibration& c);
std::string calibration_markdown(const Calibration& c);

// The arm name of a TQ4 layer set: minima@tq4=none, minima@tq4=0+6, ...
std::string tq4_arm(const std::vector<int>& layers);

}  // namespace minimakv::eval
