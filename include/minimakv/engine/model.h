// A decoder-only transformer (the architectures of engine/architecture.h: Qwen3, Llama) running through
// the paged KV store on a backend (CPU or CUDA).
//
// Owns: the backend, the weights (in the backend's memory: matrices in BF16 on the CUDA backend, fp32 on
// the CPU, norms fp32; or dummy weights drawn on the device from config.json alone) and the tokenizer. The forward pass
// is written once against backend::Backend. forward() runs a chunk of tokens at the sequence's next positions: per
// layer it projects q/k/v, applies QK-norm (Qwen3) and RoPE, writes the chunk's K/V into the store (quantized on write,
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
#include "minimakv/engine/architecture.h"
#include "minimakv/engine/network.h"
#include "minimakv/engine/options.h"
#include "minimakv/model/config.h"
#include "minimakv/model/tokenizer.h"

namespace minimakv::engine {

// How a model's weights are made and kept.
struct LoadOptions {
  // Projection and embedding matrices. kAuto: BF16 on CUDA (checkpoint BF16 kept as stored, F16/F32
  // rounded once); on the CPU the checkpoint's precision (a BF16 checkpoint stays BF16 in RAM, half the
  // bytes, widened exactly in registers by the GEMV or block by block for the GEMM; F32/F16 stay fp32).
  // kBf16 / kFp32 force one (kFp32 on CUDA: fp32 SGEMM, for debugging). Norm weights are always fp32.
  enum class Weights { kAuto, kBf16, kFp32 } weights = Weights::kAuto;
  // Dummy weights: config.json alone, every matrix drawn from backend::dummy_weight with a seed derived
  // from dummy_seed and the tensor's name, norms 1. For benchmarks at a real model's geometry.
  bool dummy = false;
  uint64_t dummy_seed = 0;
  // The tokenizer.json to use when the model directory has none (a dummy model's directory holds only
  // config.json); its ids must fit the model's vocabulary.
  std::string fallback_tokenizer;
  // CPU backend: threads for attention and the BF16 GEMV (0: one per hardware thread).
  unsigned cpu_threads = 0;
};

// Where a model's memory went (bytes).
struct MemoryReport {
  backend::DType weight_dtype = backend::DType::kF32;  // of the matrices
  size_t weight_bytes = 0;                             // every weight tensor as the backend holds it
  size_t checkpoint_bytes = 0;                  // the same tensors as stored in the checkpoint (BF16 for dummy weights)
  std::optional<backend::DeviceMemory> device;  // free / total device memory, on a GPU backend
};

// A store configuration for this geometry: pools sized for max_tokens tokens of one sequence in the
// formats the mode uses (for minima FP8 and each layer's Stale format: TQ3, or TQ4 for kv.tq4_layers),
// with kv's protected and TQ4 layers.
cache::StoreConfig store_config_for(const model::ModelConfig& cfg, const KvOptions& kv, size_t max_tokens);

class Model final : public Network {
 public:
  static std::unique_ptr<Model> load(const std::string& dir, backend::Device device = backend::Device::kCpu,
                                     const LoadOptions& options = {});
  MemoryReport memory() const;
  const model::ModelConfig& config() const override { return cfg_; }
  const model::Tokenizer& tokenizer() const { return *tok_; }
  backend::Backend& backend() const { return *backend_; }
  // A store configuration with this model's geometry (store_config_for).
  cache::StoreConfig store_config(const KvOptions& kv, size_t max_tokens) const;
  // The same for a mode and page size alone (every layer TQ3 when Stale, none protected).
  cache::StoreConfig store_config(cache::KvMode mode, int tokens_per_page, size_t max_tokens) const {
    KvOptions kv;
    kv.mode = mode;
    kv.tokens_per_page = tokens_per_page;
    return store_config(kv, max_tokens);
  }
  // A store whose pages live where this model's backend reads them (host pools or device memory).
  std::unique_ptr<cache::KvStore> make_store(const cache::StoreConfig& cfg) const override {
    return backend_->make_store(cfg);
  }

  // Appends `ids` to `seq` and returns the logits of the last of them (vocab_size floats), or of every
  // one when all_logits ([n][vocab]). With page_scores, also returns one attention score per logical
  // page of the sequence (eq. 7-9 from the kernel's own page partials: all query heads and queries of
  // the chunk, averaged over layers), which the tier controller folds into its EWMA.
  std::vector<float> forward(cache::KvStore& store, cache::SeqId seq, std::span<const int32_t> ids,
                             bool all_logits = false, std::vector<float>* page_scores = nullptr) const;

  // Several sequences in one pass (batched decode, or prefill chunks of different requests): the
  // projections and the MLP of all chunks' tokens are one GEMM each; RoPE, the K/V write and attention
  // run per sequence at its own positions. Capacity for every chunk is checked before the store
  // changes. Returns the logits of each chunk's last token ([chunks][vocab]), or of every token when
  // all_logits ([total tokens][vocab], chunks in order).
  std::vector<float> forward_batch(cache::KvStore& store, std::span<const SeqChunk> chunks, bool all_logits = false,
                                   std::vector<std::vector<float>>* page_scores = nullptr) const override;

 private:
  model::ModelConfig cfg_;
  const Architecture* arch_ = nullptr;
  std::unique_ptr<model::Tokenizer> tok_;
  std::unique_ptr<backend::Backend> backend_;
  backend::Tensor embed_, final_norm_, lm_head_;  // lm_head_ empty when tied
  std::vector<DecoderLayer> layers_;
  backend::DType weight_dtype_ = backend::DType::kF32;
  size_t checkpoint_bytes_ = 0;
};

}  // namespace minimakv::engine
