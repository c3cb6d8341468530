// GPU decode benchmark: dense BF16, FP8-only, mixed (FP8 + TQ3) and mixed-tq4 (the same Stale pages
// in TQ4) paged decode side by side in one run, on pages written by our own append and conversion kernels, timed with
// CUDA events (warm-up, then
// >= 20 timed repetitions; median and min-max). Effective bandwidth counts the K/V codes and metadata the
// kernel reads (DecodeStats). A device-to-device copy gives the bandwidth ceiling of the same machine.
// Each configuration also converts its Stale pages FP8 -> TQ3 with the fused kernel and with the former
// per-vector one, checks on the device that both wrote the same bytes, and times both ("convert" rows,
// GB/s counting the FP8 bytes read and the TQ3 pages written, as the copy row counts read + write); then
// the same for the promotion back to FP8 ("promote" rows), after the decode arms.
// --split-tokens LIST (e.g. 128,256,512,1024) adds, for every arm, rows at those fixed split sizes
// beside the automatic one ("fp8/s256"), the data behind the plan's automatic rule.
// --configs LIST keeps the configurations whose names start with one of the comma-separated prefixes.
// Usage: cuda_decode_bench [--reps N] [--quick] [--split-tokens LIST] [--configs LIST] [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "minimakv/cuda/device_pool.h"
#include "minimakv/cuda/page_writes.h"
#include "minimakv/cuda/paged_decode.h"

using namespace minimakv;
using bench::comma_list;
using bench::fill_random;
using bench::Stat;
using bench::time_events;
using codec::PageFormat;

