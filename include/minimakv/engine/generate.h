// Generation: chunked prefill through the tiers, then greedy decoding, one sequence.
//
// The prompt is processed in chunks; in minima mode the tier controller runs a checkpoint after each
// chunk, so earlier pages are already FP8 or TQ3 when later chunks (and the question) read them, and
// the memory saving holds during prefill. Decoding runs a checkpoint every `checkpoint_interval` tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "minimakv/engine/model.h"
#include "minimakv/policy/tier_controller.h"

namespace minimakv::engine {

struct GenerateOptions {
  cache::KvMode mode = cache::KvMode::kMinima;
  int tokens_per_page = 64;
  int prefill_chunk = 512;
  int max_new_tokens = 32;
  int checkpoint_interval = 64;
  policy::ControllerConfig controller{};
  std::vector<int32_t> stop_ids;      // default: the model's eos ids
  float temperature = 0.0f;           // 0: greedy
  float top_p = 1.0f;                 // nucleus sampling over the smallest set with this much probability
  uint64_t seed = 0;                  // sampling is reproducible for a given seed
  std::vector<int> protected_layers;  // layers whose pages stay FP8 in every tier (minima)
  std::function<void(size_t done, size_t total)> on_prefill_progress;  // after each prefill chunk
  bool keep_prompt_logits = false;  // GenerateResult::prompt_logits: what the first token is drawn from
};

// Throws std::invalid_argument naming the first option that is not finite or out of range (a NaN
// temperature or top_p, a page of 0 tokens, ...). generate(), generate_batch() and Session check it
// before they touch a store, so a bad request changes nothing.
void validate(const GenerateOptions& opt);

// Picks the next token: argmax when temperature <= 0, else a seeded draw from the temperature-scaled
// softmax restricted to the top-p nucleus.
int32_t sample_token(std::span<const float> logits, float temperature, float top_p, uint64_t& rng_state);

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (stop token excluded)
  double prefill_seconds = 0, decode_seconds = 0;
  std::vector<double> step_seconds;  // wall time of each decode forward pass (and its checkpoint)
  cache::Accounting accounting;  // at the end, before the sequence is finished
  // With keep_prompt_logits: the logits after the whole prompt, from the same forward passes, mode and
  // retier checkpoints that the generated tokens came from (the first token is sampled from these).
  std::vector<float> prompt_logits;
};

GenerateResult generate(const Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const std::function<void(int32_t)>& on_token = {});

// Several prompts in one store: each prompt is prefilled in chunks (with checkpoints, as generate()
// does), then every unfinished sequence advances together, one batched forward pass per step
// (Model::forward_batch), each stopping at its own stop token or budget. on_token gets (prompt index,
// token). decode_seconds of every result is the wall time of the shared decode loop; accounting is the
// shared store's at the end.
std::vector<GenerateResult> generate_batch(const Model& model, std::span<const std::vector<int32_t>> prompts,
                                           const GenerateOptions& opt,
                                           const std::function<void(size_t, int32_t)>& on_token = {});

// Requests that share one KV store, so a later prompt reuses the cached full pages of an earlier one
// (prefix caching). The last prompt token is always recomputed, since its logits start decoding. A hit
// installs the FP8 copy of a page when the cache still holds it, else its Stale (TQ3) copy.
class Session {
 public:
  Session(const Model& model, GenerateOptions opt, size_t capacity_tokens);
  struct Result {
    GenerateResult gen;
    size_t reused_tokens = 0;  // prompt tokens served from the prefix cache
  };
  // max_new_tokens >= 0 overrides the session's option for this request (0: prefill only, e.g. to cache
  // a document that later requests query).
  Result run(std::span<const int32_t> prompt, const std::function<void(int32_t)>& on_token = {},
             int max_new_tokens = -1);
  const cache::KvStore& store() const { return *store_; }

 private:
  const Model& model_;
  GenerateOptions opt_;
  std::unique_ptr<cache::KvStore> store_;
  policy::TierController ctl_;
};

}  // namespace minimakv::engine
