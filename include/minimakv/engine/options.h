// What a run of the engine is configured by, split by who decides it: the KV cache (one per store,
// shared by every request in it) and sampling (one per request).
//
// Owns: KvOptions, SamplingParams, their validation and the token sampler. validate() throws
// std::invalid_argument naming the first option that is not finite or out of range, so a bad request
// is refused before any store changes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "minimakv/cache/types.h"
#include "minimakv/model/config.h"
#include "minimakv/policy/tier_controller.h"

namespace minimakv::engine {

// The KV cache of one store: its mode, page size, how prompts are cut into chunks and when the tier
// controller runs.
struct KvOptions {
  cache::KvMode mode = cache::KvMode::kMinima;
  int tokens_per_page = 64;
  int prefill_chunk = 512;       // most prompt tokens of one request in one forward pass
  int checkpoint_interval = 64;  // decode tokens between retier checkpoints (0: none while decoding)
  policy::ControllerConfig controller{};
  std::vector<int> protected_layers;  // layers whose pages stay FP8 in every tier (minima)
  // Layers whose Stale pages are TQ4 instead of TQ3 (minima). nullopt: the model's calibrated profile
  // (ModelConfig::profile_tq4_layers, TQ3 everywhere without one); an empty list: TQ3 everywhere.
  std::optional<std::vector<int>> tq4_layers;
};

// The TQ4 layers a store of this model and these options uses: the options' own list, else the model's
// profile less any protected layer (protection keeps a layer in FP8 and wins over the profile).
std::vector<int> tq4_layers_for(const model::ModelConfig& cfg, const KvOptions& kv);

// A TQ4 layer list as users write it (--tq4-layers 0,6 or none): "none" alone is the empty list (TQ3
// everywhere); otherwise every piece is a layer number. Throws std::invalid_argument on anything else.
std::vector<int> parse_tq4_layers(const std::vector<std::string>& pieces);

// One request's decoding.
struct SamplingParams {
  int max_new_tokens = 32;
  std::vector<int32_t> stop_ids;  // empty: the model's eos ids
  float temperature = 0.0f;       // 0: greedy
  float top_p = 1.0f;             // nucleus sampling over the smallest set with this much probability
  int top_k = 0;                  // > 0: only the k most likely tokens (then top_p among them)
  // OpenAI's penalties, on the logits before temperature: each token already generated loses
  // presence_penalty once and frequency_penalty per occurrence. In [-2, 2].
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int logprobs = -1;                // >= 0: report each token's log-probability and this many alternatives
  uint64_t seed = 0;                // sampling is reproducible for a given seed
  bool keep_prompt_logits = false;  // keep the logits the first token is drawn from
};

// A sampled token's log-probability under the model (log-softmax of the raw logits, before
// penalties and temperature, as vLLM reports by default) and the most likely alternatives.
struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

void validate(const KvOptions& opt);
void validate(const SamplingParams& opt);

// Whether forward passes compute attention page scores for the tier controller (a retiering mode with
// scoring on): the one rule the scheduler and the prefill memory estimate share.
inline bool wants_page_scores(const KvOptions& opt) { return cache::retiers(opt.mode) && opt.controller.scoring; }

// Prompt tokens of one request per forward pass when the caller does not choose, for a GPU with
// `free_bytes` of device memory free and a model whose prefill pass needs about `bytes_per_token` of
// activations and attention workspace per chunk token: 4096 (large chunks keep the tensor cores busy;
// 4096 prefilled a 32K prompt of the 8B geometry 1.18-1.22x faster than 512 on an H200,
// docs/benchmarks.md), halved while the chunk would take more than a quarter of the free memory, not
// below 2048 (or below 512 when even that does not fit). The CPU keeps KvOptions' 512.
int gpu_prefill_chunk(size_t free_bytes, size_t bytes_per_token);

// Picks the next token: argmax when temperature <= 0, else a seeded draw from the temperature-scaled
// softmax restricted to the top_k most likely tokens (top_k <= 0: all) and then to the top-p nucleus
// of those. rng_state advances by one draw per sampled token.
int32_t sample_token(std::span<const float> logits, float temperature, float top_p, uint64_t& rng_state, int top_k = 0);

// OpenAI's presence and frequency penalties over the tokens generated so far (counts[id]).
void apply_penalties(std::span<float> logits, std::span<const int32_t> generated, float presence, float frequency);

// log-softmax of the logits at `token`, and the top_n most likely tokens with theirs.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_n);

}  // namespace minimakv::engine
