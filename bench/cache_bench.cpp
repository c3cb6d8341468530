// Microbenchmarks of the paged store: append per token, a checkpoint that retiers N pages, prefix
// lookups that hit and miss, and the store's share of one batched decode step of an engine whose pages
// live elsewhere (the CUDA backend): begin the appends, per layer claim the slots and pin the pages
// attention reads, commit. Geometry of the embedded model (8 layers, 2 KV heads, d=128).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "minimakv/cache/kv_store.h"
#include "minimakv/cache/page_storage.h"

namespace {
using namespace minimakv::cache;

StoreConfig bench_config(size_t pages) {
  StoreConfig c;
  c.layers = 8;
  c.kv_heads = 2;
  c.head_dim = 128;
  c.tokens_per_page = 16;
  c.pages_of(PageFormat::kFp8) = pages;
  c.pages_of(PageFormat::kTq3) = pages;
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

// Bytes elsewhere, nothing to move: only the store's bookkeeping is timed.
class NoStorage final : public PageStorage {
 public:
  void copy_page(PageFormat, PageId, PageId) override {}
  void convert(std::span<const Conversion>) override {}
};

// Args: context tokens, batch. 64-token pages as in the engine.
constexpr int kDecodeSteps = 1000;
void BM_DecodeStepBookkeeping(benchmark::State& st) {
  const size_t context = static_cast<size_t>(st.range(0)), batch = static_cast<size_t>(st.range(1));
  StoreConfig c = bench_config(0);
  c.tokens_per_page = 64;
  // Room for the steps the benchmark runs (a fixed count, so the sequences cannot outgrow it).
  c.pages_of(PageFormat::kFp8) = c.pages_of(PageFormat::kTq3) = ((context + kDecodeSteps) / 64 + 2) * batch * 8;
  KvStore store(c, std::make_unique<NoStorage>());
  std::vector<SeqId> seqs;
  std::vector<int32_t> ids(context);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % 8192);
  auto append = [&](SeqId s, std::span<const int32_t> t) {
    const KvStore::AppendChunk ch{s, t};
    ForwardStep step = store.begin_step(std::span<const KvStore::AppendChunk>(&ch, 1));
    for (int l = 0; l < c.layers; ++l) (void)step.write_slots(0, l);
    step.commit();
  };
  for (size_t b = 0; b < batch; ++b) {
    seqs.push_back(store.create_sequence());
    for (size_t o = 0; o < context; o += 512) append(seqs.back(), std::span<const int32_t>(ids).subspan(o, 512));
  }
  const int32_t token = 7;
  for (auto _ : st) {
    std::vector<KvStore::AppendChunk> chunks;
    for (SeqId s : seqs) chunks.push_back({s, std::span<const int32_t>(&token, 1)});
    ForwardStep step = store.begin_step(chunks);
    for (int l = 0; l < c.layers; ++l) {
      std::vector<PagedView> views;
      for (size_t i = 0; i < seqs.size(); ++i) {
        benchmark::DoNotOptimize(step.write_slots(i, l));
        views.push_back(step.view(i, l));
      }
    }
    step.commit();
  }
  st.SetItemsProcessed(st.iterations() * static_cast<int64_t>(batch));
  st.SetLabel("decode tokens");
}
BENCHMARK(BM_DecodeStepBookkeeping)
    ->Args({32768, 1})
    ->Args({32768, 8})
    ->Iterations(kDecodeSteps)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
