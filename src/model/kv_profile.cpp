#include "minimakv/model/kv_profile.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "minimakv/model/config.h"

namespace minimakv::model {

namespace {
[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw ConfigError(file + ": " + what);
}
}  // namespace

KvProfile parse_kv_profile(const std::string& json_text, const std::string& file, int64_t num_layers) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    fail(file, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(file, "must be a JSON object");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != kKvProfileVersion)
    fail(file, "field 'version' must be " + std::to_string(kKvProfileVersion));
  KvProfile p;
  if (!j.contains("tq4_layers") || !j["tq4_layers"].is_array())
    fail(file, "field 'tq4_layers' must be a list of layers");
  for (const auto& v : j["tq4_layers"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= num_layers)
      fail(file, "tq4_layers: " + v.dump() + " is not a layer of this " + std::to_string(num_layers) + "-layer model");
    p.tq4_layers.push_back(static_cast<int>(v.get<int64_t>()));
  }
  if (!std::is_sorted(p.tq4_layers.begin(), p.tq4_layers.end()) ||
      std::adjacent_find(p.tq4_layers.begin(), p.tq4_layers.end()) != p.tq4_layers.end())
    fail(file, "tq4_layers must be ascending and list each layer once");
  if (j.contains("calibration")) {
    if (!j["calibration"].is_object()) fail(file, "field 'calibration' must be an object");
    p.calibration_json = j["calibration"].dump();
  } else {
    p.calibration_json = "{}";
  }
  return p;
}

std::optional<KvProfile> load_kv_profile(const std::string& dir, int64_t num_layers) {
  const std::string path = dir + "/" + kKvProfileFile;
  if (!std::filesystem::exists(path)) return std::nullopt;
  std::ifstream in(path);
  if (!in) fail(path, "cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_kv_profile(ss.str(), path, num_layers);
}

std::string kv_profile_json(const KvProfile& p) {
  nlohmann::ordered_json j;
  j["version"] = kKvProfileVersion;
  j["tq4_layers"] = p.tq4_layers;
  j["calibration"] = nlohmann::ordered_json::parse(p.calibration_json.empty() ? "{}" : p.calibration_json);
  return j.dump(1) + "\n";
}

}  // namespace minimakv::model
