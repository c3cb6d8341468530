// What drives a forward pass over paged KV: the interface between the request loop and a network.
//
// Owns nothing. A Network appends each chunk's tokens to its sequence in the store (capacity for every
// chunk is checked before the store changes: cache::OutOfCapacity then leaves it as it was) and returns
// the logits of each chunk's last token. engine::Model is the transformer; tests plug in stand-ins with
// the same contract so the scheduler's bookkeeping can be checked exactly, apart from numerics.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "minimakv/cache/kv_store.h"
#include "minimakv/model/config.h"

namespace minimakv::engine {

class Network {
 public:
  virtual ~Network() = default;

  struct SeqChunk {
    cache::SeqId seq;
    std::span<const int32_t> ids;
  };
  virtual const model::ModelConfig& config() const = 0;
  // A store whose pages live where this network reads them.
  virtual std::unique_ptr<cache::KvStore> make_store(const cache::StoreConfig& cfg) const = 0;
  // Appends every chunk to its sequence (distinct sequences) and returns the logits of each chunk's last
  // token ([chunks][vocab]), or of every token when all_logits ([total tokens][vocab]). With page_scores,
  // one attention score per logical page of each sequence (for the tier controller).
  virtual std::vector<float> forward_batch(cache::KvStore& store, std::span<const SeqChunk> chunks,
                                           bool all_logits = false,
                                           std::vector<std::vector<float>>* page_scores = nullptr) const = 0;
};

}  // namespace minimakv::engine
