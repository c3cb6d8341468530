// A Qwen3 / Llama decoder-only transformer running through the paged KV store on a backend (CPU or CUDA).
//
// Owns: the backend, the weights (fp32 copies of the checkpoint's BF16/F16/F32 tensors, in the backend's
// memory) and the tokenizer. The forward pass is written once against backend::Backend. forward() runs a chunk of tokens at the sequence's next positions: per layer it projects
// q/k/v, applies QK-norm (Qwen3) and RoPE, writes the chunk's K/V into the store (quantized on write,
// one layer at a time), then attends over every page of the sequence in its stored format (BF16, FP8
// or TQ3) with the mixed-format kernel, causal inside the chunk. No dense copy of the cache is made.
// The store's geometry must match the model (layers, KV heads, head_dim), and the store must come from
// make_store() (its pages live where this model's backend reads them). One forward pass at a time.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "minimakv/attention/thread_pool.h"
#include "minimakv/backend/backend.h"
#include "minimakv/cache/kv_store.h"
#include "minimakv/model/config.h"
#include "minimakv/model/tokenizer.h"

namespace minimakv::engine {

class Model {
 public:
  static std::unique_ptr<Model> load(const std::string& dir, backend::Device device = backend::Device::kCpu);
  const model::ModelConfig& config() const { return cfg_; }
  const model::Tokenizer& tokenizer() const { return *tok_; }
  backend::Backend& backend() const { return *backend_; }
  // A store configuration with this model's geometry.
  cache::StoreConfig store_config(cache::KvMode mode, int tokens_per_page, size_t max_tokens) const;
  // A store whose pages live where this model's backend reads them (host pools or device memory).
  std::unique_ptr<cache::KvStore> make_store(const cache::StoreConfig& cfg) const { return backend_->make_store(cfg); }

  // Appends `ids` to `seq` and returns the logits of the last of them (vocab_size floats), or of every
  // one when all_logits ([n][vocab]). With page_scores, also returns one attention score per logical
  // page of the sequence (eq. 7-9 from the kernel's own page partials: all query heads and queries of
  // the chunk, averaged over layers), which the tier controller folds into its EWMA.
  std::vector<float> forward(cache::KvStore& store, cache::SeqId seq, std::span<const int32_t> ids,
                             attention::ThreadPool* pool = nullptr, bool all_logits = false,
                             std::vector<float>* page_scores = nullptr) const;

  // Several sequences in one pass (batched decode, or prefill chunks of different requests): the
  // projections and the MLP of all chunks' tokens are one GEMM each; RoPE, the K/V write and attention
  // run per sequence at its own positions. Capacity for every chunk is checked before the store
  // changes. Returns the logits of each chunk's last token ([chunks][vocab]), or of every token when
  // all_logits ([total tokens][vocab], chunks in order).
  struct SeqChunk {
    cache::SeqId seq;
    std::span<const int32_t> ids;
  };
  std::vector<float> forward_batch(cache::KvStore& store, std::span<const SeqChunk> chunks,
                                   attention::ThreadPool* pool = nullptr, bool all_logits = false,
                                   std::vector<std::vector<float>>* page_scores = nullptr) const;

 private:
  struct Layer {
    backend::Tensor wq, wk, wv, wo, q_norm, k_norm, in_norm, post_norm, gate, up, down;
  };
  model::ModelConfig cfg_;
  std::unique_ptr<model::Tokenizer> tok_;
  std::unique_ptr<backend::Backend> backend_;
  backend::Tensor embed_, final_norm_, lm_head_;  // lm_head_ empty when tied
  std::vector<Layer> layers_;
};

}  // namespace minimakv::engine
