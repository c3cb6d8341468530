// Generation for callers that hold their prompts up front: one prompt, a batch, or a session whose
// requests share a prefix cache. Each is a thin client of engine::Scheduler (the one request loop).
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
#include "minimakv/engine/options.h"
#include "minimakv/engine/scheduler.h"

namespace minimakv::engine {

// A single run's options: the KV cache's and the request's sampling, plus a progress callback.
struct GenerateOptions : KvOptions, SamplingParams {
  std::function<void(size_t done, size_t total)> on_prefill_progress;  // after each prefill chunk
};

// Throws std::invalid_argument naming the first option that is not finite or out of range (a NaN
// temperature or top_p, a page of 0 tokens, ...), before any store is touched.
void validate(const GenerateOptions& opt);

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (stop token excluded)
  double prefill_seconds = 0, decode_seconds = 0;
  // decode_seconds of generate_batch: the sum of its decode passes (the batch decodes after every
  // prompt is in); of generate: from the end of the prompt to the last token.
  std::vector<double> step_seconds;  // wall time of each pure decode forward pass (and its checkpoint)
  cache::Accounting accounting;      // at the end, before the sequence released its pages
  // With keep_prompt_logits: the logits after the whole prompt, from the same forward passes, mode and
  // retier checkpoints that the generated tokens came from (the first token is sampled from these).
  std::vector<float> prompt_logits;
};

GenerateResult generate(const Network& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const std::function<void(int32_t)>& on_token = {});

// Device bytes one chunk token of a prefill pass takes at `context` tokens: the fp32 activations of a
// layer, the attention workspace's partials and, with page scores, the per-page partials.
size_t prefill_bytes_per_token(const model::ModelConfig& cfg, size_t context, int tokens_per_page, bool page_scores);
// The prefill chunk the engine picks for `model` when the caller does not: KvOptions' default on the
// CPU, gpu_prefill_chunk() from the free device memory on a GPU.
int auto_prefill_chunk(const Model& model, size_t context, const KvOptions& kv);

// Several prompts in one store sized for all of them, run together by the scheduler (prompt chunks and
// decode rows share forward passes), each stopping at its own stop token or budget. on_token gets
// (prompt index, token). accounting is the shared store's when that request ended.
std::vector<GenerateResult> generate_batch(const Network& model, std::span<const std::vector<int32_t>> prompts,
                                           const GenerateOptions& opt,
                                           const std::function<void(size_t, int32_t)>& on_token = {});

// Requests that share one KV store, so a later prompt reuses the cached full pages of an earlier one
// (prefix caching). The last prompt token is always recomputed, since its logits start decoding. A hit
// installs the FP8 copy of a page when the cache still holds it, else its Stale (TQ3) copy; in minima
// mode the admission checkpoint then demotes installed pages outside the window and anchors. Requests
// run one at a time; a prompt plus its new tokens must fit capacity_tokens (else invalid_argument).
class Session {
 public:
  Session(const Network& model, GenerateOptions opt, size_t capacity_tokens);
  struct Result {
    GenerateResult gen;
    size_t reused_tokens = 0;  // prompt tokens served from the prefix cache
  };
  // max_new_tokens >= 0 overrides the session's option for this request (0: prefill only, e.g. to cache
  // a document that later requests query).
  Result run(std::span<const int32_t> prompt, const std::function<void(int32_t)>& on_token = {},
             int max_new_tokens = -1);
  const cache::KvStore& store() const { return sched_.store(); }

 private:
  GenerateOptions opt_;
  Scheduler sched_;
};

}  // namespace minimakv::engine
