// config.json of Hugging Face decoder-only checkpoints of the Qwen3 and Llama families.
//
// Owns: the model hyper-parameters the engine needs, read with the defaults transformers applies:
// head_dim defaults to hidden_size / num_attention_heads; num_key_value_heads to num_attention_heads;
// rope_theta is read at the top level or under rope_parameters; Llama-3 rope scaling
// (rope_type "llama3") is recognised; eos_token_id may be a number or a list. Unknown architectures,
// missing required fields and inconsistent shapes throw ConfigError naming the file and the field.
// load_config also reads the directory's calibrated KV profile (model/kv_profile.h) when it has one.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace minimakv::model {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Family : uint8_t { kQwen3, kLlama };

struct RopeScaling {
  bool llama3 = false;
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Family family = Family::kQwen3;
  std::string architecture;
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0, max_position_embeddings = 0;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qk_norm = false;  // Qwen3: RMSNorm on q and k per head before RoPE
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1;
  // kv_profile.json's TQ4 layers (ascending): the layers whose Stale pages minima keeps in TQ4 unless
  // the KV options name others. Empty without a profile.
  std::vector<int> profile_tq4_layers;
};

ModelConfig parse_config(const std::string& json_text, const std::string& file);
ModelConfig load_config(const std::string& dir);  // dir/config.json (and dir/kv_profile.json if present)

}  // namespace minimakv::model