namespace {

struct Config {
  std::string name;
  int batch, tokens, q_heads, kv_heads, d, B;
  double fp8_share;  // of pages, the paper's canary: ~27%
};

struct Row {
  std::string config, arm, route;
  Stat us;
  double gbps, bytes_mb;
};

// A page conversion's fused kernel against the former per-vector one (run(true) / run(false)), both
// writing pool `dst`: the former runs first and its pool is kept, the jobs' destination pages are
// poisoned (the others are no conversion's output), the fused kernel's bytes are counted against the
// kept ones on the device, and then both are timed.
struct KernelPair {
  unsigned long long mismatches = 0;
  Stat fused, former;
};

template <typename Run>
KernelPair compare_and_time(const cuda::PoolViews& views, int dst, size_t pool_pages,
                            const std::vector<cuda::ConvertJob>& jobs, Run&& run) {
  KernelPair k;
  const size_t page_bytes = views.layout[dst].page_bytes, pool_bytes = pool_pages * page_bytes;
  run(false);
  cuda::DeviceArray<uint8_t> want(pool_bytes);
  cuda::check(cudaMemcpy(want.get(), views.base[dst], pool_bytes, cudaMemcpyDeviceToDevice), "snapshot");
  for (const auto& j : jobs)
    cuda::check(cudaMemsetAsync(views.base[dst] + static_cast<size_t>(j.dst_page) * page_bytes, 0xa5, page_bytes),
                "poison");
  run(true);
  cuda::DeviceArray<unsigned long long> counter(1);
  cuda::check(cudaMemset(counter.get(), 0, sizeof(unsigned long long)), "counter");
  bench::count_mismatches<<<1024, 256>>>(want.get(), views.base[dst], pool_bytes, counter.get());
  cuda::check(cudaMemcpy(&k.mismatches, counter.get(), sizeof k.mismatches, cudaMemcpyDeviceToHost), "count");
  k.former = time_events(1, 10, [&] { run(false); });
  k.fused = time_events(2, 20, [&] { run(true); });
  return k;
}

// The two rows of a KernelPair moving `bytes` per call (arm "convert" or "promote").
void push_pair(std::vector<Row>& rows, const std::string& config, const char* arm, const KernelPair& k,
               double bytes) {
  for (const bool fused : {true, false}) {
    const Stat& t = fused ? k.fused : k.former;
    rows.push_back({config,
                    arm,
                    fused ? (k.mismatches ? "MISMATCH" : "fused") : "per-vector",
                    {t.median * 1e3, t.lo * 1e3, t.hi * 1e3},
                    bytes / (t.median * 1e-3) / 1e9,
                    bytes / 1e6});
  }
}

std::vector<Row> run_config(const Config& c, int reps, const std::vector<int>& split_sizes, std::FILE* log) {
  const codec::PageGeometry geo{c.B, c.kv_heads, c.d};
  const int pages_per_seq = (c.tokens + c.B - 1) / c.B;
  const size_t n_pages = static_cast<size_t>(pages_per_seq) * c.batch;
  cuda::DevicePagePool pool(geo, n_pages + 1);
  const auto views = pool.views();
  // Write every page: BF16 and FP8 through append_tokens, TQ3 by converting the FP8 page.
  const size_t vec = static_cast<size_t>(c.kv_heads) * c.d;
  const int chunk_pages = std::max(1, 65536 / c.B);
  cuda::DeviceArray<float> k(static_cast<size_t>(chunk_pages) * c.B * vec), v(k.size());
  cuda::DeviceArray<cuda::AppendSlot> slots(static_cast<size_t>(chunk_pages) * c.B);
  std::vector<cuda::AppendSlot> hs;
  for (size_t p0 = 0; p0 < n_pages; p0 += chunk_pages) {
    const size_t np = std::min<size_t>(chunk_pages, n_pages - p0);
    fill_random<<<1024, 256>>>(k.get(), np * c.B * vec, 17 + p0 * 2, 1.0f);
    fill_random<<<1024, 256>>>(v.get(), np * c.B * vec, 18 + p0 * 2, 0.0f);
    hs.clear();
    for (size_t p = 0; p < np; ++p)
      for (int t = 0; t < c.B; ++t) hs.push_back({static_cast<uint32_t>(p0 + p + 1), static_cast<uint32_t>(t)});
    cuda::check(cudaMemcpy(slots.get(), hs.data(), hs.size() * sizeof(hs[0]), cudaMemcpyHostToDevice), "slots");
    for (PageFormat f : {PageFormat::kBf16, PageFormat::kFp8})
      cuda::append_tokens(views, f, geo, k.get(), v.get(), slots.get(), static_cast<int>(hs.size()), nullptr);
  }
  // Which pages are FP8 in the mixed arm: the first two (sinks) and the most recent ones.
  const int n_fp8 = std::max(3, static_cast<int>(c.fp8_share * pages_per_seq + 0.5));
  auto mixed_format = [&](int p) {
    return (p < 2 || p >= pages_per_seq - (n_fp8 - 2)) ? PageFormat::kFp8 : PageFormat::kTq3;
  };
  std::vector<cuda::ConvertJob> jobs;
  for (int s = 0; s < c.batch; ++s)
    for (int p = 0; p < pages_per_seq; ++p)
      if (mixed_format(p) == PageFormat::kTq3) {
        const uint32_t id = static_cast<uint32_t>(s * pages_per_seq + p + 1);
        jobs.push_back({id, id, static_cast<uint32_t>(c.B), 0});
      }
  const auto signs = cuda::upload_rotation_signs(1, c.kv_heads, c.d, codec::kDefaultRotationSeed);
  cuda::DeviceArray<cuda::ConvertJob> djobs(std::max<size_t>(1, jobs.size()));
  cuda::check(cudaMemcpy(djobs.get(), jobs.data(), jobs.size() * sizeof(jobs[0]), cudaMemcpyHostToDevice), "jobs");
  // Both FP8 -> TQ3 kernels, checked equal on the device, then timed.
  const KernelPair conv = compare_and_time(views, 2, n_pages + 1, jobs, [&](bool fused) {
    (fused ? cuda::convert_fp8_to_tq3 : cuda::convert_fp8_to_tq3_per_vector)(
        views, geo, signs.get(), djobs.get(), static_cast<int>(jobs.size()), {}, nullptr);
  });
  // The same Stale pages in TQ4 (same ids, the TQ4 pool), for the mixed-tq4 arm.
  cuda::convert_fp8_to_tq4(views, geo, signs.get(), djobs.get(), static_cast<int>(jobs.size()), {}, nullptr);
  // Bytes a conversion moves: the FP8 codes and scales it reads, the whole TQ3 pages it writes.
  double conv_bytes = 0;
  for (const auto& j : jobs)
    conv_bytes += static_cast<double>(j.tokens) * c.kv_heads * 2 * (c.d + 4) + views.layout[2].page_bytes;
  cuda::check(cudaDeviceSynchronize(), "build pages");

  const cuda::DecodeShape shape{c.q_heads, c.kv_heads, c.d, c.B, 0.0f};
  cuda::DeviceArray<float> q(static_cast<size_t>(c.batch) * c.q_heads * c.d), out(q.size());
  fill_random<<<64, 256>>>(q.get(), q.size(), 99, 0.0f);
  std::vector<Row> rows;
  for (const char* arm : {"bf16", "fp8", "mixed", "mixed-tq4"}) {
    std::vector<std::vector<cuda::PageRef>> seqs(c.batch);
    for (int s = 0; s < c.batch; ++s)
      for (int p = 0; p < pages_per_seq; ++p) {
        const int tokens = std::min(c.B, c.tokens - p * c.B);
        PageFormat f = std::strcmp(arm, "bf16") == 0  ? PageFormat::kBf16
                       : std::strcmp(arm, "fp8") == 0 ? PageFormat::kFp8
                                                      : mixed_format(p);
        if (f == PageFormat::kTq3 && std::strcmp(arm, "mixed-tq4") == 0) f = PageFormat::kTq4;
        seqs[s].push_back({f, static_cast<uint32_t>(s * pages_per_seq + p + 1), static_cast<uint32_t>(tokens)});
      }
    std::vector<int> sizes = {0};  // 0: the plan's automatic split size
    sizes.insert(sizes.end(), split_sizes.begin(), split_sizes.end());
    for (const int split_tokens : sizes) {
      const auto plan = cuda::make_decode_plan(seqs, shape, split_tokens);
      cuda::DecodeWorkspace ws(shape, c.batch, static_cast<int>(plan.splits.size()),
                               static_cast<int>(plan.entries.size()));
      ws.stage(plan, views);
      const cuda::AttentionBuffers io{q.get(), signs.get(), out.get()};
      const Stat t = time_events(3, reps, [&] { ws.launch(views, io, nullptr); });
      const double bytes = static_cast<double>(ws.stats().total_bytes());
      rows.push_back({c.name,
                      split_tokens ? std::string(arm) + "/s" + std::to_string(split_tokens) : std::string(arm),
                      ws.stats().route,
                      {t.median * 1e3, t.lo * 1e3, t.hi * 1e3},
                      bytes / (t.median * 1e-3) / 1e9,
                      bytes / 1e6});
    }
  }
  // Bandwidth ceiling: a device-to-device copy of the BF16 arm's bytes (read + write counted).
  {
    const size_t n = std::min<size_t>(static_cast<size_t>(rows[0].bytes_mb * 1e6), 4ull << 30);
    cuda::DeviceArray<uint8_t> a(n), b(n);
    const Stat t = time_events(
        2, reps, [&] { cuda::check(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice), "copy"); });
    rows.push_back({c.name,
                    "d2d-copy",
                    "-",
                    {t.median * 1e3, t.lo * 1e3, t.hi * 1e3},
                    2.0 * n / (t.median * 1e-3) / 1e9,
                    n / 1e6});
  }
  const double copy_gbps = rows.back().gbps;
  push_pair(rows, c.name, "convert", conv, conv_bytes);
  if (log)
    std::fprintf(
        log,
        "%s: converted %zu FP8 pages to TQ3: fused %.3f ms (%.1f pages/ms, %.0f GB/s read + written, %.0f%% of "
        "copy), per-vector %.3f ms (%.2fx the fused time); fused bytes %s the per-vector kernel's%s\n",
        c.name.c_str(), jobs.size(), conv.fused.median, jobs.size() / conv.fused.median,
        conv_bytes / (conv.fused.median * 1e-3) / 1e9,
        100.0 * conv_bytes / (conv.fused.median * 1e-3) / 1e9 / copy_gbps, conv.former.median,
        conv.former.median / conv.fused.median, conv.mismatches ? "DIFFER FROM" : "equal",
        conv.mismatches ? (" (" + std::to_string(conv.mismatches) + " bytes)").c_str() : "");
  // Promotion (TQ3 -> FP8) of the same pages into their FP8 slots, by both kernels (the decode arms are
  // done with those pages), checked equal on the device before timing.
  // Each job's source and destination ids are equal, so the same job array serves both directions.
  const KernelPair prom = compare_and_time(views, 1, n_pages + 1, jobs, [&](bool fused) {
    (fused ? cuda::convert_tq3_to_fp8 : cuda::convert_tq3_to_fp8_per_vector)(views, geo, signs.get(), djobs.get(),
                                                                             static_cast<int>(jobs.size()), nullptr);
  });
  double prom_bytes = 0;  // TQ3 codes and alphas read, whole FP8 pages written
  for (const auto& j : jobs)
    prom_bytes += static_cast<double>(j.tokens) * c.kv_heads * 2 * (3.0 * c.d / 8 + 2) + views.layout[1].page_bytes;
  push_pair(rows, c.name, "promote", prom, prom_bytes);
  if (log)
    std::fprintf(log,
                 "%s: promoted %zu TQ3 pages to FP8: fused %.3f ms (%.0f GB/s, %.0f%% of copy), per-vector %.3f ms "
                 "(%.2fx); fused bytes %s the per-vector kernel's\n",
                 c.name.c_str(), jobs.size(), prom.fused.median, prom_bytes / (prom.fused.median * 1e-3) / 1e9,
                 100.0 * prom_bytes / (prom.fused.median * 1e-3) / 1e9 / copy_gbps, prom.former.median,
                 prom.former.median / prom.fused.median, prom.mismatches ? "DIFFER FROM" : "equal");
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30;
  bool quick = false;
  const char* json = nullptr;
  std::vector<int> split_sizes;
  std::vector<std::string> prefixes;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(20, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc)
      json = argv[++i];
    else if (!std::strcmp(argv[i], "--configs") && i + 1 < argc)
      prefixes = comma_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--split-tokens") && i + 1 < argc)
      for (const std::string& item : comma_list(argv[++i])) {
        char* end = nullptr;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (*end != '\0' || v < 1) {
          std::fprintf(stderr, "cuda_decode_bench: bad --split-tokens list\n");
          return 2;
        }
        split_sizes.push_back(static_cast<int>(v));
      }
    else {
      std::fprintf(
          stderr,
          "usage: cuda_decode_bench [--reps N>=20] [--quick] [--split-tokens LIST] [--configs LIST] [--json FILE]\n");
      return 2;
    }
  }
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "cuda_decode_bench: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("GPU: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::vector<Config> configs = {
      {"canary b2 59008 h24/4 d256 p1792", 2, 59008, 24, 4, 256, 1792, 9.0 / 33.0},
      {"canary b2 59008 h24/4 d256 p832", 2, 59008, 24, 4, 256, 832, 0.27},
      {"b1 32K h32/8 d128 p256", 1, 32768, 32, 8, 128, 256, 0.27},
      {"b8 32K h32/8 d128 p256", 8, 32768, 32, 8, 128, 256, 0.27},
      {"b32 32K h32/8 d128 p256", 32, 32768, 32, 8, 128, 256, 0.27},
      {"b1 128K h32/8 d128 p256", 1, 131072, 32, 8, 128, 256, 0.27},
      {"b8 128K h32/8 d128 p256", 8, 131072, 32, 8, 128, 256, 0.27},
      {"b32 128K h32/8 d128 p256", 32, 131072, 32, 8, 128, 256, 0.27},
  };
  if (quick) configs.resize(3);
  std::erase_if(configs, [&](const Config& c) { return !bench::matches_prefix(prefixes, c.name); });
  std::vector<Row> all;
  for (const auto& c : configs) {
    auto rows = run_config(c, reps, split_sizes, stdout);
    all.insert(all.end(), rows.begin(), rows.end());
  }
  std::FILE* jf = json ? std::fopen(json, "w") : nullptr;
  if (jf) std::fprintf(jf, "[\n");
  std::printf(
      "\n| config | arm | route | MB read | time us (median) | min-max | GB/s | vs bf16 "
      "|\n|---|---|---|---|---|---|---|---|\n");
  double bf16_us = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const Row& r = all[i];
    if (r.arm == "bf16") bf16_us = r.us.median;
    std::printf("| %s | %s | %s | %.1f | %.1f | %.1f-%.1f | %.0f | %s |\n", r.config.c_str(), r.arm.c_str(),
                r.route.c_str(), r.bytes_mb, r.us.median, r.us.lo, r.us.hi, r.gbps,
                (r.arm == "d2d-copy" || r.arm == "convert" || r.arm == "promote")
                    ? "-"
                    : (std::to_string(r.us.median / bf16_us).substr(0, 4) + "x").c_str());
    if (jf)
      std::fprintf(jf,
                   "  {\"config\": \"%s\", \"arm\": \"%s\", \"route\": \"%s\", \"mb\": %.3f, \"us_median\": %.3f, "
                   "\"us_min\": %.3f, \"us_max\": %.3f, \"gbps\": %.1f}%s\n",
                   r.config.c_str(), r.arm.c_str(), r.route.c_str(), r.bytes_mb, r.us.median, r.us.lo, r.us.hi, r.gbps,
                   i + 1 < all.size() ? "," : "");
  }
  if (jf) {
    std::fprintf(jf, "]\n");
    std::fclose(jf);
  }
  // A fused conversion that wrote other bytes than the per-vector kernel fails the run.
  return std::any_of(all.begin(), all.end(), [](const Row& r) { return r.route == "MISMATCH"; }) ? 1 : 0;
}
