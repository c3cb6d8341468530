// Microbenchmarks of the paged store: append per token, a checkpoint that retiers N pages, prefix
// lookups that hit and miss. Geometry of the embedded model (8 layers, 2 KV heads, d=128, 16-token pages).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "minimakv/cache/kv_store.h"

namespace {
using namespace minimakv::cache;

StoreConfig bench_config(size_t pages) {
  StoreConfig c;
  c.layers = 8;
  c.kv_heads = 2;
  c.head_dim = 128;
  c.tokens_per_page = 16;
  c.fp8_pages = pages;
  c.tq3_pages = pages;
  return c;
}

std::vector<float> rows(size_t n, const StoreConfig& c) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> g;
  std::vector<float> x(n * c.layers * c.kv_heads * c.head_dim);
  for (auto& v : x) v = g(rng);
  return x;
}

void BM_AppendToken(benchmark::State& st) {
  const auto c = bench_config(1 << 14);
  KvStore store(c);
  const auto k = rows(1, c);
  SeqId s = store.create_sequence();
  int32_t id = 0;
  size_t n = 0;
  for (auto _ : st) {
    store.append(s, std::span<const int32_t>(&id, 1), k, k);
    ++id;
    if (++n == 16000) {  // stay inside capacity
      st.PauseTiming();
      store.finish(s);
      store.evict_cached(static_cast<size_t>(-1));
      s = store.create_sequence();
      n = 0;
      st.ResumeTiming();
    }
  }
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_AppendToken);

void BM_CheckpointRetier(benchmark::State& st) {
  const size_t pages = static_cast<size_t>(st.range(0));
  const auto c = bench_config((pages + 2) * 8 * 2);
  const auto k = rows(pages * 16, c);
  std::vector<int32_t> ids(pages * 16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  for (auto _ : st) {
    st.PauseTiming();
    KvStore store(c);
    const SeqId s = store.create_sequence();
    store.append(s, ids, k, k);
    std::vector<KvStore::Transition> plan;
    for (uint32_t p = 0; p < pages; ++p) plan.push_back({s, p, Tier::kStale});
    st.ResumeTiming();
    benchmark::DoNotOptimize(store.apply(plan));
  }
  st.SetItemsProcessed(st.iterations() * static_cast<int64_t>(pages));
  st.SetLabel("logical pages per checkpoint (8 layers each)");
}
BENCHMARK(BM_CheckpointRetier)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond);

void BM_PrefixLookup(benchmark::State& st) {
  const bool hit = st.range(0) != 0;
  const auto c = bench_config(4096);
  KvStore store(c);
  std::vector<int32_t> ids(1024);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  const auto k = rows(ids.size(), c);
  store.append(store.create_sequence(), ids, k, k);
  if (!hit) ids[0] = -1;
  for (auto _ : st) benchmark::DoNotOptimize(store.match_prefix(ids));
  st.SetLabel(hit ? "1024 tokens, 64 pages hit" : "miss on the first page");
}
BENCHMARK(BM_PrefixLookup)->Arg(1)->Arg(0);

}  // namespace
