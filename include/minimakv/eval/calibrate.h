// Calibration of minima's per-layer Stale format for one model: which layers keep their Stale pages in
// TQ4 instead of TQ3, chosen from measured sensitivity (the result is the model's kv_profile.json).
//
// Owns: the measurement and the rule. Every number comes from run_kl and project_memory on identical
// windows: KL(arm || bf16) of fp8, of TQ3 in every layer, and of TQ3 everywhere but one TQ4 layer, for
// each layer; a layer's gain is how much KL its TQ4 removes. The rule (choose_tq4_layers): take layers
// by decreasing gain while (a) the gain is at least min_gain of TQ3's KL above fp8's, so noise does not
// buy bytes, and (b) the KV stays at least min_compression times smaller than bf16's at
// compression_tokens live tokens. The chosen set is then measured as one arm, so the profile records
// the KL it delivers, not a sum of single-layer estimates.
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
  int page_size = 64, prefill_chunk = 512;
  uint64_t seed = 1;
};

struct LayerGain {
  int layer = 0;
  double kl = 0;    // KL with this layer's Stale pages in TQ4, the others in TQ3
  double gain = 0;  // KL of TQ3 everywhere minus kl
};

struct Calibration {
  CalibrationConfig cfg;
  double kl_fp8 = 0, kl_tq3 = 0, kl_chosen = 0;  // kl_chosen == kl_tq3 when nothing is chosen
  double ppl_bf16 = 0;
  std::vector<LayerGain> layers;                       // by layer
  std::vector<int> chosen;                             // ascending
  double compression_tq3 = 0, compression_chosen = 0;  // bf16 bytes per live token over the arm's
};

// The rule above, on measured gains. compression(layers) gives the compression of a TQ4 layer set.
std::vector<int> choose_tq4_layers(std::vector<LayerGain> layers, double kl_tq3, double kl_fp8,
                                   const CalibrationConfig& cfg,
                                   const std::function<double(const std::vector<int>&)>& compression);

// Measures and chooses. progress(what) is called before each KL run.
Calibration calibrate_tq4_layers(const engine::Model& model, const NiahData& data, const CalibrationConfig& cfg,
                                 const std::function<void(const std::string&)>& progress = {});

// The measurements as the profile's "calibration" object (JSON text) and as a Markdown report.
std::string calibration_json(const Calibration& c);
std::string calibration_markdown(const Calibration& c);

// The arm name of a TQ4 layer set: minima@tq4=none, minima@tq4=0+6, ...
std::string tq4_arm(const std::vector<int>& layers);

}  // namespace minimakv::eval
