// How many requests a KV memory envelope holds in each mode: the paper's capacity equation (Eq. 14),
// measured instead of derived.
//
// Owns: measure_capacity. For one request of T tokens it runs a real store through the mode's chunked
// prefill and retier checkpoints (zero K/V: sizes do not depend on content) and reads, from the store's
// own accounting, the bytes the request holds in each page format (page sizes as the pools allocate
// them, block tables included). An envelope of E bytes then holds floor(E / request bytes) such
// requests, with each format's pool sized to that many requests' share, and E / (bytes per token)
// tokens. Needs only the model's config (no weights).
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <vector>

#include "minimakv/cache/kv_store.h"
#include "minimakv/engine/generate.h"
#include "minimakv/model/config.h"

namespace minimakv::engine {

struct CapacityRow {
  cache::KvMode mode = cache::KvMode::kBf16;
  size_t request_tokens = 0;
  std::array<size_t, codec::kNumPageFormats> request_bytes_by_format{};  // pages the request holds
  size_t block_table_bytes = 0;
  size_t request_bytes = 0;     // all formats + block tables
  double bytes_per_token = 0;   // request_bytes / request_tokens
  size_t max_requests = 0;      // floor(envelope / request_bytes)
  size_t tokens_held = 0;       // floor(envelope / bytes_per_token)
  std::array<size_t, codec::kNumPageFormats> pool_bytes{};  // each format's pool for max_requests requests
  bool reconciled = false;      // the store's accounting reconciled after the run
};

// The accounting of a store after one request of `tokens` tokens has run through opt's chunked prefill
// with opt.mode's retier checkpoints (zero K/V; sizes do not depend on content), the request still live.
cache::Accounting hold_one_request(const model::ModelConfig& cfg, const GenerateOptions& opt, size_t tokens);

// One row per mode. opt supplies the page size, prefill chunk, controller and protected layers (the
// engine's defaults when default-constructed).
std::vector<CapacityRow> measure_capacity(const model::ModelConfig& cfg, std::span<const cache::KvMode> modes,
                                          size_t request_tokens, size_t envelope_bytes, const GenerateOptions& opt);

// A byte count with an optional unit: "1000000", "64MiB", "40GiB", "1.5GB" (K, M, G, T: powers of 1000;
// Ki, Mi, Gi, Ti: powers of 1024; a trailing B optional). Throws std::invalid_argument otherwise.
size_t parse_bytes(std::string_view text);

}  // namespace minimakv::engine
