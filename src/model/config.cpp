#include "minimakv/model/config.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "minimakv/model/kv_profile.h"

namespace minimakv::model {

namespace {
[[noreturn]] void fail(const std::string& file, const std::string& what) { throw ConfigError(file + ": " + what); }

// Reads integer field `key`; `def` >= 0 makes it optional. A value of another JSON type (a string, a
// float such as 4.5, a bool) is an error naming the field, never a silent default.
int64_t get_int(const nlohmann::json& j, const char* key, const std::string& file, int64_t def = -1) {
  if (!j.contains(key) || j[key].is_null()) {
    if (def >= 0) return def;
    fail(file, std::string("missing required field '") + key + "'");
  }
  const auto& v = j[key];
  if (!v.is_number_integer())
    fail(file, std::string("field '") + key + "' must be an integer, got " + std::string(v.type_name()) + " " + v.dump());
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) : v.get<int64_t>() < 0)
    fail(file, std::string("field '") + key + "' must be a non-negative integer, got " + v.dump());
  return v.get<int64_t>();
}

// Reads a finite number (integer or float); absent or null gives `def`, anything else is an error.
double get_num(const nlohmann::json& j, const char* key, double def, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return def;
  const auto& v = j[key];
  if (!v.is_number()) fail(file, std::string("field '") + key + "' must be a number, got " + std::string(v.type_name()) + " " + v.dump());
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail(file, std::string("field '") + key + "' must be finite, got " + v.dump());
  return d;
}

bool get_bool(const nlohmann::json& j, const char* key, bool def, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean())
    fail(file, std::string("field '") + key + "' must be true or false, got " + std::string(j[key].type_name()) + " " + j[key].dump());
  return j[key].get<bool>();
}

std::string get_string(const nlohmann::json& j, const char* key, const std::string& def, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_string())
    fail(file, std::string("field '") + key + "' must be a string, got " + std::string(j[key].type_name()) + " " + j[key].dump());
  return j[key].get<std::string>();
}

// A token id field: an integer, or (eos_token_id) a list of integers.
std::vector<int64_t> get_token_ids(const nlohmann::json& j, const char* key, bool list_ok, const std::string& file) {
  std::vector<int64_t> ids;
  if (!j.contains(key) || j[key].is_null()) return ids;
  const auto& v = j[key];
  const std::string what = std::string("field '") + key + "' must be a token id" + (list_ok ? " or a list of them" : "");
  auto one = [&](const nlohmann::json& x) {
    if (!x.is_number_integer() || (x.is_number_integer() && !x.is_number_unsigned() && x.get<int64_t>() < 0))
      fail(file, what + ", got " + v.dump());
    ids.push_back(x.get<int64_t>());
  };
  if (v.is_array() && list_ok) {
    for (const auto& x : v) one(x);
  } else {
    one(v);
  }
  return ids;
}
}  // namespace

ModelConfig parse_config(const std::string& text, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(file, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(file, "not a JSON object");
  ModelConfig c;
  if (!j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
      !j["architectures"][0].is_string())
    fail(file, "missing 'architectures'");
  c.architecture = j["architectures"][0].get<std::string>();
  if (c.architecture == "Qwen3ForCausalLM") {
    c.family = Family::kQwen3;
    c.qk_norm = true;
  } else if (c.architecture == "LlamaForCausalLM") {
    c.family = Family::kLlama;
  } else {
    fail(file, "unsupported architecture '" + c.architecture + "' (supported: Qwen3ForCausalLM, LlamaForCausalLM)");
  }
  c.vocab_size = get_int(j, "vocab_size", file);
  c.hidden_size = get_int(j, "hidden_size", file);
  c.intermediate_size = get_int(j, "intermediate_size", file);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", file);
  c.num_attention_heads = get_int(j, "num_attention_heads", file);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", file, c.num_attention_heads);
  if (c.num_attention_heads == 0) fail(file, "num_attention_heads must be positive");
  c.head_dim = get_int(j, "head_dim", file, c.hidden_size / c.num_attention_heads);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", file, 2048);
  c.rms_norm_eps = get_num(j, "rms_norm_eps", 1e-6, file);
  if (c.rms_norm_eps <= 0) fail(file, "field 'rms_norm_eps' must be positive");
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false, file);
  c.rope_theta = get_num(j, "rope_theta", 10000.0, file);
  const nlohmann::json* rope = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (rope || !j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_object()) fail(file, std::string("field '") + key + "' must be an object, got " + j[key].dump());
    rope = &j[key];
  }
  if (rope) {
    c.rope_theta = get_num(*rope, "rope_theta", c.rope_theta, file);
    const std::string type = get_string(*rope, "rope_type", get_string(*rope, "type", "default", file), file);
    if (type == "llama3") {
      c.rope_scaling.llama3 = true;
      c.rope_scaling.factor = get_num(*rope, "factor", 8.0, file);
      c.rope_scaling.low_freq_factor = get_num(*rope, "low_freq_factor", 1.0, file);
      c.rope_scaling.high_freq_factor = get_num(*rope, "high_freq_factor", 4.0, file);
      c.rope_scaling.original_max_position_embeddings =
          get_int(*rope, "original_max_position_embeddings", file, 8192);
      if (c.rope_scaling.factor <= 0 || c.rope_scaling.low_freq_factor <= 0 ||
          c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor ||
          c.rope_scaling.original_max_position_embeddings == 0)
        fail(file, "llama3 rope scaling needs factor > 0, high_freq_factor > low_freq_factor > 0 and "
                   "original_max_position_embeddings > 0");
    } else if (type != "default") {
      fail(file, "unsupported rope type '" + type + "' (supported: default, llama3)");
    }
  }
  if (c.rope_theta <= 0) fail(file, "field 'rope_theta' must be positive");
  c.eos_token_ids = get_token_ids(j, "eos_token_id", true, file);
  if (const auto bos = get_token_ids(j, "bos_token_id", false, file); !bos.empty()) c.bos_token_id = bos[0];
  if (c.num_key_value_heads == 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    fail(file, "num_attention_heads must be a positive multiple of num_key_value_heads");
  if (c.head_dim == 0 || c.hidden_size == 0 || c.num_hidden_layers == 0 || c.vocab_size == 0 || c.intermediate_size == 0)
    fail(file, "hidden_size, intermediate_size, num_hidden_layers, vocab_size and head_dim must be positive");
  // Bounds far above any released model, so that size arithmetic downstream cannot overflow.
  const std::pair<const char*, int64_t> limits[] = {
      {"hidden_size", c.hidden_size},         {"intermediate_size", c.intermediate_size},
      {"head_dim", c.head_dim},               {"num_attention_heads", c.num_attention_heads},
      {"num_hidden_layers", c.num_hidden_layers}};
  for (const auto& [key, v] : limits)
    if (v > (int64_t{1} << 18)) fail(file, std::string("field '") + key + "' = " + std::to_string(v) + " is larger than 262144");
  for (const auto& [key, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                               std::pair<const char*, int64_t>{"max_position_embeddings", c.max_position_embeddings}})
    if (v > (int64_t{1} << 24)) fail(file, std::string("field '") + key + "' = " + std::to_string(v) + " is larger than 16777216");
  return c;
}

ModelConfig load_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  ModelConfig cfg = parse_config(ss.str(), path);
  if (const auto profile = load_kv_profile(dir, cfg.num_hidden_layers)) cfg.profile_tq4_layers = profile->tq4_layers;
  return cfg;
}

}  // namespace minimakv::model
