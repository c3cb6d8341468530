// What a run of the engine is configured by, split by who decides it: the KV cache (one per store,
// shared by every request in it) and sampling (one per request).
//
// Owns: KvOptions, SamplingParams, their validation and the token sampler. validate() throws
// std::invalid_argument naming the first option that is not finite or out of range, so a bad request
// is refused before any store changes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "minimakv/cache/types.h"
#include "minimakv/policy/tier_controller.h"

namespace minimakv::engine {

// The KV cache of one store: its mode, page size, how prompts are cut into chunks and when the tier
// controller runs.
struct KvOptions {
  cache::KvMode mode = cache::KvMode::kMinima;
  int tokens_per_page = 64;
  int prefill_chunk = 512;          // most prompt tokens of one request in one forward pass
  int checkpoint_interval = 64;     // decode tokens between retier checkpoints (0: none while decoding)
  policy::ControllerConfig controller{};
  std::vector<int> protected_layers;  // layers whose pages stay FP8 in every tier (minima)
};

// One request's decoding.
struct SamplingParams {
  int max_new_tokens = 32;
  std::vector<int32_t> stop_ids;  // empty: the model's eos ids
  float temperature = 0.0f;       // 0: greedy
  float top_p = 1.0f;             // nucleus sampling over the smallest set with this much probability
  uint64_t seed = 0;              // sampling is reproducible for a given seed
  bool keep_prompt_logits = false;  // keep the logits the first token is drawn from
};

void validate(const KvOptions& opt);
void validate(const SamplingParams& opt);

// Picks the next token: argmax when temperature <= 0, else a seeded draw from the temperature-scaled
// softmax restricted to the top-p nucleus. rng_state advances by one draw per sampled token.
int32_t sample_token(std::span<const float> logits, float temperature, float top_p, uint64_t& rng_state);

}  // namespace minimakv::engine
