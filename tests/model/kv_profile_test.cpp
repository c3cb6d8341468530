// kv_profile.json: a written profile reads back; every malformed file is refused with an error that names
// the file and the field; load_config picks a profile up beside config.json and a directory without one
// has no TQ4 layers.
#include "minimakv/model/kv_profile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "minimakv/model/config.h"
#include "test_util.h"

namespace minimakv::model {
namespace {

const std::string kShipped = std::string(MINIMAKV_SOURCE_DIR) + "/models/minima-qwen3-23m";

TEST(KvProfile, WrittenProfilesReadBack) {
  auto rng = testing::rng_for_test();
  for (int trial = 0; trial < 50; ++trial) {
    const int layers = 1 + static_cast<int>(rng() % 64);
    KvProfile p;
    for (int l = 0; l < layers; ++l)
      if (rng() % 3 == 0) p.tq4_layers.push_back(l);
    p.calibration_json = R"({"kl_tq3":)" + std::to_string(rng() % 1000) + "}";
    const KvProfile q = parse_kv_profile(kv_profile_json(p), "p.json", layers);
    EXPECT_EQ(q.tq4_layers, p.tq4_layers);
    EXPECT_EQ(nlohmann::json::parse(q.calibration_json), nlohmann::json::parse(p.calibration_json));
  }
}

TEST(KvProfile, MalformedFilesNameTheFileAndField) {
  const std::pair<const char*, const char*> bad[] = {
      {"{", "not valid JSON"},
      {"[1]", "JSON object"},
      {R"({"tq4_layers": [0]})", "'version'"},
      {R"({"version": 2, "tq4_layers": [0]})", "'version'"},
      {R"({"version": 1})", "'tq4_layers'"},
      {R"({"version": 1, "tq4_layers": "0,6"})", "'tq4_layers'"},
      {R"({"version": 1, "tq4_layers": [8]})", "8 is not a layer"},
      {R"({"version": 1, "tq4_layers": [-1]})", "-1 is not a layer"},
      {R"({"version": 1, "tq4_layers": [1.5]})", "1.5 is not a layer"},
      {R"({"version": 1, "tq4_layers": [3, 1]})", "ascending"},
      {R"({"version": 1, "tq4_layers": [1, 1]})", "once"},
      {R"({"version": 1, "tq4_layers": [1], "calibration": 3})", "'calibration'"},
  };
  for (const auto& [text, want] : bad) {
    SCOPED_TRACE(text);
    try {
      parse_kv_profile(text, "dir/kv_profile.json", 8);
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("dir/kv_profile.json"), std::string::npos) << msg;
      EXPECT_NE(msg.find(want), std::string::npos) << msg;
    }
  }
}

TEST(KvProfile, LoadConfigReadsTheProfileBesideConfigJson) {
  testing::TempDir dir;
  std::filesystem::copy_file(kShipped + "/config.json", dir.str() + "/config.json");
  EXPECT_TRUE(load_config(dir.str()).profile_tq4_layers.empty()) << "no profile: TQ3 in every layer";
  EXPECT_FALSE(load_kv_profile(dir.str(), 8).has_value());
  dir.write(kKvProfileFile, std::string(R"({"version": 1, "tq4_layers": [2, 5]})"));
  EXPECT_EQ(load_config(dir.str()).profile_tq4_layers, (std::vector<int>{2, 5}));
  dir.write(kKvProfileFile, std::string(R"({"version": 1, "tq4_layers": [2, 99]})"));
  EXPECT_THROW(load_config(dir.str()), ConfigError) << "a bad profile fails the load, it is not ignored";
}

TEST(KvProfile, ShippedModelsProfileIsValid) {
  const ModelConfig cfg = load_config(kShipped);
  for (int l : cfg.profile_tq4_layers) EXPECT_LT(l, cfg.num_hidden_layers);
}

}  // namespace
}  // namespace minimakv::model
