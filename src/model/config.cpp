#include "minimakv/model/config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace minimakv::model {

namespace {
[[noreturn]] void fail(const std::string& file, const std::string& what) { throw ConfigError(file + ": " + what); }

int64_t get_int(const nlohmann::json& j, const char* key, const std::string& file, int64_t def = -1) {
  if (!j.contains(key) || j[key].is_null()) {
    if (def >= 0) return def;
    fail(file, std::string("missing required field '") + key + "'");
  }
  if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0)
    fail(file, std::string("field '") + key + "' must be a non-negative integer");
  return j[key].get<int64_t>();
}

double get_num(const nlohmann::json& j, const char* key, double def) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : def;
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
  c.rms_norm_eps = get_num(j, "rms_norm_eps", 1e-6);
  c.tie_word_embeddings = j.value("tie_word_embeddings", false);
  c.rope_theta = get_num(j, "rope_theta", 10000.0);
  const nlohmann::json* rope = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rope = &j["rope_parameters"];
  else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rope = &j["rope_scaling"];
  if (rope) {
    c.rope_theta = get_num(*rope, "rope_theta", c.rope_theta);
    const std::string type = rope->value("rope_type", rope->value("type", std::string("default")));
    if (type == "llama3") {
      c.rope_scaling.llama3 = true;
      c.rope_scaling.factor = get_num(*rope, "factor", 8.0);
      c.rope_scaling.low_freq_factor = get_num(*rope, "low_freq_factor", 1.0);
      c.rope_scaling.high_freq_factor = get_num(*rope, "high_freq_factor", 4.0);
      c.rope_scaling.original_max_position_embeddings =
          get_int(*rope, "original_max_position_embeddings", file, 8192);
    } else if (type != "default") {
      fail(file, "unsupported rope type '" + type + "' (supported: default, llama3)");
    }
  }
  if (j.contains("eos_token_id")) {
    const auto& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int64_t>());
    else if (e.is_array())
      for (const auto& x : e)
        if (x.is_number_integer()) c.eos_token_ids.push_back(x.get<int64_t>());
  }
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_token_id = j["bos_token_id"].get<int64_t>();
  if (c.num_key_value_heads == 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    fail(file, "num_attention_heads must be a positive multiple of num_key_value_heads");
  if (c.head_dim == 0 || c.hidden_size == 0 || c.num_hidden_layers == 0 || c.vocab_size == 0 || c.intermediate_size == 0)
    fail(file, "hidden_size, intermediate_size, num_hidden_layers, vocab_size and head_dim must be positive");
  return c;
}

ModelConfig load_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path);
}

}  // namespace minimakv::model
