// kv_profile.json beside a checkpoint's config.json: how minima lays out this model's KV cache, as
// measured on the model by `minimakv calibrate` (the equivalent of a quantiser's calibration file).
//
// Owns: the file's schema and its validation. Today it holds one decision, the layers whose Stale pages
// are TQ4 instead of TQ3 (the layers whose keys the 3-bit code hurts most), plus the measurements that
// chose them, kept for provenance and never read back by the engine. Invariants: every layer is in
// [0, num_hidden_layers), listed once, in ascending order. A malformed file throws ConfigError naming the
// file and the field; a missing file is not an error (the model runs with TQ3 in every layer).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace minimakv::model {

inline constexpr const char* kKvProfileFile = "kv_profile.json";
inline constexpr int kKvProfileVersion = 1;

struct KvProfile {
  std::vector<int> tq4_layers;   // ascending, unique
  std::string calibration_json;  // the measurements behind the choice (a JSON object), "{}" when none
};

// Parses and validates a profile for a model of `num_layers` layers.
KvProfile parse_kv_profile(const std::string& json_text, const std::string& file, int64_t num_layers);

// dir/kv_profile.json, or nullopt when the file does not exist.
std::optional<KvProfile> load_kv_profile(const std::string& dir, int64_t num_layers);

// The file's text for a profile (what parse_kv_profile reads back).
std::string kv_profile_json(const KvProfile& p);

}  // namespace minimakv::model
