// How many layer-pages of each format a request holds, and KV pools sized from a memory envelope.
//
// Owns: the page arithmetic the scheduler admits by. For a request of T tokens in pages of P tokens
// (n = ceil(T / P) logical pages, L layers of which Lp are protected and L_f store Stale pages in
// rotated format f, TQ3 or TQ4; sum_f L_f = L - Lp):
//   bf16 / fp8  n * L pages of the mode's format;
//   minima      settled (right after a retier checkpoint): the Recent window, the sinks and, with
//               scoring, the scored anchors stay FP8 (k = min(n, W + sinks + A) logical pages), the rest
//               is Stale: FP8 k * (L - Lp) + n * Lp, format f (n - k) * L_f. Equal to what a real store
//               holds after the mode's chunked prefill (tests/engine/kv_budget_test.cpp checks it).
//               peak (an upper bound over the request's whole life up to T): k grows by the tokens
//               written between two checkpoints (a prefill chunk or a checkpoint interval) plus the
//               page in conversion; Stale is bounded by n - 1 pages, since the controller may shrink the
//               window to one page under FP8 pressure. With checkpoint_interval 0 (no checkpoint
//               while decoding) every page may be FP8.
// Page sizes are the pools' own (codec::PageLayout), metadata and alignment included.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>

#include "minimakv/cache/kv_store.h"
#include "minimakv/engine/options.h"
#include "minimakv/model/config.h"

namespace minimakv::engine {

using PageCounts = std::array<size_t, codec::kNumPageFormats>;  // layer-pages by format

class KvBudget {
 public:
  // Throws std::invalid_argument for a protected layer out of range or a page size the codecs refuse.
  KvBudget(const model::ModelConfig& cfg, const KvOptions& kv);

  PageCounts settled(size_t tokens) const;
  PageCounts peak(size_t tokens) const;
  // FP8 layer-pages one forward pass of `step_tokens` tokens may add before its checkpoint (minima), on
  // top of every request's settled pages; 0 in the single-format modes, where settled counts them.
  size_t step_headroom(size_t step_tokens) const;
  size_t page_bytes(codec::PageFormat f) const { return page_bytes_[static_cast<size_t>(f)]; }
  size_t bytes(const PageCounts& c) const;

  // Pools that fill `envelope_bytes`: one format in bf16 and fp8 mode; in minima the envelope is split
  // between FP8 and the Stale formats in the proportion a request of `reference_tokens` tokens settles at (plus its
  // decode drift between checkpoints), after reserving step_headroom(step_tokens) FP8 pages. Throws
  // std::invalid_argument when the envelope cannot hold one such request.
  cache::StoreConfig pools_for_memory(size_t envelope_bytes, size_t reference_tokens, size_t step_tokens) const;
  // Pools for requests of these lengths all live at once (generate()'s store): each one's peak pages
  // plus a page per layer.
  cache::StoreConfig pools_for_requests(std::span<const size_t> tokens) const;
  cache::StoreConfig pools_for_tokens(size_t tokens) const { return pools_for_requests({&tokens, 1}); }
  // "FP8 1,234 (56.1 MiB) TQ3 ..." for messages.
  std::string describe(const PageCounts& c) const;

 private:
  cache::StoreConfig base() const;
  model::ModelConfig cfg_;
  KvOptions kv_;
  size_t layers_ = 0, protected_ = 0, page_ = 0;
  PageCounts stale_layers_{};  // layers whose Stale pages take each format (minima; protected ones excluded)
  PageCounts page_bytes_{};
};

}  // namespace minimakv::engine
