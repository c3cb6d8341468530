// Helpers for KvStore tests: small geometries and random K/V rows.
#pragma once

#include <random>
#include <vector>

#include "minimakv/cache/kv_store.h"

namespace minimakv::testing {

inline cache::StoreConfig small_config(size_t fp8 = 16, size_t tq3 = 16, size_t bf16 = 0) {
  cache::StoreConfig c;
  c.layers = 2;
  c.kv_heads = 1;
  c.head_dim = 64;
  c.tokens_per_page = 4;
  c.pages_of(cache::PageFormat::kFp8) = fp8;
  c.pages_of(cache::PageFormat::kTq3) = tq3;
  c.pages_of(cache::PageFormat::kBf16) = bf16;
  return c;
}

struct KvRows {
  std::vector<int32_t> ids;
  std::vector<float> k, v;
};

inline KvRows random_rows(std::mt19937_64& rng, const cache::StoreConfig& c, size_t n, int32_t first_id = 0) {
  std::normal_distribution<float> g;
  KvRows r;
  const size_t per = static_cast<size_t>(c.layers) * c.kv_heads * c.head_dim;
  r.k.resize(n * per);
  r.v.resize(n * per);
  for (auto& x : r.k) x = g(rng);
  for (auto& x : r.v) x = g(rng);
  for (size_t i = 0; i < n; ++i) r.ids.push_back(first_id + static_cast<int32_t>(i));
  return r;
}

}  // namespace minimakv::testing
