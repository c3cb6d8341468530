// A stand-in network for the scheduler's tests and benchmarks: it appends each chunk to the store like
// the transformer does (capacity checked first, zero K/V written layer by layer) and returns logits
// that depend only on the sequence's whole token history as the store holds it, so a request that is
// preempted and recomputed, or served from the prefix cache, must produce exactly the tokens of a solo
// run, and a token the scheduler failed to feed changes every later one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "minimakv/engine/network.h"

namespace minimakv::testing {

class TokenHashNetwork final : public engine::Network {
 public:
  // vocab ids 0..vocab-1; eos is vocab-1, so roughly one step in `vocab` stops a request.
  explicit TokenHashNetwork(int layers = 2, int vocab = 40, int kv_heads = 1, int head_dim = 64) {
    cfg_.vocab_size = vocab;
    cfg_.num_hidden_layers = layers;
    cfg_.num_key_value_heads = kv_heads;
    cfg_.num_attention_heads = kv_heads;
    cfg_.head_dim = head_dim;
    cfg_.hidden_size = kv_heads * head_dim;
    cfg_.max_position_embeddings = 1 << 20;
    cfg_.eos_token_ids = {vocab - 1};
  }
  const model::ModelConfig& config() const override { return cfg_; }
  std::unique_ptr<cache::KvStore> make_store(const cache::StoreConfig& c) const override {
    return std::make_unique<cache::KvStore>(c);
  }
  std::vector<float> forward_batch(cache::KvStore& store, std::span<const SeqChunk> chunks, bool all_logits,
                                   std::vector<std::vector<float>>* page_scores) const override {
    if (all_logits) throw std::invalid_argument("TokenHashNetwork: all_logits is not supported");
    std::vector<cache::KvStore::AppendChunk> appends;
    for (const auto& c : chunks) appends.push_back({c.seq, c.ids});
    cache::ForwardStep step = store.begin_step(appends);  // throws OutOfCapacity before any change
    const size_t V = static_cast<size_t>(cfg_.vocab_size);
    std::vector<float> out(chunks.size() * V, 0.0f);
    if (page_scores) page_scores->assign(chunks.size(), {});
    for (size_t i = 0; i < chunks.size(); ++i) {
      const auto& c = chunks[i];
      const size_t row = c.ids.size() * static_cast<size_t>(cfg_.num_key_value_heads * cfg_.head_dim);
      const std::vector<float> zeros(row, 0.0f);
      for (int l = 0; l < cfg_.num_hidden_layers; ++l)
        store.host_storage()->write_tokens(step.write_slots(i, l), zeros, zeros);
      const auto history = store.tokens(c.seq);
      uint64_t h = 1469598103934665603ull;
      for (int32_t t : history) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
      h ^= h >> 29;
      out[i * V + h % V] = 8.0f;
      out[i * V + (h >> 17) % V] += 6.0f;  // a runner-up, so sampling at temperature 1 varies
      if (page_scores) {
        const size_t pages = store.block_table(c.seq).size();
        auto& s = (*page_scores)[i];
        for (size_t p = 0; p < pages; ++p) s.push_back(static_cast<float>((h >> (p % 32)) & 7) / 8.0f);
      }
      ++passes_rows_;
    }
    step.commit();
    return out;
  }
  size_t rows() const { return passes_rows_; }

 private:
  model::ModelConfig cfg_;
  mutable size_t passes_rows_ = 0;
};

}  // namespace minimakv::testing
