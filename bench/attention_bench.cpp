// CPU attention kernels on cache-resident pages: one decode step over one KV head's pages of a single
// format, so the time is the kernels' arithmetic rather than memory traffic. Reported per token
// (the counter "ns/token" divides by the pages' tokens). Arguments: format (0 BF16, 1 FP8, 2 TQ3),
// head_dim, GQA ratio, tokens.
// This VM-class machines' neighbours make single runs noisy: compare the "min" aggregate of repetitions.
//   ./build/release/bench/attention_bench --benchmark_repetitions=10 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "minimakv/attention/paged_attention.h"
#include "minimakv/codec/page_codec.h"

namespace {

using minimakv::codec::PageFormat;
namespace codec = minimakv::codec;
namespace attention = minimakv::attention;

void BM_DecodeStep(benchmark::State& state) {
  const auto f = static_cast<PageFormat>(state.range(0));
  const int d = static_cast<int>(state.range(1)), G = static_cast<int>(state.range(2));
  const int tokens = static_cast<int>(state.range(3)), B = 256, kv = 1;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> g;
  const std::vector<codec::Rotation> rots{codec::Rotation::for_head(d, 0, 0)};
  const codec::PageLayout fp8(PageFormat::kFp8, {B, kv, d}), own(f, {B, kv, d});
  attention::LayerInput in;
  in.q_heads = G;
  in.kv_heads = kv;
  in.head_dim = d;
  in.rotations = rots;
  in.layouts[static_cast<int>(f)] = &own;
  std::vector<std::vector<uint8_t>> pages;
  std::vector<float> k(d), v(d);
  for (int p = 0; p * B < tokens; ++p) {
    const int nt = std::min(B, tokens - p * B);
    std::vector<uint8_t> page(own.bytes()), staged(fp8.bytes());
    for (int t = 0; t < nt; ++t) {
      for (auto& x : k) x = g(rng);
      for (auto& x : v) x = g(rng);
      codec::write_token(f == PageFormat::kTq3 ? staged : page, f == PageFormat::kTq3 ? fp8 : own, t, k, v);
    }
    if (f == PageFormat::kTq3) codec::convert_fp8_to_tq3(staged, fp8, page, own, rots, B);
    pages.push_back(std::move(page));
    in.pages.push_back({f, nullptr, static_cast<uint32_t>(nt), static_cast<uint32_t>(p * B)});
  }
  for (size_t p = 0; p < pages.size(); ++p) in.pages[p].data = pages[p].data();
  std::vector<float> q(static_cast<size_t>(G) * d), out(q.size());
  for (auto& x : q) x = g(rng);
  const attention::QueryBlock qb{q, 1, static_cast<uint32_t>(tokens - 1)};
  const attention::AttendOptions one_split{1 << 30, nullptr};
  for (auto _ : state) {
    attention::attend(in, qb, out, nullptr, one_split);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["ns/token"] =
      benchmark::Counter(1e-9 * tokens,  // inverted rate: ns per token
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(f == PageFormat::kBf16 ? "bf16" : f == PageFormat::kFp8 ? "fp8" : "tq3");
}

BENCHMARK(BM_DecodeStep)
    ->ArgNames({"fmt", "d", "G", "tokens"})
    ->ArgsProduct({{0, 1, 2}, {128, 256}, {4}, {1024}})
    ->ArgsProduct({{0, 1, 2}, {128}, {1, 8}, {1024}})
    ->ArgsProduct({{0, 1, 2}, {256}, {6}, {1024}})
    ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); })
    ->Unit(benchmark::kMicrosecond);

}  // namespace
